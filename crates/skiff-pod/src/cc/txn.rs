//! A host worker's transaction context: strict two-phase locking with NO_WAIT
//! or WAIT_DIE, in-place writes with an undo log, and every row access routed
//! by placement, to the host's partition (local DRAM) or through the CXL
//! layer (pod memory). In Pasha dynamic, a tuple of a movable table is found
//! wherever it is (`dynamic::lock_tuple`), and one another host owns is
//! first asked for.
//!
//! Lifecycle: `begin` → `lock`/`get`/`put` ... → `commit` or `abort`. Locks
//! are released only at the end (strict 2PL), after undo on abort, so no
//! other transaction ever sees an uncommitted write. A transaction touches
//! only its host's partition and pod memory; in (e) it may ask another
//! host's mover to move a tuple, but never runs anything on another host.
//!
//! WAIT_DIE: a transaction's age is the time of its first attempt (kept
//! across retries, so it grows old and eventually wins). A conflicting
//! request waits if it is older than the word's oldest holder, else dies
//! (aborts). Waiting sleeps on a release epoch futex (`Control::
//! release_epoch`) that the releaser bumps when the word's `WAITERS` bit was
//! set, bounded by `LOCK_WAIT_MAX` in case clock ages wrapped (then it dies).

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, SeqCst};
use std::time::{Duration, Instant};

use bytemuck::Pod;

use crate::arch::dynamic::{self, Miss, Reply, Route, Tuples};
use crate::arch::remote::{self, Coordinator, RemoteError};
use crate::durability::recovery::{self, TxnSlot};
use crate::durability::wal::{Redo, Tag, Wal, kind};
use skiff_pod_memory::arch::{CcProtocol, Place};
use skiff_pod_memory::constants::{DYNAMIC_ASKS_MAX, TXN_LOCKS_MAX, TXN_UNDO_BYTES_MAX};
use skiff_pod_memory::lockword::{self, Conflict, Mode};
use skiff_pod_memory::memory::PodMemory;
use skiff_pod_memory::memory::cxl::{Coherence, CxlAccess};
use skiff_pod_memory::memory::futex;
use skiff_pod_memory::memory::header::state;
use skiff_pod_memory::memory::layout::{Array, Loc, LockTable};

/// Longest WAIT_DIE wait for one lock before the waiter dies anyway.
const LOCK_WAIT_MAX: Duration = Duration::from_millis(100);

/// Why a transaction body stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TxnError {
    /// Lock conflict (NO_WAIT, or WAIT_DIE's die): abort and retry.
    Conflict,
    /// The transaction asked to roll back (NewOrder's invalid item).
    Rollback,
    /// A tuple's owner host is down (dead, or restarting): abort and give
    /// the input up, as a client would be told the host is unavailable,
    /// rather than retry until it is back.
    Unavailable,
    /// A table is full (order slots of a district): the run must stop.
    Capacity(String),
    /// A value read from pod memory is out of range.
    Corrupt(String),
}

pub(crate) type TxnResult<T> = Result<T, TxnError>;

/// A lock the transaction holds.
#[derive(Clone, Copy)]
struct Held {
    table: LockTable,
    w: u32,
    idx: u64,
    /// The word actually locked: the tuple's lock word, or in (e) its home
    /// word or the word of the slot it moved to.
    word: Loc,
    /// (e): the slot of the owner's pool the tuple is in.
    slot: Option<u32>,
    /// (a), (b): the tuple is another host's; its copy is this entry of the
    /// coordinator's remote tuples, and the owner holds the lock.
    remote: Option<usize>,
    mode: Mode,
}

#[derive(Clone, Copy)]
struct Undo {
    loc: Loc,
    /// Covering lock word of a pod row, for coherence bookkeeping on restore.
    lock: Option<Loc>,
    start: usize,
    len: usize,
}

/// What a worker's transactions did besides committing (for the report).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TxnSideCounters {
    /// WAIT_DIE waits (sleeps on a release epoch).
    pub waits: u64,
    /// (e) requests to an owner host, and messages (request + reply each).
    pub asks: u64,
    pub messages: u64,
}

