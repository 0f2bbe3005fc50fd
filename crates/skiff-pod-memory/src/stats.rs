//! Counters and latency histograms: per worker while running, merged per
//! host, and left by each host in its slot of the coherent region for the
//! coordinator to read after the run.

use bytemuck::{Pod, Zeroable};

use crate::constants::HOST_ERROR_BYTES_MAX;
use crate::memory::cxl::CxlCounters;

/// Log-linear latency buckets: values below 32 ns exactly, then 16 buckets
/// per power of two (6% resolution) up to 2^40 ns (18 minutes).
pub const LATENCY_BUCKETS: usize = 32 + (40 - 5 + 1) * 16;

#[derive(Clone, Debug)]
pub struct Histogram {
    buckets: Box<[u64; LATENCY_BUCKETS]>,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram {
            buckets: Box::new([0; LATENCY_BUCKETS]),
        }
    }
}

fn bucket_of(ns: u64) -> usize {
    if ns < 32 {
        return ns as usize;
    }
    let e = (63 - ns.leading_zeros()).min(40) as usize;
    let sub = if e == 40 && ns >= 1 << 41 {
        15
    } else {
        ((ns >> (e - 4)) & 15) as usize
    };
    32 + (e - 5) * 16 + sub
}

/// The upper bound (ns) of a bucket.
fn bucket_upper(b: usize) -> u64 {
    if b < 32 {
        return b as u64;
    }
    let e = (b - 32) / 16 + 5;
    let sub = ((b - 32) % 16) as u64;
    ((16 + sub + 1) << (e - 4)) - 1
}

impl Histogram {
    pub fn record(&mut self, ns: u64) {
        self.buckets[bucket_of(ns)] += 1;
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The `q` quantile (0..=1) in ns, as its bucket's upper bound; 0 if empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let n = self.count();
        if n == 0 {
            return 0;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (b, &c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_upper(b);
            }
        }
        bucket_upper(LATENCY_BUCKETS - 1)
    }

    pub fn as_slice(&self) -> &[u64; LATENCY_BUCKETS] {
        &self.buckets
    }

    pub fn from_slice(b: &[u64; LATENCY_BUCKETS]) -> Histogram {
        Histogram {
            buckets: Box::new(*b),
        }
    }
}

/// Outcomes of one transaction type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct TxnCounters {
    pub committed: u64,
    /// Attempts aborted by a lock conflict (NO_WAIT) and retried.
    pub aborted: u64,
    /// NewOrders rolled back by the spec (invalid item); completed, not
    /// retried.
    pub rolled_back: u64,
    /// Inputs abandoned after `TXN_ATTEMPTS_MAX` attempts.
    pub gave_up: u64,
    /// Committed transactions that touched a remote warehouse.
    pub remote: u64,
}

impl TxnCounters {
    pub fn add(&mut self, o: &TxnCounters) {
        self.committed += o.committed;
        self.aborted += o.aborted;
        self.rolled_back += o.rolled_back;
        self.gave_up += o.gave_up;
        self.remote += o.remote;
    }
}

/// Outcomes of the auditor transaction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct AuditCounters {
    pub committed: u64,
    pub aborted: u64,
    /// Committed audits that saw W_YTD != sum of D_YTD.
    pub violations: u64,
}

/// What the protocols did besides committing: WAIT_DIE waits, messages
/// between hosts, and Pasha dynamic's data movement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct ProtocolCounters {
    /// WAIT_DIE sleeps on a release epoch.
    pub waits: u64,
    /// Messages between hosts (a request and its reply are two).
    pub messages: u64,
    /// (e) requests to an owner to move a tuple.
    pub asks: u64,
    /// (e) requests a mover served, tuples it moved in and back, and
    /// requests it answered busy.
    pub served: u64,
    pub moved_in: u64,
    pub moved_back: u64,
    pub busy: u64,
    /// (e) tuples moved in again (moved in before in the run), and moves
    /// back by the cooling sweep (the others made room).
    pub moved_again: u64,
    pub cooled: u64,
    /// (e) the movers' rounds (wake-ups), their CPU time, and the time
    /// they spent moving tuples in and back (where a request's cost goes).
    pub mover_rounds: u64,
    pub mover_cpu_ns: u64,
    pub move_in_ns: u64,
    pub move_back_ns: u64,
    /// Write-ahead log: records, bytes, and group-commit flushes (write +
    /// fdatasync; records / flushes is the mean group size).
    pub log_records: u64,
    pub log_bytes: u64,
    pub log_flushes: u64,
    /// Checkpoints taken during the run, and the longest time one kept
    /// its host's transactions out (`checkpoint`).
    pub checkpoints: u64,
    /// Checkpoints given up because the gate did not empty in time.
    pub checkpoints_skipped: u64,
    pub checkpoint_pause_us_max: u64,
}

