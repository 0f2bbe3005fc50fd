//! A host: maps the pod file and its own partition, runs worker threads (and
//! optionally an auditor) from the coordinator's start signal to its stop
//! signal, and leaves its statistics in its slot of the coherent region.
//!
//! In (c) and (d) a host never talks to another host. In (e) it also runs a
//! mover that answers other hosts' requests for its tuples; in (a) and (b)
//! it runs a participant per remote worker that executes their remote parts
//! (`remote`).

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::arch::dynamic::Mover;
use crate::arch::remote;
use crate::cc::txn::{Txn, TxnError, TxnResult, age_now};
use crate::durability::checkpoint::{self, Gate};
use crate::durability::lease::{self, HostRecord};
use crate::durability::wal::{Wal, WalCounters};
use crate::run::live::Tally;
use crate::tpcc::audit::audit_warehouse;
use crate::tpcc::delivery::deliver_district;
use crate::tpcc::neworder::new_order;
use crate::tpcc::order_status::order_status;
use crate::tpcc::payment::payment;
use crate::tpcc::stock_level::stock_level;
use skiff_pod_memory::arch::{Arch, Place};
use skiff_pod_memory::constants::TXN_ATTEMPTS_MAX;
use skiff_pod_memory::error::{PodError, Result};
use skiff_pod_memory::memory::files::wal_path;
use skiff_pod_memory::memory::futex;
use skiff_pod_memory::memory::header::{Control, state};
use skiff_pod_memory::memory::layout::Array;
use skiff_pod_memory::memory::live::{Figures, HostLive};
use skiff_pod_memory::memory::params::Mix;
use skiff_pod_memory::memory::{Parts, PodMemory};
use skiff_pod_memory::stats::ProtocolCounters;
use skiff_pod_memory::stats::{
    HOST_STATS_BYTES, Histogram, HostStatsRaw, TxnCounters, WorkerStats, thread_cpu_ns,
};
use skiff_pod_memory::tpcc::input::{
    DeliveryInput, InputGen, NewOrderInput, OrderStatusInput, PaymentInput, StockLevelInput,
};
use skiff_pod_memory::tpcc::random::Rng;
use skiff_pod_memory::tpcc::schema::DISTRICTS_PER_WAREHOUSE;
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;

/// How long a host waits for the start signal before giving up.
const HOST_START_TIMEOUT: Duration = Duration::from_secs(120);
/// A host stops by itself this long after its run should have ended, in case
/// the coordinator died without saying so.
const HOST_STOP_GRACE: Duration = Duration::from_secs(30);
/// The auditor's pause between audits (a futex sleep, woken by the stop).
const AUDIT_PAUSE: Duration = Duration::from_millis(1);

/// Arguments of a host process: all else is in the pod header.
#[derive(Clone, Debug)]
pub struct HostArgs {
    pub shm_path: PathBuf,
    pub host: u16,
    /// The host crashed and is restarting: rebuild its partition from the
    /// logs and rejoin the running pod (`--recover`).
    pub recover: bool,
}