pub(crate) struct Txn<'m> {
    mem: &'m PodMemory,
    host: u16,
    /// This worker's mailbox in (e).
    worker: u16,
    cc: CcProtocol,
    cxl: CxlAccess<'m>,
    held: Vec<Held>,
    undo: Vec<Undo>,
    undo_bytes: Vec<u8>,
    active: bool,
    age: u32,
    side: TxnSideCounters,
    /// (a), (b): links to the other hosts, once connected.
    coordinator: Option<Coordinator<'m>>,
    /// A broken protocol or log during commit or abort: the run must stop.
    fatal: Option<String>,
    /// (a), (b): the last commit failed because a participant's host is
    /// down; the transaction was aborted.
    unavailable: bool,
    /// A participant's part of a distributed transaction, logged and
    /// voted for: how its end is logged.
    prepared: Option<Tag>,
    /// The host's log; `None` in unit tests that test no durability.
    wal: Option<&'m Wal>,
    /// Undo images of pod rows for survivors (`recovery`); `None` for
    /// contexts that never write pod memory (participants of (a), (b)).
    slot: Option<TxnSlot>,
    /// After-images of every row written, for the log.
    redo: Redo,
    /// The attempt wrote a row in pod memory (its log record needs a GSN).
    wrote_pod: bool,
    /// Attempts begun by this context: with host and worker, the id of the
    /// current attempt in the log and in its transaction slot. Starts at
    /// the host's incarnation times 2^32, so a restarted host never reuses
    /// an id its participants may still be in doubt about.
    attempts: u64,
    /// The host's incarnation when the context was made.
    incarnation: u32,
}

/// The current WAIT_DIE age: a microsecond-ish clock shared by every process
/// of the machine (CLOCK_MONOTONIC), cut to the lock word's age field.
pub(crate) fn age_now() -> u32 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    let ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    ((ns >> 10) & ((1 << lockword::AGE_BITS) - 1)) as u32
}

