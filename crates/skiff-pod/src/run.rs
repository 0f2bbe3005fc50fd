//! The coordinator: creates and loads the pod, starts the hosts, gives the
//! start and stop signals, and gathers what the hosts left in their slots.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::config::{Launch, Params, PodConfig};
use crate::error::{PodError, Result};
use crate::futex;
use crate::header::state;
use crate::host::{HostArgs, host_main};
use crate::memory::PodMemory;
use crate::report::{RunFacts, RunReport};
use crate::stats::{
    HOST_STATS_BYTES, HOST_STATUS_FAILED, HOST_STATUS_OK, HostStatsRaw, WorkerStats,
};

/// How long hosts may take to attach to a loaded pod.
const HOSTS_ATTACH_TIMEOUT: Duration = Duration::from_secs(120);
/// How long hosts may take to finish after the stop signal.
const HOSTS_FINISH_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest single futex sleep while also watching host liveness.
const WATCH_SLICE: Duration = Duration::from_millis(100);

/// What [`load`] did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LoadReport {
    pub load_s: f64,
    pub pod_bytes: u64,
    /// Size of each host's partition file (0: none).
    pub partition_bytes: u64,
    pub orders_per_district: u32,
}

/// Creates the pod files at `cfg.shm_path` (replacing old ones) and loads
/// the TPC-C population; leaves the pod LOADED for hosts or `check`.
pub fn load(cfg: &PodConfig) -> Result<LoadReport> {
    let (mem, report) = create_and_load(cfg)?;
    drop(mem);
    Ok(report)
}

fn create_and_load(cfg: &PodConfig) -> Result<(PodMemory, LoadReport)> {
    cfg.validate()?;
    let started = Instant::now();
    let mem = PodMemory::create(&cfg.shm_path, Params::from_config(cfg))?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_secs().max(1));
    crate::tpcc::load::load(&mem, now)?;
    mem.control().set_state(state::LOADED);
    let report = LoadReport {
        load_s: started.elapsed().as_secs_f64(),
        pod_bytes: mem.layout.pod_bytes,
        partition_bytes: mem.layout.part_bytes,
        orders_per_district: mem.params().orders_per_district,
    };
    Ok((mem, report))
}

/// A started host.
enum Host {
    Thread(Option<JoinHandle<Result<()>>>),
    Process(Child),
}

impl Host {
    /// Whether it ended (possibly before reporting).
    fn exited(&mut self) -> bool {
        match self {
            Host::Thread(h) => h.as_ref().is_none_or(|h| h.is_finished()),
            Host::Process(c) => matches!(c.try_wait(), Ok(Some(_))),
        }
    }

    /// Waits for it to end; its own failure, if it reported one that way.
    fn join(&mut self, host: u16) -> Result<()> {
        match self {
            Host::Thread(h) => match h.take().map(|h| h.join()) {
                None | Some(Ok(Ok(()))) => Ok(()),
                Some(Ok(Err(e))) => Err(e),
                Some(Err(_)) => Err(PodError::HostFailed {
                    host,
                    reason: "host thread panicked".into(),
                }),
            },
            Host::Process(c) => {
                let status = c.wait().map_err(|e| PodError::io("host process", e))?;
                if status.success() {
                    Ok(())
                } else {
                    Err(PodError::HostFailed {
                        host,
                        reason: format!("host process exited with {status}"),
                    })
                }
            }
        }
    }

    /// Ends a host that is ours (only on the error path).
    fn kill(&mut self) {
        if let Host::Process(c) = self {
            let _ = c.kill();
        }
    }
}

/// Loads a pod, runs the workload on `cfg.hosts` hosts for `cfg.duration`,
/// and reports. The pod is left DONE for [`crate::check`].
pub fn run(cfg: &PodConfig) -> Result<RunReport> {
    let (mem, loaded) = create_and_load(cfg)?;
    let mut hosts = Vec::with_capacity(cfg.hosts as usize);
    let driven = (|| {
        for h in 0..cfg.hosts {
            hosts.push(launch(cfg, h)?);
        }
        drive(&mem, cfg, &mut hosts)
    })();
    if driven.is_err() {
        // Hosts waiting for the start see FAILED and return; processes that
        // may be stuck are ours to end.
        mem.control().set_state(state::FAILED);
        for h in &mut hosts {
            h.kill();
        }
    }
    let mut joined = Ok(());
    for (i, h) in hosts.iter_mut().enumerate() {
        let r = h.join(i as u16);
        if joined.is_ok() {
            joined = r;
        }
    }
    let (stats, elapsed, ended_early) = driven?;
    joined?;
    mem.control().set_state(state::DONE);
    let p = mem.params();
    Ok(RunReport::build(
        RunFacts {
            arch: p.arch,
            cc: p.cc,
            hosts: p.hosts,
            warehouses: p.warehouses,
            workers_per_host: p.workers_per_host,
            multi_warehouse_pct: p.multi_warehouse_pct,
            orders_per_district: p.orders_per_district,
            load_s: loaded.load_s,
            elapsed_s: elapsed.as_secs_f64(),
            cxl_model: p.cxl,
            ended_early,
        },
        &stats,
    ))
}

