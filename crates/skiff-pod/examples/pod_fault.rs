//! A host killed mid-run, without the `skiff` binary (hosts are this crate's
//! `skiff-pod-host`, built beside it): `cargo run --release -p skiff-pod
//! --example pod_fault -- [ARCH] [MIX] [CSV] [CHECKPOINT_S]`, e.g. `d
//! standard bench/results/pod-fault-d.csv 1`. Two hosts, four warehouses, 60%
//! multi-warehouse, 8 s; host 1 is SIGKILLed after 2 s and restarted 3 s
//! later. Prints the report and the check; the CSV is the timeline of
//! commits each host reported, every 100 ms.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use skiff_pod::{Arch, CheckConfig, HostCommand, HostFault, Launch, Mix, PodConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arch: Arch = args.first().map_or("d", |s| s.as_str()).parse()?;
    let mix: Mix = args.get(1).map_or("standard", |s| s.as_str()).parse()?;
    let csv = args
        .get(2)
        .map(PathBuf::from)
        .filter(|p| p.as_os_str() != "-");
    let checkpoint_s: Option<f64> = args.get(3).map(|s| s.parse()).transpose()?;
    let host = std::env::current_exe()?
        .parent()
        .and_then(|examples| examples.parent())
        .map(|dir| dir.join("skiff-pod-host"))
        .ok_or("no directory for skiff-pod-host")?;
    let shm = PathBuf::from(format!("/dev/shm/skiff-pod-fault-{}", std::process::id()));
    let mut cfg = PodConfig::new(&shm, 2, 4);
    cfg.arch = arch;
    cfg.mix = mix;
    cfg.multi_warehouse_pct = 60.0;
    cfg.duration = Duration::from_secs(8);
    if let Some(s) = checkpoint_s {
        cfg.checkpoint_every = Duration::try_from_secs_f64(s)?;
    }
    cfg.launch = Launch::Processes(HostCommand {
        program: host,
        args: vec![],
    });
    cfg.fault = Some(HostFault {
        host: 1,
        kill_after: Duration::from_secs(2),
        restart_after: Duration::from_secs(3),
    });
    let outcome = skiff_pod::run(&cfg).and_then(|report| {
        println!("{report}");
        let check = skiff_pod::check(&CheckConfig {
            shm_path: shm.clone(),
        })?;
        println!("{check}");
        Ok((report, check.passed()))
    });
    skiff_pod::remove_pod(&shm)?;
    let (report, passed) = outcome?;
    if let (Some(path), Some(f)) = (csv, &report.fault) {
        let mut out = std::fs::File::create(&path)?;
        writeln!(out, "t_s,host0_reported,host1_reported")?;
        for (t, counts) in &f.timeline {
            let c = |h: usize| counts.get(h).copied().unwrap_or(0);
            writeln!(out, "{t:.3},{},{}", c(0), c(1))?;
        }
        println!("timeline: {}", path.display());
    }
    if !passed {
        return Err("the consistency check failed".into());
    }
    Ok(())
}
