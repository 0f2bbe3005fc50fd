//! `skiff bench tpch --scale N --faults`: what a lost or a vacated worker
//! costs a distributed query (issue 42). On one `skiff serve` with N
//! workers over the hash-partitioned tables:
//!
//! - every query's warm latency, then the same query with a worker
//!   SIGKILLed at 25, 50 and 75% of that latency: the query runs again
//!   from the start without it (`skiff_coordinator::rerun`), and the figure
//!   is its latency against the undisturbed one, with the restarts
//!   `skiff.queries` counted;
//! - the vacate latency of [`VACATE_QUERIES`] distributed queries: from
//!   `skiff.remove_worker` of a worker they run on until it is removed,
//!   against how long those queries go on running when nothing is removed
//!   (what a removal waited for before queries ran again).
//!
//! - what committing stage outputs costs when nothing fails: every
//!   query's latency with `skiff.stage_checkpoints = all` and with
//!   `auto` against its undisturbed latency without
//!   (`skiff_node::checkpoints`);
//! - the same kills with `auto` checkpoints, at 25, 50 and 75% of the
//!   query's latency with them: the query runs its plan again over the
//!   stage outputs it committed (`skiff_coordinator::stage_reuse`),
//!   against its undisturbed latency without checkpoints.
//!
//! Re-running only the lost tasks while the rest of the query goes on is
//! not built: the recoveries measured are the restart from scratch and
//! the run again over committed outputs.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use datafusion::common::runtime::SpawnedTask;
use plotters::prelude::*;

use super::report;
use super::scale::{Bars, Cluster, grouped_bars, own_state, timed};
use crate::args::BenchArgs;
use crate::client::{Credentials, PgConn};
use crate::harness::{BenchError, QueryFile, Setup, publish, read_scripts, results_stem};

/// When a worker is killed, as a share of the query's undisturbed latency.
const KILL_AT: [f64; 3] = [0.25, 0.5, 0.75];

/// Distributed queries running when a worker is removed.
const VACATE_QUERIES: usize = 8;

/// How long a removed worker may take to show as removed.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(120);

/// How often a removal's end is looked for.
const POLL: Duration = Duration::from_millis(5);

/// The checkpoint modes measured when nothing fails; the kills with
/// checkpoints use the last.
const MODES: [&str; 2] = ["all", "auto"];

/// One query with a worker killed at `fraction` of its latency.
struct KillFigure {
    query: String,
    fraction: f64,
    /// With `skiff.stage_checkpoints = auto`: it runs again over what it
    /// committed, not from scratch.
    checkpoints: bool,
    /// Its undisturbed latency without checkpoints.
    base_ms: f64,
    ms: Option<f64>,
    restarts: u64,
    error: Option<String>,
}

/// One query with its stage outputs committed, nothing failing.
struct CheckpointFigure {
    query: String,
    /// `skiff.stage_checkpoints`.
    mode: &'static str,
    base_ms: f64,
    ms: Option<f64>,
    error: Option<String>,
}

/// One removal under [`VACATE_QUERIES`] running queries.
struct VacateFigure {
    /// The worker's vacate latency (`skiff.workers.vacate_ms`): until no
    /// query ran there any more.
    vacate_ms: f64,
    /// From `skiff.remove_worker` until the worker was removed (its
    /// blocks shipped to its partitions' next owners first).
    removed_ms: f64,
    /// From the same point until the last query answered.
    answered_ms: f64,
    /// The same queries, nothing removed: how long they still ran.
    undisturbed_ms: f64,
    failed: usize,
}

