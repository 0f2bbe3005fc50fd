//! The pod benchmark (issue 5, the Pasha paper's Figure 3): throughput of
//! every architecture this build runs as the multi-warehouse share grows,
//! on 2 hosts for timing, plus correctness-scale runs on more hosts. Every
//! run ends with the twelve consistency conditions.
//!
//! The sweep and its CSV are here; the `skiff` binary draws the PNG.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::run::report::RunReport;
use skiff_pod_memory::arch::{Arch, CcProtocol};
use skiff_pod_memory::config::{CheckConfig, Launch, PodConfig};
use skiff_pod_memory::error::{PodError, Result};
use skiff_pod_memory::memory::params::Mix;

/// The warm-up of a timing run of the full sweep (TPC-C measures after
/// ramp-up). In (e) the first seconds are spent moving the tuples other
/// hosts use into the shared region: a run measured from the start reports
/// that fill, not the steady state (docs/pod.md, "Warm-up").
pub const BENCH_WARMUP: Duration = Duration::from_secs(5);
/// The quick sweep's warm-up: its 2 warehouses fill the pools sooner.
pub const BENCH_WARMUP_QUICK: Duration = Duration::from_secs(3);

/// What [`bench`] sweeps.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Directory of the pod files (normally /dev/shm).
    pub shm_dir: PathBuf,
    pub archs: Vec<Arch>,
    pub protocols: Vec<CcProtocol>,
    /// The paper's NewOrder + Payment (the Figure 3 workload), or TPC-C's
    /// standard mix, whose three home-warehouse transactions dilute the
    /// remote share.
    pub mix: Mix,
    /// Pasha dynamic: slots per host and movable table (`None`: the
    /// default of [`PodConfig::dynamic_slots_per_host`]).
    pub dynamic_slots_per_host: Option<u32>,
    /// The x axis: 10 is the TPC-C default, 60 the paper's highest setting
    /// (60% of NewOrders and 90% of Payments touch a remote warehouse).
    pub multi_warehouse_pcts: Vec<f64>,
    /// Timing runs: hosts, warehouses and workers. Two hosts of one worker
    /// each keep at most one busy worker per core on a 2-core machine.
    pub hosts: u16,
    pub warehouses: u32,
    pub workers_per_host: u16,
    pub duration: Duration,
    /// Warm-up of every timing run before its `duration` is measured
    /// ([`PodConfig::warmup`]), the same for every architecture.
    pub warmup: Duration,
    /// Modeled-latency figures, computed from each run's miss counts.
    pub latency_ratios: Vec<f64>,
    /// Correctness-scale runs (more hosts than cores, with the auditor) at
    /// the highest multi-warehouse setting; checked, not plotted.
    pub correctness_hosts: Vec<u16>,
    pub correctness_duration: Duration,
    pub launch: Launch,
    pub seed: u64,
}

impl BenchConfig {
    /// The full sweep: every implemented architecture, 0% to 60% in steps
    /// of 10, 5 s per point after 5 s of warm-up, both protocols, 4- and
    /// 8-host checks.
    pub fn full(shm_dir: impl Into<PathBuf>, launch: Launch) -> BenchConfig {
        BenchConfig {
            shm_dir: shm_dir.into(),
            archs: Arch::ALL
                .into_iter()
                .filter(|a| a.is_implemented())
                .collect(),
            protocols: CcProtocol::ALL.to_vec(),
            mix: Mix::NewOrderPayment,
            dynamic_slots_per_host: None,
            multi_warehouse_pcts: vec![0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0],
            hosts: 2,
            warehouses: 4,
            workers_per_host: 1,
            duration: Duration::from_secs(5),
            warmup: BENCH_WARMUP,
            latency_ratios: vec![1.0, 2.3, 3.0],
            correctness_hosts: vec![4, 8],
            correctness_duration: Duration::from_secs(2),
            launch,
            seed: 0x5eed,
        }
    }

