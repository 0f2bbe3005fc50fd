//! End-to-end runs of the pod through the public API: load, hosts as threads
//! or as real processes, the workload for about a second, then `check`.
//! Every run ends with the twelve consistency conditions.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use skiff_pod::{
    Arch, CcProtocol, CheckConfig, HostCommand, Launch, PodConfig, PodError, RunReport,
};

/// A unique pod path in /dev/shm, removed with its partitions on drop.
struct Pod(PathBuf);

impl Pod {
    fn new(tag: &str) -> Pod {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        Pod(dir.join(format!("skiff-pod-it-{tag}-{}-{n}", std::process::id())))
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = skiff_pod::remove_pod(&self.0);
    }
}

fn config(pod: &Pod, arch: Arch, hosts: u16, warehouses: u32, workers: u16) -> PodConfig {
    let mut c = PodConfig::new(&pod.0, hosts, warehouses);
    c.arch = arch;
    c.workers_per_host = workers;
    c.duration = Duration::from_millis(1_000);
    c.auditor = true;
    c
}

fn processes() -> Launch {
    Launch::Processes(HostCommand {
        program: env!("CARGO_BIN_EXE_skiff-pod-host").into(),
        args: vec![],
    })
}

/// Runs, prints the report, checks all twelve conditions, returns the report.
fn run_and_check(cfg: &PodConfig) -> RunReport {
    let report = skiff_pod::run(cfg).unwrap_or_else(|e| panic!("run failed: {e}"));
    eprintln!("{report}");
    let check = skiff_pod::check(&CheckConfig {
        shm_path: cfg.shm_path.clone(),
    })
    .unwrap();
    eprintln!("{check}");
    assert!(check.passed(), "{check}");
    assert!(
        report.new_order.committed > 0 && report.payment.committed > 0,
        "{report}"
    );
    assert_eq!(report.audit.violations, 0, "{report}");
    // The auditor ran. Under NO_WAIT it commits only when no worker holds
    // any of the 11 rows it reads, so on a loaded machine it may not commit
    // at all in a second; `auditor_sees_consistent_ytd_under_payments` makes
    // it commit hundreds of times.
    assert!(
        report.audit.committed + report.audit.aborted > 0,
        "{report}"
    );
    assert_eq!(report.ended_early, None);
    // Every committed NewOrder is exactly one order beyond the 3,000 loaded.
    let orders = check.rows.orders;
    assert_eq!(
        orders,
        cfg.warehouses as u64 * 30_000 + report.new_order.committed
    );
    assert_eq!(
        check.rows.history,
        cfg.warehouses as u64 * 30_000 + report.payment.committed
    );
    report
}

#[test]
fn one_host_threads_pasha_static_all_private() {
    let pod = Pod::new("d1");
    let report = run_and_check(&config(&pod, Arch::PashaStatic, 1, 2, 2));
    // One host: nothing is shared, so nothing is CXL traffic.
    assert_eq!(report.cxl.misses(), 0, "{report}");
    // The spec's 1% of NewOrders roll back (and are not committed).
    let n = &report.new_order;
    let share = n.rolled_back as f64 / (n.committed + n.rolled_back) as f64;
    assert!(
        n.committed < 5_000 || (0.004..0.02).contains(&share),
        "{report}"
    );
}

#[test]
fn one_host_threads_shared_everything() {
    let pod = Pod::new("c1");
    let report = run_and_check(&config(&pod, Arch::SharedEverything, 1, 2, 2));
    assert!(report.cxl.data_misses > report.committed, "{report}");
    assert!(report.cxl.coherent_misses > 0);
    assert!(report.modeled_committed_per_s < report.committed_per_s);
}

#[test]
fn two_host_processes_shared_everything() {
    let pod = Pod::new("c2");
    let mut cfg = config(&pod, Arch::SharedEverything, 2, 2, 1);
    cfg.launch = processes();
    // Six times the spec's remote accesses: hosts contend on each other's rows.
    cfg.multi_warehouse_pct = 60.0;
    let report = run_and_check(&cfg);
    assert!(
        report.payment.remote > 0 && report.new_order.remote > 0,
        "{report}"
    );
    // Every pod tuple starts invalid in every host's cache, and remote writes
    // invalidate it again: reads of pod rows flush first.
    assert!(report.cxl.flushes > 0, "{report}");
    assert_eq!(report.messages, 0);
}

