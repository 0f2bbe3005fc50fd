//! Pasha dynamic (architecture (e)): tuples of the tables other hosts reach
//! (CUSTOMER, STOCK) live in their owner's partition and move to the shared
//! region when another host asks for them.
//!
//! State, all in pod memory except the owner's private bookkeeping:
//! - the tuple's **home word**: its lock word in the owner's partition. While
//!   the tuple is moved, it is a *forward* (`lockword::MOVED` + slot) that
//!   refuses every acquire, so the owner's own transactions follow it;
//! - its **directory word** in the coherent region: 0, or the same forward;
//!   how other hosts find a moved tuple;
//! - a **slot** of the owner's pool: a lock word in the coherent region (the
//!   tuple's lock metadata while moved, with the clock bit) and the tuple's
//!   rows in the shared region.
//!
//! Only the owner's mover thread changes home and directory words and fills
//! or empties slots, so it needs no lock of its own. The protocol:
//! - **Move in** (on request): take the free slot's word exclusively, turn
//!   the home word into a forward (fails if a local transaction holds the
//!   tuple: the requester is told the tuple is busy), copy the rows, publish
//!   the directory word, release the slot word.
//! - **Move back** (clock, when the pool is full or the tuple cooled): take
//!   the slot word exclusively (fails if anyone references the tuple: every
//!   reference is a lock), copy the rows home, clear the home word, clear
//!   the directory word, release.
//! - **Access** ([`lock_tuple`]): try the home word (owner only); else read
//!   the forward, lock the slot word it names, and re-read the forward: if it
//!   changed, the slot was emptied (and maybe refilled) in between, so let go
//!   and report a conflict. A slot cannot empty while locked, so a forward
//!   seen unchanged after the lock names the tuple's current rows.
//!
//! A host that finds no forward asks the owner through its **mailbox** in the
//! coherent region and sleeps on it (futex) until the owner's mover answers;
//! the mover sleeps on its **doorbell** until asked, or until it is time to
//! sweep for cooled tuples. Nothing polls.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::{Duration, Instant};

use crate::durability::checkpoint::Gate;
use crate::durability::lease::{HostRecord, life};
use crate::durability::wal::{Redo, Tag, Wal};
use skiff_pod_memory::constants::{DYNAMIC_COOL_SWEEP_MAX, WAL_RECORD_BYTES_MAX};
use skiff_pod_memory::lockword::{self, AtomicWord, Conflict};
use skiff_pod_memory::memory::PodMemory;
use skiff_pod_memory::memory::cxl::{Coherence, CxlAccess, CxlCounters};
use skiff_pod_memory::memory::futex;
use skiff_pod_memory::memory::header::state;
use skiff_pod_memory::memory::layout::{Array, LockTable};
use skiff_pod_memory::stats::thread_cpu_ns;

/// Where [`lock_tuple`] found the tuple.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// In the owner's partition, under its home word.
    Home,
    /// In this slot of the owner's pool.
    Slot(u32),
}

/// Why [`lock_tuple`] did not lock the tuple.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Miss {
    /// Held in a conflicting mode, or moving: the transaction aborts.
    Conflict,
    /// Not in the shared region and not ours: ask the owner.
    NotMoved,
    /// A forward names a slot outside the pool.
    BadForward(u32),
}

/// What [`lock_tuple`] needs from its caller: words by id, and the
/// concurrency-control protocol's acquire and release.
pub(crate) trait Tuples {
    type Word: AtomicWord;
    type Id: Copy;
    fn word(&mut self, id: Self::Id) -> &Self::Word;
    /// The id of `slot`'s word, `None` if the pool has no such slot.
    fn slot(&self, slot: u32) -> Option<Self::Id>;
    fn acquire(&mut self, id: Self::Id) -> Result<(), Conflict>;
    fn release(&mut self, id: Self::Id);
}

/// Locks a tuple wherever it is. `home`: its home word, for the owner only;
/// `forward`: the word that forwards it when moved (the home word for the
/// owner, the directory word for other hosts).
pub(crate) fn lock_tuple<T: Tuples>(
    t: &mut T,
    home: Option<T::Id>,
    forward: T::Id,
) -> Result<Route, Miss> {
    if let Some(h) = home
        && t.acquire(h).is_ok()
    {
        return Ok(Route::Home);
    }
    let seen = t.word(forward).load(Acquire);
    let Some(slot) = lockword::forwarded(seen) else {
        return Err(if home.is_some() {
            Miss::Conflict
        } else {
            Miss::NotMoved
        });
    };
    let id = t.slot(slot).ok_or(Miss::BadForward(slot))?;
    t.acquire(id).map_err(|_| Miss::Conflict)?;
    // Acquire of the slot word synchronizes with the mover's release, which
    // follows its forward updates: a forward still equal to `seen` now
    // names this slot for as long as we hold it.
    if t.word(forward).load(Acquire) != seen {
        t.release(id);
        return Err(Miss::Conflict);
    }
    Ok(Route::Slot(slot))
}

