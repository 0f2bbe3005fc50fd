//! Leases: how hosts learn that one of them died, and who cleans up.
//!
//! Each host has a record in the coherent region: its liveness (`NONE`,
//! `ALIVE`, `RECLAIMING`, `DEAD`), incarnation, pid and a heartbeat (a
//! CLOCK_MONOTONIC millisecond stamp, one clock for every process of the
//! machine) that its lease thread renews every `LEASE_BEAT_MS`. The same
//! thread watches the other hosts: a host whose heartbeat is older than
//! `LEASE_MS` *and* whose process is gone (no `/proc/PID`, or a zombie) is
//! dead. The survivor whose compare-and-swap moves the record from `ALIVE`
//! to `RECLAIMING` runs [`recovery::reclaim`] and then marks it `DEAD`.
//!
//! The process check is the fence: on one machine it proves the host will
//! never write again, so undoing its writes cannot race with it. A host that
//! is merely slow keeps its lease however late its heartbeat is. (Hosts run
//! as threads of one process are never declared dead: the process lives.)
//!
//! A restarted host ([`take_over`]) reclaims its own previous incarnation if
//! nobody has yet (a one-host pod, or every host died), waits out a survivor
//! that is reclaiming it, rebuilds its partition and announces itself
//! `ALIVE` with the next incarnation.
//!
//! The record also carries the commits the host *reported* (after their log
//! records were durable): what a client was told, which tests compare with
//! what recovery kept.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::time::{Duration, Instant};

use crate::durability::recovery;
use skiff_pod_memory::constants::{LEASE_BEAT_MS, LEASE_MS};
use skiff_pod_memory::error::{PodError, Result};
use skiff_pod_memory::memory::PodMemory;
use skiff_pod_memory::memory::futex;
use skiff_pod_memory::memory::header::state;

pub(crate) mod life {
    pub const NONE: u32 = 0;
    pub const ALIVE: u32 = 1;
    pub const RECLAIMING: u32 = 2;
    pub const DEAD: u32 = 3;
}

const LIFE: u64 = 0;
const INCARNATION: u64 = 4;
const HEARTBEAT_MS: u64 = 8;
const PID: u64 = 16;
const RECLAIMED_BY: u64 = 20;
const RECLAIMED_AT_MS: u64 = 24;
const TXNS_UNDONE: u64 = 32;
const TXNS_KEPT: u64 = 36;
const LOCKS_RELEASED: u64 = 40;
const REPORTED: u64 = 48;
/// Kinds of reported commits (NewOrder, Payment, Delivery, OrderStatus,
/// StockLevel).
pub(crate) const REPORTED_KINDS: usize = 5;
const DETECTED_AT_MS: u64 = REPORTED + 8 * REPORTED_KINDS as u64;
const REBUILD_US: u64 = DETECTED_AT_MS + 8;
const REBUILD_RECORDS: u64 = REBUILD_US + 8;
const REBUILD_ROWS: u64 = REBUILD_RECORDS + 8;
/// (a), (b): participants' prepared transactions of this coordinator that
/// are not resolved yet, on any host.
const IN_DOUBT: u64 = REBUILD_ROWS + 8;
const _: () = assert!(IN_DOUBT + 4 <= skiff_pod_memory::memory::layout::HOST_RECORD_BYTES);

/// Milliseconds of CLOCK_MONOTONIC: the same clock in every process.
pub(crate) fn mono_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// One host's record in the coherent region.
pub(crate) struct HostRecord<'m> {
    mem: &'m PodMemory,
    off: u64,
}

impl<'m> HostRecord<'m> {
    pub(crate) fn of(mem: &'m PodMemory, host: u16) -> HostRecord<'m> {
        HostRecord {
            mem,
            off: mem.layout.host_record(host),
        }
    }

    fn u32(&self, at: u64) -> &'m AtomicU32 {
        self.mem.pod.atomic_u32(self.off + at)
    }