#[test]
fn two_host_processes_pasha_static() {
    let pod = Pod::new("d2");
    let mut cfg = config(&pod, Arch::PashaStatic, 2, 2, 1);
    cfg.launch = processes();
    cfg.multi_warehouse_pct = 60.0;
    let report = run_and_check(&cfg);
    assert!(report.payment.remote > 0, "{report}");
    // Only CUSTOMER and STOCK are in pod memory.
    assert!(report.cxl.misses() > 0, "{report}");
}

#[test]
fn pasha_static_without_remote_accesses_shares_nothing() {
    let pod = Pod::new("d0");
    let mut cfg = config(&pod, Arch::PashaStatic, 2, 2, 1);
    cfg.multi_warehouse_pct = 0.0;
    let report = run_and_check(&cfg);
    assert_eq!(report.cxl.misses(), 0, "{report}");
    assert_eq!(report.payment.remote + report.new_order.remote, 0);
}

/// More hosts than cores, as a correctness run (SKIFF_SLOW_TESTS=1).
#[test]
fn four_host_processes_shared_everything_slow() {
    if std::env::var_os("SKIFF_SLOW_TESTS").is_none() {
        eprintln!("skipped: set SKIFF_SLOW_TESTS=1");
        return;
    }
    let pod = Pod::new("c4");
    let mut cfg = config(&pod, Arch::SharedEverything, 4, 4, 1);
    cfg.launch = processes();
    cfg.multi_warehouse_pct = 60.0;
    cfg.duration = Duration::from_secs(3);
    run_and_check(&cfg);
}

#[test]
fn two_host_processes_pasha_dynamic_moves_tuples_both_ways() {
    let pod = Pod::new("e2");
    let mut cfg = config(&pod, Arch::PashaDynamic, 2, 2, 1);
    cfg.launch = processes();
    cfg.multi_warehouse_pct = 60.0;
    // A small pool: the clock must move tuples back to make room.
    cfg.dynamic_slots_per_host = Some(64);
    let report = run_and_check(&cfg);
    let m = &report.movement;
    assert!(
        report.payment.remote > 0 && report.new_order.remote > 0,
        "{report}"
    );
    assert!(m.asks > 0 && m.moved_in > 0 && m.moved_back > 0, "{report}");
    assert!(m.served >= m.moved_in, "{report}");
    // Every request and every reply is a message.
    assert_eq!(report.messages, 2 * m.asks, "{report}");
    // Only moved tuples are in pod memory: far fewer misses than (d) has.
    assert!(report.cxl.misses() > 0, "{report}");
}

/// A warm-up runs transactions (they are in the database afterwards) but
/// none of its work is in the report: the figures cover only `duration`
/// after it, in every architecture alike.
#[test]
fn a_warm_up_runs_transactions_that_the_report_leaves_out() {
    for arch in [
        Arch::PashaStatic,
        Arch::PashaDynamic,
        Arch::SharedNothingCxl,
    ] {
        let pod = Pod::new("warm");
        let mut cfg = config(&pod, arch, 2, 2, 1);
        cfg.multi_warehouse_pct = 60.0;
        cfg.auditor = false;
        cfg.warmup = Duration::from_millis(800);
        cfg.duration = Duration::from_millis(400);
        let report = skiff_pod::run(&cfg).unwrap_or_else(|e| panic!("run failed: {e}"));
        eprintln!("{report}");
        let check = skiff_pod::check(&CheckConfig {
            shm_path: cfg.shm_path.clone(),
        })
        .unwrap();
        assert!(check.passed(), "{check}");
        assert_eq!(report.warmup_s, 0.8, "{report}");
        assert!((0.4..0.8).contains(&report.elapsed_s), "{report}");
        assert!(report.new_order.committed > 0, "{report}");
        // The warm-up's orders are in the tables, not in the report.
        let measured = 2 * 30_000 + report.new_order.committed;
        assert!(
            check.rows.orders > measured,
            "{} orders: {report}",
            check.rows.orders
        );
        assert!(report.worker_cpu_s < 0.8 * 2.0, "{report}");
    }
    // Warm-up and a killed host do not mix (the fault's times are from the
    // start).
    let pod = Pod::new("warm-kill");
    let mut cfg = config(&pod, Arch::PashaStatic, 2, 2, 1);
    cfg.launch = processes();
    cfg.warmup = Duration::from_secs(1);
    cfg.fault = Some(skiff_pod::HostFault {
        host: 1,
        kill_after: Duration::from_millis(200),
        restart_after: Duration::from_millis(200),
    });
    let e = skiff_pod::run(&cfg).unwrap_err().to_string();
    assert!(e.contains("warm-up"), "{e}");
}