impl HostArgs {
    /// Parses `--shm PATH --host N [--recover]` (what
    /// [`crate::Launch::Processes`] appends), ignoring nothing else.
    pub fn parse(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<HostArgs> {
        let mut shm = None;
        let mut host = None;
        let mut recover = false;
        let mut it = args.into_iter();
        while let Some(a) = it.next() {
            match a.to_str() {
                Some("--shm") => shm = it.next().map(PathBuf::from),
                Some("--recover") => recover = true,
                Some("--host") => {
                    host = it
                        .next()
                        .and_then(|v| v.to_str().and_then(|s| s.parse::<u16>().ok()))
                }
                _ => return Err(PodError::Config(format!("unexpected host argument {a:?}"))),
            }
        }
        match (shm, host) {
            (Some(shm_path), Some(host)) => Ok(HostArgs {
                shm_path,
                host,
                recover,
            }),
            _ => Err(PodError::Config("a host needs --shm PATH --host N".into())),
        }
    }
}

/// The body of a host process (or host thread): attach, run, report. Its
/// statistics (or its error) go to its slot in the coherent region, so the
/// coordinator learns the outcome even from a process it cannot join.
pub fn host_main(args: &HostArgs) -> Result<()> {
    let mut mem = if args.recover {
        PodMemory::open_restarting(&args.shm_path, args.host)?
    } else {
        PodMemory::open(&args.shm_path, true, Parts::Own(args.host))?
    };
    // Checkpoints copy only the pages written since the last one: a fresh
    // partition is the load's checkpoint, a restarted one is cleared once
    // its checkpoint is copied in ([`rebuild_partition`]).
    if let Some(Some(part)) = mem.parts.get_mut(args.host as usize) {
        part.track_writes();
    }
    let mem = mem;
    let control = mem.control();
    let result = if args.recover {
        rejoin(&mem, args.host)
    } else {
        run_host(&mem, args.host)
    };
    let raw = match &result {
        Ok((stats, elapsed)) => HostStatsRaw::from_stats(stats, elapsed.as_nanos() as u64),
        Err(e) => HostStatsRaw::failed(&e.to_string()),
    };
    mem.pod.write(
        mem.layout.host_stats_off + args.host as u64 * HOST_STATS_BYTES,
        &raw,
    );
    Control::count_in(control.hosts_done);
    result.map(|_| ())
}

fn run_host(mem: &PodMemory, host: u16) -> Result<(WorkerStats, Duration)> {
    // A pod written by a newer build may name an architecture this one
    // cannot run; refuse rather than run it as something else.
    mem.params().arch.require_implemented()?;
    mem.params().cc.require_implemented()?;
    let control = mem.control();
    let s = control.state();
    if s != state::LOADED {
        return Err(PodError::Busy(format!(
            "host {host} found the pod {}, not loaded",
            state::name(s)
        )));
    }
    // Shared nothing over TCP: listen before counting in, so every port is
    // published by the time the run starts.
    let listener = listen(mem, host)?;
    let wal = Wal::open(&wal_path(mem.pod.path(), host), true)?;
    HostRecord::of(mem, host).announce();
    Control::count_in(control.hosts_ready);
    let started = futex::wait_until(
        control.run_state,
        Instant::now() + HOST_START_TIMEOUT,
        HOST_START_TIMEOUT,
        |s| s != state::LOADED,
    );
    match started {
        None => return Err(PodError::Timeout(format!("host {host}: no start signal"))),
        Some(state::RUNNING) => {}
        // Stopped or failed before the start: nothing to run.
        Some(_) => return Ok((WorkerStats::default(), Duration::ZERO)),
    }
    run_workers(mem, host, &wal, listener.as_ref(), Instant::now())
}

/// Shared nothing over TCP: a listener for the other hosts' workers, its
/// port published in the pod (before the host is announced, so whoever
/// sees it ALIVE finds the port of this incarnation).
fn listen(mem: &PodMemory, host: u16) -> Result<Option<std::net::TcpListener>> {
    if mem.params().arch != Arch::SharedNothingTcp {
        return Ok(None);
    }
    let (l, port) = remote::listen().map_err(|reason| PodError::HostFailed { host, reason })?;
    let word = mem.pod.atomic_u32(mem.layout.port_word(host));
    word.store(port as u32, std::sync::atomic::Ordering::Release);
    Ok(Some(l))
}

/// Rebuilds restarted host `host`'s partition, which must be freshly
/// zeroed: its latest checkpoint, then its own log from the log's start
/// (the checkpoint's end, or earlier), front to back (`recovery`). In
/// shared nothing the log's prepared transactions count as their
/// distributed transactions ended, which those in doubt learn now (`remote`);
/// in (e) the home words of tuples it had moved forward to them again
/// (`dynamic`). Returns the number of log records read and rows written.
/// `wal` is the host's reopened log, where the outcomes of prepared
/// transactions that were in doubt are logged.
pub(crate) fn rebuild_partition(mem: &PodMemory, host: u16, wal: &Wal) -> Result<(u64, u64)> {
    if !mem.layout.has_partitions() {
        // (c): every row is in pod memory; nothing private was lost.
        return Ok((0, 0));
    }
    checkpoint::restore_checkpoint(mem, host)?;
    // The partition is its checkpoint now; the next one copies only what
    // replay and later transactions write.
    mem.part(host).forget_dirty();
    let outcomes = remote::settle_in_doubt(mem, host, wal)?;
    let replayed = crate::durability::recovery::replay_own_log(mem, host, &outcomes)?;
    if mem.layout.dynamic_slots() > 0 {
        crate::arch::dynamic::restore_home_words(mem, host);
    }
    Ok(replayed)
}

/// A restarted host: takes its record back (reclaiming its previous
/// incarnation's pod locks and writes if no survivor did), rebuilds its
/// partition from its latest checkpoint and its log (resolving prepared
/// transactions that were in doubt), opens its log after the last durable
/// record, listens again in (a), and, if the run is still on, runs its
/// workers until the stop.
fn rejoin(mem: &PodMemory, host: u16) -> Result<(WorkerStats, Duration)> {
    mem.params().arch.require_implemented()?;
    lease::take_over(mem, host, Instant::now() + HOST_START_TIMEOUT)?;
    let wal = Wal::open(&wal_path(mem.pod.path(), host), true)?;
    let started = Instant::now();
    let (records, rows) = rebuild_partition(mem, host, &wal)?;
    if mem.layout.dynamic_slots() > 0 {
        crate::arch::dynamic::reset_mailboxes(mem, host)
            .map_err(|reason| PodError::HostFailed { host, reason })?;
    }
    HostRecord::of(mem, host).note_rebuilt(started.elapsed(), records, rows);
    let listener = listen(mem, host)?;
    HostRecord::of(mem, host).announce();
    if mem.control().state() != state::RUNNING {
        return Ok((WorkerStats::default(), Duration::ZERO));
    }
    let start = Instant::now();
    run_workers(mem, host, &wal, listener.as_ref(), start)
}

/// Runs the host's workers (and auditor, mover, participants, lease
/// thread) from `start` until the stop signal.
fn run_workers(
    mem: &PodMemory,
    host: u16,
    wal: &Wal,
    listener: Option<&std::net::TcpListener>,
    start: Instant,
) -> Result<(WorkerStats, Duration)> {
    let hard_stop = start + Duration::from_millis(mem.params().duration_ms) + HOST_STOP_GRACE;
    let workers = mem.params().workers_per_host;
    let lease_stop = AtomicBool::new(false);
    let gate = Gate::default();
    let wal_base = OnceLock::new();
    let mut total = WorkerStats::default();
    let results: Vec<Result<WorkerStats>> = std::thread::scope(|s| {
        let (lease_stop, gate, wal_base) = (&lease_stop, &gate, &wal_base);
        let lease = s.spawn(move || lease::lease_thread(mem, host, lease_stop));
        let every = Duration::from_millis(mem.params().checkpoint_ms);
        let checkpoints = (!every.is_zero()).then(|| {
            s.spawn(move || {
                let c = checkpoint::checkpointer(mem, host, wal, gate, every, lease_stop)?;
                let mut stats = WorkerStats::default();
                stats.protocol.checkpoints = c.taken;
                stats.protocol.checkpoints_skipped = c.skipped;
                stats.protocol.checkpoint_pause_us_max = c.pause_max_us;
                Ok(stats)
            })
        });
        let handles: Vec<_> = (0..workers)
            .map(|w| s.spawn(move || worker(mem, host, wal, wal_base, gate, w, hard_stop)))
            .collect();
        let auditor = mem
            .params()
            .auditor
            .then(|| s.spawn(move || auditor(mem, host, wal, gate, hard_stop)));
        let participants = participants(s, mem, host, wal, gate, listener, hard_stop);
        let mover = (mem.layout.dynamic_slots() > 0).then(|| {
            std::thread::Builder::new()
                .name(format!("pod-mover-{host}"))
                .spawn_scoped(s, move || mover(mem, host, wal, gate, hard_stop))
        });
        let mut out: Vec<Result<WorkerStats>> =
            handles.into_iter().map(|h| join(host, h)).collect();
        if let Some(a) = auditor {
            out.push(join(host, a));
        }
        match mover {
            Some(Ok(m)) => out.push(join(host, m)),
            Some(Err(e)) => out.push(Err(PodError::io("mover thread", e))),
            None => {}
        }
        if let Some(p) = participants {
            out.push(join(host, p));
        }
        lease_stop.store(true, std::sync::atomic::Ordering::Release);
        if let Some(c) = checkpoints {
            out.push(join(host, c));
        }
        let lease = lease.join().unwrap_or_else(|_| {
            Err(PodError::HostFailed {
                host,
                reason: "the lease thread panicked".into(),
            })
        });
        out.push(lease.map(|()| WorkerStats::default()));
        out
    });
    for r in results {
        total.merge(&r?);
    }
    let (log, base) = (wal.counters(), wal_base.get().copied().unwrap_or_default());
    total.protocol.log_records += log.records - base.records;
    total.protocol.log_bytes += log.bytes - base.bytes;
    total.protocol.log_flushes += log.flushes - base.flushes;
    Ok((total, start.elapsed()))
}

fn join(
    host: u16,
    h: std::thread::ScopedJoinHandle<'_, Result<WorkerStats>>,
) -> Result<WorkerStats> {
    h.join().unwrap_or_else(|_| {
        Err(PodError::HostFailed {
            host,
            reason: "a worker thread panicked".into(),
        })
    })
}

/// Shared nothing: serves the other hosts' workers, one participant thread
/// each: a pod channel each in (b), for the whole run (a coordinator's
/// next incarnation reuses it); a TCP connection each in (a), accepted by
/// this thread until the run stops (a restarted coordinator connects
/// again). Their CPU time is the host's busy time.
fn participants<'s, 'm: 's>(
    s: &'s std::thread::Scope<'s, '_>,
    mem: &'m PodMemory,
    host: u16,
    wal: &'s Wal,
    gate: &'s Gate,
    listener: Option<&'s std::net::TcpListener>,
    hard_stop: Instant,
) -> Option<std::thread::ScopedJoinHandle<'s, Result<WorkerStats>>> {
    if !mem.layout.shared_nothing() {
        return None;
    }
    let p = mem.params();
    let failed = move |reason: String| PodError::HostFailed { host, reason };
    // A link returns the CPU time its participant used while measuring,
    // and the CXL traffic of its channel.
    type Served = Result<(u64, skiff_pod_memory::memory::cxl::CxlCounters), String>;
    let serve_one = move |link: Box<dyn FnOnce() -> Served + Send + 's>| {
        let (cpu_ns, cxl) = link().map_err(failed)?;
        Ok(WorkerStats {
            cpu_ns,
            cxl,
            ..WorkerStats::default()
        })
    };
    Some(s.spawn(move || {
        let mut handles = Vec::new();
        match listener {
            Some(l) => {
                let stopped = || mem.control().state() != state::RUNNING;
                while let Some(stream) = remote::accept(l, hard_stop, stopped).map_err(failed)? {
                    let link: Box<dyn FnOnce() -> Served + Send + 's> = Box::new(move || {
                        crate::run::participant::serve(
                            mem,
                            host,
                            wal,
                            gate,
                            remote::TcpServe(stream),
                        )
                    });
                    handles.push(s.spawn(move || serve_one(link)));
                }
            }
            None => {
                for g in (0..p.hosts).filter(|&g| g != host) {
                    for k in 0..p.workers_per_host {
                        let link: Box<dyn FnOnce() -> Served + Send + 's> = Box::new(move || {
                            let ch = remote::PodChannel::serving(mem, g, k, host, hard_stop);
                            crate::run::participant::serve(mem, host, wal, gate, ch)
                        });
                        handles.push(s.spawn(move || serve_one(link)));
                    }
                }
            }
        }
        let mut total = WorkerStats::default();
        for h in handles {
            total.merge(&join(host, h)?);
        }
        Ok(total)
    }))
}