    fn u64(&self, at: u64) -> &'m AtomicU64 {
        self.mem.pod.atomic_u64(self.off + at)
    }

    pub(crate) fn life(&self) -> u32 {
        self.u32(LIFE).load(Acquire)
    }

    pub(crate) fn incarnation(&self) -> u32 {
        self.u32(INCARNATION).load(Acquire)
    }

    /// Whether incarnation `inc` of the host may still be running: a
    /// request sent to it may yet be answered. False once its process is
    /// gone (even before a survivor noticed) or it restarted, so callers
    /// that wait on it fail fast instead of waiting out a lease.
    pub(crate) fn alive_as(&self, inc: u32) -> bool {
        self.life() == life::ALIVE
            && self.incarnation() == inc
            && !process_gone(self.u32(PID).load(Acquire))
    }

    /// Whether the host missed a heartbeat: cheap (no /proc read), so a
    /// caller can afford it per request and check [`HostRecord::alive_as`]
    /// only then.
    pub(crate) fn beat_is_late(&self) -> bool {
        let beat = self.u64(HEARTBEAT_MS).load(Acquire);
        mono_ms().saturating_sub(beat) > 2 * LEASE_BEAT_MS
    }

    /// The last heartbeat (CLOCK_MONOTONIC ms; 0 before the first).
    pub(crate) fn heartbeat_ms(&self) -> u64 {
        self.u64(HEARTBEAT_MS).load(Acquire)
    }

    pub(crate) fn beat(&self) {
        self.u64(HEARTBEAT_MS).store(mono_ms(), Release);
    }

    /// This process is the host now: next incarnation, ALIVE.
    pub(crate) fn announce(&self) {
        self.u32(PID).store(std::process::id(), Release);
        self.u32(INCARNATION).fetch_add(1, AcqRel);
        self.beat();
        self.u32(LIFE).store(life::ALIVE, Release);
    }

    /// A restarted host rebuilt its partition: how long it took, log
    /// records read, rows redone.
    pub(crate) fn note_rebuilt(&self, took: Duration, records: u64, rows: u64) {
        self.u64(REBUILD_US).store(took.as_micros() as u64, Release);
        self.u64(REBUILD_RECORDS).store(records, Release);
        self.u64(REBUILD_ROWS).store(rows, Release);
    }

    /// A participant (on any host) is about to log a prepared part of one
    /// of this coordinator's transactions: until it is resolved, the
    /// coordinator's log keeps its decision (`checkpoint`).
    pub(crate) fn in_doubt_add(&self) {
        self.u32(IN_DOUBT).fetch_add(1, AcqRel);
    }

    /// A prepared part was resolved. Never below zero: a participant that
    /// died between its count and its record leaves one too many, which
    /// only keeps the coordinator's log longer.
    pub(crate) fn in_doubt_sub(&self) {
        let word = self.u32(IN_DOUBT);
        let _ = word.fetch_update(AcqRel, Acquire, |n| n.checked_sub(1));
    }

    pub(crate) fn in_doubt(&self) -> u32 {
        self.u32(IN_DOUBT).load(Acquire)
    }

    /// Counts a commit the host reported (its record is durable).
    pub(crate) fn reported(&self, kind: usize) {
        assert!(kind < REPORTED_KINDS);
        self.u64(REPORTED + 8 * kind as u64).fetch_add(1, Relaxed);
    }

    pub(crate) fn reported_counts(&self) -> [u64; REPORTED_KINDS] {
        std::array::from_fn(|k| self.u64(REPORTED + 8 * k as u64).load(Acquire))
    }

    /// Whether the host's lease ran out and its process is gone.
    fn expired(&self, now_ms: u64) -> bool {
        let beat = self.u64(HEARTBEAT_MS).load(Acquire);
        now_ms.saturating_sub(beat) > LEASE_MS && process_gone(self.u32(PID).load(Acquire))
    }

    /// Claims the right to reclaim the host (ALIVE → RECLAIMING).
    fn claim(&self) -> bool {
        self.u32(LIFE)
            .compare_exchange(life::ALIVE, life::RECLAIMING, AcqRel, Acquire)
            .is_ok()
    }

    /// What the last reclaim of this host did.
    pub(crate) fn reclaim_facts(&self) -> ReclaimFacts {
        ReclaimFacts {
            by: self.u32(RECLAIMED_BY).load(Acquire),
            detected_at_ms: self.u64(DETECTED_AT_MS).load(Acquire),
            done_at_ms: self.u64(RECLAIMED_AT_MS).load(Acquire),
            txns_undone: self.u32(TXNS_UNDONE).load(Acquire),
            txns_kept: self.u32(TXNS_KEPT).load(Acquire),
            locks_released: self.u64(LOCKS_RELEASED).load(Acquire),
            rebuild_us: self.u64(REBUILD_US).load(Acquire),
            rebuild_log_records: self.u64(REBUILD_RECORDS).load(Acquire),
            rebuild_rows: self.u64(REBUILD_ROWS).load(Acquire),
        }
    }
}