#[test]
fn pasha_dynamic_with_one_host_never_moves_anything() {
    let pod = Pod::new("e1");
    let report = run_and_check(&config(&pod, Arch::PashaDynamic, 1, 2, 2));
    assert_eq!(report.cxl.misses(), 0, "{report}");
    assert_eq!(report.messages, 0, "{report}");
}

#[test]
fn wait_die_runs_every_architecture_consistently() {
    for arch in [
        Arch::SharedEverything,
        Arch::PashaStatic,
        Arch::PashaDynamic,
    ] {
        let pod = Pod::new("wd");
        // Two workers on one warehouse per host: they conflict on it.
        let mut cfg = config(&pod, arch, 2, 2, 2);
        cfg.cc = CcProtocol::WaitDie;
        cfg.multi_warehouse_pct = 60.0;
        cfg.duration = Duration::from_millis(700);
        let report = run_and_check(&cfg);
        assert_eq!(report.cc, CcProtocol::WaitDie);
        assert!(report.lock_waits > 0, "{report}");
    }
}

/// Shared nothing: a remote tuple is locked and written at its owner, and
/// a transaction with one commits by two-phase commit.
#[test]
fn two_host_processes_shared_nothing_two_phase_commit() {
    for arch in [Arch::SharedNothingTcp, Arch::SharedNothingCxl] {
        let pod = Pod::new("ab");
        let mut cfg = config(&pod, arch, 2, 2, 1);
        cfg.launch = processes();
        cfg.multi_warehouse_pct = 60.0;
        cfg.duration = Duration::from_millis(800);
        let report = run_and_check(&cfg);
        assert!(
            report.payment.remote > 0 && report.new_order.remote > 0,
            "{report}"
        );
        // A remote Payment: LOCK, PREPARE, COMMIT, each a request and a
        // reply. Local transactions send nothing.
        assert!(report.messages >= 6 * report.payment.remote, "{report}");
        match arch {
            Arch::SharedNothingTcp => assert_eq!(
                report.cxl.misses(),
                0,
                "shared nothing over TCP touches no pod memory: {report}"
            ),
            // Every message crosses pod memory: the writer writes its lines
            // back and the reader loads them from CXL memory (at least one
            // line each), and both touch the channel's control line.
            _ => {
                assert!(report.cxl.data_misses >= report.messages, "{report}");
                assert!(report.cxl.writebacks >= report.messages, "{report}");
                assert!(report.cxl.coherent_misses > 0, "{report}");
            }
        }
    }
}

#[test]
fn shared_nothing_under_wait_die_with_two_workers() {
    let pod = Pod::new("ab-wd");
    let mut cfg = config(&pod, Arch::SharedNothingCxl, 2, 2, 2);
    cfg.cc = CcProtocol::WaitDie;
    cfg.multi_warehouse_pct = 60.0;
    cfg.duration = Duration::from_millis(600);
    run_and_check(&cfg);
}

#[test]
fn check_refuses_missing_and_foreign_files() {
    let pod = Pod::new("foreign");
    let cfg = CheckConfig {
        shm_path: pod.0.clone(),
    };
    assert!(matches!(skiff_pod::check(&cfg), Err(PodError::Io { .. })));
    std::fs::write(&pod.0, vec![7u8; 8192]).unwrap();
    let err = skiff_pod::check(&cfg).unwrap_err();
    assert!(matches!(err, PodError::BadPodFile { .. }), "{err}");
    assert!(err.to_string().contains("magic"), "{err}");
}

#[test]
fn a_host_process_that_cannot_start_fails_the_run_cleanly() {
    let pod = Pod::new("badhost");
    let mut cfg = config(&pod, Arch::SharedEverything, 2, 2, 1);
    // A host command that exits at once without attaching.
    cfg.launch = Launch::Processes(HostCommand {
        program: "/bin/false".into(),
        args: vec![],
    });
    let err = skiff_pod::run(&cfg).unwrap_err();
    assert!(matches!(err, PodError::HostFailed { .. }), "{err}");
}

