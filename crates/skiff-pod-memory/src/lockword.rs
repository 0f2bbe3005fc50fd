//! The 64-bit lock word: one per lockable tuple, in the coherent region for
//! tuples in pod memory and in the host's partition for private tuples. Both
//! use the same protocol, so the transaction code does not care which.
//!
//! ```text
//!  63    62      61        60        59..36   35..32   31..16     15..0
//! [ X ][MOVED][WAITERS][ACCESSED][  age  ][ owner ][ readers ][ valid bitmap ]
//! ```
//!
//! - `X`: held exclusively; then `owner` names the holder's host, so a
//!   survivor can release a dead host's locks (`lease`), and `readers` is 0.
//! - `readers`: shared holders: a count on a private word, a bitmap of
//!   holder hosts on a pod word ([`Reader`]).
//! - `valid bitmap`: bit h set = host h's cached copy of the tuple's data is
//!   current (software coherence, see `cxl`). Only lock holders change it: a
//!   reader sets its own bit after loading the tuple; a writer keeps only its
//!   own bit, so every other host flushes and reloads before its next read.
//! - `age`: WAIT_DIE's timestamp of the oldest holder (24 bits of a
//!   microsecond clock, compared in serial-number arithmetic), written by
//!   each acquire; meaningless while nobody holds the word. It may be older
//!   than every current holder (a departed reader's), never younger, so a
//!   requester that waits is truly older than every holder.
//! - `WAITERS`: a WAIT_DIE requester sleeps on a release epoch (see `txn`);
//!   the releaser that clears this bit wakes it.
//! - `ACCESSED`: the clock bit of a slot word in Pasha dynamic (`dynamic`).
//! - `MOVED`: in Pasha dynamic, the word no longer guards the tuple: it was
//!   moved to the shared region and bits 31..0 name its slot. A moved word
//!   has no holders; every acquire on it fails and the caller follows the
//!   forward. Directory words in the coherent region use the same encoding.
//!
//! Acquires never wait here: they succeed or report a conflict, and the
//! concurrency-control protocol (NO_WAIT or WAIT_DIE, in `txn`) decides what
//! a conflict means.

use std::sync::atomic::Ordering::{self, AcqRel, Acquire, Relaxed};

use crate::constants::LOCK_CAS_RETRY_MAX;

pub const VALID_MASK: u64 = 0xFFFF;
pub const READER_ONE: u64 = 1 << 16;
pub const READERS_MASK: u64 = 0xFFFF << 16;
pub const OWNER_SHIFT: u32 = 32;
pub const OWNER_MASK: u64 = 0xF << OWNER_SHIFT;
pub const AGE_SHIFT: u32 = 36;
pub const AGE_BITS: u32 = 24;
pub const AGE_MASK: u64 = ((1 << AGE_BITS) - 1) << AGE_SHIFT;
pub const ACCESSED: u64 = 1 << 60;
pub const WAITERS: u64 = 1 << 61;
pub const MOVED: u64 = 1 << 62;
pub const EXCLUSIVE: u64 = 1 << 63;
const SLOT_MASK: u64 = 0xFFFF_FFFF;

const _: () = {
    // Every bit has exactly one meaning.
    let fields = [
        VALID_MASK,
        READERS_MASK,
        OWNER_MASK,
        AGE_MASK,
        ACCESSED,
        WAITERS,
        MOVED,
        EXCLUSIVE,
    ];
    let mut all = 0u64;
    let mut i = 0;
    while i < fields.len() {
        assert!(all & fields[i] == 0);
        all |= fields[i];
        i += 1;
    }
    assert!(all == u64::MAX);
    assert!(crate::constants::HOSTS_MAX <= 16);
};

/// Lock modes of two-phase locking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Shared,
    Exclusive,
}

/// The word is held in a conflicting mode, or it is a forward (MOVED).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conflict;