impl<'m> Txn<'m> {
    #[cfg(test)]
    pub(crate) fn new(mem: &'m PodMemory, host: u16) -> Txn<'m> {
        Txn::for_worker(mem, host, 0)
    }

    /// The context of worker `worker` of `host` (its mailbox in (e)).
    pub(crate) fn for_worker(mem: &'m PodMemory, host: u16, worker: u16) -> Txn<'m> {
        let l = &mem.layout;
        let incarnation = crate::durability::lease::HostRecord::of(mem, host).incarnation();
        Txn {
            mem,
            host,
            worker,
            cc: l.params.cc,
            cxl: CxlAccess::new(&mem.pod, host, l.shared.clone(), l.coherent.clone()),
            held: Vec::with_capacity(TXN_LOCKS_MAX),
            undo: Vec::with_capacity(TXN_LOCKS_MAX * 2),
            undo_bytes: Vec::with_capacity(TXN_UNDO_BYTES_MAX),
            active: false,
            age: 0,
            side: TxnSideCounters::default(),
            coordinator: None,
            fatal: None,
            unavailable: false,
            prepared: None,
            wal: None,
            slot: None,
            redo: Redo::default(),
            wrote_pod: false,
            attempts: (incarnation as u64 & 0xFF) << 32,
            incarnation,
        }
    }

    /// Logs every commit to `wal` (group commit, durable before any lock is
    /// released); with `pod_writes`, also keeps undo images of pod rows in
    /// this worker's transaction slot for survivors.
    pub(crate) fn attach_log(&mut self, wal: &'m Wal, pod_writes: bool) {
        assert!(!self.active);
        self.wal = Some(wal);
        self.slot =
            pod_writes.then(|| TxnSlot::new(self.mem.layout.txn_slot(self.host, self.worker)));
    }

    fn txn_id(&self) -> u64 {
        (self.host as u64) << 56 | (self.worker as u64) << 40 | (self.attempts & ((1 << 40) - 1))
    }

    /// (a), (b): this worker reaches other hosts' tuples through their
    /// participants.
    pub(crate) fn connect_remote(&mut self) {
        assert!(self.mem.layout.shared_nothing());
        self.coordinator = Some(Coordinator::new(self.mem, self.host, self.worker));
    }

    /// A broken protocol or log left by the last commit or abort, if any.
    pub(crate) fn take_fatal(&mut self) -> Option<String> {
        self.fatal.take()
    }

    /// Whether the last commit was aborted because a participant's host is
    /// down (and clears it).
    pub(crate) fn take_unavailable(&mut self) -> bool {
        std::mem::take(&mut self.unavailable)
    }

    /// A participant's prepared part, if this transaction voted yes.
    pub(crate) fn prepared(&self) -> Option<Tag> {
        self.prepared
    }

    /// A participant votes yes: logs what it wrote as `tag` (`PREPARED`)
    /// and waits until the record is durable. Commit or abort then logs
    /// only the outcome.
    pub(crate) fn prepare(&mut self, tag: Tag) -> Result<(), String> {
        assert!(self.active && self.prepared.is_none());
        let wal = self.wal.ok_or("a participant without a log")?;
        let gsn = wal.next_seq(None);
        let end = wal.append(&self.redo, self.txn_id(), gsn, tag, |_, _| {})?;
        wal.wait_durable(end)?;
        self.redo.clear();
        self.prepared = Some(tag);
        Ok(())
    }

    pub(crate) fn is_active(&self) -> bool {
        self.active
    }

    /// Whether this transaction holds tuple `idx` of `table` in `mode` (or
    /// stronger).
    pub(crate) fn holds(&self, table: LockTable, w: u32, idx: u64, mode: Mode) -> bool {
        self.held.iter().any(|h| {
            h.table == table
                && h.w == w
                && h.idx == idx
                && (h.mode == Mode::Exclusive || mode == Mode::Shared)
        })
    }

    pub(crate) fn mem(&self) -> &'m PodMemory {
        self.mem
    }

    pub(crate) fn cxl_counters(&self) -> skiff_pod_memory::memory::cxl::CxlCounters {
        self.cxl.counters()
    }

    /// This context's window on pod memory, for a participant's channel.
    pub(crate) fn cxl_mut(&mut self) -> &mut CxlAccess<'m> {
        &mut self.cxl
    }

    /// Forgets what was counted so far (the warm-up ended); between
    /// transactions only.
    pub(crate) fn reset_counters(&mut self) {
        assert!(!self.active, "counters reset inside a transaction");
        self.cxl.reset_counters();
        self.side = TxnSideCounters::default();
        if let Some(c) = &mut self.coordinator {
            c.messages = 0;
        }
    }

    pub(crate) fn side_counters(&self) -> TxnSideCounters {
        let mut side = self.side;
        if let Some(c) = &self.coordinator {
            side.messages += c.messages;
        }
        side
    }

    /// Starts an attempt. `age`: WAIT_DIE timestamp of the input's first
    /// attempt ([`age_now`]); the same for every retry.
    pub(crate) fn begin(&mut self, age: u32) {
        assert!(!self.active, "begin inside a transaction");
        assert!(self.held.is_empty() && self.undo.is_empty());
        self.cxl.begin();
        self.age = age;
        self.active = true;
        self.attempts += 1;
        self.redo.clear();
        self.wrote_pod = false;
    }

