//! The coordinator: creates and loads the pod, starts the hosts, gives the
//! start and stop signals, and gathers what the hosts left in their slots.
//!
//!
//! The group is everything a run is made of above the transactions: what a
//! caller configures (`config`), a host process and its threads (`host`,
//! `participant`), the figures they keep (`stats`), publish while they run
//! (`live`) and report (`report`), and the Figure 3 sweep (`bench`).

pub(crate) mod bench;
pub(crate) mod host;
pub(crate) mod live;
pub(crate) mod participant;
pub(crate) mod report;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::durability::lease::{HostRecord, mono_ms};
use host::{HostArgs, host_main};
use report::FaultReport;
use report::{RunFacts, RunReport};
use skiff_pod_memory::config::{HostFault, Launch, PodConfig};
use skiff_pod_memory::error::{PodError, Result};
use skiff_pod_memory::memory::PodMemory;
use skiff_pod_memory::memory::futex;
use skiff_pod_memory::memory::header::state;
use skiff_pod_memory::stats::{
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
    let mem = PodMemory::create(&cfg.shm_path, cfg.params())?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_secs().max(1));
    crate::tpcc::load::load(&mem, now)?;
    // A restarted host starts over from its partition as loaded.
    crate::durability::checkpoint::write_checkpoints(&mem)?;
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

    /// SIGKILLs a host process and reaps it, so its pid is gone (what
    /// survivors check before reclaiming it).
    fn crash(&mut self, host: u16) -> Result<()> {
        match self {
            Host::Process(c) => {
                c.kill()
                    .map_err(|e| PodError::io(format!("kill host {host}"), e))?;
                c.wait()
                    .map_err(|e| PodError::io(format!("reap host {host}"), e))?;
                Ok(())
            }
            Host::Thread(_) => Err(PodError::Config("cannot kill a host thread".into())),
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
            hosts.push(launch(cfg, h, false)?);
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
    let (stats, elapsed, ended_early, fault) = driven?;
    joined?;
    mem.control().set_state(state::DONE);
    let p = mem.params();
    let mut report = RunReport::build(
        RunFacts {
            arch: p.arch,
            cc: p.cc,
            hosts: p.hosts,
            warehouses: p.warehouses,
            workers_per_host: p.workers_per_host,
            multi_warehouse_pct: p.multi_warehouse_pct,
            orders_per_district: p.orders_per_district,
            load_s: loaded.load_s,
            warmup_s: cfg.warmup.as_secs_f64(),
            elapsed_s: elapsed.as_secs_f64(),
            cxl_model: p.cxl,
            ended_early,
            mix: p.mix,
        },
        &stats,
    );
    report.fault = fault.map(|f| f.report(&mem));
    Ok(report)
}

fn launch(cfg: &PodConfig, host: u16, recover: bool) -> Result<Host> {
    let args = HostArgs {
        shm_path: cfg.shm_path.clone(),
        host,
        recover,
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
                .args(recover.then_some("--recover"))
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

type Driven = (WorkerStats, Duration, Option<String>, Option<FaultLog>);

fn drive(mem: &PodMemory, cfg: &PodConfig, hosts: &mut [Host]) -> Result<Driven> {
    let control = mem.control();
    await_hosts(mem, control.hosts_ready, hosts, Phase::Ready)?;
    control.set_state(state::RUNNING);
    warm_up(mem, cfg.warmup);
    let start = Instant::now();
    let fault = match cfg.fault {
        // Sleep for the duration, or until a host stops the run early.
        None => {
            futex::wait_until(control.run_state, start + cfg.duration, cfg.duration, |s| {
                s != state::RUNNING
            });
            None
        }
        Some(f) => Some(drive_fault(mem, cfg, f, hosts, start)?),
    };
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
    Ok((total, elapsed, control.stop_reason(), fault))
}

/// Lets the hosts run `warmup` unmeasured, then starts measurement: every
/// thread that keeps figures drops what it counted (`stats::Window`). In
/// (e) the movers sleep on their doorbells, so each is rung to notice.
fn warm_up(mem: &PodMemory, warmup: Duration) {
    if warmup.is_zero() {
        return;
    }
    let control = mem.control();
    let running = futex::wait_until(control.run_state, Instant::now() + warmup, warmup, |s| {
        s != state::RUNNING
    });
    if running.is_some() {
        return;
    }
    control.begin_measuring();
    if mem.layout.dynamic_slots() > 0 {
        for h in 0..mem.params().hosts {
            let bell = mem.pod.atomic_u32(mem.layout.doorbell(h));
            bell.fetch_add(1, Ordering::Release);
            futex::wake_all(bell);
        }
    }
}

/// Interval of the fault timeline's samples.
const TIMELINE_TICK: Duration = Duration::from_millis(100);

/// What [`drive_fault`] saw, turned into a [`FaultReport`] after the run.
struct FaultLog {
    fault: HostFault,
    start: Instant,
    killed: Instant,
    killed_ms: u64,
    restarted: Option<Instant>,
    timeline: Vec<(f64, Vec<u64>)>,
}

fn reported_total(mem: &PodMemory, h: u16) -> u64 {
    HostRecord::of(mem, h).reported_counts().iter().sum()
}

/// Runs the duration with host `f.host` SIGKILLed at `f.kill_after` and
/// restarted (`--recover`) `f.restart_after` later, sampling every host's
/// reported commits every [`TIMELINE_TICK`].
fn drive_fault(
    mem: &PodMemory,
    cfg: &PodConfig,
    f: HostFault,
    hosts: &mut [Host],
    start: Instant,
) -> Result<FaultLog> {
    let control = mem.control();
    let end = start + cfg.duration;
    let mut log = FaultLog {
        fault: f,
        start,
        killed: start,
        killed_ms: 0,
        restarted: None,
        timeline: Vec::new(),
    };
    let mut killed = false;
    loop {
        let now = Instant::now();
        let counts = (0..cfg.hosts).map(|h| reported_total(mem, h)).collect();
        log.timeline.push(((now - start).as_secs_f64(), counts));
        if now >= end || control.state() != state::RUNNING {
            break;
        }
        if !killed && now >= start + f.kill_after {
            hosts[f.host as usize].crash(f.host)?;
            (log.killed, log.killed_ms, killed) = (Instant::now(), mono_ms(), true);
        }
        if killed && log.restarted.is_none() && now >= log.killed + f.restart_after {
            hosts[f.host as usize] = launch(cfg, f.host, true)?;
            log.restarted = Some(Instant::now());
        }
        futex::wait(
            control.run_state,
            state::RUNNING,
            TIMELINE_TICK.min(end - now),
        );
    }
    if !killed {
        return Err(PodError::HostFailed {
            host: f.host,
            reason: "the run ended before the host was to be killed".into(),
        });
    }
    if log.restarted.is_none() {
        // The run ended early: restart anyway, so the host recovers.
        hosts[f.host as usize] = launch(cfg, f.host, true)?;
        log.restarted = Some(Instant::now());
    }
    Ok(log)
}

impl FaultLog {
    fn report(self, mem: &PodMemory) -> FaultReport {
        let f = self.fault;
        let rec = HostRecord::of(mem, f.host);
        let reclaim = rec.reclaim_facts();
        let since_kill = |ms: u64| (ms > 0).then(|| ms.saturating_sub(self.killed_ms) as f64 / 1e3);
        let at = |i: Instant| (i - self.start).as_secs_f64();
        let killed_s = at(self.killed);
        let reclaimed_s = since_kill(reclaim.done_at_ms);
        let restarted_s = self.restarted.map(at);
        let survivors = |counts: &Vec<u64>| -> u64 {
            counts
                .iter()
                .enumerate()
                .filter(|(h, _)| *h != f.host as usize)
                .map(|(_, c)| *c)
                .sum()
        };
        // Survivors' commit rate between two instants (seconds since start).
        let rate = |from: f64, to: f64| -> f64 {
            let pick = |t: f64| {
                self.timeline
                    .iter()
                    .rev()
                    .find(|(s, _)| *s <= t)
                    .or(self.timeline.first())
                    .map_or((0.0, 0), |(s, c)| (*s, survivors(c)))
            };
            let ((t0, c0), (t1, c1)) = (pick(from), pick(to));
            if t1 > t0 {
                c1.saturating_sub(c0) as f64 / (t1 - t0)
            } else {
                0.0
            }
        };
        let last = self.timeline.last().map_or(0.0, |(t, _)| *t);
        let reclaimed_at = reclaimed_s.map_or(last, |s| killed_s + s);
        let restart_at = restarted_s.unwrap_or(last);
        let host_at = |t: f64| {
            self.timeline
                .iter()
                .rev()
                .find(|(s, _)| *s <= t)
                .map_or(0, |(_, c)| c[f.host as usize])
        };
        let survivors_at = |t: f64| {
            self.timeline
                .iter()
                .rev()
                .find(|(s, _)| *s <= t)
                .map_or(0, |(_, c)| survivors(c))
        };
        let survivors_end = self.timeline.last().map_or(0, |(_, c)| survivors(c));
        let before = rate(killed_s - 1.0, killed_s);
        let resumed = self
            .timeline
            .windows(2)
            .filter(|w| w[0].0 >= killed_s && w[1].0 > w[0].0)
            .find(|w| {
                let n = survivors(&w[1].1).saturating_sub(survivors(&w[0].1));
                n as f64 / (w[1].0 - w[0].0) >= before / 2.0
            })
            .map(|w| w[0].0 - killed_s);
        let hosts = mem.params().hosts;
        let (orders_created, payments_created) = (0..hosts).map(|h| created(mem, h)).unzip();
        FaultReport {
            host: f.host,
            killed_at_s: killed_s,
            restarted_at_s: restarted_s,
            detected_s: since_kill(reclaim.detected_at_ms),
            reclaimed_s,
            reclaim,
            survivors_per_s_before: before,
            survivors_resumed_s: resumed,
            survivors_per_s_until_reclaimed: rate(killed_s, reclaimed_at),
            survivors_per_s_until_restart: rate(reclaimed_at, restart_at),
            survivors_per_s_after_restart: rate(restart_at, last),
            survivors_committed_after_reclaim: match reclaimed_s {
                Some(_) => survivors_end.saturating_sub(survivors_at(reclaimed_at)),
                None => 0,
            },
            restarted_host_committed: reported_total(mem, f.host)
                .saturating_sub(host_at(restart_at)),
            reported: (0..hosts)
                .map(|h| HostRecord::of(mem, h).reported_counts())
                .collect(),
            orders_created,
            payments_created,
            timeline: self.timeline,
        }
    }
}

/// Orders and history rows host `h`'s districts gained since the load
/// (D_NEXT_O_ID and D_NEXT_H_SLOT past their initial values).
fn created(mem: &PodMemory, h: u16) -> (u64, u64) {
    use skiff_pod_memory::memory::layout::Array;
    use skiff_pod_memory::tpcc::schema::{
        CUSTOMERS_PER_DISTRICT, DISTRICTS_PER_WAREHOUSE, District, ORDERS_PER_DISTRICT_INITIAL,
    };
    let (mut orders, mut payments) = (0, 0);
    for w in mem.layout.warehouses_of(h) {
        for d in 0..DISTRICTS_PER_WAREHOUSE as u64 {
            let loc = mem.layout.row(Array::District, w, d);
            let row: District = mem.mapping_of(loc, h).read(loc.off);
            orders += row
                .d_next_o_id
                .saturating_sub(ORDERS_PER_DISTRICT_INITIAL + 1) as u64;
            payments += row.d_next_h_slot.saturating_sub(CUSTOMERS_PER_DISTRICT) as u64;
        }
    }
    (orders, payments)
}