/// The atomic operations the protocol needs, so the same code runs on a
/// `std` atomic in pod memory and on a `shuttle` atomic in protocol tests.
pub trait AtomicWord {
    fn load(&self, order: Ordering) -> u64;
    fn swap(&self, value: u64, order: Ordering) -> u64;
    fn compare_exchange_weak(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64>;
    fn fetch_and(&self, value: u64, order: Ordering) -> u64;
    fn fetch_or(&self, value: u64, order: Ordering) -> u64;
}

impl AtomicWord for std::sync::atomic::AtomicU64 {
    fn load(&self, order: Ordering) -> u64 {
        self.load(order)
    }
    fn swap(&self, value: u64, order: Ordering) -> u64 {
        self.swap(value, order)
    }
    fn compare_exchange_weak(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        self.compare_exchange_weak(current, new, success, failure)
    }
    fn fetch_and(&self, value: u64, order: Ordering) -> u64 {
        self.fetch_and(value, order)
    }
    fn fetch_or(&self, value: u64, order: Ordering) -> u64 {
        self.fetch_or(value, order)
    }
}

pub fn host_bit(host: u16) -> u64 {
    assert!((host as usize) < crate::constants::HOSTS_MAX);
    1 << host
}

pub fn readers(word: u64) -> u64 {
    (word & READERS_MASK) >> 16
}

pub fn owner(word: u64) -> u16 {
    ((word & OWNER_MASK) >> OWNER_SHIFT) as u16
}

/// Whether anyone holds the word (a forward has no holders).
pub fn held(word: u64) -> bool {
    word & MOVED == 0 && (word & EXCLUSIVE != 0 || readers(word) > 0)
}

/// The slot a forward names, or `None` for a lock word in use.
pub fn forwarded(word: u64) -> Option<u32> {
    (word & MOVED != 0).then_some((word & SLOT_MASK) as u32)
}

/// The forward to `slot`.
pub fn forward_to(slot: u32) -> u64 {
    MOVED | slot as u64
}

/// WAIT_DIE age stored in the word (the oldest holder's, if held).
pub fn age(word: u64) -> u32 {
    ((word & AGE_MASK) >> AGE_SHIFT) as u32
}

fn with_age(word: u64, age: u32) -> u64 {
    (word & !AGE_MASK) | ((age as u64) << AGE_SHIFT & AGE_MASK)
}

/// Whether age `a` is strictly older than `b`, in serial-number arithmetic
/// on `AGE_BITS` bits (correct while live ages are within 2^23 units).
pub fn older(a: u32, b: u32) -> bool {
    let d = b.wrapping_sub(a) & ((1 << AGE_BITS) - 1);
    d != 0 && d < 1 << (AGE_BITS - 1)
}

/// The older of two ages.
fn oldest(a: u32, b: u32) -> u32 {
    if older(b, a) { b } else { a }
}

/// Takes a shared lock unless the word is held exclusively (or moved).
#[cfg(test)]
pub fn try_lock_shared<W: AtomicWord>(word: &W) -> Result<(), Conflict> {
    try_lock_shared_aged(word, 0)
}

/// [`try_lock_shared`] recording the requester's WAIT_DIE age.
#[cfg(test)]
pub fn try_lock_shared_aged<W: AtomicWord>(word: &W, my_age: u32) -> Result<(), Conflict> {
    try_lock_shared_as(word, Reader::Count, my_age)
}

/// How a shared holder counts in the readers field: on a private word as
/// one of a count; on a pod word as its host's bit, so a survivor can
/// release a dead host's shared locks exactly (`lease`). A host then holds
/// a pod tuple shared at most once: a second reader of the same host
/// conflicts, as a writer would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    Count,
    Host(u16),
}

impl Reader {
    /// What this holder adds to (and later subtracts from) the word.
    fn unit(self) -> u64 {
        match self {
            Reader::Count => READER_ONE,
            Reader::Host(h) => host_bit(h) << 16,
        }
    }

    /// Whether `word` holds this reader already (only a host bit can tell).
    fn present(self, word: u64) -> bool {
        matches!(self, Reader::Host(_)) && word & self.unit() != 0
    }
}

/// The reader kind of a word in pod memory (`pod`) or a partition.
pub fn reader_unit(pod: bool, host: u16) -> Reader {
    if pod {
        Reader::Host(host)
    } else {
        Reader::Count
    }
}

