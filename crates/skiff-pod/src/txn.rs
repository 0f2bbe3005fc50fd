//! A host worker's transaction context: strict two-phase locking with
//! NO_WAIT, in-place writes with an undo log, and every row access routed by
//! placement, to the host's partition (local DRAM) or through the CXL layer
//! (pod memory).
//!
//! Lifecycle: `begin` → `lock`/`get`/`put` ... → `commit` or `abort`. Locks
//! are released only at the end (strict 2PL), after undo on abort, so no
//! other transaction ever sees an uncommitted write. A transaction touches
//! only its host's partition and pod memory: no message, no second host.

use bytemuck::Pod;

use crate::arch::Place;
use crate::constants::{TXN_LOCKS_MAX, TXN_UNDO_BYTES_MAX};
use crate::cxl::{Coherence, CxlAccess};
use crate::layout::{Array, Loc, LockTable};
use crate::lockword::{self, Mode};
use crate::memory::PodMemory;

/// Why a transaction body stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TxnError {
    /// NO_WAIT lock conflict: abort and retry.
    Conflict,
    /// The transaction asked to roll back (NewOrder's invalid item).
    Rollback,
    /// A table is full (order slots of a district): the run must stop.
    Capacity(String),
    /// A value read from pod memory is out of range.
    Corrupt(String),
}

pub(crate) type TxnResult<T> = Result<T, TxnError>;

#[derive(Clone, Copy)]
struct Held {
    loc: Loc,
    mode: Mode,
}

#[derive(Clone, Copy)]
struct Undo {
    loc: Loc,
    /// Covering lock of the row, for coherence bookkeeping on restore.
    lock: Option<Loc>,
    start: usize,
    len: usize,
}

pub(crate) struct Txn<'m> {
    mem: &'m PodMemory,
    host: u16,
    cxl: CxlAccess<'m>,
    held: Vec<Held>,
    undo: Vec<Undo>,
    undo_bytes: Vec<u8>,
    active: bool,
}

impl<'m> Txn<'m> {
    pub(crate) fn new(mem: &'m PodMemory, host: u16) -> Txn<'m> {
        let l = &mem.layout;
        Txn {
            mem,
            host,
            cxl: CxlAccess::new(&mem.pod, host, l.shared.clone(), l.coherent.clone()),
            held: Vec::with_capacity(TXN_LOCKS_MAX),
            undo: Vec::with_capacity(TXN_LOCKS_MAX * 2),
            undo_bytes: Vec::with_capacity(TXN_UNDO_BYTES_MAX),
            active: false,
        }
    }

    pub(crate) fn mem(&self) -> &'m PodMemory {
        self.mem
    }

    pub(crate) fn cxl_counters(&self) -> crate::cxl::CxlCounters {
        self.cxl.counters()
    }

    pub(crate) fn begin(&mut self) {
        assert!(!self.active, "begin inside a transaction");
        assert!(self.held.is_empty() && self.undo.is_empty());
        self.cxl.begin();
        self.active = true;
    }

    /// Takes `mode` on tuple `idx` of `table` for warehouse `w`, or fails with
    /// `Conflict` at once (NO_WAIT). Re-locking a held tuple is free; asking
    /// for exclusive on a shared-held tuple upgrades.
    pub(crate) fn lock(&mut self, table: LockTable, w: u32, idx: u64, mode: Mode) -> TxnResult<()> {
        assert!(self.active);
        let loc = self.mem.layout.lock(table, w, idx);
        if let Some(i) = self.held.iter().position(|h| h.loc == loc) {
            if self.held[i].mode == Mode::Exclusive || mode == Mode::Shared {
                return Ok(());
            }
            let word = self.word(loc);
            lockword::try_upgrade(word, self.host).map_err(|_| TxnError::Conflict)?;
            self.held[i].mode = Mode::Exclusive;
            return Ok(());
        }
        assert!(
            self.held.len() < TXN_LOCKS_MAX,
            "transaction holds {TXN_LOCKS_MAX} locks"
        );
        let word = self.word(loc);
        match mode {
            Mode::Shared => lockword::try_lock_shared(word),
            Mode::Exclusive => lockword::try_lock_exclusive(word, self.host),
        }
        .map_err(|_| TxnError::Conflict)?;
        self.held.push(Held { loc, mode });
        Ok(())
    }