impl ProtocolCounters {
    pub fn add(&mut self, o: &ProtocolCounters) {
        self.waits += o.waits;
        self.messages += o.messages;
        self.asks += o.asks;
        self.served += o.served;
        self.moved_in += o.moved_in;
        self.moved_back += o.moved_back;
        self.busy += o.busy;
        self.moved_again += o.moved_again;
        self.cooled += o.cooled;
        self.mover_rounds += o.mover_rounds;
        self.mover_cpu_ns += o.mover_cpu_ns;
        self.move_in_ns += o.move_in_ns;
        self.move_back_ns += o.move_back_ns;
        self.log_records += o.log_records;
        self.log_bytes += o.log_bytes;
        self.log_flushes += o.log_flushes;
        self.checkpoints += o.checkpoints;
        self.checkpoints_skipped += o.checkpoints_skipped;
        self.checkpoint_pause_us_max = self.checkpoint_pause_us_max.max(o.checkpoint_pause_us_max);
    }
}

/// What one worker (or a whole host, merged) measured.
#[derive(Clone, Debug, Default)]
pub struct WorkerStats {
    pub new_order: TxnCounters,
    pub payment: TxnCounters,
    pub order_status: TxnCounters,
    /// Business transactions: all ten districts delivered (each district is
    /// one database transaction; its conflicts count in `aborted`).
    pub delivery: TxnCounters,
    pub stock_level: TxnCounters,
    pub audit: AuditCounters,
    pub new_order_latency: Histogram,
    pub payment_latency: Histogram,
    pub order_status_latency: Histogram,
    pub delivery_latency: Histogram,
    pub stock_level_latency: Histogram,
    pub cxl: CxlCounters,
    pub cpu_ns: u64,
    pub protocol: ProtocolCounters,
}

impl WorkerStats {
    pub fn merge(&mut self, o: &WorkerStats) {
        self.new_order.add(&o.new_order);
        self.payment.add(&o.payment);
        self.order_status.add(&o.order_status);
        self.delivery.add(&o.delivery);
        self.stock_level.add(&o.stock_level);
        self.order_status_latency.merge(&o.order_status_latency);
        self.delivery_latency.merge(&o.delivery_latency);
        self.stock_level_latency.merge(&o.stock_level_latency);
        self.audit.committed += o.audit.committed;
        self.audit.aborted += o.audit.aborted;
        self.audit.violations += o.audit.violations;
        self.new_order_latency.merge(&o.new_order_latency);
        self.payment_latency.merge(&o.payment_latency);
        self.cxl.add(&o.cxl);
        self.cpu_ns += o.cpu_ns;
        self.protocol.add(&o.protocol);
    }
}

pub const HOST_STATUS_OK: u64 = 1;
pub const HOST_STATUS_FAILED: u64 = 2;

/// A host's slot in the coherent region. Written once by the host at the end
/// of its run, then published by incrementing `hosts_done` (release); the
/// coordinator reads it after seeing the count (acquire).
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct HostStatsRaw {
    pub status: u64,
    pub elapsed_ns: u64,
    pub cpu_ns: u64,
    pub new_order: TxnCounters,
    pub payment: TxnCounters,
    pub order_status: TxnCounters,
    pub delivery: TxnCounters,
    pub stock_level: TxnCounters,
    pub audit: AuditCounters,
    pub cxl: [u64; 5],
    pub protocol: ProtocolCounters,
    pub error_len: u64,
    pub error: [u8; HOST_ERROR_BYTES_MAX],
    pub new_order_latency: [u64; LATENCY_BUCKETS],
    pub payment_latency: [u64; LATENCY_BUCKETS],
    pub order_status_latency: [u64; LATENCY_BUCKETS],
    pub delivery_latency: [u64; LATENCY_BUCKETS],
    pub stock_level_latency: [u64; LATENCY_BUCKETS],
}

pub const HOST_STATS_BYTES: u64 = size_of::<HostStatsRaw>().next_multiple_of(64) as u64;

impl HostStatsRaw {
    pub fn from_stats(s: &WorkerStats, elapsed_ns: u64) -> HostStatsRaw {
        HostStatsRaw {
            status: HOST_STATUS_OK,
            elapsed_ns,
            cpu_ns: s.cpu_ns,
            new_order: s.new_order,
            payment: s.payment,
            order_status: s.order_status,
            delivery: s.delivery,
            stock_level: s.stock_level,
            audit: s.audit,
            cxl: s.cxl.to_array(),
            protocol: s.protocol,
            error_len: 0,
            error: [0; HOST_ERROR_BYTES_MAX],
            new_order_latency: *s.new_order_latency.as_slice(),
            payment_latency: *s.payment_latency.as_slice(),
            order_status_latency: *s.order_status_latency.as_slice(),
            delivery_latency: *s.delivery_latency.as_slice(),
            stock_level_latency: *s.stock_level_latency.as_slice(),
        }
    }