/// Takes a shared lock as `unit` ([`reader_unit`]) unless the word is held
/// exclusively (or moved), or by this host already on a pod word.
pub fn try_lock_shared_as<W: AtomicWord>(
    word: &W,
    reader: Reader,
    my_age: u32,
) -> Result<(), Conflict> {
    let unit = reader.unit();
    let mut current = word.load(Relaxed);
    for _ in 0..LOCK_CAS_RETRY_MAX {
        if current & (EXCLUSIVE | MOVED) != 0 || reader.present(current) {
            return Err(Conflict);
        }
        assert!(
            readers(current) < readers(READERS_MASK),
            "reader count overflow"
        );
        let a = if readers(current) == 0 {
            my_age
        } else {
            oldest(age(current), my_age)
        };
        let new = with_age(current, a) + unit;
        // Acquire: the holder's reads of the tuple must see the last writer's
        // stores, released by its unlock.
        match word.compare_exchange_weak(current, new, Acquire, Relaxed) {
            Ok(_) => return Ok(()),
            Err(seen) => current = seen,
        }
    }
    Err(Conflict)
}

/// Takes an exclusive lock if nobody holds the word in any mode.
pub fn try_lock_exclusive<W: AtomicWord>(word: &W, host: u16) -> Result<(), Conflict> {
    try_lock_exclusive_aged(word, host, 0)
}

/// [`try_lock_exclusive`] recording the requester's WAIT_DIE age.
pub fn try_lock_exclusive_aged<W: AtomicWord>(
    word: &W,
    host: u16,
    my_age: u32,
) -> Result<(), Conflict> {
    assert!((host as usize) < crate::constants::HOSTS_MAX);
    let owner_bits = (host as u64) << OWNER_SHIFT;
    let mut current = word.load(Relaxed);
    for _ in 0..LOCK_CAS_RETRY_MAX {
        if current & (EXCLUSIVE | READERS_MASK | MOVED) != 0 {
            return Err(Conflict);
        }
        assert_eq!(
            current & (OWNER_MASK | WAITERS),
            0,
            "free word {current:#x} has owner or waiter bits"
        );
        let new = with_age(current, my_age) | EXCLUSIVE | owner_bits;
        match word.compare_exchange_weak(current, new, Acquire, Relaxed) {
            Ok(_) => return Ok(()),
            Err(seen) => current = seen,
        }
    }
    Err(Conflict)
}

/// Turns the caller's shared lock into an exclusive one if it is the only
/// reader. The caller must hold a shared lock on `word`.
#[cfg(test)]
pub fn try_upgrade<W: AtomicWord>(word: &W, host: u16) -> Result<(), Conflict> {
    try_upgrade_as(word, host, Reader::Count)
}

/// [`try_upgrade`] of a shared lock taken as `unit`.
pub fn try_upgrade_as<W: AtomicWord>(word: &W, host: u16, reader: Reader) -> Result<(), Conflict> {
    let owner_bits = (host as u64) << OWNER_SHIFT;
    let unit = reader.unit();
    let mut current = word.load(Relaxed);
    for _ in 0..LOCK_CAS_RETRY_MAX {
        assert!(
            current & (EXCLUSIVE | MOVED) == 0
                && readers(current) >= 1
                && (reader == Reader::Count || reader.present(current)),
            "upgrade without a shared lock"
        );
        if current & READERS_MASK != unit {
            return Err(Conflict);
        }
        let new = (current - unit) | EXCLUSIVE | owner_bits;
        match word.compare_exchange_weak(current, new, Acquire, Relaxed) {
            Ok(_) => return Ok(()),
            Err(seen) => current = seen,
        }
    }
    Err(Conflict)
}

/// Releases one shared lock. Returns whether a WAIT_DIE waiter asked to be
/// woken (the caller wakes it; the bit is cleared here).
#[cfg(test)]
pub fn unlock_shared<W: AtomicWord>(word: &W) -> bool {
    unlock_shared_as(word, Reader::Count)
}