    /// Takes `mode` on tuple `idx` of `table` for warehouse `w`, or fails with
    /// `Conflict` (at once under NO_WAIT; after waiting for older holders
    /// under WAIT_DIE). Re-locking a held tuple is free; asking for exclusive
    /// on a shared-held tuple upgrades, if this is the only reader (an
    /// upgrade never waits).
    pub(crate) fn lock(&mut self, table: LockTable, w: u32, idx: u64, mode: Mode) -> TxnResult<()> {
        assert!(self.active);
        let found = self
            .held
            .iter()
            .position(|h| h.table == table && h.w == w && h.idx == idx);
        if let Some(i) = found {
            if self.held[i].mode == Mode::Exclusive || mode == Mode::Shared {
                return Ok(());
            }
            if self.held[i].remote.is_some() {
                return Err(TxnError::Corrupt(format!(
                    "upgrade of a remote lock on {table:?} {w}/{idx} is not supported"
                )));
            }
            let loc = self.held[i].word;
            let unit = lockword::reader_unit(loc.place == Place::Pod, self.host);
            let word = self.word(loc);
            lockword::try_upgrade_as(word, self.host, unit).map_err(|_| TxnError::Conflict)?;
            self.held[i].mode = Mode::Exclusive;
            return Ok(());
        }
        assert!(
            self.held.len() < TXN_LOCKS_MAX,
            "transaction holds {TXN_LOCKS_MAX} locks"
        );
        let owner = self.mem.layout.host_of(w);
        if owner != self.host
            && let Some(c) = self.coordinator.as_mut()
        {
            let i = match c.lock(&mut self.cxl, owner, table, w, idx, mode, self.age) {
                Ok(i) => i,
                Err(RemoteError::Conflict) => return Err(TxnError::Conflict),
                Err(RemoteError::Unreachable) => return Err(TxnError::Unavailable),
                Err(RemoteError::Fatal(e)) => return Err(TxnError::Corrupt(e)),
            };
            self.held.push(Held {
                table,
                w,
                idx,
                word: Loc {
                    place: Place::Partition,
                    host: owner,
                    off: 0,
                },
                slot: None,
                remote: Some(i),
                mode,
            });
            return Ok(());
        }
        let (word, slot) = if self.mem.layout.movable(table) {
            self.lock_movable(table, w, idx, mode)?
        } else {
            let loc = self.mem.layout.lock(table, w, idx);
            self.acquire(loc, mode).map_err(|_| TxnError::Conflict)?;
            (loc, None)
        };
        self.held.push(Held {
            table,
            w,
            idx,
            word,
            slot,
            remote: None,
            mode,
        });
        Ok(())
    }

    /// (e): locks a tuple of a movable table wherever it is, asking its
    /// owner to move it to the shared region if another host owns it.
    fn lock_movable(
        &mut self,
        table: LockTable,
        w: u32,
        idx: u64,
        mode: Mode,
    ) -> TxnResult<(Loc, Option<u32>)> {
        let mem = self.mem;
        let layout = &mem.layout;
        let owner = layout.host_of(w);
        let (home, forward) = if owner == self.host {
            let home = layout.lock(table, w, idx);
            (Some(home), home)
        } else {
            let dir = Loc {
                place: Place::Pod,
                host: owner,
                off: layout.directory(table, w, idx),
            };
            (None, dir)
        };
        for _ in 0..DYNAMIC_ASKS_MAX {
            let mut r = Resolver {
                txn: self,
                table,
                owner,
                mode,
            };
            match dynamic::lock_tuple(&mut r, home, forward) {
                Ok(Route::Home) => return Ok((forward, None)),
                Ok(Route::Slot(s)) => {
                    let off = layout.slot_lock(table, owner, s);
                    lockword::mark_accessed(self.cxl.lock_word(off));
                    let loc = Loc {
                        place: Place::Pod,
                        host: owner,
                        off,
                    };
                    return Ok((loc, Some(s)));
                }
                Err(Miss::Conflict) => return Err(TxnError::Conflict),
                Err(Miss::BadForward(s)) => {
                    return Err(TxnError::Corrupt(format!(
                        "{table:?} {w}/{idx} forwarded to slot {s}, outside the pool"
                    )));
                }
                Err(Miss::NotMoved) => {}
            }
            self.side.asks += 1;
            self.side.messages += 2;
            let reply = dynamic::ask_owner(
                self.mem,
                &mut self.cxl,
                self.host,
                self.worker,
                owner,
                table,
                w,
                idx,
            )
            .map_err(TxnError::Corrupt)?;
            match reply {
                Reply::Moved => {}
                Reply::Busy | Reply::Stopped => return Err(TxnError::Conflict),
                Reply::OwnerDown => return Err(TxnError::Unavailable),
                Reply::Refused => {
                    return Err(TxnError::Corrupt(format!(
                        "host {owner} refused to move {table:?} {w}/{idx}"
                    )));
                }
            }
        }
        // Moved back by the clock between each answer and our retry.
        Err(TxnError::Conflict)
    }