fn launch(cfg: &PodConfig, host: u16) -> Result<Host> {
    let args = HostArgs {
        shm_path: cfg.shm_path.clone(),
        host,
    };
    match &cfg.launch {
        Launch::Threads => {
            let handle = std::thread::Builder::new()
                .name(format!("pod-host-{host}"))
                .spawn(move || host_main(&args))
                .map_err(|e| PodError::io("host thread", e))?;
            Ok(Host::Thread(Some(handle)))
        }
        Launch::Processes(cmd) => {
            let child = Command::new(&cmd.program)
                .args(&cmd.args)
                .arg("--shm")
                .arg(&cfg.shm_path)
                .arg("--host")
                .arg(host.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| PodError::io(&cmd.program, e))?;
            Ok(Host::Process(child))
        }
    }
}

/// The phase a coordinator waits for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Hosts attach and count themselves in `hosts_ready`; none may exit.
    Ready,
    /// Hosts publish their slot, count themselves in `hosts_done` and exit.
    Finished,
}

/// Waits until `word` reaches the host count, failing if a host ends without
/// having done its part. A host that reported (its slot has a status) and
/// then exited is done, not dead: it may exit before the others count in.
fn await_hosts(mem: &PodMemory, word: &AtomicU32, hosts: &mut [Host], phase: Phase) -> Result<()> {
    let count = hosts.len() as u32;
    let (timeout, what) = match phase {
        Phase::Ready => (HOSTS_ATTACH_TIMEOUT, "ready"),
        Phase::Finished => (HOSTS_FINISH_TIMEOUT, "finished"),
    };
    let mut dead = None;
    let deadline = Instant::now() + timeout;
    futex::wait_until(word, deadline, WATCH_SLICE, |v| {
        if v >= count {
            return true;
        }
        dead = hosts.iter_mut().enumerate().position(|(h, host)| {
            host.exited() && (phase == Phase::Ready || slot(mem, h as u16).status == 0)
        });
        dead.is_some()
    });
    // The last host may have counted itself in after the check above.
    if word.load(Ordering::Acquire) >= count {
        return Ok(());
    }
    match dead {
        Some(h) => {
            let raw = slot(mem, h as u16);
            let reason = if raw.status == HOST_STATUS_FAILED {
                raw.error_message()
            } else {
                format!("exited before it was {what}, without reporting")
            };
            Err(PodError::HostFailed {
                host: h as u16,
                reason,
            })
        }
        None => Err(PodError::Timeout(format!(
            "hosts not {what} after {timeout:?}"
        ))),
    }
}

/// Host `h`'s stats slot in the coherent region.
fn slot(mem: &PodMemory, h: u16) -> HostStatsRaw {
    mem.pod
        .read(mem.layout.host_stats_off + h as u64 * HOST_STATS_BYTES)
}

type Driven = (WorkerStats, Duration, Option<String>);

fn drive(mem: &PodMemory, cfg: &PodConfig, hosts: &mut [Host]) -> Result<Driven> {
    let control = mem.control();
    await_hosts(mem, control.hosts_ready, hosts, Phase::Ready)?;
    let start = Instant::now();
    control.set_state(state::RUNNING);
    // Sleep for the duration, or until a host stops the run early.
    futex::wait_until(control.run_state, start + cfg.duration, cfg.duration, |s| {
        s != state::RUNNING
    });
    control.request_stop("");
    let elapsed = start.elapsed();
    await_hosts(mem, control.hosts_done, hosts, Phase::Finished)?;
    let mut total = WorkerStats::default();
    for h in 0..cfg.hosts {
        let raw = slot(mem, h);
        match raw.status {
            HOST_STATUS_OK => total.merge(&raw.to_stats()),
            HOST_STATUS_FAILED => {
                return Err(PodError::HostFailed {
                    host: h,
                    reason: raw.error_message(),
                });
            }
            s => {
                return Err(PodError::Corrupt(format!(
                    "host {h} stats slot has status {s}"
                )));
            }
        }
    }
    Ok((total, elapsed, control.stop_reason()))
}