/// The owner's mover moves a tuple into free slot `slot`; `copy` copies its
/// rows from the partition to the slot. Fails, changing nothing, if a local
/// transaction holds the tuple (or a stale reader still holds the slot).
/// Returns whether a WAIT_DIE waiter asked to be woken when the slot word
/// was released: the owner's transactions follow the forward to the slot
/// while it is being filled, and an older one waits for the mover as for
/// any holder; the caller wakes it (`Mover::wake_waiters`).
pub(crate) fn move_in<W: AtomicWord>(
    home: &W,
    directory: &W,
    slot_word: &W,
    slot: u32,
    owner: u16,
    copy: impl FnOnce(),
) -> Result<bool, Conflict> {
    lockword::try_lock_exclusive(slot_word, owner)?;
    if lockword::try_forward(home, slot).is_err() {
        // A waiter here followed a stale forward to this slot and is not
        // woken: it dies when its bounded wait ends, as it would anyway.
        lockword::unlock_exclusive(slot_word, owner);
        return Err(Conflict);
    }
    // From here the owner's transactions follow the forward to a slot we
    // hold; other hosts still see no directory entry and ask again later.
    copy();
    let previous = directory.swap(lockword::forward_to(slot), Release);
    assert_eq!(
        previous, 0,
        "directory word of a tuple at home was {previous:#x}"
    );
    Ok(lockword::unlock_exclusive(slot_word, owner))
}

/// The owner's mover moves the tuple in `slot` home; `copy` copies its rows
/// from the slot to the partition. Fails, changing nothing, if anyone holds
/// the slot's lock (references it). Returns whether a WAIT_DIE waiter (one
/// that arrived while the mover held the slot) asked to be woken. The mover
/// runs the two halves itself, to log a batch in between; tests run both.
#[cfg(test)]
pub(crate) fn move_back<W: AtomicWord>(
    home: &W,
    directory: &W,
    slot_word: &W,
    slot: u32,
    owner: u16,
    copy: impl FnOnce(),
) -> Result<bool, Conflict> {
    begin_move_back(slot_word, owner, copy)?;
    Ok(finish_move_back(home, directory, slot_word, slot, owner))
}

/// The first half of [`move_back`]: takes the slot word exclusively (fails,
/// changing nothing, if anyone references the tuple) and copies the rows
/// home. The home word still forwards, so the copies are not read yet; the
/// mover may log a batch of them before it finishes each, or let go with
/// [`abandon_move_back`].
pub(crate) fn begin_move_back<W: AtomicWord>(
    slot_word: &W,
    owner: u16,
    copy: impl FnOnce(),
) -> Result<(), Conflict> {
    lockword::try_lock_exclusive(slot_word, owner)?;
    copy();
    Ok(())
}

/// The second half of [`move_back`]: the tuple is home again. Returns
/// whether a WAIT_DIE waiter asked to be woken.
pub(crate) fn finish_move_back<W: AtomicWord>(
    home: &W,
    directory: &W,
    slot_word: &W,
    slot: u32,
    owner: u16,
) -> bool {
    let previous = home.swap(0, Release);
    assert_eq!(
        lockword::forwarded(previous),
        Some(slot),
        "home word of a moved tuple was {previous:#x}"
    );
    let previous = directory.swap(0, Release);
    assert_eq!(
        lockword::forwarded(previous),
        Some(slot),
        "directory word of a moved tuple was {previous:#x}"
    );
    let woken = lockword::unlock_exclusive(slot_word, owner);
    // The next occupant starts with no cached copies and a clear clock bit.
    slot_word.fetch_and(!(lockword::VALID_MASK | lockword::ACCESSED), AcqRel);
    woken
}

/// A begun move back that cannot finish (its log record failed): the tuple
/// stays in its slot, which is still what the forward names; the rows
/// copied home are never read while the home word forwards.
pub(crate) fn abandon_move_back<W: AtomicWord>(slot_word: &W, owner: u16) -> bool {
    lockword::unlock_exclusive(slot_word, owner)
}