/// Releases a shared lock taken as `reader` ([`reader_unit`]).
pub fn unlock_shared_as<W: AtomicWord>(word: &W, reader: Reader) -> bool {
    let unit = reader.unit();
    // One CAS for both changes: a word must never be free with WAITERS set.
    // Not bounded: a release cannot fail, and each failed CAS means another
    // thread's operation on the word succeeded (lock-free).
    let mut current = word.load(Relaxed);
    loop {
        assert!(
            current & (EXCLUSIVE | MOVED) == 0
                && readers(current) >= 1
                && (reader == Reader::Count || reader.present(current)),
            "unlock_shared of {current:#x}"
        );
        let new = (current - unit) & !WAITERS;
        match word.compare_exchange_weak(current, new, AcqRel, Relaxed) {
            Ok(_) => return current & WAITERS != 0,
            Err(seen) => current = seen,
        }
    }
}

/// Releases the exclusive lock held by `host`. Release ordering publishes the
/// holder's writes to the next acquirer, in any process. Returns whether a
/// WAIT_DIE waiter asked to be woken.
pub fn unlock_exclusive<W: AtomicWord>(word: &W, host: u16) -> bool {
    let previous = word.fetch_and(!(EXCLUSIVE | OWNER_MASK | WAITERS), AcqRel);
    assert!(
        previous & EXCLUSIVE != 0
            && previous & MOVED == 0
            && owner(previous) == host
            && readers(previous) == 0,
        "unlock_exclusive by host {host} of {previous:#x}"
    );
    previous & WAITERS != 0
}

/// Releases whatever dead host `host` holds on a pod word: its exclusive
/// lock, or its shared lock (its reader bit). Returns `None` if it held
/// nothing here, else whether a WAIT_DIE waiter asked to be woken. Only the
/// survivor that claimed the dead host's recovery calls it (`lease`), so the
/// holder cannot release concurrently.
pub fn release_dead<W: AtomicWord>(word: &W, host: u16) -> Option<bool> {
    let reader = Reader::Host(host);
    let unit = reader.unit();
    let mut current = word.load(Acquire);
    loop {
        if current & MOVED != 0 {
            return None;
        }
        let new = if current & EXCLUSIVE != 0 && owner(current) == host {
            current & !(EXCLUSIVE | OWNER_MASK | WAITERS)
        } else if current & EXCLUSIVE == 0 && reader.present(current) {
            (current - unit) & !WAITERS
        } else {
            return None;
        };
        match word.compare_exchange_weak(current, new, AcqRel, Relaxed) {
            Ok(_) => return Some(current & WAITERS != 0),
            Err(seen) => current = seen,
        }
    }
}

/// WAIT_DIE: asks the next releaser of `word` to wake its waiters, if the
/// word still has the value `seen`. False: it changed; try again.
pub fn ask_for_wake<W: AtomicWord>(word: &W, seen: u64) -> bool {
    assert!(held(seen), "waiting on a free word {seen:#x}");
    seen & WAITERS != 0
        || word
            .compare_exchange_weak(seen, seen | WAITERS, AcqRel, Relaxed)
            .is_ok()
}

/// Records that `host` now caches the tuple. Caller holds the lock (any mode).
pub fn mark_valid<W: AtomicWord>(word: &W, host: u16) {
    let previous = word.fetch_or(host_bit(host), Relaxed);
    assert!(
        previous & EXCLUSIVE != 0 || readers(previous) >= 1,
        "mark_valid on an unlocked word"
    );
}

/// A write by `host`: every other host's cached copy is now stale. Caller
/// holds the exclusive lock.
pub fn keep_only_valid<W: AtomicWord>(word: &W, host: u16) {
    let previous = word.fetch_and(!VALID_MASK | host_bit(host), Relaxed);
    assert!(
        previous & EXCLUSIVE != 0 && owner(previous) == host,
        "keep_only_valid by host {host} without the exclusive lock: {previous:#x}"
    );
    word.fetch_or(host_bit(host), Relaxed);
}

