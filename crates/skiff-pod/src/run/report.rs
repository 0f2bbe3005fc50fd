//! What a run measured, for the CLI and the benchmark.

use std::fmt;

use serde::Serialize;

use skiff_pod_memory::arch::{Arch, CcProtocol};
use skiff_pod_memory::memory::cxl::{CxlCounters, CxlModel};
use skiff_pod_memory::stats::{Histogram, TxnCounters, WorkerStats};

/// One transaction type's outcomes.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct TxnReport {
    pub committed: u64,
    /// Attempts aborted by a lock conflict (and retried).
    pub aborted: u64,
    /// Spec-mandated rollbacks (NewOrder's invalid item); not in `committed`.
    pub rolled_back: u64,
    /// Inputs abandoned after too many conflicts.
    pub gave_up: u64,
    /// Committed transactions that touched a remote warehouse.
    pub remote: u64,
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
}

impl TxnReport {
    fn new(c: &TxnCounters, h: &Histogram) -> TxnReport {
        TxnReport {
            committed: c.committed,
            aborted: c.aborted,
            rolled_back: c.rolled_back,
            gave_up: c.gave_up,
            remote: c.remote,
            latency_p50_us: h.quantile(0.50) as f64 / 1e3,
            latency_p99_us: h.quantile(0.99) as f64 / 1e3,
        }
    }
}

/// The auditor's outcomes (zero when it did not run).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct AuditReport {
    pub committed: u64,
    pub aborted: u64,
    /// Audits that saw W_YTD != sum(D_YTD): must be 0.
    pub violations: u64,
}

/// The hosts' write-ahead logs.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct LogReport {
    pub records: u64,
    pub bytes: u64,
    /// Group-commit flushes (one write + fdatasync each).
    pub flushes: u64,
    /// records / flushes.
    pub records_per_flush: f64,
    /// Checkpoints the hosts took during the run, and the longest one
    /// kept a host's transactions waiting.
    pub checkpoints: u64,
    /// Checkpoints given up: a host's threads did not all leave their
    /// transactions in time.
    pub checkpoints_skipped: u64,
    pub checkpoint_pause_ms_max: f64,
}

/// A host killed mid-run (SIGKILL), reclaimed by a survivor and restarted.
/// Times are seconds since the kill unless named otherwise.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FaultReport {
    pub host: u16,
    /// Seconds after the start.
    pub killed_at_s: f64,
    pub restarted_at_s: Option<f64>,
    /// When a survivor found the lease expired, and finished reclaiming.
    pub detected_s: Option<f64>,
    pub reclaimed_s: Option<f64>,
    pub reclaim: crate::durability::lease::ReclaimFacts,
    /// Commits reported by the other hosts per second: in the second
    /// before the kill, between kill and reclaim, between reclaim and
    /// restart, and after the restart.
    pub survivors_per_s_before: f64,
    pub survivors_per_s_until_reclaimed: f64,
    pub survivors_per_s_until_restart: f64,
    pub survivors_per_s_after_restart: f64,
    /// Seconds from the kill to the start of the first timeline interval
    /// (100 ms) in which the other hosts committed at half their rate
    /// before the kill or more: how long the failure held them up.
    pub survivors_resumed_s: Option<f64>,
    /// Commits the other hosts reported from the end of the reclaim to the
    /// end of the run.
    pub survivors_committed_after_reclaim: u64,
    /// Commits the restarted host reported after its restart.
    pub restarted_host_committed: u64,
    /// Per host: commits reported (durable, all incarnations) of NewOrder,
    /// Payment, Delivery, OrderStatus, StockLevel.
    pub reported: Vec<[u64; crate::durability::lease::REPORTED_KINDS]>,
    /// Per host, read from the pod after the run: orders and history rows
    /// its districts gained (each committed NewOrder adds one order, each
    /// Payment one history row; only the owner writes them).
    pub orders_created: Vec<u64>,
    pub payments_created: Vec<u64>,
    /// (seconds since start, commits reported so far per host), every 100 ms.
    pub timeline: Vec<(f64, Vec<u64>)>,
}

/// Pasha dynamic's data movement (zero elsewhere).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct MovementReport {
    /// Requests transactions sent to owner hosts.
    pub asks: u64,
    /// Requests the owners' movers served, tuples they moved to the shared
    /// region and back, and requests answered busy.
    pub served: u64,
    pub moved_in: u64,
    pub moved_back: u64,
    pub busy: u64,
    /// Of `moved_in`, tuples that had been moved in before in the run
    /// (moved back, then asked for again: churn).
    pub moved_again: u64,
    /// Of `moved_back`, those the cooling sweep moved (the rest made room).
    pub cooled: u64,
    /// The movers' wake-ups, and their CPU time per request served, of
    /// which moving tuples in and moving them back (wall time) took these.
    pub mover_rounds: u64,
    pub mover_cpu_us_per_request: f64,
    pub move_in_us_per_request: f64,
    pub move_back_us_per_request: f64,
}

