//! The Figure 3 sweep without the `skiff` binary (its hosts are this
//! crate's `skiff-pod-host`, built beside it): `cargo run --release -p
//! skiff-pod --example pod_sweep -- [--quick] [--mix standard] [--archs d,e]
//! [--pcts 0,60] [--cc no-wait] [--duration S] [--warmup S] [--slots N]
//! [--timing-only] [CSV]`. Prints one line per run; `skiff pod bench` is the full tool (PNG,
//! final check). The filters exist to measure a subset (say (d) and (e) at
//! 60%) with the sweep's settings, before and after a change;
//! `--timing-only` skips the correctness-scale runs (every run is still
//! checked).

use std::path::PathBuf;
use std::time::Duration;

use skiff_pod::{Arch, BenchConfig, CcProtocol, HostCommand, Launch, Mix};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().any(|a| a == name);
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let mut csv = None;
    let mut skip = false;
    for a in &args {
        if std::mem::take(&mut skip) {
            continue;
        }
        if a.starts_with("--") {
            skip = matches!(
                a.as_str(),
                "--mix" | "--archs" | "--pcts" | "--cc" | "--duration" | "--warmup" | "--slots"
            );
        } else {
            csv = Some(PathBuf::from(a));
        }
    }
    let host = std::env::current_exe()?
        .parent()
        .and_then(|examples| examples.parent())
        .map(|dir| dir.join("skiff-pod-host"))
        .ok_or("no directory for skiff-pod-host")?;
    let launch = Launch::Processes(HostCommand {
        program: host,
        args: vec![],
    });
    let mut cfg = if flag("--quick") {
        BenchConfig::quick("/dev/shm", launch)
    } else {
        BenchConfig::full("/dev/shm", launch)
    };
    if let Some(mix) = value("--mix") {
        cfg.mix = mix.parse::<Mix>()?;
    }
    if let Some(archs) = value("--archs") {
        cfg.archs = archs
            .split(',')
            .map(str::parse::<Arch>)
            .collect::<Result<_, _>>()?;
    }
    if let Some(pcts) = value("--pcts") {
        cfg.multi_warehouse_pcts = pcts.split(',').map(str::parse).collect::<Result<_, _>>()?;
    }
    if let Some(cc) = value("--cc") {
        cfg.protocols = cc
            .split(',')
            .map(str::parse::<CcProtocol>)
            .collect::<Result<_, _>>()?;
    }
    if let Some(secs) = value("--duration") {
        cfg.duration = Duration::try_from_secs_f64(secs.parse()?)?;
    }
    if let Some(secs) = value("--warmup") {
        cfg.warmup = Duration::try_from_secs_f64(secs.parse()?)?;
    }
    if let Some(slots) = value("--slots") {
        cfg.dynamic_slots_per_host = Some(slots.parse()?);
    }
    if flag("--timing-only") {
        cfg.correctness_hosts.clear();
    }
    let points = skiff_pod::bench(&cfg, false, |p| {
        let r = &p.report;
        let m = &r.movement;
        println!(
            "{} {} h{} {:>4}%  {:>8.0}/s  @2.3x {:>8.0}/s {:>8.0}/cpu-s  raw {:>8.0}/cpu-s  \
             abort {:>5.2}%  p50 {:>6.1}  p99 {:>7.1} us  msg {:.2}  miss {:.1}  \
             asks {} in {} (again {}) back {} (cooled {}) busy {}  \
             mover {} rounds {:.1} us/req (in {:.1} back {:.1})  {}",
            r.arch,
            r.cc,
            r.hosts,
            r.multi_warehouse_pct,
            r.committed_per_s,
            r.modeled_at(2.3).committed_per_s,
            r.modeled_at(2.3).committed_per_cpu_s,
            r.committed_per_cpu_s,
            100.0 * r.abort_rate,
            r.latency_p50_us,
            r.latency_p99_us,
            r.messages_per_txn,
            r.misses_per_txn,
            m.asks,
            m.moved_in,
            m.moved_again,
            m.moved_back,
            m.cooled,
            m.busy,
            m.mover_rounds,
            m.mover_cpu_us_per_request,
            m.move_in_us_per_request,
            m.move_back_us_per_request,
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