    /// The lock word at `loc`; pod words count a coherent miss.
    fn word(&mut self, loc: Loc) -> &'m AtomicU64 {
        match loc.place {
            Place::Pod => self.cxl.lock_word(loc.off),
            Place::Partition => {
                assert_eq!(loc.host, self.host, "lock in another host's partition");
                self.mem.part(self.host).atomic_u64(loc.off)
            }
            Place::Replicated => unreachable!("replicated tables have no locks"),
        }
    }

    /// Acquires the word at `loc` under the concurrency-control protocol.
    fn acquire(&mut self, loc: Loc, mode: Mode) -> Result<(), Conflict> {
        let word = self.word(loc);
        let unit = lockword::reader_unit(loc.place == Place::Pod, self.host);
        let mut deadline = None;
        loop {
            let got = match mode {
                Mode::Shared => lockword::try_lock_shared_as(word, unit, self.age),
                Mode::Exclusive => lockword::try_lock_exclusive_aged(word, self.host, self.age),
            };
            if got.is_ok() || self.cc == CcProtocol::NoWait {
                return got;
            }
            let seen = word.load(Acquire);
            let now = Instant::now();
            let deadline = *deadline.get_or_insert(now + LOCK_WAIT_MAX);
            if now >= deadline || lockword::forwarded(seen).is_some() {
                return Err(Conflict);
            }
            if !lockword::held(seen) {
                // Released since the attempt: try again.
                continue;
            }
            if !lockword::older(self.age, lockword::age(seen)) {
                return Err(Conflict); // die
            }
            let control = self.mem.control();
            if matches!(
                control.state(),
                state::STOPPING | state::DONE | state::FAILED
            ) {
                return Err(Conflict);
            }
            let epoch = control.release_epoch(loc.off);
            let e = epoch.load(SeqCst);
            if lockword::ask_for_wake(word, seen) {
                self.side.waits += 1;
                futex::wait(epoch, e, deadline - now);
            }
        }
    }

    /// Releases the word at `loc` held in `mode`, waking WAIT_DIE waiters.
    fn unlock(&mut self, loc: Loc, mode: Mode) {
        let word = self.word(loc);
        let unit = lockword::reader_unit(loc.place == Place::Pod, self.host);
        let waiters = match mode {
            Mode::Shared => lockword::unlock_shared_as(word, unit),
            Mode::Exclusive => lockword::unlock_exclusive(word, self.host),
        };
        if waiters {
            let epoch = self.mem.control().release_epoch(loc.off);
            epoch.fetch_add(1, SeqCst);
            futex::wake_all(epoch);
        }
    }

    /// The held lock protecting a row, asserted held in (at least) `mode`.
    /// `None` for immutable arrays.
    fn covering(&self, array: Array, w: u32, idx: u64, mode: Mode) -> Option<Held> {
        let (table, lidx) = self.mem.layout.covering_lock(array, idx)?;
        let held = self
            .held
            .iter()
            .find(|h| h.table == table && h.w == w && h.idx == lidx);
        assert!(
            held.is_some_and(|h| h.mode == Mode::Exclusive || mode == Mode::Shared),
            "{array:?} row {idx} of warehouse {w} accessed without its {mode:?} lock"
        );
        held.copied()
    }

    /// Where row `idx` of `array` is now, given its covering lock.
    fn row(&self, array: Array, w: u32, idx: u64, held: Option<Held>) -> Loc {
        let layout = &self.mem.layout;
        match held.and_then(|h| h.slot) {
            Some(s) => layout.slot_row(array, layout.host_of(w), s),
            None => layout.row(array, w, idx),
        }
    }

    fn coherence(&mut self, held: Option<Held>) -> Coherence<'m> {
        match held {
            Some(h) => {
                assert_eq!(
                    h.word.place,
                    Place::Pod,
                    "pod row covered by a private lock"
                );
                Coherence::Tracked(self.cxl.lock_word(h.word.off))
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
        let held = self.covering(array, w, idx, Mode::Shared);
        if let Some(row) = self.remote_row(array, held) {
            let at = at as usize;
            return bytemuck::pod_read_unaligned(&row.0[at..at + size_of::<T>()]);
        }
        let loc = self.row(array, w, idx, held);
        match loc.place {
            Place::Pod => {
                let c = self.coherence(held);
                self.cxl.read(c, loc.off + at)
            }
            _ => self.local(loc).read(loc.off + at),
        }
    }

    /// Writes row `idx` of `array` in place after saving its before-image;
    /// the covering lock must be held exclusively.
    pub(crate) fn put<T: Pod>(&mut self, array: Array, w: u32, idx: u64, value: &T) {
        self.put_bytes(array, w, idx, bytemuck::bytes_of(value));
    }

    /// Reads a whole row as bytes (a participant shipping it).
    pub(crate) fn get_bytes(&mut self, array: Array, w: u32, idx: u64, dst: &mut [u8]) {
        assert!(self.active);
        assert_eq!(dst.len() as u64, array.row_bytes());
        let held = self.covering(array, w, idx, Mode::Shared);
        assert!(held.is_none_or(|h| h.remote.is_none()));
        let loc = self.row(array, w, idx, held);
        match loc.place {
            Place::Pod => {
                let c = self.coherence(held);
                self.cxl.read_bytes(c, loc.off, dst);
            }
            _ => self.local(loc).read_bytes(loc.off, dst),
        }
    }

    /// [`Txn::put`] of raw bytes: the row's new image.
    pub(crate) fn put_bytes(&mut self, array: Array, w: u32, idx: u64, value: &[u8]) {
        assert!(self.active);
        assert_eq!(value.len() as u64, array.row_bytes());
        let held = self.covering(array, w, idx, Mode::Exclusive);
        if let Some(row) = self.remote_row(array, held) {
            // The owner writes it at PREPARE, under the lock it holds.
            row.0.copy_from_slice(value);
            row.1 = true;
            return;
        }
        let loc = self.row(array, w, idx, held);
        if self.wal.is_some() {
            self.redo.push(array, w, idx, value);
        }
        self.wrote_pod |= loc.place == Place::Pod;
        let len = value.len();
        let start = self.undo_bytes.len();
        assert!(
            start + len <= TXN_UNDO_BYTES_MAX,
            "undo log over {TXN_UNDO_BYTES_MAX} bytes"
        );
        self.undo_bytes.resize(start + len, 0);
        let lock = match loc.place {
            Place::Pod => {
                let c = self.coherence(held);
                self.cxl
                    .read_bytes(c, loc.off, &mut self.undo_bytes[start..]);
                if let (Some(slot), Some(h)) = (self.slot.as_mut(), held) {
                    let id = (self.host as u64) << 56
                        | (self.worker as u64) << 40
                        | (self.attempts & ((1 << 40) - 1));
                    let before = &self.undo_bytes[start..];
                    slot.save(&mut self.cxl, id, loc.off, h.word.off, before);
                }
                self.cxl.write_bytes(c, loc.off, value);
                held.map(|h| h.word)
            }
            _ => {
                let m = self.local(loc);
                m.read_bytes(loc.off, &mut self.undo_bytes[start..]);
                m.write_bytes(loc.off, value);
                None
            }
        };
        self.undo.push(Undo {
            loc,
            lock,
            start,
            len,
        });
    }

    /// The local copy of a remote tuple's row of `array` (shared nothing).
    fn remote_row(&mut self, array: Array, held: Option<Held>) -> Option<&mut (Vec<u8>, bool)> {
        let h = held?;
        let i = h.remote?;
        let group = remote::arrays_of(h.table).iter().position(|&a| a == array);
        let c = self.coordinator.as_mut()?;
        let group = group.unwrap_or_else(|| panic!("{array:?} is not a row of {:?}", h.table));
        Some(&mut c.tuples[i].rows[group])
    }

    fn local(&self, loc: Loc) -> &'m skiff_pod_memory::memory::region::Mapping {
        match loc.place {
            Place::Partition => {
                assert_eq!(loc.host, self.host, "row in another host's partition");
                self.mem.part(self.host)
            }
            Place::Replicated => self.mem.part(self.host),
            Place::Pod => unreachable!(),
        }
    }

    /// Commits; with remote participants, by two-phase commit: every
    /// participant prepares, then this host's record (its writes and the
    /// decision) becomes durable, then the participants commit. A
    /// participant that is down aborts it instead ([`Txn::take_unavailable`]);
    /// a broken protocol or log aborts it and leaves a fatal error
    /// ([`Txn::take_fatal`]).
    pub(crate) fn commit(&mut self) {
        assert!(self.active);
        let (id, incarnation) = (self.txn_id(), self.incarnation);
        let distributed = match self.coordinator.as_mut() {
            Some(c) if c.has_participants() => match c.prepare(&mut self.cxl, id, incarnation) {
                Ok(()) => true,
                Err(RemoteError::Fatal(e)) => {
                    self.fatal = Some(e);
                    self.abort();
                    return;
                }
                Err(_) => {
                    self.unavailable = true;
                    self.abort();
                    return;
                }
            },
            _ => false,
        };
        if let Err(e) = self.log_commit(distributed) {
            // Not durable: the transaction did not commit. Undo it; the
            // host stops (a log that cannot be written cannot go on).
            self.fatal = Some(e);
            self.abort();
            return;
        }
        if distributed
            && let Some(c) = self.coordinator.as_mut()
            && let Err(e) = c.finish(&mut self.cxl, true)
        {
            self.fatal = Some(e);
        }
        if let Some(slot) = self.slot.as_mut() {
            slot.clear(&mut self.cxl);
        }
        self.undo.clear();
        self.undo_bytes.clear();
        self.release();
    }

    /// Test: the host dies right after its commit record is appended and
    /// waited for (`durable`) or just appended, with every lock still held
    /// and its transaction slot still `COMMITTING`. The context is left
    /// unusable (leak it with `std::mem::forget`).
    #[cfg(test)]
    pub(crate) fn crash_while_committing(&mut self) {
        let wal = self.wal.expect("a log");
        let id = self.txn_id();
        let off = self.mem.layout.recovery_off;
        let gsn = wal.next_seq(Some(self.cxl.lock_word(off)));
        let (slot, cxl) = (&self.slot, &mut self.cxl);
        let end = wal
            .append(&self.redo, id, gsn, Tag::default(), |start, end| {
                if let Some(slot) = slot {
                    slot.committing(cxl, start, end);
                }
            })
            .expect("appended");
        wal.wait_durable(end).expect("durable");
    }

    /// Appends the redo record (GSN taken under every lock) and waits until
    /// it is durable. Read-only transactions log nothing, unless the record
    /// is a distributed transaction's decision, or a prepared
    /// participant's outcome.
    fn log_commit(&mut self, distributed: bool) -> Result<(), String> {
        let Some(wal) = self.wal else {
            return Ok(());
        };
        let tag = match self.prepared.take() {
            Some(p) => Tag {
                kind: kind::RESOLVED_COMMIT,
                ..p
            },
            None if distributed => Tag {
                kind: kind::DECIDED_COMMIT,
                ..Tag::default()
            },
            None => Tag::default(),
        };
        if self.redo.is_empty() && tag.kind == kind::LOCAL {
            return Ok(());
        }
        let id = self.txn_id();
        // (e): other hosts write this host's movable rows while they are
        // moved, so every record is ordered globally, unless nothing can
        // move (one host, or no remote access): then, as in (d) at 0%, no
        // record needs the GSN word's coherent miss.
        let global = self.wrote_pod || self.mem.layout.tuples_can_move();
        let gsn = if global {
            let off = self.mem.layout.recovery_off;
            debug_assert!(std::ptr::eq(
                recovery::gsn_word(self.mem),
                self.mem.pod.atomic_u64(off)
            ));
            wal.next_seq(Some(self.cxl.lock_word(off)))
        } else {
            wal.next_seq(None)
        };
        let (slot, cxl) = (&self.slot, &mut self.cxl);
        let end = wal.append(&self.redo, id, gsn, tag, |start, end| {
            if let Some(slot) = slot {
                slot.committing(cxl, start, end);
            }
        })?;
        wal.wait_durable(end)
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
        if let Some(slot) = self.slot.as_mut() {
            slot.clear(&mut self.cxl);
        }
        self.undo_bytes.clear();
        self.release();
        if let Some(p) = self.prepared.take() {
            let resolved = Tag {
                kind: kind::RESOLVED_ABORT,
                ..p
            };
            self.log_outcome(resolved);
        }
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        if !c.has_participants() {
            return;
        }
        if c.prepare_sent() {
            // A participant that went down after it prepared is in doubt
            // until it reads this.
            let decided = Tag {
                kind: kind::DECIDED_ABORT,
                ..Tag::default()
            };
            self.log_outcome(decided);
        }
        if let Some(c) = self.coordinator.as_mut()
            && let Err(e) = c.finish(&mut self.cxl, false)
        {
            self.fatal.get_or_insert(e);
        }
    }

    /// Logs a distributed transaction's outcome (no writes); a log that
    /// cannot be written is fatal.
    fn log_outcome(&mut self, tag: Tag) {
        let Some(wal) = self.wal else { return };
        let gsn = wal.next_seq(None);
        let logged = wal
            .append(&Redo::default(), self.txn_id(), gsn, tag, |_, _| {})
            .and_then(|end| wal.wait_durable(end));
        if let Err(e) = logged {
            self.fatal.get_or_insert(e);
        }
    }

    fn release(&mut self) {
        while let Some(h) = self.held.pop() {
            // A remote lock is its owner's to release (COMMIT or ABORT).
            if h.remote.is_none() {
                self.unlock(h.word, h.mode);
            }
        }
        self.active = false;
    }
}