    /// The same sweep, shorter (well under 5 minutes on 2 cores): NO_WAIT
    /// only, 0/20/40/60%, 1.5 s per point after 3 s of warm-up, one 4-host
    /// check.
    pub fn quick(shm_dir: impl Into<PathBuf>, launch: Launch) -> BenchConfig {
        BenchConfig {
            protocols: vec![CcProtocol::NoWait],
            multi_warehouse_pcts: vec![0.0, 20.0, 40.0, 60.0],
            warehouses: 2,
            duration: Duration::from_millis(1_500),
            warmup: BENCH_WARMUP_QUICK,
            correctness_hosts: vec![4],
            correctness_duration: Duration::from_millis(700),
            ..BenchConfig::full(shm_dir, launch)
        }
    }

    /// Where results of this sweep go, so the standard mix never overwrites
    /// the Figure 3 files: `pod-fig3[-quick][-standard]`.
    pub fn file_stem(&self, quick: bool) -> String {
        let mut stem = String::from("pod-fig3");
        if quick {
            stem.push_str("-quick");
        }
        if self.mix != Mix::NewOrderPayment {
            let _ = write!(stem, "-{}", self.mix.name());
        }
        stem
    }

    /// Runs in the order [`bench`] does them.
    pub fn points(&self) -> Vec<PodConfig> {
        let mut out = Vec::new();
        let top = self
            .multi_warehouse_pcts
            .iter()
            .copied()
            .fold(0.0f64, f64::max);
        for &cc in &self.protocols {
            for &arch in &self.archs {
                for &pct in &self.multi_warehouse_pcts {
                    out.push(self.pod(arch, cc, pct, self.hosts, self.warehouses, false));
                }
            }
        }
        for &hosts in &self.correctness_hosts {
            for &arch in &self.archs {
                let cc = self.protocols[0];
                out.push(self.pod(arch, cc, top, hosts, hosts as u32, true));
            }
        }
        out
    }

    fn pod(
        &self,
        arch: Arch,
        cc: CcProtocol,
        pct: f64,
        hosts: u16,
        w: u32,
        audit: bool,
    ) -> PodConfig {
        let path = self
            .shm_dir
            .join(format!("skiff-pod-bench-{}", std::process::id()));
        let mut c = PodConfig::new(path, hosts, w.max(hosts as u32));
        c.arch = arch;
        c.cc = cc;
        c.mix = self.mix;
        c.dynamic_slots_per_host = self.dynamic_slots_per_host;
        c.multi_warehouse_pct = pct;
        c.workers_per_host = self.workers_per_host;
        c.duration = if audit {
            self.correctness_duration
        } else {
            self.duration
        };
        // Correctness-scale runs are checked, not plotted: no warm-up.
        c.warmup = if audit { Duration::ZERO } else { self.warmup };
        c.auditor = audit;
        c.launch = self.launch.clone();
        c.seed = self.seed;
        c
    }
}

/// One run of the sweep.
#[derive(Clone, Debug)]
pub struct BenchPoint {
    pub report: RunReport,
    /// All twelve conditions held after the run (and the auditor saw no
    /// violation).
    pub check_passed: bool,
    /// A correctness-scale run (not a timing point).
    pub correctness: bool,
}

/// Runs every point of `cfg`, checking each, and hands each to `on_point`
/// as it finishes. With `keep_last`, the last pod's files stay for a final
/// `skiff pod check` (the caller removes them); the others are removed.
pub fn bench(
    cfg: &BenchConfig,
    keep_last: bool,
    mut on_point: impl FnMut(&BenchPoint),
) -> Result<Vec<BenchPoint>> {
    let points = cfg.points();
    let timing = points.len() - cfg.correctness_hosts.len() * cfg.archs.len();
    let mut out = Vec::with_capacity(points.len());
    for (i, pod) in points.iter().enumerate() {
        let result = run_point(pod, i >= timing);
        if !(keep_last && i + 1 == points.len()) || result.is_err() {
            crate::remove_pod(&pod.shm_path)?;
        }
        let point = result?;
        on_point(&point);
        out.push(point);
    }
    Ok(out)
}

/// The pod file of the last point, kept by `bench(.., keep_last = true)`.
pub fn last_pod_path(cfg: &BenchConfig) -> Option<PathBuf> {
    cfg.points().last().map(|p| p.shm_path.clone())
}