/// Mailbox states (the futex word at offset 0 of a mailbox).
mod mail {
    pub const EMPTY: u32 = 0;
    pub const PENDING: u32 = 1;
    pub const TAKEN: u32 = 2;
    /// Replies: at least `MOVED`.
    pub const MOVED: u32 = 3;
    pub const BUSY: u32 = 4;
    pub const REFUSED: u32 = 5;
}

/// The owner's answer to a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// The tuple is in the shared region now (or was already).
    Moved,
    /// A local transaction holds it, or every slot is referenced.
    Busy,
    /// The run is stopping; the request was withdrawn.
    Stopped,
    /// The owner's process is gone (or it restarted): nobody will answer.
    OwnerDown,
    /// The owner found the request malformed.
    Refused,
}

/// Longest single sleep of a requester, so it notices a stopping run.
const ASK_SLICE: Duration = Duration::from_millis(20);
/// A request the owner's mover took must be answered within this: it
/// never blocks while serving.
const ASK_ANSWER_MAX: Duration = Duration::from_secs(30);

fn table_code(t: LockTable) -> u32 {
    match t {
        LockTable::Customer => 1,
        LockTable::Stock => 2,
        _ => 0,
    }
}

fn table_of(code: u32) -> Option<LockTable> {
    match code {
        1 => Some(LockTable::Customer),
        2 => Some(LockTable::Stock),
        _ => None,
    }
}

/// The rows a movable tuple of `table` has (its column groups).
fn arrays_of(table: LockTable) -> [Array; 2] {
    match table {
        LockTable::Customer => [Array::Customer, Array::CustomerData],
        LockTable::Stock => [Array::Stock, Array::StockDist],
        _ => unreachable!("{table:?} does not move"),
    }
}

/// The column groups a move back copies home and logs: those a transaction
/// can write. S_DIST_01..10 are read-only after the load (NewOrder reads
/// one; nothing writes them), so the home copy is still the slot's: three
/// quarters of a STOCK tuple's bytes need neither a copy nor a log entry.
fn writable(array: Array) -> bool {
    array != Array::StockDist
}

struct Mailbox<'m> {
    state: &'m AtomicU32,
    target: &'m AtomicU32,
    table: &'m AtomicU32,
    warehouse: &'m AtomicU32,
    idx: &'m AtomicU64,
}