/// Date-time stamps in Unix seconds; never 0, which means NULL.
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_secs().max(1))
}

enum Outcome {
    Committed,
    RolledBack,
    /// Attempts exhausted, or the run stopped while retrying.
    Abandoned,
}

/// Runs `body` until it commits, rolls back by request, or fails for good.
/// Each conflict aborts (undo, release) and retries the same input.
fn execute(
    txn: &mut Txn<'_>,
    control: &Control<'_>,
    counters: &mut TxnCounters,
    mut body: impl FnMut(&mut Txn<'_>) -> TxnResult<()>,
) -> std::result::Result<Outcome, TxnError> {
    // WAIT_DIE: retries keep the first attempt's age, so they grow old.
    let age = age_now();
    for _ in 0..TXN_ATTEMPTS_MAX {
        txn.begin(age);
        match body(txn) {
            Ok(()) => {
                txn.commit();
                if let Some(e) = txn.take_fatal() {
                    return Err(TxnError::Corrupt(e));
                }
                if txn.take_unavailable() {
                    counters.aborted += 1;
                    return Ok(Outcome::Abandoned);
                }
                return Ok(Outcome::Committed);
            }
            Err(TxnError::Conflict) => {
                txn.abort();
                counters.aborted += 1;
                if control.state() != state::RUNNING {
                    return Ok(Outcome::Abandoned);
                }
                // Let the holder finish; on 2 cores spinning would starve it.
                std::thread::yield_now();
            }
            Err(TxnError::Rollback) => {
                txn.abort();
                return Ok(Outcome::RolledBack);
            }
            Err(TxnError::Unavailable) => {
                txn.abort();
                counters.aborted += 1;
                return Ok(Outcome::Abandoned);
            }
            Err(fatal) => {
                txn.abort();
                return Err(fatal);
            }
        }
    }
    counters.gave_up += 1;
    Ok(Outcome::Abandoned)
}

/// Runs transactions until the stop. `wal_base`: the host's log counters
/// when the warm-up ended, taken by the first worker that sees it end.
fn worker(
    mem: &PodMemory,
    host: u16,
    wal: &Wal,
    wal_base: &OnceLock<WalCounters>,
    gate: &Gate,
    id: u16,
    hard_stop: Instant,
) -> Result<WorkerStats> {
    let params = mem.params();
    let inputs = InputGen {
        warehouses: params.warehouses,
        line_remote_p: params.line_remote_probability(),
        payment_remote_p: params.payment_remote_probability(),
        nurand: params.nurand,
    };
    let mut rng = Rng::derive(params.seed, 0x574F_524B ^ host as u64, id as u64);
    let home = home_warehouses(mem.layout.warehouses_of(host), params.workers_per_host, id);
    let control = mem.control();
    let mut txn = Txn::for_worker(mem, host, id);
    txn.attach_log(wal, true);
    let record = HostRecord::of(mem, host);
    if mem.layout.shared_nothing() {
        txn.connect_remote();
    }
    let mut stats = WorkerStats::default();
    let mut cpu_start = thread_cpu_ns();
    let mut window = control.window();
    let mut done = 0u64;
    let live = HostLive::of(mem, host);
    let mut tally = Tally::new();
    while control.state() == state::RUNNING {
        if window.restarted() {
            // The warm-up ended: what follows is what the run reports.
            stats = WorkerStats::default();
            cpu_start = thread_cpu_ns();
            txn.reset_counters();
            wal_base.get_or_init(|| wal.counters());
        }
        done += 1;
        if done.is_multiple_of(256) && Instant::now() > hard_stop {
            break;
        }
        let w = home[rng.uniform(0, home.len() as u64 - 1) as usize];
        let now = unix_now();
        let started = Instant::now();
        let kind = Kind::pick(params, &mut rng);
        let (misses_before, aborted_before) = (
            txn.cxl_counters().misses(),
            stats_of(&mut stats, kind).0.aborted,
        );
        gate.enter();
        let (outcome, remote) = run_one(
            &mut txn,
            &control,
            &mut stats,
            kind,
            || generate(&inputs, kind, &mut rng, w),
            now,
        );
        gate.leave();
        // Every attempt counts in the live figures, the last one before a
        // stop too, as it does in the report.
        tally.count(
            kind as usize,
            Figures {
                committed: matches!(outcome, Ok(Outcome::Committed)) as u64,
                aborted: stats_of(&mut stats, kind).0.aborted - aborted_before,
                misses: txn.cxl_counters().misses() - misses_before,
            },
        );
        tally.publish_due(&live, started);
        let (counters, latency) = stats_of(&mut stats, kind);
        match outcome {
            Ok(Outcome::Committed) => {
                // Durable: what a client of this terminal would be told.
                record.reported(kind as usize);
                counters.committed += 1;
                counters.remote += remote as u64;
                latency.record(started.elapsed().as_nanos() as u64);
            }
            Ok(Outcome::RolledBack) => {
                counters.rolled_back += 1;
                latency.record(started.elapsed().as_nanos() as u64);
            }
            Ok(Outcome::Abandoned) => {}
            Err(TxnError::Capacity(reason)) => {
                control.request_stop(&format!("host {host}: {reason}"));
                break;
            }
            Err(e) => {
                tally.publish(&live, Instant::now());
                return Err(PodError::Corrupt(format!("host {host} worker {id}: {e:?}")));
            }
        }
    }
    tally.publish(&live, Instant::now());
    stats.cxl = txn.cxl_counters();
    stats.cpu_ns = thread_cpu_ns() - cpu_start;
    stats.protocol = protocol_counters(&txn);
    Ok(stats)
}

/// The five TPC-C transactions; the index of each kind's reported count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    NewOrder = 0,
    Payment = 1,
    Delivery = 2,
    OrderStatus = 3,
    StockLevel = 4,
}