#[test]
fn a_full_district_stops_the_run_early_and_consistently() {
    let pod = Pod::new("full");
    let mut cfg = config(&pod, Arch::SharedEverything, 1, 1, 1);
    cfg.auditor = false;
    // Room for 1,000 orders and payments per district beyond the load.
    cfg.orders_per_district_max = Some(4_000);
    cfg.duration = Duration::from_secs(60);
    let report = skiff_pod::run(&cfg).unwrap();
    eprintln!("{report}");
    let why = report.ended_early.clone().expect("the run must end early");
    assert!(why.contains("slots"), "{why}");
    assert!(report.elapsed_s < 30.0, "{report}");
    let check = skiff_pod::check(&CheckConfig {
        shm_path: cfg.shm_path.clone(),
    })
    .unwrap();
    assert!(check.passed(), "{check}");
    assert_eq!(check.rows.orders, 30_000 + report.new_order.committed);
}

/// Hosts that report and exit before the others count in are done, not
/// dead: eight hosts on two cores finish at very different times.
#[test]
fn eight_hosts_finishing_at_different_times_all_report() {
    let pod = Pod::new("eight");
    let mut cfg = config(&pod, Arch::PashaStatic, 8, 8, 1);
    cfg.duration = Duration::from_millis(300);
    cfg.multi_warehouse_pct = 60.0;
    run_and_check(&cfg);
}

/// Eight hosts with movers, and with 56 participants each way over TCP.
#[test]
fn eight_hosts_pasha_dynamic_and_shared_nothing_slow() {
    if std::env::var_os("SKIFF_SLOW_TESTS").is_none() {
        eprintln!("skipped: set SKIFF_SLOW_TESTS=1");
        return;
    }
    for arch in [
        Arch::PashaDynamic,
        Arch::SharedNothingTcp,
        Arch::SharedNothingCxl,
    ] {
        let pod = Pod::new("eight-e");
        let mut cfg = config(&pod, arch, 8, 8, 1);
        cfg.duration = Duration::from_millis(500);
        cfg.multi_warehouse_pct = 60.0;
        run_and_check(&cfg);
    }
}

/// Kills host `killed` with SIGKILL mid-run, restarts it, and checks what
/// durability and partial failure promise: survivors reclaimed the dead
/// host's locks and kept committing, the restarted host rebuilt its
/// partition and committed again, no commit a host reported was lost, and
/// all twelve conditions hold.
fn kill_and_restart(
    tag: &str,
    arch: Arch,
    cc: CcProtocol,
    mix: skiff_pod::Mix,
    killed: u16,
) -> RunReport {
    kill_and_restart_with(tag, arch, cc, mix, killed, |_| {})
}

fn kill_and_restart_with(
    tag: &str,
    arch: Arch,
    cc: CcProtocol,
    mix: skiff_pod::Mix,
    killed: u16,
    tweak: impl FnOnce(&mut PodConfig),
) -> RunReport {
    // One kill test at a time: each runs two host processes and a rebuild
    // that takes seconds in a debug build; several at once on two cores
    // can starve the restarted host until the run is over.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let pod = Pod::new(tag);
    let mut cfg = config(&pod, arch, 2, 4, 1);
    cfg.cc = cc;
    cfg.mix = mix;
    cfg.launch = processes();
    cfg.auditor = false;
    cfg.multi_warehouse_pct = 60.0;
    // The restarted host rebuilds its partition (two warehouses loaded
    // again, then the logs replayed) before it rejoins: seconds in a debug
    // build with other tests running, so the run leaves it room.
    cfg.duration = Duration::from_millis(10_000);
    cfg.fault = Some(skiff_pod::HostFault {
        host: killed,
        kill_after: Duration::from_millis(800),
        restart_after: Duration::from_millis(1_200),
    });
    tweak(&mut cfg);
    let report = skiff_pod::run(&cfg).unwrap_or_else(|e| panic!("run failed: {e}"));
    eprintln!("{report}");
    let check = skiff_pod::check(&CheckConfig {
        shm_path: cfg.shm_path.clone(),
    })
    .unwrap();
    eprintln!("{check}");
    assert!(check.passed(), "{check}");
    let f = report.fault.clone().expect("a fault report");
    // A survivor (not the restarted host itself) reclaimed the dead host.
    assert!(f.reclaimed_s.is_some(), "{report}");
    assert_ne!(f.reclaim.by, killed as u32, "{report}");
    // Survivors kept committing after the reclaim.
    assert!(f.survivors_committed_after_reclaim > 0, "{report}");
    // The restarted host rejoined and committed.
    assert!(f.restarted_host_committed > 0, "{report}");
    // No reported commit was lost: each NewOrder a host reported is an
    // order in its districts, each Payment a history row.
    for h in 0..2 {
        assert!(
            f.orders_created[h] >= f.reported[h][0],
            "host {h}: {report}"
        );
        assert!(
            f.payments_created[h] >= f.reported[h][1],
            "host {h}: {report}"
        );
    }
    report
}