fn run_point(pod: &PodConfig, correctness: bool) -> Result<BenchPoint> {
    let report = crate::run(pod)?;
    let check = crate::check(&CheckConfig {
        shm_path: pod.shm_path.clone(),
    })?;
    let check_passed = check.passed() && report.audit.violations == 0;
    Ok(BenchPoint {
        report,
        check_passed,
        correctness,
    })
}

/// Writes the points as CSV, one row per run, with a modeled throughput
/// pair per latency ratio.
pub fn write_csv(points: &[BenchPoint], ratios: &[f64], path: &Path) -> Result<()> {
    let mut s = String::from(
        "kind,arch,cc,mix,hosts,warehouses,workers_per_host,multi_warehouse_pct,elapsed_s,\
         committed,committed_per_s,abort_rate,p50_us,p99_us,messages_per_txn,\
         committed_per_cpu_s,worker_cpu_s,misses_per_txn,lock_waits,moved_in,moved_back,\
         warmup_s,asks,moved_again,cooled,mover_us_per_request",
    );
    for r in ratios {
        let _ = write!(s, ",modeled_per_s_x{r},modeled_per_cpu_s_x{r}");
    }
    s.push_str(",check_passed\n");
    for p in points {
        let r = &p.report;
        let kind = if p.correctness {
            "correctness"
        } else {
            "timing"
        };
        let _ = write!(
            s,
            "{kind},{},{},{},{},{},{},{},{:.3},{},{:.1},{:.5},{:.1},{:.1},{:.3},{:.1},{:.3},{:.2},\
             {},{},{},{:.3},{},{},{},{:.2}",
            r.arch.name(),
            r.cc.name(),
            r.mix.name(),
            r.hosts,
            r.warehouses,
            r.workers_per_host,
            r.multi_warehouse_pct,
            r.elapsed_s,
            r.committed,
            r.committed_per_s,
            r.abort_rate,
            r.latency_p50_us,
            r.latency_p99_us,
            r.messages_per_txn,
            r.committed_per_cpu_s,
            r.worker_cpu_s,
            r.misses_per_txn,
            r.lock_waits,
            r.movement.moved_in,
            r.movement.moved_back,
            r.warmup_s,
            r.movement.asks,
            r.movement.moved_again,
            r.movement.cooled,
            r.movement.mover_cpu_us_per_request,
        );
        for &ratio in ratios {
            let m = r.modeled_at(ratio);
            let _ = write!(s, ",{:.1},{:.1}", m.committed_per_s, m.committed_per_cpu_s);
        }
        let _ = writeln!(s, ",{}", p.check_passed);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| PodError::io(dir, e))?;
    }
    std::fs::write(path, s).map_err(|e| PodError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_sweeps_every_implemented_architecture_and_ends_with_checks() {
        let q = BenchConfig::quick("/dev/shm", Launch::Threads);
        let points = q.points();
        let implemented = Arch::ALL.iter().filter(|a| a.is_implemented()).count();
        assert_eq!(points.len(), implemented * (4 + 1));
        assert!(points.iter().take(implemented * 4).all(|p| p.hosts == 2));
        let last = points.last().unwrap();
        assert_eq!((last.hosts, last.auditor), (4, true));
        assert_eq!(last.multi_warehouse_pct, 60.0);
        assert_eq!(last_pod_path(&q), Some(last.shm_path.clone()));
        assert!(points.iter().all(|p| p.mix == Mix::NewOrderPayment));
    }

    #[test]
    fn the_standard_mix_runs_every_point_and_has_its_own_files() {
        let mut full = BenchConfig::full("/dev/shm", Launch::Threads);
        assert_eq!(full.file_stem(false), "pod-fig3");
        full.mix = Mix::Standard;
        assert!(full.points().iter().all(|p| p.mix == Mix::Standard));
        assert_eq!(full.file_stem(false), "pod-fig3-standard");
        let mut quick = BenchConfig::quick("/dev/shm", Launch::Threads);
        assert_eq!(quick.file_stem(true), "pod-fig3-quick");
        quick.mix = Mix::Standard;
        assert_eq!(quick.file_stem(true), "pod-fig3-quick-standard");
    }
}