impl Kind {
    /// The next transaction of the run's mix.
    fn pick(params: &skiff_pod_memory::memory::params::Params, rng: &mut Rng) -> Kind {
        let r = rng.uniform(1, 100);
        match params.mix {
            Mix::NewOrderPayment if r <= params.new_order_pct as u64 => Kind::NewOrder,
            Mix::NewOrderPayment => Kind::Payment,
            // Clause 5.2.3's minimum shares, NewOrder taking the rest.
            Mix::Standard => match r {
                1..=45 => Kind::NewOrder,
                46..=88 => Kind::Payment,
                89..=92 => Kind::OrderStatus,
                93..=96 => Kind::Delivery,
                _ => Kind::StockLevel,
            },
        }
    }
}

/// One transaction's input.
enum Input {
    NewOrder(NewOrderInput),
    Payment(PaymentInput),
    OrderStatus(OrderStatusInput),
    Delivery(DeliveryInput),
    StockLevel(StockLevelInput),
}

/// The input of one transaction of `kind` at warehouse `w`.
fn generate(inputs: &InputGen, kind: Kind, rng: &mut Rng, w: u32) -> Input {
    match kind {
        Kind::NewOrder => Input::NewOrder(inputs.new_order(rng, w)),
        Kind::Payment => Input::Payment(inputs.payment(rng, w)),
        Kind::OrderStatus => Input::OrderStatus(inputs.order_status(rng, w)),
        Kind::Delivery => Input::Delivery(inputs.delivery(rng, w)),
        Kind::StockLevel => Input::StockLevel(inputs.stock_level(rng, w)),
    }
}