pub async fn run(
    setup: &Setup<'_>,
    args: &BenchArgs,
    queries: &[QueryFile],
    title: &str,
) -> Result<(), BenchError> {
    let workers = args.scale.iter().copied().max().unwrap_or(0);
    if workers < 2 {
        return Err(BenchError::Data(
            "--faults kills and removes workers of a distributed query: give --scale 2 or more"
                .into(),
        ));
    }
    let runs = setup.runs.max(2);
    eprintln!(
        "{title}: {} queries distributed over {workers} workers, a worker killed at {:?} \
         of each one's latency; then {VACATE_QUERIES} queries while a worker is removed, \
         {runs} rounds; data {}",
        queries.len(),
        KILL_AT,
        setup.data.display()
    );
    let state = own_state(&setup.data)?;
    let cluster = Cluster::start(setup, state.path(), workers).await?;
    let scripts = read_scripts(queries)?;
    let mut kills = Vec::new();
    let mut checkpoints = Vec::new();
    let mut slowest: Option<(f64, &str)> = None;
    for (name, script) in &scripts {
        let base_ms = match timed(&cluster, script, runs).await {
            Ok((ms, _)) => ms,
            Err(e) => {
                eprintln!("{name}: {e}");
                continue;
            }
        };
        if slowest.is_none_or(|(ms, _)| base_ms > ms) {
            slowest = Some((base_ms, script.as_str()));
        }
        let mut checkpointed_ms = None;
        for mode in MODES {
            let figure = checkpointed(&cluster, name, script, base_ms, runs, mode).await?;
            eprintln!(
                "{name}: {base_ms:.0} ms; with stage checkpoints {mode}: {}",
                figure.ms.map_or_else(
                    || format!("failed: {}", figure.error.as_deref().unwrap_or("")),
                    |ms| format!("{ms:.0} ms")
                )
            );
            // A kill lands at the same share of the run with checkpoints.
            checkpointed_ms = figure.ms;
            checkpoints.push(figure);
        }
        let modes = [(false, Some(base_ms)), (true, checkpointed_ms)];
        for (with_checkpoints, latency) in modes {
            let Some(latency) = latency else { continue };
            for fraction in KILL_AT {
                let kill = Kill {
                    name,
                    script,
                    base_ms,
                    at_ms: latency * fraction,
                    fraction,
                    checkpoints: with_checkpoints,
                };
                let figure = killed(&cluster, workers, kill).await?;
                eprintln!(
                    "{name}: {base_ms:.0} ms; killed at {:.0}%{}: {} ({} restarts)",
                    fraction * 100.0,
                    if with_checkpoints {
                        " with checkpoints"
                    } else {
                        ""
                    },
                    figure
                        .ms
                        .map_or_else(|| "failed".to_string(), |ms| format!("{ms:.0} ms")),
                    figure.restarts
                );
                kills.push(figure);
            }
        }
    }
    let mut vacates = Vec::new();
    if let Some((base_ms, script)) = slowest {
        for round in 0..runs {
            let figure = vacate(&cluster, workers, script, base_ms).await?;
            eprintln!(
                "vacate round {}: vacated in {:.0} ms, removed in {:.0} ms; the queries \
                 answered {:.0} ms after the removal began, {:.0} ms undisturbed; {} failed",
                round + 1,
                figure.vacate_ms,
                figure.removed_ms,
                figure.answered_ms,
                figure.undisturbed_ms,
                figure.failed
            );
            vacates.push(figure);
        }
    }
    let mut text = summary(title, workers, &kills, &vacates);
    text.push_str(&checkpoint_summary(title, &checkpoints));
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    let stem = format!("{}-faults", results_stem(args));
    let files = publish(
        &args.results,
        &stem,
        args.archive,
        csv(&kills, &checkpoints, &vacates).as_bytes(),
        |png| plot(png, title, &kills, &checkpoints, &vacates),
    )?;
    println!("\nwrote {}", files.join(", "));
    Ok(())
}

/// `script` timed with its stage outputs committed
/// (`skiff.stage_checkpoints = mode`), against `base_ms` without.
async fn checkpointed(
    cluster: &Cluster,
    name: &str,
    script: &str,
    base_ms: f64,
    runs: u32,
    mode: &'static str,
) -> Result<CheckpointFigure, BenchError> {
    cluster
        .execute(&format!("SET skiff.stage_checkpoints = '{mode}'"))
        .await?;
    let timed = timed(cluster, script, runs).await;
    cluster
        .execute("SET skiff.stage_checkpoints = 'off'")
        .await?;
    Ok(CheckpointFigure {
        query: name.to_string(),
        mode,
        base_ms,
        ms: timed.as_ref().ok().map(|(ms, _)| *ms),
        error: timed.err(),
    })
}