impl<'m> Mailbox<'m> {
    fn of(mem: &'m PodMemory, off: u64) -> Mailbox<'m> {
        Mailbox {
            state: mem.pod.atomic_u32(off),
            target: mem.pod.atomic_u32(off + 4),
            table: mem.pod.atomic_u32(off + 8),
            warehouse: mem.pod.atomic_u32(off + 12),
            idx: mem.pod.atomic_u64(off + 16),
        }
    }
}

/// Asks `owner` to move tuple `idx` of `table` (warehouse `w`) to the shared
/// region, from mailbox `worker` of `host`, and sleeps until it answers.
/// `cxl` counts the mailbox line (one coherent miss).
#[allow(clippy::too_many_arguments)]
pub(crate) fn ask_owner(
    mem: &PodMemory,
    cxl: &mut CxlAccess<'_>,
    host: u16,
    worker: u16,
    owner: u16,
    table: LockTable,
    w: u32,
    idx: u64,
) -> Result<Reply, String> {
    assert_ne!(owner, host, "a host asks only other hosts");
    // A dead owner's mover answers nobody: fail fast, the transaction
    // aborts and the worker moves on, instead of waiting for a restart.
    // The process check reads /proc: only when a heartbeat is late.
    let record = HostRecord::of(mem, owner);
    let incarnation = record.incarnation();
    let late = record.beat_is_late();
    if record.life() != life::ALIVE || late && !record.alive_as(incarnation) {
        return Ok(Reply::OwnerDown);
    }
    let off = mem.layout.mailbox(host, worker);
    cxl.lock_word(off);
    let mb = Mailbox::of(mem, off);
    let s = mb.state.load(Acquire);
    assert_eq!(s, mail::EMPTY, "mailbox {host}/{worker} in use: {s}");
    mb.target.store(owner as u32, Relaxed);
    mb.table.store(table_code(table), Relaxed);
    mb.warehouse.store(w, Relaxed);
    mb.idx.store(idx, Relaxed);
    mb.state.store(mail::PENDING, Release);
    let bell = mem.pod.atomic_u32(mem.layout.doorbell(owner));
    bell.fetch_add(1, Release);
    futex::wake_all(bell);

    let control = mem.control();
    let started = Instant::now();
    loop {
        let answered = futex::wait_until(mb.state, Instant::now() + ASK_SLICE, ASK_SLICE, |s| {
            s >= mail::MOVED
        });
        if let Some(reply) = answered {
            mb.state.store(mail::EMPTY, Release);
            return Ok(match reply {
                mail::MOVED => Reply::Moved,
                mail::BUSY => Reply::Busy,
                _ => Reply::Refused,
            });
        }
        let stopping = !matches!(control.state(), state::RUNNING | state::LOADED);
        let down = !record.alive_as(incarnation);
        if (stopping || down)
            && mb
                .state
                .compare_exchange(mail::PENDING, mail::EMPTY, AcqRel, Acquire)
                .is_ok()
        {
            return Ok(if down {
                Reply::OwnerDown
            } else {
                Reply::Stopped
            });
        }
        // Taken by a mover that died serving it: nobody will answer. No
        // mover of the owner runs until it is ALIVE again (a restarted
        // mover answers what it takes).
        if down && record.life() != life::ALIVE && withdraw_taken(mb.state) {
            return Ok(Reply::OwnerDown);
        }
        if started.elapsed() > ASK_ANSWER_MAX {
            return Err(format!(
                "host {owner} did not answer host {host}'s request in {ASK_ANSWER_MAX:?}"
            ));
        }
    }
}

/// Empties a mailbox whose request a dead mover took.
fn withdraw_taken(state: &AtomicU32) -> bool {
    state
        .compare_exchange(mail::TAKEN, mail::EMPTY, AcqRel, Acquire)
        .is_ok()
}

/// A restarted host's mailboxes: requests its previous incarnation left
/// behind are withdrawn, and answers nobody read are dropped, so every
/// mailbox is EMPTY before its workers ask again. A survivor's mover that
/// took a request answers within `ASK_ANSWER_MAX`.
pub(crate) fn reset_mailboxes(mem: &PodMemory, host: u16) -> Result<(), String> {
    let l = &mem.layout;
    for k in 0..l.mailboxes_per_host() {
        let mb = Mailbox::of(mem, l.mailbox(host, k));
        let give_up = Instant::now() + ASK_ANSWER_MAX;
        loop {
            let s = mb.state.load(Acquire);
            let emptied = match s {
                mail::EMPTY => true,
                mail::TAKEN => false,
                _ => mb
                    .state
                    .compare_exchange(s, mail::EMPTY, AcqRel, Acquire)
                    .is_ok(),
            };
            if emptied {
                break;
            }
            if Instant::now() > give_up {
                return Err(format!(
                    "mailbox {host}/{k} still taken after {ASK_ANSWER_MAX:?}"
                ));
            }
            futex::wait(mb.state, s, ASK_SLICE);
        }
    }
    Ok(())
}

/// Tuples of `table` owned by `host` that are in one of its slots, by
/// their directory words: (warehouse, index, slot). Only the owner's mover
/// changes them, so they are stable while it is not running. A forward out
/// of the pool is skipped (it would be refused at every access).
pub(crate) fn moved_tuples(
    mem: &PodMemory,
    host: u16,
    table: LockTable,
) -> impl Iterator<Item = (u32, u64, u32)> + '_ {
    let l = &mem.layout;
    let rows = l.lock_rows(table);
    l.warehouses_of(host).flat_map(move |w| {
        (0..rows).filter_map(move |idx| {
            let dir = mem.pod.atomic_u64(l.directory(table, w, idx)).load(Acquire);
            lockword::forwarded(dir)
                .filter(|&s| s < l.dynamic_slots())
                .map(|s| (w, idx, s))
        })
    })
}

/// (e): a tuple the host had moved to one of its slots stays there while
/// it is dead (survivors keep using it through the directory), so its home
/// word must forward to the slot again; every other home word is free (no
/// transaction of the dead host survives it).
pub(crate) fn restore_home_words(mem: &PodMemory, host: u16) {
    let l = &mem.layout;
    let part = mem.part(host);
    for table in [LockTable::Customer, LockTable::Stock] {
        if !l.movable(table) {
            continue;
        }
        for w in l.warehouses_of(host) {
            for idx in 0..l.lock_rows(table) {
                part.atomic_u64(l.lock(table, w, idx).off).store(0, Release);
            }
        }
        for (w, idx, slot) in moved_tuples(mem, host, table) {
            let home = part.atomic_u64(l.lock(table, w, idx).off);
            home.store(lockword::forward_to(slot), Release);
        }
    }
}