#[test]
fn killed_host_in_pasha_static_recovers_and_loses_nothing() {
    // The full mix: Delivery and the rest are recovered too.
    let mix = skiff_pod::Mix::Standard;
    let report = kill_and_restart("kill-d", Arch::PashaStatic, CcProtocol::NoWait, mix, 1);
    assert!(report.delivery.committed > 0, "{report}");
}

#[test]
fn killed_host_in_shared_everything_under_wait_die_recovers_and_loses_nothing() {
    let mix = skiff_pod::Mix::NewOrderPayment;
    kill_and_restart(
        "kill-c",
        Arch::SharedEverything,
        CcProtocol::WaitDie,
        mix,
        0,
    );
}

/// (e): the dead owner's moved tuples stay in its slots, where the
/// survivor keeps using them; requests to the dead owner's mover fail at
/// once; the restarted owner takes its slots back from the directory.
#[test]
fn killed_host_in_pasha_dynamic_recovers_and_loses_nothing() {
    let mix = skiff_pod::Mix::NewOrderPayment;
    let report = kill_and_restart("kill-e", Arch::PashaDynamic, CcProtocol::NoWait, mix, 1);
    assert!(report.movement.moved_in > 0, "{report}");
}

/// (a): the survivor's workers and participants find the dead host's TCP
/// connections broken: coordinators give up what needed it, participants
/// undo or, once prepared, follow the dead coordinator's log. The restarted
/// host resolves its in-doubt prepared transactions from the survivor's
/// log, listens on a new port, and the survivor connects again.
#[test]
fn killed_host_in_shared_nothing_over_tcp_recovers_and_loses_nothing() {
    let mix = skiff_pod::Mix::NewOrderPayment;
    let report = kill_and_restart("kill-a", Arch::SharedNothingTcp, CcProtocol::NoWait, mix, 1);
    assert!(report.payment.remote > 0, "{report}");
}

/// (b): the same over pod-memory channels, which outlive the dead host:
/// each end notices the other's incarnation is gone (its process, or a
/// restart), and the restarted host's participants serve the channels
/// again. Under WAIT_DIE, with the standard mix.
#[test]
fn killed_host_in_shared_nothing_over_pod_channels_recovers_and_loses_nothing() {
    let mix = skiff_pod::Mix::Standard;
    let report = kill_and_restart(
        "kill-b",
        Arch::SharedNothingCxl,
        CcProtocol::WaitDie,
        mix,
        0,
    );
    assert!(report.payment.remote > 0, "{report}");
}

/// Checkpoints every 300 ms: each host brings its checkpoint up to date
/// while its transactions are kept out, then drops the log before it. The
/// restarted host replays only the tail after its latest checkpoint: fewer
/// records than half the commits it had reported when it was killed
/// (NewOrder, Payment and each district of a Delivery log one record, so
/// it had logged more than that since the load). (e) also logs tuples it
/// moved home, so its own log and checkpoint are enough.
#[test]
fn checkpoints_during_the_run_shorten_the_replay_after_a_kill() {
    for arch in [Arch::PashaStatic, Arch::PashaDynamic] {
        let mix = skiff_pod::Mix::Standard;
        let report = kill_and_restart_with("ckpt", arch, CcProtocol::NoWait, mix, 1, |c| {
            c.checkpoint_every = Duration::from_millis(300);
            c.fault = c.fault.map(|f| skiff_pod::HostFault {
                kill_after: Duration::from_millis(2_500),
                ..f
            });
        });
        let f = report.fault.clone().expect("a fault report");
        assert!(report.log.checkpoints >= 2, "{report}");
        let reported_at_kill = f
            .timeline
            .iter()
            .rev()
            .find(|(t, _)| *t <= f.killed_at_s)
            .map_or(0, |(_, c)| c[1]);
        eprintln!(
            "{arch:?}: replayed {} records; host 1 had reported {reported_at_kill} commits; \
             {} records written in all",
            f.reclaim.rebuild_log_records, report.log.records
        );
        assert!(
            f.reclaim.rebuild_log_records * 2 < reported_at_kill,
            "{report}"
        );
    }
}