fn checkpoint_summary(title: &str, figures: &[CheckpointFigure]) -> String {
    let mut text = String::new();
    for mode in MODES {
        let of_mode: Vec<&CheckpointFigure> = figures.iter().filter(|f| f.mode == mode).collect();
        let done: Vec<&&CheckpointFigure> = of_mode.iter().filter(|f| f.ms.is_some()).collect();
        let with: f64 = done.iter().filter_map(|f| f.ms).sum();
        let without: f64 = done.iter().map(|f| f.base_ms).sum();
        let ratio = median(done.iter().filter_map(|f| f.ms.map(|ms| ms / f.base_ms)));
        text.push_str(&format!(
            "{title}: skiff.stage_checkpoints = {mode} when nothing fails: {with:.0} ms in all \
             against {without:.0} ms without ({}), median per query {}; {} of {} failed\n",
            if without > 0.0 {
                format!("{:.2}x", with / without)
            } else {
                "-".to_string()
            },
            ratio.map_or_else(|| "-".to_string(), |r| format!("{r:.2}x")),
            of_mode.len() - done.len(),
            of_mode.len()
        ));
        for f in of_mode.iter().filter(|f| f.error.is_some()) {
            text.push_str(&format!(
                "  {} with checkpoints {mode} failed: {}\n",
                f.query,
                f.error.as_deref().unwrap_or("")
            ));
        }
    }
    text
}

/// The newest query's id in `skiff.queries`.
async fn last_query(cluster: &Cluster) -> Result<u64, BenchError> {
    cluster
        .number("SELECT coalesce(max(id), 0) FROM skiff.queries")
        .await
}

/// Restarts of the queries after `after` (the bench's own left out).
async fn restarts_after(cluster: &Cluster, after: u64) -> Result<u64, BenchError> {
    cluster
        .number(&format!(
            "SELECT coalesce(sum(restarts), 0) FROM skiff.queries \
             WHERE id > {after} AND sql NOT LIKE '%skiff.%'"
        ))
        .await
}

/// One kill: query `name` (`script`), the newest worker SIGKILLed `at_ms`
/// into it (`fraction` of its undisturbed latency), with or without
/// stage checkpoints.
struct Kill<'a> {
    name: &'a str,
    script: &'a str,
    base_ms: f64,
    at_ms: f64,
    fraction: f64,
    checkpoints: bool,
}

/// `kill`'s query with its worker killed; then the cluster is back to
/// `workers` (`skiff serve` restarts the killed one under a new id).
async fn killed(
    cluster: &Cluster,
    workers: usize,
    kill: Kill<'_>,
) -> Result<KillFigure, BenchError> {
    let Kill {
        name,
        script,
        base_ms,
        at_ms,
        fraction,
        checkpoints,
    } = kill;
    let fail = |e: String| BenchError::Data(format!("{name}: {e}"));
    let victim = *cluster
        .live()
        .await?
        .last()
        .ok_or_else(|| fail("no worker".into()))?;
    let pid = cluster
        .number(&format!(
            "SELECT pid FROM skiff.workers WHERE id = {victim}"
        ))
        .await?;
    let pid = i32::try_from(pid)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| fail(format!("worker {victim} has no pid")))?;
    let conn = PgConn::connect(cluster.pg, &Credentials::default())
        .await
        .map_err(fail)?;
    if checkpoints {
        let mode = MODES[MODES.len() - 1];
        conn.run_script(&format!("SET skiff.stage_checkpoints = '{mode}'"))
            .await
            .map_err(fail)?;
    }
    let before = last_query(cluster).await?;
    let owned = script.to_string();
    let start = Instant::now();
    let query = SpawnedTask::spawn(async move { conn.run_script(&owned).await });
    tokio::time::sleep(Duration::from_secs_f64(at_ms / 1000.0)).await;
    // SAFETY: kill(2) of a worker process of the server this bench started
    // (its pid from skiff.workers, checked positive: never a group).
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let outcome = query
        .join()
        .await
        .map_err(|e| fail(format!("the query's task: {e}")))?;
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    let restarts = restarts_after(cluster, before).await?;
    back_to(cluster, workers, victim).await?;
    Ok(KillFigure {
        query: name.to_string(),
        fraction,
        checkpoints,
        base_ms,
        ms: outcome.is_ok().then_some(ms),
        restarts,
        error: outcome.err(),
    })
}