/// What [`crate::run`] returns.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    pub arch: Arch,
    pub cc: CcProtocol,
    pub hosts: u16,
    pub warehouses: u32,
    pub workers_per_host: u16,
    pub multi_warehouse_pct: f64,
    pub orders_per_district: u32,
    /// Seconds to create and load the pod.
    pub load_s: f64,
    /// Seconds the hosts ran before measurement started (not in any
    /// figure of the report).
    pub warmup_s: f64,
    /// Seconds between the end of the warm-up (the start, without one) and
    /// the stop signal.
    pub elapsed_s: f64,
    pub mix: skiff_pod_memory::memory::params::Mix,
    pub new_order: TxnReport,
    pub payment: TxnReport,
    /// Zero unless the mix is [`crate::Mix::Standard`]. Delivery counts
    /// business transactions (ten districts each).
    pub order_status: TxnReport,
    pub delivery: TxnReport,
    pub stock_level: TxnReport,
    pub audit: AuditReport,
    /// Commits of every transaction type.
    pub committed: u64,
    pub aborted: u64,
    pub committed_per_s: f64,
    /// Conflict aborts over all attempts.
    pub abort_rate: f64,
    /// CPU seconds the workers used (thread CPU clocks).
    pub worker_cpu_s: f64,
    pub committed_per_cpu_s: f64,
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    /// Raw modeled CXL traffic of the workers.
    pub cxl: CxlCounters,
    pub cxl_model: CxlModel,
    pub misses_per_txn: f64,
    /// `cxl.misses() * (ratio - 1) * dram_ns`, summed over workers.
    pub modeled_delay_s: f64,
    /// Throughput had each worker also waited its share of the delay
    /// (meaningful with at most one busy worker per core).
    pub modeled_committed_per_s: f64,
    /// Commits per busy CPU-second had every miss also stalled its core:
    /// `committed / (worker_cpu_s + modeled_delay_s)`. Robust to more
    /// workers than cores.
    pub modeled_committed_per_cpu_s: f64,
    /// Messages between hosts (a request and its reply are two): none in
    /// (c) and (d), which never need a second host; (e)'s move requests.
    pub messages: u64,
    pub messages_per_txn: f64,
    /// WAIT_DIE waits for an older transaction's lock.
    pub lock_waits: u64,
    pub movement: MovementReport,
    /// Write-ahead log: records, bytes and group-commit flushes, summed
    /// over hosts (the killed incarnation of a host's excluded).
    pub log: LogReport,
    /// What happened around a killed host (`PodConfig::fault`).
    pub fault: Option<FaultReport>,
    /// Set when a host stopped the run before its duration (a full table).
    pub ended_early: Option<String>,
}

/// Throughput had every modeled CXL miss cost `latency_ratio` times a DRAM
/// access (see [`RunReport::modeled_at`]).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Modeled {
    pub latency_ratio: f64,
    pub committed_per_s: f64,
    pub committed_per_cpu_s: f64,
}

impl RunReport {
    /// The modeled figures at another latency ratio, from the same miss
    /// counts: each miss adds `(ratio - 1) * dram_latency_ns`, shared out
    /// over the workers for the per-second figure and added to the busy CPU
    /// time for the per-CPU-second one.
    pub fn modeled_at(&self, latency_ratio: f64) -> Modeled {
        let model = CxlModel {
            latency_ratio,
            ..self.cxl_model
        };
        let delay_s = model.delay_ns(&self.cxl) / 1e9;
        let workers = (self.hosts as f64 * self.workers_per_host as f64).max(1.0);
        let per = |secs: f64| {
            if secs > 0.0 {
                self.committed as f64 / secs
            } else {
                0.0
            }
        };
        Modeled {
            latency_ratio,
            committed_per_s: per(self.elapsed_s + delay_s / workers),
            committed_per_cpu_s: per(self.worker_cpu_s + delay_s),
        }
    }
}

pub(crate) struct RunFacts {
    pub arch: Arch,
    pub cc: CcProtocol,
    pub hosts: u16,
    pub warehouses: u32,
    pub workers_per_host: u16,
    pub multi_warehouse_pct: f64,
    pub orders_per_district: u32,
    pub load_s: f64,
    pub warmup_s: f64,
    pub elapsed_s: f64,
    pub cxl_model: CxlModel,
    pub ended_early: Option<String>,
    pub mix: skiff_pod_memory::memory::params::Mix,
}