#[test]
fn a_fault_needs_host_processes() {
    let pod = Pod::new("fault-refused");
    let mut cfg = config(&pod, Arch::PashaStatic, 2, 2, 1);
    cfg.fault = Some(skiff_pod::HostFault {
        host: 1,
        kill_after: Duration::from_millis(100),
        restart_after: Duration::from_millis(100),
    });
    cfg.launch = Launch::Threads;
    assert!(matches!(skiff_pod::run(&cfg), Err(PodError::Config(_))));
}

/// The full TPC-C mix (45/43/4/4/4) in every architecture, hosts as
/// processes, remote-heavy: all five transaction types commit and the
/// twelve conditions hold (10, 11 and 12 now with deliveries).
#[test]
fn standard_mix_runs_every_architecture_consistently() {
    for arch in Arch::ALL {
        let pod = Pod::new(&format!("mix-{}", arch.letter()));
        let mut cfg = config(&pod, arch, 2, 2, 1);
        cfg.mix = skiff_pod::Mix::Standard;
        cfg.multi_warehouse_pct = 60.0;
        cfg.launch = processes();
        let report = run_and_check(&cfg);
        for (name, t) in [
            ("OrderStatus", &report.order_status),
            ("Delivery", &report.delivery),
            ("StockLevel", &report.stock_level),
        ] {
            assert!(t.committed > 0, "{name}: {report}");
        }
    }
}

#[test]
fn live_figures_grow_during_the_run_and_end_equal_to_the_report() {
    let pod = Pod::new("live");
    let mut cfg = config(&pod, Arch::SharedEverything, 2, 2, 2);
    cfg.mix = skiff_pod::Mix::Standard;
    // The auditor's reads are not a transaction type of the figures.
    cfg.auditor = false;
    cfg.multi_warehouse_pct = 60.0;
    let path = cfg.shm_path.clone();
    let report = std::thread::scope(|s| {
        let run = s.spawn(|| skiff_pod::run(&cfg));
        // A watcher sees the run going: some commits, then more.
        let mut seen: Vec<u64> = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !run.is_finished() && std::time::Instant::now() < deadline {
            if let Ok(live) = skiff_pod::live(&path)
                && live.state == "running"
            {
                let committed: u64 = live
                    .hosts
                    .iter()
                    .flat_map(|h| &h.kinds)
                    .map(|k| k.committed)
                    .sum();
                if committed > 0 {
                    seen.push(committed);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let report = run.join().unwrap().unwrap_or_else(|e| panic!("{e}"));
        assert!(
            seen.windows(2).all(|w| w[0] <= w[1]) && seen.first() < seen.last(),
            "running totals seen by the watcher: {seen:?}"
        );
        report
    });
    eprintln!("{report}");
    let live = skiff_pod::live(&path).unwrap();
    assert_eq!(live.state, "done");
    assert_eq!(live.hosts.len(), 2);
    assert!(
        live.hosts
            .iter()
            .all(|h| h.life == "alive" && h.incarnation == 1)
    );
    // Every worker published its last tally as it stopped: the totals are
    // the report's (no warm-up), per type, over both hosts.
    let total = |name: &str, f: fn(&skiff_pod::LiveKind) -> u64| -> u64 {
        live.hosts
            .iter()
            .flat_map(|h| &h.kinds)
            .filter(|k| k.name == name)
            .map(f)
            .sum()
    };
    for (name, txn) in [
        ("new_order", &report.new_order),
        ("payment", &report.payment),
        ("delivery", &report.delivery),
        ("order_status", &report.order_status),
        ("stock_level", &report.stock_level),
    ] {
        assert_eq!(total(name, |k| k.committed), txn.committed, "{name}");
        assert_eq!(total(name, |k| k.aborted), txn.aborted, "{name}");
        assert!(txn.committed > 0, "{name}: {report}");
    }
    let misses: u64 = live
        .hosts
        .iter()
        .flat_map(|h| &h.kinds)
        .map(|k| k.misses)
        .sum();
    assert_eq!(misses, report.cxl.misses(), "{report}");
    assert!(misses > 0);
    // Not a pod: a clear error, nothing created.
    let other = Pod::new("not-a-pod");
    std::fs::write(&other.0, vec![0u8; 8192]).unwrap();
    let e = skiff_pod::live(&other.0).unwrap_err().to_string();
    assert!(e.contains("not a usable pod file"), "{e}");
    let e = skiff_pod::live(&other.0.with_extension("missing")).unwrap_err();
    assert!(matches!(e, PodError::Io { .. }), "{e}");
}