/// The counters and the latency histogram of `kind`'s transactions.
fn stats_of(stats: &mut WorkerStats, kind: Kind) -> (&mut TxnCounters, &mut Histogram) {
    match kind {
        Kind::NewOrder => (&mut stats.new_order, &mut stats.new_order_latency),
        Kind::Payment => (&mut stats.payment, &mut stats.payment_latency),
        Kind::OrderStatus => (&mut stats.order_status, &mut stats.order_status_latency),
        Kind::Delivery => (&mut stats.delivery, &mut stats.delivery_latency),
        Kind::StockLevel => (&mut stats.stock_level, &mut stats.stock_level_latency),
    }
}

/// Runs one transaction of `kind` to its outcome; also whether it touched
/// a remote warehouse. The same transaction code in every architecture.
fn run_one(
    txn: &mut Txn<'_>,
    control: &Control<'_>,
    stats: &mut WorkerStats,
    kind: Kind,
    input: impl FnOnce() -> Input,
    now: u64,
) -> (std::result::Result<Outcome, TxnError>, bool) {
    let counters = stats_of(stats, kind).0;
    match input() {
        Input::NewOrder(i) => (
            execute(txn, control, counters, |t| {
                new_order(t, &i, now).map(|_| ())
            }),
            !i.all_local(),
        ),
        Input::Payment(i) => (
            execute(txn, control, counters, |t| payment(t, &i, now).map(|_| ())),
            i.c_w_id != i.w_id,
        ),
        Input::OrderStatus(i) => (
            execute(txn, control, counters, |t| order_status(t, &i).map(|_| ())),
            false,
        ),
        Input::StockLevel(i) => (
            execute(txn, control, counters, |t| stock_level(t, &i).map(|_| ())),
            false,
        ),
        Input::Delivery(i) => (deliver(txn, control, counters, &i, now), false),
    }
}