    fn word(&mut self, loc: Loc) -> &'m std::sync::atomic::AtomicU64 {
        match loc.place {
            Place::Pod => self.cxl.lock_word(loc.off),
            Place::Partition => {
                assert_eq!(loc.host, self.host, "lock in another host's partition");
                self.mem.part(self.host).atomic_u64(loc.off)
            }
            Place::Replicated => unreachable!("replicated tables have no locks"),
        }
    }

    /// Asserts the lock protecting a row is held in (at least) `mode`; returns
    /// its location. `None` for immutable arrays.
    fn covering(&self, array: Array, w: u32, idx: u64, mode: Mode) -> Option<Loc> {
        let (table, lidx) = self.mem.layout.covering_lock(array, idx)?;
        let loc = self.mem.layout.lock(table, w, lidx);
        let held = self.held.iter().find(|h| h.loc == loc);
        assert!(
            held.is_some_and(|h| h.mode == Mode::Exclusive || mode == Mode::Shared),
            "{array:?} row {idx} of warehouse {w} accessed without its {mode:?} lock"
        );
        Some(loc)
    }

    fn coherence(&mut self, lock: Option<Loc>) -> Coherence<'m> {
        match lock {
            Some(l) => {
                assert_eq!(l.place, Place::Pod, "pod row covered by a private lock");
                Coherence::Tracked(self.cxl.lock_word(l.off))
            }
            None => Coherence::Immutable,
        }
    }

    /// Reads row `idx` of `array` (warehouse `w`); the covering lock must be
    /// held.
    pub(crate) fn get<T: Pod>(&mut self, array: Array, w: u32, idx: u64) -> T {
        self.get_at(array, w, idx, 0)
    }

    /// Reads a `T` at byte `at` inside row `idx` (one column of a wide group).
    pub(crate) fn get_at<T: Pod>(&mut self, array: Array, w: u32, idx: u64, at: u64) -> T {
        assert!(self.active);
        assert!(at + size_of::<T>() as u64 <= array.row_bytes());
        let lock = self.covering(array, w, idx, Mode::Shared);
        let loc = self.mem.layout.row(array, w, idx);
        match loc.place {
            Place::Pod => {
                let c = self.coherence(lock);
                self.cxl.read(c, loc.off + at)
            }
            _ => self.local(loc).read(loc.off + at),
        }
    }

    /// Writes row `idx` of `array` in place after saving its before-image;
    /// the covering lock must be held exclusively.
    pub(crate) fn put<T: Pod>(&mut self, array: Array, w: u32, idx: u64, value: &T) {
        assert!(self.active);
        assert_eq!(size_of::<T>() as u64, array.row_bytes());
        let lock = self.covering(array, w, idx, Mode::Exclusive);
        let loc = self.mem.layout.row(array, w, idx);
        let len = size_of::<T>();
        let start = self.undo_bytes.len();
        assert!(
            start + len <= TXN_UNDO_BYTES_MAX,
            "undo log over {TXN_UNDO_BYTES_MAX} bytes"
        );
        self.undo_bytes.resize(start + len, 0);
        match loc.place {
            Place::Pod => {
                let c = self.coherence(lock);
                self.cxl
                    .read_bytes(c, loc.off, &mut self.undo_bytes[start..]);
                self.cxl.write(c, loc.off, value);
            }
            _ => {
                let m = self.local(loc);
                m.read_bytes(loc.off, &mut self.undo_bytes[start..]);
                m.write(loc.off, value);
            }
        }
        self.undo.push(Undo {
            loc,
            lock,
            start,
            len,
        });
    }

    fn local(&self, loc: Loc) -> &'m crate::region::Mapping {
        match loc.place {
            Place::Partition => {
                assert_eq!(loc.host, self.host, "row in another host's partition");
                self.mem.part(self.host)
            }
            Place::Replicated => self.mem.part(self.host),
            Place::Pod => unreachable!(),
        }
    }

    pub(crate) fn commit(&mut self) {
        assert!(self.active);
        self.undo.clear();
        self.undo_bytes.clear();
        self.release();
    }

    /// Restores every before-image, newest first, then releases the locks.
    pub(crate) fn abort(&mut self) {
        assert!(self.active);
        while let Some(u) = self.undo.pop() {
            let bytes = &self.undo_bytes[u.start..u.start + u.len];
            match u.loc.place {
                Place::Pod => {
                    let lock = u.lock.expect("pod rows that are written have locks");
                    let word = self.cxl.lock_word(lock.off);
                    self.cxl
                        .write_bytes(Coherence::Tracked(word), u.loc.off, bytes);
                }
                _ => self.local(u.loc).write_bytes(u.loc.off, bytes),
            }
        }
        self.undo_bytes.clear();
        self.release();
    }

    fn release(&mut self) {
        while let Some(h) = self.held.pop() {
            let word = self.word(h.loc);
            match h.mode {
                Mode::Shared => lockword::unlock_shared(word),
                Mode::Exclusive => lockword::unlock_exclusive(word, self.host),
            }
        }
        self.active = false;
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        // A transaction dropped half-way (an early return on an error) must
        // not leave locks behind: under NO_WAIT the other hosts would abort on
        // them forever. Not while panicking: a second panic aborts the
        // process, and a dead holder is what leases (a later increment) are
        // for.
        if self.active && !std::thread::panicking() {
            self.abort();
        }
    }
}
