//! `skiff pod`: the transaction engine of the emulated CXL pod (see
//! `docs/pod.md`). Thin glue over the `skiff-pod` crate.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use skiff_pod::{Arch, CheckConfig, HostArgs, HostCommand, Launch, PodConfig, PodError};

use crate::cli::parse_bytes;

#[derive(Subcommand, Debug)]
pub enum PodCommand {
    /// Load TPC-C into a new pod, run NewOrder/Payment on H hosts, report,
    /// then check the twelve consistency conditions.
    Run(PodRunArgs),
    /// Check the twelve TPC-C consistency conditions of a pod kept with --keep.
    Check(PodCheckArgs),
    /// One host process of a pod (started by `skiff pod run`).
    #[command(hide = true)]
    Host {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

#[derive(Args, Debug)]
pub struct PodRunArgs {
    /// Host processes sharing the pod memory.
    #[arg(long, default_value_t = 2)]
    pub hosts: u16,
    /// TPC-C warehouses, assigned to hosts in blocks.
    #[arg(long, default_value_t = 2)]
    pub warehouses: u32,
    /// Architecture: c (shared-everything) or d (Pasha static); a, b and e
    /// are not built yet and are refused.
    #[arg(long, default_value = "d")]
    pub arch: String,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Worker threads per host.
    #[arg(long, default_value_t = 1)]
    pub workers: u16,
    /// Multi-warehouse %: scales the spec's remote probabilities (1% per
    /// order line, 15% per Payment) as the Pasha paper does; 10 = the spec.
    #[arg(long, default_value_t = 10.0)]
    pub multi_warehouse_pct: f64,
    /// Size of the coherent region (lock words, metadata), e.g. 256M.
    #[arg(long, value_parser = parse_bytes, default_value = "256M")]
    pub coherent_bytes: usize,
    /// Modeled CXL latency over local DRAM.
    #[arg(long, default_value_t = 2.3)]
    pub latency_ratio: f64,
    /// Run hosts as threads of this process instead of processes.
    #[arg(long)]
    pub threads: bool,
    /// Pod file; a fresh one in /dev/shm by default.
    #[arg(long)]
    pub shm: Option<PathBuf>,
    /// Keep the pod files after the run (for `skiff pod check`).
    #[arg(long)]
    pub keep: bool,
}

#[derive(Args, Debug)]
pub struct PodCheckArgs {
    /// The pod file of a finished run.
    #[arg(long)]
    pub shm: PathBuf,
}

/// Why `skiff pod` failed.
#[derive(Debug, thiserror::Error)]
pub enum PodCliError {
    #[error(transparent)]
    Pod(#[from] PodError),
    #[error("the consistency check failed (see the report above)")]
    CheckFailed,
    #[error("bad --duration {0}: seconds must be a positive number")]
    Duration(f64),
}

pub fn run(command: &PodCommand) -> Result<(), PodCliError> {
    match command {
        PodCommand::Run(args) => run_pod(args),
        PodCommand::Check(args) => check(&args.shm),
        PodCommand::Host { args } => {
            let args = HostArgs::parse(args.iter().cloned())?;
            Ok(skiff_pod::host_main(&args)?)
        }
    }
}

fn run_pod(args: &PodRunArgs) -> Result<(), PodCliError> {
    let path = args
        .shm
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("/dev/shm/skiff-pod-{}", std::process::id())));
    let mut config = PodConfig::new(&path, args.hosts, args.warehouses);
    config.arch = args.arch.parse::<Arch>()?;
    config.duration = Duration::try_from_secs_f64(args.duration)
        .map_err(|_| PodCliError::Duration(args.duration))?;
    config.workers_per_host = args.workers;
    config.multi_warehouse_pct = args.multi_warehouse_pct;
    config.coherent_bytes = args.coherent_bytes as u64;
    config.cxl.latency_ratio = args.latency_ratio;
    config.launch = if args.threads {
        Launch::Threads
    } else {
        Launch::Processes(HostCommand::current_exe_pod_host()?)
    };
    let outcome = skiff_pod::run(&config)
        .map_err(PodCliError::from)
        .and_then(|report| {
            println!("{report}");
            check(&path)
        });
    if !args.keep {
        skiff_pod::remove_pod(&path)?;
    }
    outcome
}

fn check(path: &std::path::Path) -> Result<(), PodCliError> {
    let report = skiff_pod::check(&CheckConfig {
        shm_path: path.to_path_buf(),
    })?;
    println!("{report}");
    if report.passed() {
        Ok(())
    } else {
        Err(PodCliError::CheckFailed)
    }
}