/// What a host's mover did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct MoverStats {
    pub requests: u64,
    pub moved_in: u64,
    /// Tuples moved in that had been moved in before in this run (churn).
    pub moved_again: u64,
    pub moved_back: u64,
    /// Of `moved_back`, those the cooling sweep moved (the rest made room).
    pub cooled: u64,
    /// Requests answered busy (tuple held locally, or no slot free).
    pub busy: u64,
    /// Wake-ups, and the CPU time spent filling and emptying slots.
    pub rounds: u64,
    pub move_in_ns: u64,
    pub move_back_ns: u64,
    pub cxl: CxlCounters,
    pub cpu_ns: u64,
}

/// One movable table's pool of slots, as its owner's mover sees it.
struct Pool {
    table: LockTable,
    free: Vec<u32>,
    /// The tuple (warehouse, index) in each slot.
    occupant: Vec<Option<(u32, u64)>>,
    hand: u32,
    /// One bit per tuple of the owner: moved in before (for `moved_again`).
    moved_before: Vec<u64>,
    first_warehouse: u32,
    rows: u64,
}

impl Pool {
    /// Marks tuple (`w`, `idx`) moved; whether it had been before.
    fn mark_moved(&mut self, w: u32, idx: u64) -> bool {
        let bit = (w - self.first_warehouse) as u64 * self.rows + idx;
        let (word, mask) = ((bit / 64) as usize, 1u64 << (bit % 64));
        let before = self.moved_before[word] & mask != 0;
        self.moved_before[word] |= mask;
        before
    }

    /// Free slots the mover keeps in reserve, so a request seldom waits
    /// for a move back, and the moves back that make room go out as a
    /// batch under one log record.
    fn reserve(&self) -> usize {
        (self.occupant.len() / DYNAMIC_RESERVE_FRACTION).max(1)
    }
}

/// A pool keeps 1/64 of its slots free (`Pool::reserve`).
const DYNAMIC_RESERVE_FRACTION: usize = 64;

/// A tuple moved back in a batch: slot, warehouse, index.
type Victim = (u32, u32, u64);

/// A host's mover: serves move requests and moves tuples back.
pub(crate) struct Mover<'m> {
    mem: &'m PodMemory,
    host: u16,
    cxl: CxlAccess<'m>,
    pools: Vec<Pool>,
    buf: Vec<u8>,
    /// The tuples of the move-back batch being built.
    victims: Vec<Victim>,
    stats: MoverStats,
    /// The host's log: a tuple moved home is logged there, so the host's
    /// own log and checkpoint rebuild its partition (writes other hosts
    /// made while it was moved are in their logs, which their checkpoints
    /// truncate).
    wal: Option<&'m Wal>,
    redo: Redo,
    /// A move back that could not be logged: the mover stops.
    fatal: Option<String>,
}

/// The transaction id (below the host bits) of the mover's records.
const MOVER_TXN_ID: u64 = (1 << 56) - 1;

/// How often a mover runs its cooling sweep (and how long it sleeps when
/// nobody asks).
const COOL_INTERVAL: Duration = Duration::from_millis(100);

/// The slowest a tuple can cool: the cooling sweep visits a pool that is
/// over half full at a pace that takes its hand once around in this time,
/// so a tuple moves back for cooling only if nobody used it for this long
/// (the clock's second chance). The sweep used to turn in 3.2 s (512
/// slots per round on 16,384 slots) and made two thirds of the moves back
/// at steady state, of tuples a full pool would have moved back anyway; a
/// slower sweep leaves that to the reserve's refill, whose moves back go
/// out in larger batches.
const COOL_TURN: Duration = Duration::from_secs(30);