    pub fn failed(message: &str) -> HostStatsRaw {
        let mut raw = HostStatsRaw::zeroed();
        raw.status = HOST_STATUS_FAILED;
        let n = message.len().min(HOST_ERROR_BYTES_MAX);
        raw.error[..n].copy_from_slice(&message.as_bytes()[..n]);
        raw.error_len = n as u64;
        raw
    }

    /// The error message, validated (length in bounds, UTF-8 lossily).
    pub fn error_message(&self) -> String {
        let n = (self.error_len as usize).min(HOST_ERROR_BYTES_MAX);
        String::from_utf8_lossy(&self.error[..n]).into_owned()
    }

    pub fn to_stats(self) -> WorkerStats {
        WorkerStats {
            new_order: self.new_order,
            payment: self.payment,
            order_status: self.order_status,
            delivery: self.delivery,
            stock_level: self.stock_level,
            audit: self.audit,
            new_order_latency: Histogram::from_slice(&self.new_order_latency),
            payment_latency: Histogram::from_slice(&self.payment_latency),
            order_status_latency: Histogram::from_slice(&self.order_status_latency),
            delivery_latency: Histogram::from_slice(&self.delivery_latency),
            stock_level_latency: Histogram::from_slice(&self.stock_level_latency),
            cxl: CxlCounters::from_array(self.cxl),
            cpu_ns: self.cpu_ns,
            protocol: self.protocol,
        }
    }
}

/// Where a thread's figures start. The run's figures are steady state:
/// the coordinator bumps the measurement epoch when the warm-up ends
/// (`Control::begin_measuring`) and each thread that keeps figures asks
/// [`Window::restarted`] between units of work (a transaction, a request,
/// a mover round), dropping what it counted before. With no warm-up the
/// epoch never moves and figures cover the whole run.
pub struct Window<'m> {
    epoch: &'m std::sync::atomic::AtomicU32,
    seen: u32,
}

impl<'m> Window<'m> {
    /// A window on the run's measurement epoch (`Control::window`).
    pub fn on(epoch: &'m std::sync::atomic::AtomicU32) -> Window<'m> {
        Window {
            epoch,
            seen: epoch.load(std::sync::atomic::Ordering::Acquire),
        }
    }

    /// Whether measurement (re)started since the last call: the caller
    /// drops its figures and takes new CPU and counter baselines.
    pub fn restarted(&mut self) -> bool {
        let e = self.epoch.load(std::sync::atomic::Ordering::Acquire);
        let changed = e != self.seen;
        self.seen = e;
        changed
    }
}

/// CPU time this thread has used, in ns.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_THREAD_CPUTIME_ID is always
    // available on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_bounded() {
        let mut last = 0;
        for ns in [
            0,
            1,
            31,
            32,
            33,
            100,
            1_000,
            65_535,
            1 << 30,
            1 << 40,
            u64::MAX,
        ] {
            let b = bucket_of(ns);
            assert!(b < LATENCY_BUCKETS);
            assert!(b >= last);
            last = b;
            if ns < 1 << 40 {
                assert!(bucket_upper(b) >= ns, "{ns} above its bucket's bound");
                // 6.25% resolution.
                assert!(bucket_upper(b) as f64 <= ns as f64 * 1.0625 + 1.0, "{ns}");
            }
        }
    }

    #[test]
    fn quantiles_of_a_known_distribution() {
        let mut h = Histogram::default();
        for us in 1..=100u64 {
            h.record(us * 1000);
        }
        let p50 = h.quantile(0.5) as f64;
        let p99 = h.quantile(0.99) as f64;
        assert!((50_000.0..=53_200.0).contains(&p50), "{p50}");
        assert!((99_000.0..=105_200.0).contains(&p99), "{p99}");
        assert_eq!(Histogram::default().quantile(0.5), 0);
    }

    #[test]
    fn a_window_restarts_once_per_epoch() {
        use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
        let epoch = AtomicU32::new(0);
        let mut early = Window::on(&epoch);
        assert!(!early.restarted());
        epoch.fetch_add(1, Relaxed);
        // A thread that started before the warm-up ended drops its figures
        // once; one that started after never does.
        let mut late = Window::on(&epoch);
        assert!(early.restarted());
        assert!(!early.restarted());
        assert!(!late.restarted());
    }

    #[test]
    fn host_stats_round_trip_and_fit_the_slot() {
        let mut s = WorkerStats::default();
        s.new_order.committed = 7;
        s.payment.aborted = 3;
        s.cxl.data_misses = 11;
        s.payment_latency.record(5_000);
        let raw = HostStatsRaw::from_stats(&s, 1);
        let back = raw.to_stats();
        assert_eq!(back.new_order.committed, 7);
        assert_eq!(back.payment.aborted, 3);
        assert_eq!(back.cxl.data_misses, 11);
        assert_eq!(back.payment_latency.count(), 1);
        assert!(size_of::<HostStatsRaw>() as u64 <= HOST_STATS_BYTES);
        assert_eq!(HostStatsRaw::failed("boom").error_message(), "boom");
    }
}