/// Wait until `gone` is no longer alive and `workers` workers are.
async fn back_to(cluster: &Cluster, workers: usize, gone: u64) -> Result<(), BenchError> {
    let deadline = Instant::now() + REMOVE_TIMEOUT;
    loop {
        let live = cluster.live().await?;
        if live.len() == workers && !live.contains(&gone) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Data(format!(
                "workers {live:?} after {REMOVE_TIMEOUT:?}: not back to {workers} without {gone}"
            )));
        }
        tokio::time::sleep(POLL * 4).await;
    }
}

/// [`VACATE_QUERIES`] runs of `script` at once, each on its connection;
/// from half of `base_ms` on, the newest worker is removed (or, with
/// `remove` none, nothing happens). Returns the removal's vacate latency
/// and how long it took (zeros without one), how long until the last
/// query answered, and the failures.
async fn concurrent(
    cluster: &Cluster,
    script: &str,
    base_ms: f64,
    remove: Option<u64>,
) -> Result<(f64, f64, f64, usize), BenchError> {
    let mut tasks = Vec::new();
    for _ in 0..VACATE_QUERIES {
        let conn = PgConn::connect(cluster.pg, &Credentials::default())
            .await
            .map_err(BenchError::Data)?;
        let owned = script.to_string();
        tasks.push(SpawnedTask::spawn(
            async move { conn.run_script(&owned).await },
        ));
    }
    tokio::time::sleep(Duration::from_secs_f64(base_ms / 2000.0)).await;
    let from = Instant::now();
    let (mut vacate_ms, mut removed_ms) = (0.0, 0.0);
    if let Some(leaving) = remove {
        cluster
            .execute(&format!("SELECT skiff.remove_worker('{leaving}')"))
            .await?;
        let deadline = from + REMOVE_TIMEOUT;
        loop {
            let state = cluster
                .conn
                .rows(&format!(
                    "SELECT state FROM skiff.workers WHERE id = {leaving}"
                ))
                .await
                .map_err(BenchError::Data)?;
            if state.first().and_then(|r| r.first()?.as_deref()) == Some("removed") {
                break;
            }
            if Instant::now() >= deadline {
                return Err(BenchError::Data(format!(
                    "worker {leaving} not removed after {REMOVE_TIMEOUT:?}"
                )));
            }
            tokio::time::sleep(POLL).await;
        }
        removed_ms = from.elapsed().as_secs_f64() * 1000.0;
        vacate_ms = cluster
            .number(&format!(
                "SELECT coalesce(vacate_ms, 0) FROM skiff.workers WHERE id = {leaving}"
            ))
            .await? as f64;
    }
    let mut failed = 0;
    for task in tasks {
        if !matches!(task.join().await, Ok(Ok(_))) {
            failed += 1;
        }
    }
    let answered_ms = from.elapsed().as_secs_f64() * 1000.0;
    Ok((vacate_ms, removed_ms, answered_ms, failed))
}

/// One vacate round: the queries undisturbed, then the same with the
/// newest worker removed; the cluster is then back to `workers`.
async fn vacate(
    cluster: &Cluster,
    workers: usize,
    script: &str,
    base_ms: f64,
) -> Result<VacateFigure, BenchError> {
    let (_, _, undisturbed_ms, _) = concurrent(cluster, script, base_ms, None).await?;
    let leaving = *cluster
        .live()
        .await?
        .last()
        .ok_or_else(|| BenchError::Data("no worker".into()))?;
    let (vacate_ms, removed_ms, answered_ms, failed) =
        concurrent(cluster, script, base_ms, Some(leaving)).await?;
    cluster.execute("SELECT skiff.add_workers(1)").await?;
    back_to(cluster, workers, leaving).await?;
    Ok(VacateFigure {
        vacate_ms,
        removed_ms,
        answered_ms,
        undisturbed_ms,
        failed,
    })
}

fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let values: Vec<f64> = values.collect();
    report::stats(&values).map(|s| s.median_ms)
}

fn summary(title: &str, workers: usize, kills: &[KillFigure], vacates: &[VacateFigure]) -> String {
    let mut text = format!(
        "\n{title}: a worker of {workers} killed during a distributed query; latency / \
         undisturbed latency without checkpoints, median over the queries\n"
    );
    let modes = [
        (false, "from the start"),
        (
            true,
            "over its committed stage outputs (stage_checkpoints = auto)",
        ),
    ];
    for (checkpoints, how) in modes {
        text.push_str(&format!("  runs again {how}:\n"));
        for fraction in KILL_AT {
            let at: Vec<&KillFigure> = kills
                .iter()
                .filter(|k| k.fraction == fraction && k.checkpoints == checkpoints)
                .collect();
            let ratio = median(at.iter().filter_map(|k| k.ms.map(|ms| ms / k.base_ms)));
            let failed = at.iter().filter(|k| k.ms.is_none()).count();
            let restarted = at.iter().filter(|k| k.restarts > 0).count();
            text.push_str(&format!(
                "    killed at {:>3.0}%: {} ({} of {} queries ran again, {failed} failed)\n",
                fraction * 100.0,
                ratio.map_or_else(|| "-".to_string(), |r| format!("{r:.2}x")),
                restarted,
                at.len()
            ));
        }
    }
    for k in kills.iter().filter(|k| k.error.is_some()) {
        text.push_str(&format!(
            "  {} at {:.0}%{} failed: {}\n",
            k.query,
            k.fraction * 100.0,
            if k.checkpoints {
                " with checkpoints"
            } else {
                ""
            },
            k.error.as_deref().unwrap_or("")
        ));
    }
    if let (Some(vacate), Some(removed), Some(answered), Some(undisturbed)) = (
        median(vacates.iter().map(|v| v.vacate_ms)),
        median(vacates.iter().map(|v| v.removed_ms)),
        median(vacates.iter().map(|v| v.answered_ms)),
        median(vacates.iter().map(|v| v.undisturbed_ms)),
    ) {
        let failed: usize = vacates.iter().map(|v| v.failed).sum();
        text.push_str(&format!(
            "{title}: skiff.remove_worker under {VACATE_QUERIES} distributed queries, median \
             of {} rounds: vacated in {vacate:.0} ms (nothing ran there any more), removed in \
             {removed:.0} ms (its blocks shipped to their next owners first); the queries ran \
             again without it, answering \
             {answered:.0} ms after the removal began, {failed} failed; undisturbed they ran \
             {undisturbed:.0} ms more, what a removal waited for before\n",
            vacates.len()
        ));
    }
    text
}

fn csv(kills: &[KillFigure], checkpoints: &[CheckpointFigure], vacates: &[VacateFigure]) -> String {
    let mut out =
        String::from("experiment,query,kill_at,base_ms,ms,restarts,failed,removed_ms,error\n");
    for k in kills {
        out.push_str(&format!(
            "{},{},{},{:.1},{},{},{},,\"{}\"\n",
            if k.checkpoints {
                "kill_checkpoints"
            } else {
                "kill"
            },
            k.query,
            k.fraction,
            k.base_ms,
            k.ms.map_or(String::new(), |ms| format!("{ms:.1}")),
            k.restarts,
            u8::from(k.ms.is_none()),
            k.error.as_deref().unwrap_or("").replace('"', "'")
        ));
    }
    for c in checkpoints {
        out.push_str(&format!(
            "checkpoints_{},{},,{:.1},{},,{},,\"{}\"\n",
            c.mode,
            c.query,
            c.base_ms,
            c.ms.map_or(String::new(), |ms| format!("{ms:.1}")),
            u8::from(c.ms.is_none()),
            c.error.as_deref().unwrap_or("").replace('"', "'")
        ));
    }
    for (i, v) in vacates.iter().enumerate() {
        out.push_str(&format!(
            "vacate,round {},,{:.1},{:.1},,{},{:.1},\"answered {:.1} ms after the removal \
             began\"\n",
            i + 1,
            v.undisturbed_ms,
            v.vacate_ms,
            v.failed,
            v.removed_ms,
            v.answered_ms
        ));
    }
    out
}