/// Delivery: ten database transactions, one per district (clause 2.7.4.2
/// allows it); the business transaction commits once all ten did.
fn deliver(
    txn: &mut Txn<'_>,
    control: &Control<'_>,
    counters: &mut TxnCounters,
    input: &DeliveryInput,
    now: u64,
) -> std::result::Result<Outcome, TxnError> {
    for d_id in 1..=DISTRICTS_PER_WAREHOUSE {
        let o = execute(txn, control, counters, |t| {
            deliver_district(t, input, d_id, now).map(|_| ())
        })?;
        if !matches!(o, Outcome::Committed) {
            return Ok(o);
        }
    }
    Ok(Outcome::Committed)
}

fn protocol_counters(txn: &Txn<'_>) -> ProtocolCounters {
    let side = txn.side_counters();
    ProtocolCounters {
        waits: side.waits,
        messages: side.messages,
        asks: side.asks,
        ..ProtocolCounters::default()
    }
}

/// Pasha dynamic: the host's mover, which serves other hosts' requests and
/// moves tuples back. Its CPU time and CXL traffic are the host's.
fn mover(
    mem: &PodMemory,
    host: u16,
    wal: &Wal,
    gate: &Gate,
    hard_stop: Instant,
) -> Result<WorkerStats> {
    let m = Mover::new(mem, host)
        .with_log(wal)
        .run(gate, hard_stop)
        .map_err(|reason| PodError::HostFailed { host, reason })?;
    Ok(WorkerStats {
        cxl: m.cxl,
        cpu_ns: m.cpu_ns,
        protocol: ProtocolCounters {
            served: m.requests,
            moved_in: m.moved_in,
            moved_back: m.moved_back,
            busy: m.busy,
            moved_again: m.moved_again,
            cooled: m.cooled,
            mover_rounds: m.rounds,
            mover_cpu_ns: m.cpu_ns,
            move_in_ns: m.move_in_ns,
            move_back_ns: m.move_back_ns,
            ..ProtocolCounters::default()
        },
        ..WorkerStats::default()
    })
}