/// What a reclaim did, from the dead host's record.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct ReclaimFacts {
    /// The survivor that reclaimed (the host itself when it restarted
    /// first). Meaningful only when `done_at_ms > 0`.
    pub by: u32,
    pub detected_at_ms: u64,
    pub done_at_ms: u64,
    pub txns_undone: u32,
    pub txns_kept: u32,
    pub locks_released: u64,
    /// The restarted host's partition rebuild: time, log records read,
    /// rows redone.
    pub rebuild_us: u64,
    pub rebuild_log_records: u64,
    pub rebuild_rows: u64,
}

/// Whether process `pid` is gone: no `/proc/PID`, or a zombie. pid 0 (never
/// announced) counts as gone.
fn process_gone(pid: u32) -> bool {
    if pid == 0 {
        return true;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // "pid (comm) S ...": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|s| s == 'Z' || s == 'X'),
    }
}

/// Reclaims `dead` on behalf of `by` (the caller won the claim), recording
/// what it did in the dead host's record, then marks it DEAD.
fn reclaim_claimed(mem: &PodMemory, dead: u16, by: u16, detected_ms: u64) -> Result<()> {
    let rec = HostRecord::of(mem, dead);
    rec.u64(DETECTED_AT_MS).store(detected_ms, Release);
    let r = recovery::reclaim(mem, dead)?;
    rec.u32(RECLAIMED_BY).store(by as u32, Release);
    rec.u32(TXNS_UNDONE).store(r.undone, Release);
    rec.u32(TXNS_KEPT).store(r.kept, Release);
    rec.u64(LOCKS_RELEASED).store(r.locks_released, Release);
    rec.u64(RECLAIMED_AT_MS).store(mono_ms(), Release);
    rec.u32(LIFE).store(life::DEAD, Release);
    Ok(())
}

/// One look at every other host: reclaims those that died.
fn watch(mem: &PodMemory, me: u16) -> Result<()> {
    let now = mono_ms();
    for g in (0..mem.params().hosts).filter(|&g| g != me) {
        let rec = HostRecord::of(mem, g);
        if rec.life() == life::ALIVE && rec.expired(now) && rec.claim() {
            reclaim_claimed(mem, g, me, now)?;
        }
    }
    Ok(())
}

/// A host's lease thread: renews its heartbeat and, while the run is on,
/// reclaims dead hosts, until `stop`.
pub(crate) fn lease_thread(mem: &PodMemory, me: u16, stop: &AtomicBool) -> Result<()> {
    let rec = HostRecord::of(mem, me);
    let control = mem.control();
    let beat = Duration::from_millis(LEASE_BEAT_MS);
    while !stop.load(Acquire) {
        rec.beat();
        let s = control.state();
        if s == state::RUNNING {
            watch(mem, me)?;
        }
        // Wakes early when the run state changes.
        futex::wait(control.run_state, s, beat);
    }
    Ok(())
}

/// A restarted host takes its record back: reclaims its previous
/// incarnation if nobody has, or waits for the survivor that is doing it.
pub(crate) fn take_over(mem: &PodMemory, me: u16, give_up: Instant) -> Result<()> {
    let rec = HostRecord::of(mem, me);
    loop {
        match rec.life() {
            life::NONE | life::DEAD => return Ok(()),
            life::ALIVE => {
                let pid = rec.u32(PID).load(Acquire);
                if pid == std::process::id() || !process_gone(pid) {
                    return Err(PodError::Busy(format!(
                        "host {me} is still alive (pid {pid}); cannot restart it"
                    )));
                }
                if rec.claim() {
                    return reclaim_claimed(mem, me, me, mono_ms());
                }
            }
            _ => {}
        }
        if Instant::now() > give_up {
            return Err(PodError::Timeout(format!(
                "host {me}: a survivor is still reclaiming it"
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