impl<'m> Mover<'m> {
    pub(crate) fn new(mem: &'m PodMemory, host: u16) -> Mover<'m> {
        let l = &mem.layout;
        let slots = l.dynamic_slots();
        assert!(slots > 0, "a mover outside Pasha dynamic");
        let pools = [LockTable::Customer, LockTable::Stock]
            .into_iter()
            .filter(|&t| l.movable(t))
            .map(|table| {
                // A restarted host's tuples may still be in its slots, where
                // survivors kept using them: the directory says which.
                let mut occupant = vec![None; slots as usize];
                for (w, idx, slot) in moved_tuples(mem, host, table) {
                    occupant[slot as usize] = Some((w, idx));
                }
                let warehouses = l.warehouses_of(host);
                let rows = l.lock_rows(table);
                let tuples = (warehouses.end() - warehouses.start() + 1) as u64 * rows;
                Pool {
                    table,
                    // Pop from the end: hand out slot 0 first.
                    free: (0..slots)
                        .rev()
                        .filter(|&s| occupant[s as usize].is_none())
                        .collect(),
                    occupant,
                    hand: 0,
                    moved_before: vec![0; tuples.div_ceil(64) as usize],
                    first_warehouse: *warehouses.start(),
                    rows,
                }
            })
            .collect();
        Mover {
            mem,
            host,
            cxl: CxlAccess::new(&mem.pod, host, l.shared.clone(), l.coherent.clone()),
            pools,
            buf: Vec::with_capacity(512),
            victims: Vec::new(),
            stats: MoverStats::default(),
            wal: None,
            redo: Redo::default(),
            fatal: None,
        }
    }

    /// Logs every tuple it moves home to `wal`.
    pub(crate) fn with_log(mut self, wal: &'m Wal) -> Mover<'m> {
        self.wal = Some(wal);
        self
    }

    /// Serves until the run leaves RUNNING or `hard_stop`; an error if a
    /// move back could not be logged. Its moves change the partition, so
    /// they happen inside the checkpoint `gate`.
    pub(crate) fn run(mut self, gate: &Gate, hard_stop: Instant) -> Result<MoverStats, String> {
        let mut cpu_start = thread_cpu_ns();
        let control = self.mem.control();
        let mut window = control.window();
        let bell = self.mem.pod.atomic_u32(self.mem.layout.doorbell(self.host));
        let mut last_sweep = Instant::now();
        while control.state() == state::RUNNING && Instant::now() < hard_stop {
            let rung = bell.load(Acquire);
            if window.restarted() {
                // The warm-up ended (the coordinator rang to say so).
                self.stats = MoverStats::default();
                self.cxl.reset_counters();
                cpu_start = thread_cpu_ns();
            }
            self.stats.rounds += 1;
            gate.enter();
            self.serve();
            self.refill();
            if last_sweep.elapsed() >= COOL_INTERVAL {
                self.cool();
                last_sweep = Instant::now();
            }
            gate.leave();
            if let Some(e) = self.fatal.take() {
                return Err(e);
            }
            // Woken by a request (the doorbell changes), the stop (a
            // request withdrawn is fine), or the next sweep.
            futex::wait(bell, rung, COOL_INTERVAL);
        }
        self.stats.cxl = self.cxl.counters();
        self.stats.cpu_ns = thread_cpu_ns() - cpu_start;
        Ok(self.stats)
    }

    /// Answers every pending request addressed to this host.
    pub(crate) fn serve(&mut self) {
        let mem = self.mem;
        let l = &mem.layout;
        let me = self.host;
        for g in (0..l.params.hosts).filter(|&g| g != me) {
            for k in 0..l.mailboxes_per_host() {
                let mb = Mailbox::of(mem, l.mailbox(g, k));
                if mb.state.load(Acquire) != mail::PENDING
                    || mb.target.load(Relaxed) != me as u32
                    || mb
                        .state
                        .compare_exchange(mail::PENDING, mail::TAKEN, AcqRel, Acquire)
                        .is_err()
                {
                    continue;
                }
                let request = (
                    mb.table.load(Relaxed),
                    mb.warehouse.load(Relaxed),
                    mb.idx.load(Relaxed),
                );
                let reply = self.handle(request);
                mb.state.store(reply, Release);
                futex::wake_all(mb.state);
            }
        }
    }

    /// Moves the requested tuple in, if it can. Request fields come from pod
    /// memory: validated, never trusted.
    fn handle(&mut self, (code, w, idx): (u32, u32, u64)) -> u32 {
        self.stats.requests += 1;
        let mem = self.mem;
        let l = &mem.layout;
        let Some(table) = table_of(code).filter(|&t| l.movable(t)) else {
            return mail::REFUSED;
        };
        let rows = if table == LockTable::Customer {
            skiff_pod_memory::tpcc::schema::CUSTOMERS_PER_DISTRICT as u64
                * skiff_pod_memory::tpcc::schema::DISTRICTS_PER_WAREHOUSE as u64
        } else {
            skiff_pod_memory::tpcc::schema::STOCK_PER_WAREHOUSE as u64
        };
        if !(1..=l.params.warehouses).contains(&w) || l.host_of(w) != self.host || idx >= rows {
            return mail::REFUSED;
        }
        let dir = mem.pod.atomic_u64(l.directory(table, w, idx));
        if lockword::forwarded(dir.load(Acquire)).is_some() {
            return mail::MOVED;
        }
        let p = self.pools.iter().position(|p| p.table == table);
        let Some(p) = p else { return mail::REFUSED };
        let Some(slot) = self.take_slot(p) else {
            self.stats.busy += 1;
            return mail::BUSY;
        };
        let started = thread_cpu_ns();
        let filled = self.fill(p, slot, w, idx);
        self.stats.move_in_ns += thread_cpu_ns() - started;
        if filled.is_ok() {
            self.stats.moved_in += 1;
            self.stats.moved_again += self.pools[p].mark_moved(w, idx) as u64;
            mail::MOVED
        } else {
            self.pools[p].free.push(slot);
            self.stats.busy += 1;
            mail::BUSY
        }
    }

    /// A free slot of pool `p`, moving a batch of tuples back by the clock
    /// if none is (the reserve ran out between rounds).
    fn take_slot(&mut self, p: usize) -> Option<u32> {
        if let Some(s) = self.pools[p].free.pop() {
            return Some(s);
        }
        // Two turns of the hand: the first may only clear clock bits.
        let visits = 2 * self.pools[p].occupant.len();
        let want = self.pools[p].reserve();
        self.evict(p, visits, want, false);
        self.pools[p].free.pop()
    }

    /// Tops up every pool's reserve of free slots once it is half gone.
    fn refill(&mut self) {
        for p in 0..self.pools.len() {
            let (free, reserve) = (self.pools[p].free.len(), self.pools[p].reserve());
            if free * 2 < reserve {
                let visits = 2 * self.pools[p].occupant.len();
                self.evict(p, visits, reserve - free, false);
            }
        }
    }

    /// Moves back tuples that cooled: a bounded clock sweep per pool that
    /// is over half full, paced so the hand turns once per `COOL_TURN`.
    fn cool(&mut self) {
        let per_turn = (COOL_TURN.as_millis() / COOL_INTERVAL.as_millis()).max(1) as usize;
        for p in 0..self.pools.len() {
            let slots = self.pools[p].occupant.len();
            if self.pools[p].free.len() * 2 >= slots {
                continue;
            }
            let visits = slots
                .div_ceil(per_turn)
                .min(DYNAMIC_COOL_SWEEP_MAX as usize);
            self.evict(p, visits, usize::MAX, true);
        }
    }

    fn advance(&mut self, p: usize) -> u32 {
        let pool = &mut self.pools[p];
        let s = pool.hand;
        pool.hand = (s + 1) % pool.occupant.len() as u32;
        s
    }

    /// Clock over the next `visits` slots of pool `p`: a slot used since
    /// the hand last passed gets a second chance; an unused, unreferenced
    /// one moves home, up to `want` of them, in batches that share one log
    /// record. `cooling`: counted as moved back for cooling.
    fn evict(&mut self, p: usize, visits: usize, want: usize, cooling: bool) {
        let started = thread_cpu_ns();
        let mut moved = 0;
        let mut visited = 0;
        while visited < visits && moved < want && self.fatal.is_none() {
            self.victims.clear();
            self.redo.clear();
            self.cxl.begin();
            while visited < visits && moved + self.victims.len() < want {
                if self.redo.record_bytes() + TUPLE_LOG_BYTES_MAX > WAL_RECORD_BYTES_MAX {
                    break;
                }
                visited += 1;
                let s = self.advance(p);
                if let Some((w, idx)) = self.pools[p].occupant[s as usize]
                    && self.begin_empty(p, s, w, idx)
                {
                    self.victims.push((s, w, idx));
                }
            }
            if self.victims.is_empty() {
                continue;
            }
            moved += self.victims.len();
            self.finish_batch(p, cooling);
        }
        self.stats.move_back_ns += thread_cpu_ns() - started;
    }

    /// Clock step on slot `s` holding (`w`, `idx`): unless its clock bit
    /// was set (cleared now: a second chance) or anyone references it, locks
    /// the slot, copies the writable rows home and adds them to the batch's
    /// redo record.
    fn begin_empty(&mut self, p: usize, slot: u32, w: u32, idx: u64) -> bool {
        let (mem, host, table) = (self.mem, self.host, self.pools[p].table);
        let l = &mem.layout;
        let slot_word = self.cxl.lock_word(l.slot_lock(table, host, slot));
        if lockword::take_accessed(slot_word) {
            return false;
        }
        let (cxl, buf, redo) = (&mut self.cxl, &mut self.buf, &mut self.redo);
        begin_move_back(slot_word, host, || {
            for array in arrays_of(table) {
                let src = l.slot_row(array, host, slot);
                let dst = l.row(array, w, idx);
                // Read-only rows are not read at all (no modeled misses):
                // the home copy is still theirs, which debug builds check.
                if !writable(array) && !cfg!(debug_assertions) {
                    continue;
                }
                buf.resize(array.row_bytes() as usize, 0);
                cxl.read_bytes(Coherence::Tracked(slot_word), src.off, buf);
                if !writable(array) {
                    let mut home = vec![0u8; buf.len()];
                    mem.part(host).read_bytes(dst.off, &mut home);
                    assert!(home == *buf, "{array:?} changed while moved");
                    continue;
                }
                mem.part(host).write_bytes(dst.off, buf);
                redo.push(array, w, idx, buf);
            }
        })
        .is_ok()
    }

    /// Logs the batch's rows in one record, durable before any of its
    /// tuples' directory words let go of their slots (until then a restart
    /// finds them in the slots), then finishes each move back. If the log
    /// fails, the tuples stay in their slots and the mover stops.
    fn finish_batch(&mut self, p: usize, cooling: bool) {
        let (mem, host, table) = (self.mem, self.host, self.pools[p].table);
        let l = &mem.layout;
        if let Some(wal) = self.wal {
            let gsn = wal.next_seq(Some(crate::durability::recovery::gsn_word(mem)));
            let id = (host as u64) << 56 | MOVER_TXN_ID;
            let logged = wal
                .append(&self.redo, id, gsn, Tag::default(), |_, _| {})
                .and_then(|end| wal.wait_durable(end));
            if let Err(e) = logged {
                for &(slot, _, _) in &self.victims {
                    let off = l.slot_lock(table, host, slot);
                    let woken = abandon_move_back(self.cxl.lock_word(off), host);
                    self.wake_waiters(woken, off);
                }
                self.fatal.get_or_insert(e);
                return;
            }
        }
        for i in 0..self.victims.len() {
            let (slot, w, idx) = self.victims[i];
            let home = mem.part(host).atomic_u64(l.lock(table, w, idx).off);
            let dir = self.cxl.lock_word(l.directory(table, w, idx));
            let off = l.slot_lock(table, host, slot);
            let woken = finish_move_back(home, dir, self.cxl.lock_word(off), slot, host);
            self.wake_waiters(woken, off);
            self.pools[p].occupant[slot as usize] = None;
            self.pools[p].free.push(slot);
        }
        let n = self.victims.len() as u64;
        self.stats.moved_back += n;
        if cooling {
            self.stats.cooled += n;
        }
    }

    fn fill(&mut self, p: usize, slot: u32, w: u32, idx: u64) -> Result<(), Conflict> {
        let (mem, host, table) = (self.mem, self.host, self.pools[p].table);
        let l = &mem.layout;
        self.cxl.begin();
        let home = mem.part(host).atomic_u64(l.lock(table, w, idx).off);
        let dir = self.cxl.lock_word(l.directory(table, w, idx));
        let slot_off = l.slot_lock(table, host, slot);
        let slot_word = self.cxl.lock_word(slot_off);
        let (cxl, buf) = (&mut self.cxl, &mut self.buf);
        let woken = move_in(home, dir, slot_word, slot, host, || {
            for array in arrays_of(table) {
                let src = l.row(array, w, idx);
                let dst = l.slot_row(array, host, slot);
                buf.resize(array.row_bytes() as usize, 0);
                mem.part(host).read_bytes(src.off, buf);
                cxl.write_bytes(Coherence::Tracked(slot_word), dst.off, buf);
            }
        })?;
        self.wake_waiters(woken, slot_off);
        self.pools[p].occupant[slot as usize] = Some((w, idx));
        Ok(())
    }

    /// Wakes the WAIT_DIE waiters of the slot word at `off` if one asked, as
    /// a transaction's release does.
    fn wake_waiters(&self, woken: bool, off: u64) {
        if woken {
            let epoch = self.mem.control().release_epoch(off);
            epoch.fetch_add(1, SeqCst);
            futex::wake_all(epoch);
        }
    }

    #[cfg(test)]
    pub(crate) fn occupied(&self) -> usize {
        self.pools
            .iter()
            .map(|p| p.occupant.iter().flatten().count())
            .sum()
    }

    #[cfg(test)]
    pub(crate) fn stats(&self) -> MoverStats {
        self.stats
    }

    /// Moves back every unreferenced tuple (tests: the pool drains).
    #[cfg(test)]
    pub(crate) fn cool_all(&mut self) {
        for p in 0..self.pools.len() {
            // Two visits per slot: the first clears the clock bit.
            let visits = 2 * self.pools[p].occupant.len();
            self.evict(p, visits, usize::MAX, true);
        }
    }
}

/// The most one tuple adds to a move-back record: an entry head per
/// column group and the rows (CUSTOMER's are the larger).
const TUPLE_LOG_BYTES_MAX: usize = 2 * 32
    + size_of::<skiff_pod_memory::tpcc::schema::Customer>()
    + size_of::<skiff_pod_memory::tpcc::schema::CustomerData>();

#[cfg(test)]
mod tests;