impl RunReport {
    pub(crate) fn build(f: RunFacts, s: &WorkerStats) -> RunReport {
        let kinds = [
            &s.new_order,
            &s.payment,
            &s.order_status,
            &s.delivery,
            &s.stock_level,
        ];
        let committed: u64 = kinds.iter().map(|k| k.committed).sum();
        let aborted: u64 = kinds.iter().map(|k| k.aborted).sum();
        let attempts = committed + aborted + s.new_order.rolled_back;
        let mut all = s.new_order_latency.clone();
        all.merge(&s.payment_latency);
        all.merge(&s.order_status_latency);
        all.merge(&s.delivery_latency);
        all.merge(&s.stock_level_latency);
        let per_s = |n: f64, secs: f64| if secs > 0.0 { n / secs } else { 0.0 };
        let delay_s = f.cxl_model.delay_ns(&s.cxl) / 1e9;
        let workers = (f.hosts as f64 * f.workers_per_host as f64).max(1.0);
        let txns = (committed + s.new_order.rolled_back).max(1) as f64;
        let p = &s.protocol;
        RunReport {
            arch: f.arch,
            cc: f.cc,
            mix: f.mix,
            hosts: f.hosts,
            warehouses: f.warehouses,
            workers_per_host: f.workers_per_host,
            multi_warehouse_pct: f.multi_warehouse_pct,
            orders_per_district: f.orders_per_district,
            load_s: f.load_s,
            warmup_s: f.warmup_s,
            elapsed_s: f.elapsed_s,
            new_order: TxnReport::new(&s.new_order, &s.new_order_latency),
            payment: TxnReport::new(&s.payment, &s.payment_latency),
            order_status: TxnReport::new(&s.order_status, &s.order_status_latency),
            delivery: TxnReport::new(&s.delivery, &s.delivery_latency),
            stock_level: TxnReport::new(&s.stock_level, &s.stock_level_latency),
            audit: AuditReport {
                committed: s.audit.committed,
                aborted: s.audit.aborted,
                violations: s.audit.violations,
            },
            committed,
            aborted,
            committed_per_s: per_s(committed as f64, f.elapsed_s),
            abort_rate: if attempts > 0 {
                aborted as f64 / attempts as f64
            } else {
                0.0
            },
            worker_cpu_s: s.cpu_ns as f64 / 1e9,
            committed_per_cpu_s: per_s(committed as f64, s.cpu_ns as f64 / 1e9),
            latency_p50_us: all.quantile(0.50) as f64 / 1e3,
            latency_p99_us: all.quantile(0.99) as f64 / 1e3,
            cxl: s.cxl,
            cxl_model: f.cxl_model,
            misses_per_txn: s.cxl.misses() as f64 / txns,
            modeled_delay_s: delay_s,
            modeled_committed_per_s: per_s(committed as f64, f.elapsed_s + delay_s / workers),
            modeled_committed_per_cpu_s: per_s(committed as f64, s.cpu_ns as f64 / 1e9 + delay_s),
            messages: p.messages,
            messages_per_txn: p.messages as f64 / txns,
            lock_waits: p.waits,
            movement: MovementReport {
                asks: p.asks,
                served: p.served,
                moved_in: p.moved_in,
                moved_back: p.moved_back,
                busy: p.busy,
                moved_again: p.moved_again,
                cooled: p.cooled,
                mover_rounds: p.mover_rounds,
                mover_cpu_us_per_request: p.mover_cpu_ns as f64 / 1e3 / p.served.max(1) as f64,
                move_in_us_per_request: p.move_in_ns as f64 / 1e3 / p.served.max(1) as f64,
                move_back_us_per_request: p.move_back_ns as f64 / 1e3 / p.served.max(1) as f64,
            },
            log: LogReport {
                records: p.log_records,
                bytes: p.log_bytes,
                flushes: p.log_flushes,
                records_per_flush: p.log_records as f64 / p.log_flushes.max(1) as f64,
                checkpoints: p.checkpoints,
                checkpoints_skipped: p.checkpoints_skipped,
                checkpoint_pause_ms_max: p.checkpoint_pause_us_max as f64 / 1e3,
            },
            fault: None,
            ended_early: f.ended_early,
        }
    }
}

impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} {} ({} mix): {} hosts x {} workers, {} warehouses, multi-warehouse {}%",
            self.arch,
            self.cc,
            self.mix,
            self.hosts,
            self.workers_per_host,
            self.warehouses,
            self.multi_warehouse_pct
        )?;
        let kinds = [
            ("NewOrder", &self.new_order),
            ("Payment", &self.payment),
            ("OrderSt.", &self.order_status),
            ("Delivery", &self.delivery),
            ("StockLvl", &self.stock_level),
        ];
        for (i, (name, t)) in kinds.into_iter().enumerate() {
            if i >= 2 && t.committed + t.aborted + t.gave_up == 0 {
                continue;
            }
            write!(
                f,
                "  {name:<8} committed {:>9}  aborted {:>8}  rolled back {:>6}  remote {:>7}",
                t.committed, t.aborted, t.rolled_back, t.remote
            )?;
            writeln!(
                f,
                "  p50 {:>7.1} us  p99 {:>8.1} us",
                t.latency_p50_us, t.latency_p99_us
            )?;
        }
        writeln!(
            f,
            "  throughput {:.0} committed/s over {:.2} s ({:.0} per busy CPU-second), \
             abort rate {:.1}%",
            self.committed_per_s,
            self.elapsed_s,
            self.committed_per_cpu_s,
            100.0 * self.abort_rate
        )?;
        if self.warmup_s > 0.0 {
            writeln!(f, "  (measured after {:.2} s of warm-up)", self.warmup_s)?;
        }
        writeln!(
            f,
            "  CXL: {} data + {} coherent misses ({:.1} per txn), {} flushes, {} write-backs",
            self.cxl.data_misses,
            self.cxl.coherent_misses,
            self.misses_per_txn,
            self.cxl.flushes,
            self.cxl.writebacks,
        )?;
        writeln!(
            f,
            "  modeled at {:.1}x of {:.0} ns: {:.0} committed/s, {:.0} per busy CPU-second",
            self.cxl_model.latency_ratio,
            self.cxl_model.dram_latency_ns,
            self.modeled_committed_per_s,
            self.modeled_committed_per_cpu_s
        )?;
        write!(
            f,
            "  messages per txn {:.2}, lock waits {}",
            self.messages_per_txn, self.lock_waits
        )?;
        let m = &self.movement;
        if m.asks > 0 || m.served > 0 || m.moved_in > 0 {
            write!(
                f,
                "\n  movement: {} asks, {} served, {} moved in ({} again), {} moved back \
                 ({} cooled), {} busy",
                m.asks, m.served, m.moved_in, m.moved_again, m.moved_back, m.cooled, m.busy
            )?;
            write!(
                f,
                "\n  movers: {} rounds, {:.1} us CPU per request (moving in {:.1} us, \
                 back {:.1} us)",
                m.mover_rounds,
                m.mover_cpu_us_per_request,
                m.move_in_us_per_request,
                m.move_back_us_per_request
            )?;
        }
        if self.audit.committed > 0 || self.audit.aborted > 0 {
            write!(
                f,
                "\n  auditor: {} audits, {} aborted, {} violations",
                self.audit.committed, self.audit.aborted, self.audit.violations
            )?;
        }
        write!(
            f,
            "\n  log: {} records, {:.1} MB, {} flushes ({:.2} records per flush)",
            self.log.records,
            self.log.bytes as f64 / 1e6,
            self.log.flushes,
            self.log.records_per_flush
        )?;
        if self.log.checkpoints + self.log.checkpoints_skipped > 0 {
            write!(
                f,
                "; {} checkpoints ({} given up), longest pause {:.1} ms",
                self.log.checkpoints,
                self.log.checkpoints_skipped,
                self.log.checkpoint_pause_ms_max
            )?;
        }
        if let Some(k) = &self.fault {
            fmt_fault(f, k)?;
        }
        if let Some(why) = &self.ended_early {
            write!(f, "\n  ended early: {why}")?;
        }
        Ok(())
    }
}

fn fmt_fault(f: &mut fmt::Formatter<'_>, k: &FaultReport) -> fmt::Result {
    let secs = |x: Option<f64>| x.map_or("never".to_string(), |s| format!("{s:.2} s"));
    write!(
        f,
        "\n  host {} killed at {:.2} s; lease expiry seen after {}, reclaimed after {} \
         by host {} ({} txns undone, {} kept, {} locks released)",
        k.host,
        k.killed_at_s,
        secs(k.detected_s),
        secs(k.reclaimed_s),
        k.reclaim.by,
        k.reclaim.txns_undone,
        k.reclaim.txns_kept,
        k.reclaim.locks_released
    )?;
    write!(
        f,
        "\n  restarted at {}; rebuilt its partition in {:.1} ms from {} log records \
         ({} rows redone); committed {} after rejoining",
        k.restarted_at_s
            .map_or("never".to_string(), |s| format!("{s:.2} s")),
        k.reclaim.rebuild_us as f64 / 1e3,
        k.reclaim.rebuild_log_records,
        k.reclaim.rebuild_rows,
        k.restarted_host_committed
    )?;
    write!(
        f,
        "\n  survivors committed/s: {:.0} before, {:.0} until reclaimed, {:.0} until restart, \
         {:.0} after",
        k.survivors_per_s_before,
        k.survivors_per_s_until_reclaimed,
        k.survivors_per_s_until_restart,
        k.survivors_per_s_after_restart
    )?;
    write!(
        f,
        "; back to half their rate {} after the kill",
        secs(k.survivors_resumed_s)
    )
}