/// Sets the clock bit of a slot word the caller holds (no store if set).
pub fn mark_accessed<W: AtomicWord>(word: &W) {
    if word.load(Relaxed) & ACCESSED == 0 {
        word.fetch_or(ACCESSED, Relaxed);
    }
}

/// Clock hand: clears the bit; returns whether it was set.
pub fn take_accessed<W: AtomicWord>(word: &W) -> bool {
    word.load(Relaxed) & ACCESSED != 0 && word.fetch_and(!ACCESSED, Relaxed) & ACCESSED != 0
}

/// Turns a free home lock word into a forward to `slot` (the tuple is being
/// moved to the shared region). Fails if anyone holds it.
pub fn try_forward<W: AtomicWord>(word: &W, slot: u32) -> Result<(), Conflict> {
    let mut current = word.load(Relaxed);
    for _ in 0..LOCK_CAS_RETRY_MAX {
        if held(current) || current & MOVED != 0 {
            return Err(Conflict);
        }
        match word.compare_exchange_weak(current, forward_to(slot), AcqRel, Relaxed) {
            Ok(_) => return Ok(()),
            Err(seen) => current = seen,
        }
    }
    Err(Conflict)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn bit_fields_do_not_overlap() {
        let masks = [
            VALID_MASK,
            READERS_MASK,
            OWNER_MASK,
            AGE_MASK,
            ACCESSED,
            WAITERS,
            MOVED,
            EXCLUSIVE,
        ];
        for (i, a) in masks.iter().enumerate() {
            for b in &masks[i + 1..] {
                assert_eq!(a & b, 0);
            }
        }
        assert_eq!(
            VALID_MASK.count_ones() as usize,
            crate::constants::HOSTS_MAX
        );
    }

    #[test]
    fn ages_compare_in_serial_arithmetic_and_holders_keep_the_oldest() {
        assert!(older(5, 6) && !older(6, 5) && !older(5, 5));
        // Across the wrap of the 24-bit clock.
        let top = (1 << AGE_BITS) - 1;
        assert!(older(top, 2) && !older(2, top));
        let w = AtomicU64::new(0);
        try_lock_shared_aged(&w, 100).unwrap();
        try_lock_shared_aged(&w, 50).unwrap();
        try_lock_shared_aged(&w, 70).unwrap();
        assert_eq!(age(w.load(Relaxed)), 50);
        for _ in 0..3 {
            unlock_shared(&w);
        }
        // Free again: the next holder's age replaces the stale one.
        try_lock_exclusive_aged(&w, 1, 90).unwrap();
        assert_eq!(age(w.load(Relaxed)), 90);
        unlock_exclusive(&w, 1);
    }

    #[test]
    fn pod_readers_are_host_bits_that_a_survivor_can_release() {
        let w = AtomicU64::new(0);
        let (h0, h3) = (reader_unit(true, 0), reader_unit(true, 3));
        try_lock_shared_as(&w, h0, 1).unwrap();
        // Host 0's bit is READER_ONE's position: a second host-0 reader must
        // still conflict, not count.
        assert_eq!(try_lock_shared_as(&w, h0, 1), Err(Conflict));
        try_lock_shared_as(&w, h3, 1).unwrap();
        assert_eq!(try_upgrade_as(&w, 3, h3), Err(Conflict));
        assert_eq!(release_dead(&w, 5), None);
        assert_eq!(release_dead(&w, 0), Some(false));
        try_upgrade_as(&w, 3, h3).unwrap();
        assert_eq!(release_dead(&w, 0), None);
        let seen = w.load(Relaxed);
        assert!(ask_for_wake(&w, seen));
        assert_eq!(release_dead(&w, 3), Some(true));
        assert_eq!(w.load(Relaxed) & !AGE_MASK, 0);
        // Private words count readers.
        let c = reader_unit(false, 0);
        try_lock_shared_as(&w, c, 1).unwrap();
        try_lock_shared_as(&w, c, 1).unwrap();
        assert_eq!(readers(w.load(Relaxed)), 2);
    }

    #[test]
    fn waiters_are_reported_to_exactly_one_releaser() {
        let w = AtomicU64::new(0);
        try_lock_exclusive(&w, 1).unwrap();
        let seen = w.load(Relaxed);
        assert!(ask_for_wake(&w, seen));
        assert!(!ask_for_wake(&w, seen ^ 1), "stale value must be refused");
        assert!(unlock_exclusive(&w, 1));
        try_lock_shared(&w).unwrap();
        try_lock_shared(&w).unwrap();
        assert!(ask_for_wake(&w, w.load(Relaxed)));
        assert!(unlock_shared(&w));
        assert!(!unlock_shared(&w), "the bit went with the first wake");
        assert_eq!(w.load(Relaxed) & !AGE_MASK, 0);
    }

    #[test]
    fn a_forward_refuses_every_acquire() {
        let w = AtomicU64::new(0);
        try_lock_shared(&w).unwrap();
        assert_eq!(try_forward(&w, 7), Err(Conflict), "held words stay home");
        unlock_shared(&w);
        try_forward(&w, 7).unwrap();
        let v = w.load(Relaxed);
        assert_eq!(forwarded(v), Some(7));
        assert!(!held(v));
        assert_eq!(try_lock_shared(&w), Err(Conflict));
        assert_eq!(try_lock_exclusive(&w, 0), Err(Conflict));
        assert_eq!(try_forward(&w, 8), Err(Conflict));
        assert_eq!(forwarded(0), None);
    }

    #[test]
    fn shared_locks_stack_and_block_exclusive() {
        let w = AtomicU64::new(0);
        try_lock_shared(&w).unwrap();
        try_lock_shared(&w).unwrap();
        assert_eq!(readers(w.load(Relaxed)), 2);
        assert_eq!(try_lock_exclusive(&w, 1), Err(Conflict));
        assert_eq!(try_upgrade(&w, 1), Err(Conflict));
        unlock_shared(&w);
        try_upgrade(&w, 3).unwrap();
        let word = w.load(Relaxed);
        assert!(word & EXCLUSIVE != 0);
        assert_eq!(owner(word), 3);
        assert_eq!(readers(word), 0);
        assert_eq!(try_lock_shared(&w), Err(Conflict));
        unlock_exclusive(&w, 3);
        assert_eq!(w.load(Relaxed), 0);
    }

    #[test]
    fn exclusive_blocks_everything_and_records_owner() {
        let w = AtomicU64::new(0);
        try_lock_exclusive(&w, 5).unwrap();
        assert_eq!(owner(w.load(Relaxed)), 5);
        assert_eq!(try_lock_exclusive(&w, 6), Err(Conflict));
        assert_eq!(try_lock_shared(&w), Err(Conflict));
        unlock_exclusive(&w, 5);
        try_lock_exclusive(&w, 6).unwrap();
        unlock_exclusive(&w, 6);
    }

    #[test]
    fn validity_bits_survive_locking_and_writers_clear_others() {
        let w = AtomicU64::new(0);
        try_lock_shared(&w).unwrap();
        mark_valid(&w, 0);
        mark_valid(&w, 2);
        unlock_shared(&w);
        assert_eq!(w.load(Relaxed) & VALID_MASK, 0b101);
        try_lock_exclusive(&w, 1).unwrap();
        keep_only_valid(&w, 1);
        unlock_exclusive(&w, 1);
        assert_eq!(w.load(Relaxed), 0b010);
    }

    #[test]
    #[should_panic(expected = "unlock_exclusive by host 2")]
    fn releasing_someone_elses_lock_asserts() {
        let w = AtomicU64::new(0);
        try_lock_exclusive(&w, 1).unwrap();
        unlock_exclusive(&w, 2);
    }

    #[test]
    #[should_panic(expected = "unlock_shared")]
    fn releasing_an_unheld_shared_lock_asserts() {
        let w = AtomicU64::new(0);
        unlock_shared(&w);
    }

    /// Randomized schedules (shuttle) of the lock-word protocol: writers move
    /// value between two cells under the exclusive lock, readers check the
    /// sum under a shared lock. A broken acquire/release or a lost reader
    /// count shows up as a torn sum or an assertion.
    mod shuttle_protocol {
        use super::super::*;
        use shuttle::sync::Arc;
        use shuttle::sync::atomic::{AtomicU64 as ShuttleU64, Ordering as O};

        struct Shared {
            word: ShuttleU64,
            // Two cells written non-atomically as a pair (separate stores);
            // only the lock keeps readers from seeing half an update.
            a: ShuttleU64,
            b: ShuttleU64,
        }

        fn writer(s: &Shared, host: u16, rounds: u32) -> u32 {
            let mut done = 0;
            for _ in 0..rounds {
                if try_lock_exclusive(&s.word, host).is_err() {
                    shuttle::thread::yield_now();
                    continue;
                }
                keep_only_valid(&s.word, host);
                let a = s.a.load(O::Relaxed);
                s.a.store(a - 1, O::Relaxed);
                shuttle::thread::yield_now();
                let b = s.b.load(O::Relaxed);
                s.b.store(b + 1, O::Relaxed);
                unlock_exclusive(&s.word, host);
                done += 1;
            }
            done
        }

        fn reader(s: &Shared, host: u16, rounds: u32) {
            for _ in 0..rounds {
                if try_lock_shared(&s.word).is_err() {
                    shuttle::thread::yield_now();
                    continue;
                }
                mark_valid(&s.word, host);
                let a = s.a.load(O::Relaxed);
                shuttle::thread::yield_now();
                let b = s.b.load(O::Relaxed);
                assert_eq!(a + b, 1000, "reader saw a torn update");
                unlock_shared(&s.word);
            }
        }

        #[test]
        fn no_wait_two_phase_locking_is_mutually_exclusive() {
            shuttle::check_random(
                || {
                    let s = Arc::new(Shared {
                        word: ShuttleU64::new(0),
                        a: ShuttleU64::new(1000),
                        b: ShuttleU64::new(0),
                    });
                    let mut writers = Vec::new();
                    for host in 0..2u16 {
                        let s = Arc::clone(&s);
                        writers.push(shuttle::thread::spawn(move || writer(&s, host, 3)));
                    }
                    let readers: Vec<_> = (2..4u16)
                        .map(|host| {
                            let s = Arc::clone(&s);
                            shuttle::thread::spawn(move || reader(&s, host, 3))
                        })
                        .collect();
                    let moved: u32 = writers.into_iter().map(|h| h.join().unwrap()).sum();
                    for r in readers {
                        r.join().unwrap();
                    }
                    assert_eq!(s.b.load(O::Relaxed), moved as u64);
                    // Every lock was released and no unused bit was touched.
                    let word = s.word.load(O::Relaxed);
                    assert_eq!(word & !VALID_MASK, 0, "word {word:#x} still locked");
                },
                2_000,
            );
        }

        #[test]
        fn upgrade_is_exclusive_against_other_readers() {
            shuttle::check_random(
                || {
                    let s = Arc::new(Shared {
                        word: ShuttleU64::new(0),
                        a: ShuttleU64::new(1000),
                        b: ShuttleU64::new(0),
                    });
                    let handles: Vec<_> = (0..3u16)
                        .map(|host| {
                            let s = Arc::clone(&s);
                            shuttle::thread::spawn(move || {
                                let mut upgraded = 0u64;
                                for _ in 0..2 {
                                    if try_lock_shared(&s.word).is_err() {
                                        continue;
                                    }
                                    if try_upgrade(&s.word, host).is_ok() {
                                        let a = s.a.load(O::Relaxed);
                                        shuttle::thread::yield_now();
                                        s.a.store(a - 1, O::Relaxed);
                                        s.b.fetch_add(1, O::Relaxed);
                                        unlock_exclusive(&s.word, host);
                                        upgraded += 1;
                                    } else {
                                        unlock_shared(&s.word);
                                    }
                                }
                                upgraded
                            })
                        })
                        .collect();
                    let total: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
                    assert_eq!(
                        s.a.load(O::Relaxed),
                        1000 - total,
                        "lost update under upgrade"
                    );
                    assert_eq!(s.word.load(O::Relaxed), 0);
                },
                2_000,
            );
        }
    }
}