/// The home warehouses of worker `id` among its host's `range`. Like the
/// spec's terminals, a worker keeps to its own warehouses, so two workers of
/// one host share a warehouse only when there are more workers than
/// warehouses (otherwise NO_WAIT aborts them on each other's warehouse row).
fn home_warehouses(range: std::ops::RangeInclusive<u32>, workers: u16, id: u16) -> Vec<u32> {
    let (first, count) = (*range.start(), range.end() - range.start() + 1);
    let workers = workers as u32;
    if workers <= count {
        range
            .filter(|w| (w - first) % workers == id as u32)
            .collect()
    } else {
        vec![first + id as u32 % count]
    }
}

/// Audits W_YTD = sum(D_YTD) round-robin over the warehouses this host can
/// reach: all of them when WAREHOUSE and DISTRICT are in pod memory, its own
/// otherwise. Counts only audit outcomes (it is an observer, not load).
fn auditor(
    mem: &PodMemory,
    host: u16,
    wal: &Wal,
    gate: &Gate,
    hard_stop: Instant,
) -> Result<WorkerStats> {
    let layout = &mem.layout;
    let shared = layout.place_of(Array::Warehouse) == Place::Pod
        && layout.place_of(Array::District) == Place::Pod;
    let targets: Vec<u32> = if shared {
        (1..=mem.params().warehouses).collect()
    } else {
        layout.warehouses_of(host).collect()
    };
    let control = mem.control();
    // The auditor's mailbox (in (e)) follows the workers'.
    let mut txn = Txn::for_worker(mem, host, mem.params().workers_per_host);
    txn.attach_log(wal, true);
    let mut stats = WorkerStats::default();
    let mut window = control.window();
    let mut next = host as usize;
    while control.state() == state::RUNNING && Instant::now() < hard_stop {
        if window.restarted() {
            stats = WorkerStats::default();
            txn.reset_counters();
        }
        let w = targets[next % targets.len()];
        next += 1;
        let mut holds = true;
        let mut counters = TxnCounters::default();
        // Its shared locks are in the partition too.
        gate.enter();
        let outcome = execute(&mut txn, &control, &mut counters, |t| {
            holds = audit_warehouse(t, w)?;
            Ok(())
        });
        gate.leave();
        stats.audit.aborted += counters.aborted;
        match outcome {
            Ok(Outcome::Committed) => {
                stats.audit.committed += 1;
                stats.audit.violations += !holds as u64;
            }
            Ok(_) => {}
            Err(e) => return Err(PodError::Corrupt(format!("host {host} auditor: {e:?}"))),
        }
        futex::wait(control.run_state, state::RUNNING, AUDIT_PAUSE);
    }
    stats.protocol.waits = txn.side_counters().waits;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_split_their_hosts_warehouses() {
        assert_eq!(home_warehouses(3..=7, 2, 0), vec![3, 5, 7]);
        assert_eq!(home_warehouses(3..=7, 2, 1), vec![4, 6]);
        assert_eq!(home_warehouses(3..=4, 3, 2), vec![3]);
        assert_eq!(home_warehouses(5..=5, 1, 0), vec![5]);
    }

    #[test]
    fn live_figures_name_the_kinds_in_their_order() {
        use crate::run::live::KIND_NAMES;
        assert_eq!(KIND_NAMES[Kind::NewOrder as usize], "new_order");
        assert_eq!(KIND_NAMES[Kind::Payment as usize], "payment");
        assert_eq!(KIND_NAMES[Kind::Delivery as usize], "delivery");
        assert_eq!(KIND_NAMES[Kind::OrderStatus as usize], "order_status");
        assert_eq!(KIND_NAMES[Kind::StockLevel as usize], "stock_level");
    }

    #[test]
    fn host_args_parse() {
        let a = HostArgs::parse(["--shm", "/dev/shm/p", "--host", "3"].map(Into::into)).unwrap();
        assert_eq!(a.host, 3);
        assert_eq!(a.shm_path, PathBuf::from("/dev/shm/p"));
        assert!(HostArgs::parse(["--shm", "/x"].map(Into::into)).is_err());
        assert!(HostArgs::parse(["--bogus"].map(Into::into)).is_err());
    }
}