/// [`dynamic::lock_tuple`]'s view of a transaction: words by location,
/// acquired under the transaction's protocol.
struct Resolver<'t, 'm> {
    txn: &'t mut Txn<'m>,
    table: LockTable,
    owner: u16,
    mode: Mode,
}

impl Tuples for Resolver<'_, '_> {
    type Word = AtomicU64;
    type Id = Loc;

    fn word(&mut self, id: Loc) -> &AtomicU64 {
        self.txn.word(id)
    }

    fn slot(&self, slot: u32) -> Option<Loc> {
        let layout = &self.txn.mem.layout;
        (slot < layout.dynamic_slots()).then(|| Loc {
            place: Place::Pod,
            host: self.owner,
            off: layout.slot_lock(self.table, self.owner, slot),
        })
    }

    fn acquire(&mut self, id: Loc) -> Result<(), Conflict> {
        self.txn.acquire(id, self.mode)
    }

    fn release(&mut self, id: Loc) {
        self.txn.unlock(id, self.mode);
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        // A transaction dropped half-way (an early return on an error) must
        // not leave locks behind: under NO_WAIT the other hosts would abort on
        // them forever. Not while panicking: a second panic aborts the
        // process; the host then fails and exits, and a survivor reclaims
        // what it held once its process is gone (`lease`).
        if self.active && !std::thread::panicking() {
            self.abort();
        }
    }
}
