//! The transaction engine of the emulated CXL pod (Pasha, issue 5): host
//! processes that each own a partition of TPC-C in private memory and share
//! a pod-memory file standing in for CXL memory, with a hardware-coherent
//! region (lock words, run control, host stats) and a shared data region.
//! In (c)-(e) every transaction runs on one host under single-node
//! two-phase locking; the shared-nothing baselines (a) and (b) send a
//! transaction's remote part to its owner and commit with 2PC.
//!
//! This crate owns the pod files (`/dev/shm/...`, `.hostN` partitions, their
//! `.wal` logs and `.ckpt0`/`.ckpt1` checkpoint images),
//! the TPC-C schema, loader, NewOrder/Payment, the consistency check and the
//! emulated-CXL accounting. It knows nothing of SQL, DataFusion or Flight,
//! and nothing else in Skiff depends on its internals.
//!
//! # Entry points (what `skiff pod ...` calls)
//!
//! - [`run`]`(&`[`PodConfig`]`) -> `[`RunReport`]: create and load a pod, start
//!   `hosts` hosts, run for `duration`, report. Leaves the pod files for
//!   [`check`].
//! - [`check`]`(&`[`CheckConfig`]`) -> `[`CheckReport`]: the twelve TPC-C
//!   consistency conditions over a pod no host is running on.
//! - [`load`]`(&`[`PodConfig`]`) -> `[`LoadReport`]: create and load only.
//! - [`host_main`]`(&`[`HostArgs`]`)`: the body of a host process. With
//!   [`Launch::Processes`], [`run`] starts `program args... --shm PATH --host
//!   N` per host; the binary must hand those arguments to [`HostArgs::parse`]
//!   and call [`host_main`], exiting non-zero on error. The `skiff` binary
//!   should offer this as a hidden `skiff pod host` subcommand and pass
//!   [`HostCommand::current_exe_pod_host`]; this crate's `skiff-pod-host`
//!   binary does the same for its tests.
//! - [`remove_pod`]: delete a pod's files.
//! - [`live`]`(&Path) -> `[`LivePod`]: a running (or finished) pod's state
//!   and every host's running totals per transaction type (commits,
//!   aborts, CXL misses), read without writing; what the console draws.
//!
//! [`PodConfig::new`] starts hosts as threads ([`Launch::Threads`]); the CLI
//! should set [`Launch::Processes`] so each host is its own process.
//!
//! All five architectures run: (a)/(b) shared nothing with two-phase commit
//! over TCP / pod-memory channels (`arch::remote`, `run::participant`), (c)
//! shared-everything, (d) Pasha static, (e) Pasha dynamic (`arch::dynamic`);
//! under NO_WAIT or WAIT_DIE (`cc`). [`bench`] runs the Figure 3 sweep.
//! Every host logs its commits (`durability::wal`, group commit) and
//! checkpoints its partition during the run (`durability::checkpoint`); a
//! host killed mid-run is reclaimed by a survivor (`durability::lease`,
//! `durability::recovery`; in (a) and (b) its two-phase commits are
//! resolved, `arch::remote`) and restarts from its checkpoint and its log
//! ([`PodConfig::fault`]). See `docs/pod.md` for the design and for what is
//! not built yet.
//!
//! # Modules
//!
//! Grouped by concern: `memory` (the pod's files, layout, run control and
//! CXL accounting), `cc` (lock words and the transaction context),
//! `durability` (log, reclaim, leases, checkpoints), `arch` (the
//! architectures and their mechanisms), `tpcc` (the workload) and `run`
//! (the coordinator, a host and its threads, reports, the sweep). Each
//! module imports only from its own layer or below: vocabulary, memory,
//! durability, architectures, transactions, run (`docs/pod.md`, Modules;
//! the `skiff-tidy` test `layers.rs` checks it).

mod arch;
mod cc;
mod durability;
mod run;
mod tpcc;

use std::path::Path;

use skiff_pod_memory::memory;

pub use durability::lease::ReclaimFacts;
pub use run::bench::{BenchConfig, BenchPoint, bench, last_pod_path, write_csv};
pub use run::host::{HostArgs, host_main};
pub use run::live::{LiveHost, LiveKind, LivePod, live};
pub use run::report::{
    AuditReport, FaultReport, LogReport, Modeled, MovementReport, RunReport, TxnReport,
};
pub use run::{LoadReport, load, run};
pub use skiff_pod_memory::arch::{Arch, CcProtocol};
pub use skiff_pod_memory::config::{CheckConfig, HostCommand, HostFault, Launch, PodConfig};
pub use skiff_pod_memory::error::PodError;
pub use skiff_pod_memory::memory::cxl::{CxlCounters, CxlModel};
pub use skiff_pod_memory::memory::params::Mix;
pub use tpcc::check::{CheckReport, ConditionReport, RowCounts};

/// Checks the twelve consistency conditions on the pod at `cfg.shm_path`.
/// Maps every file read-only; refuses a pod that is loading or running.
pub fn check(cfg: &CheckConfig) -> Result<CheckReport, PodError> {
    let mem = memory::PodMemory::open(&cfg.shm_path, false, memory::Parts::All)?;
    let s = mem.control().state();
    if !matches!(
        s,
        memory::header::state::LOADED | memory::header::state::DONE | memory::header::state::FAILED
    ) {
        return Err(PodError::Busy(format!(
            "{} is {}; check needs a loaded or finished pod",
            cfg.shm_path.display(),
            memory::header::state::name(s)
        )));
    }
    Ok(tpcc::check::check_pod(&mem))
}

/// Deletes the pod file at `path` and its partition files; missing files are
/// not an error.
pub fn remove_pod(path: &Path) -> Result<(), PodError> {
    memory::files::remove_files(path)
}
