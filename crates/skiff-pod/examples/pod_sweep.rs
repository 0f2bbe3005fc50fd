//! The Figure 3 sweep without the `skiff` binary (its hosts are this
//! crate's `skiff-pod-host`, built beside it): `cargo run --release -p
//! skiff-pod --example pod_sweep -- [--quick] [CSV]`. Prints one line per
//! run; `skiff pod bench` is the full tool (PNG, final check).

use std::path::PathBuf;

use skiff_pod::{BenchConfig, HostCommand, Launch};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let csv = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(PathBuf::from);
    let host = std::env::current_exe()?
        .parent()
        .and_then(|examples| examples.parent())
        .map(|dir| dir.join("skiff-pod-host"))
        .ok_or("no directory for skiff-pod-host")?;
    let launch = Launch::Processes(HostCommand {
        program: host,
        args: vec![],
    });
    let cfg = if quick {
        BenchConfig::quick("/dev/shm", launch)
    } else {
        BenchConfig::full("/dev/shm", launch)
    };
    let points = skiff_pod::bench(&cfg, false, |p| {
        let r = &p.report;
        println!(
            "{} {} h{} {:>4}%  {:>8.0}/s  @2.3x {:>8.0}/s  {:>8.0}/cpu-s  abort {:>5.2}%  \
             p50 {:>6.1}  p99 {:>7.1} us  msg {:.2}  {}",
            r.arch,
            r.cc,
            r.hosts,
            r.multi_warehouse_pct,
            r.committed_per_s,
            r.modeled_at(2.3).committed_per_s,
            r.committed_per_cpu_s,
            100.0 * r.abort_rate,
            r.latency_p50_us,
            r.latency_p99_us,
            r.messages_per_txn,
            if p.check_passed {
                "check ok"
            } else {
                "CHECK FAILED"
            }
        );
    })?;
    if let Some(path) = csv {
        skiff_pod::write_csv(&points, &cfg.latency_ratios, &path)?;
    }
    Ok(())
}