fn plot(
    path: &Path,
    title: &str,
    kills: &[KillFigure],
    checkpoints: &[CheckpointFigure],
    vacates: &[VacateFigure],
) -> Result<(), String> {
    super::plot::fonts()?;
    let mut queries: Vec<&str> = kills.iter().map(|k| k.query.as_str()).collect();
    queries.dedup();
    let width = (160 + queries.len() as u32 * 70).max(900);
    let root = BitMapBackend::new(path, (width, 960)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (top, bottom) = root.split_vertically(480);
    let colors = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
    ];
    let mut series = vec![Bars {
        label: "undisturbed".into(),
        color: RGBColor(127, 127, 127),
        values: queries
            .iter()
            .map(|q| kills.iter().find(|k| k.query == *q).map(|k| k.base_ms))
            .collect(),
    }];
    let checkpoint_colors = [
        RGBColor(158, 202, 225),
        RGBColor(253, 190, 133),
        RGBColor(161, 217, 155),
    ];
    let modes = [
        (false, "runs again", colors),
        (
            true,
            "auto checkpoints, runs again over them",
            checkpoint_colors,
        ),
    ];
    for (checkpoints, how, palette) in modes {
        for (fraction, color) in KILL_AT.into_iter().zip(palette) {
            series.push(Bars {
                label: format!("worker killed at {:.0}% ({how})", fraction * 100.0),
                color,
                values: queries
                    .iter()
                    .map(|q| {
                        kills
                            .iter()
                            .find(|k| {
                                k.query == *q
                                    && k.fraction == fraction
                                    && k.checkpoints == checkpoints
                            })
                            .and_then(|k| k.ms)
                    })
                    .collect(),
            });
        }
    }
    let mode_colors = [RGBColor(148, 103, 189), RGBColor(227, 119, 194)];
    for (mode, color) in MODES.into_iter().zip(mode_colors) {
        series.push(Bars {
            label: format!("stage_checkpoints = {mode}, undisturbed"),
            color,
            values: queries
                .iter()
                .map(|q| {
                    checkpoints
                        .iter()
                        .find(|c| c.query == *q && c.mode == mode)
                        .and_then(|c| c.ms)
                })
                .collect(),
        });
    }
    let labels: Vec<String> = queries.iter().map(|q| q.to_string()).collect();
    grouped_bars(
        &top,
        format!("{title}: a distributed query losing a worker, ms"),
        &labels,
        &series,
    )?;
    let rounds: Vec<String> = (1..=vacates.len()).map(|i| format!("round {i}")).collect();
    let vacate_series = vec![
        Bars {
            label: "vacated (skiff.workers.vacate_ms)".into(),
            color: colors[0],
            values: vacates.iter().map(|v| Some(v.vacate_ms)).collect(),
        },
        Bars {
            label: "remove_worker until removed".into(),
            color: colors[1],
            values: vacates.iter().map(|v| Some(v.removed_ms)).collect(),
        },
        Bars {
            label: "the queries, undisturbed (a removal waited for them before)".into(),
            color: RGBColor(127, 127, 127),
            values: vacates.iter().map(|v| Some(v.undisturbed_ms)).collect(),
        },
    ];
    grouped_bars(
        &bottom,
        format!("{title}: removing a worker under {VACATE_QUERIES} distributed queries, ms"),
        &rounds,
        &vacate_series,
    )?;
    root.present().map_err(|e| e.to_string())
}
