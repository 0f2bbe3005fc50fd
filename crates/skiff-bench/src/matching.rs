//! `skiff bench tpch --matching`: buffer matching (VectorH §6, issue 17)
//! on `skiff serve` children over hash-partitioned TPC-H, driven over the
//! PostgreSQL wire with `skiff.distribute = on`, so every worker reads the
//! partitions it owns through its own buffer pool:
//! - the paper's Figures 8 and 9: q1 (a scan and aggregate of lineitem)
//!   run several times at each step while the cluster grows 2→3→4 and
//!   shrinks back to 2, with `skiff.buffer_matching` on and off; the first
//!   run after each resize against that step's steady state (the median of
//!   its other runs);
//! - Figure 10: how long a matching takes against the bytes it moves,
//!   lineitem buffered on 1 to 16 of its columns, for a join (old owners
//!   send) and a removal (the leaving worker sends, the survivors merge);
//! - Table 2: a resize until the first answer of q1 and q9, online with and
//!   without matching, against a restart (`scale::resize_round`).
//!
//! The paper's Figure 11 (matching time against block size) is not
//! measured: a block here is one row group's column chunk, and the
//! managed tables' writer does not take a row-group size yet.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use plotters::prelude::*;

use super::scale::{
    self, Change, Cluster, MIB, Matched, PALETTE, ResizeFigure, SINGLE, check, fmt_ms, own_state,
    ratio,
};
use super::{BenchError, QueryFile, Setup, publish, read_scripts, report, results_stem};
use crate::args::BenchArgs;

/// Worker counts of the trace (Figures 8 and 9): grow by one twice, then
/// shrink back.
const STEPS: [usize; 5] = [2, 3, 4, 3, 2];

/// The counts the data is partitioned for (each owns an equal share).
pub const WORKER_COUNTS: [usize; 3] = [2, 3, 4];

/// Runs of the probe at each step at least: the first after the resize
/// and three for the steady state.
const RUNS_MIN: u32 = 4;

/// Columns of lineitem buffered for Figure 10's points.
const COLUMN_COUNTS: [usize; 5] = [1, 2, 4, 8, 16];

/// lineitem's columns, the partition key first (the sweep's filter reads
/// it anyway).
const LINEITEM: [&str; 16] = [
    "l_orderkey",
    "l_partkey",
    "l_suppkey",
    "l_linenumber",
    "l_quantity",
    "l_extendedprice",
    "l_discount",
    "l_tax",
    "l_returnflag",
    "l_linestatus",
    "l_shipdate",
    "l_commitdate",
    "l_receiptdate",
    "l_shipinstruct",
    "l_shipmode",
    "l_comment",
];

/// One run of the probe in the trace.
struct TraceRun {
    matching: bool,
    step: usize,
    workers: usize,
    /// 0 is the first run after the step's resize (the first ever at step 0).
    run: u32,
    ms: f64,
}

/// One resize of the trace.
struct TraceResize {
    matching: bool,
    step: usize,
    from: usize,
    to: usize,
    /// Until the cluster took queries (and its matched blocks arrived).
    ready_ms: f64,
    matched: Option<Matched>,
}

/// One point of Figure 10.
struct SweepPoint {
    columns: usize,
    /// Bytes of lineitem in the pools before the resize.
    buffered: u64,
    change: Change,
    ready_ms: f64,
    matched: Option<Matched>,
}

pub async fn run(
    setup: &Setup<'_>,
    args: &BenchArgs,
    probes: &[QueryFile],
    title: &str,
) -> Result<(), BenchError> {
    let scripts = read_scripts(probes)?;
    let Some((trace_probe, trace_script)) = scripts.first() else {
        return Err(BenchError::Data("no probe query found (q1)".into()));
    };
    let runs = setup.runs.max(RUNS_MIN);
    eprintln!(
        "{title}: buffer matching over partitioned data {}: {trace_probe} {runs} times at \
         each of {STEPS:?} workers with matching on and off; matching time for lineitem \
         buffered on {COLUMN_COUNTS:?} columns; resize against restart, {} rounds",
        setup.data.display(),
        setup.runs
    );
    let mut trace_runs = Vec::new();
    let mut trace_resizes = Vec::new();
    for matching in [true, false] {
        let (r, z) = trace(setup, trace_probe, trace_script, matching, runs).await?;
        trace_runs.extend(r);
        trace_resizes.extend(z);
    }
    let points = sweep(setup).await?;
    let mut table = Vec::new();
    for (name, script) in &scripts {
        for round in 0..setup.runs {
            eprintln!("resize with {name}, round {} of {}", round + 1, setup.runs);
            table.extend(scale::resize_round(setup, name, script).await?);
        }
    }
    let text = summary(title, &trace_runs, &trace_resizes, &points, &table);
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    let stem = format!("{}-matching", results_stem(args));
    let files = publish(
        &args.results,
        &stem,
        args.archive,
        csv(&trace_runs, &trace_resizes, &points, &table).as_bytes(),
        |png| plot(png, title, &trace_runs, &trace_resizes, &points, &table),
    )?;
    println!("\nwrote {}", files.join(", "));
    Ok(())
}

/// Figures 8 and 9 with matching on or off: the probe `runs` times at
/// each step of [`STEPS`] on one cluster.
async fn trace(
    setup: &Setup<'_>,
    probe: &str,
    script: &str,
    matching: bool,
    runs: u32,
) -> Result<(Vec<TraceRun>, Vec<TraceResize>), BenchError> {
    let state = own_state(&setup.data)?;
    let cluster = Cluster::start(setup, state.path(), STEPS[0]).await?;
    cluster.set_distribute("on").await?;
    cluster.set_matching(matching).await?;
    let on = if matching { "on" } else { "off" };
    let mut out = Vec::new();
    let mut resizes = Vec::new();
    let mut expected = None;
    for (step, &workers) in STEPS.iter().enumerate() {
        if step > 0 {
            let from = STEPS[step - 1];
            let start = Instant::now();
            let matched = if workers > from {
                cluster.add_worker(workers, matching).await?
            } else {
                let Some(newest) = cluster.live().await?.last().copied() else {
                    return Err(BenchError::Data("no worker left to remove".into()));
                };
                cluster.remove_worker(newest, workers, matching).await?
            };
            let ready_ms = start.elapsed().as_secs_f64() * 1000.0;
            eprintln!(
                "matching {on}: {from} -> {workers} workers ready in {ready_ms:.0} ms{}",
                matched_note(matched)
            );
            resizes.push(TraceResize {
                matching,
                step,
                from,
                to: workers,
                ready_ms,
                matched,
            });
        }
        let mut times = Vec::new();
        for run in 0..runs {
            let start = Instant::now();
            let got = cluster.run(script).await;
            let ms = start.elapsed().as_secs_f64() * 1000.0;
            match expected {
                None => expected = Some(got.map_err(BenchError::Data)?),
                Some(rows) => check(rows, got, probe)?,
            }
            times.push(format!("{ms:.0}"));
            out.push(TraceRun {
                matching,
                step,
                workers,
                run,
                ms,
            });
        }
        eprintln!(
            "matching {on}: {probe} at {workers} workers: {} ms",
            times.join(", ")
        );
    }
    Ok((out, resizes))
}

fn matched_note(matched: Option<Matched>) -> String {
    matched.map_or(String::new(), |m| {
        format!(
            " ({} blocks, {:.1} MiB matched in {:.0} ms{})",
            m.blocks,
            m.bytes as f64 / MIB,
            m.ms,
            if m.failures > 0 {
                format!(", {} transfers failed", m.failures)
            } else {
                String::new()
            }
        )
    })
}

/// Figure 10: for each column count, lineitem buffered on that many
/// columns, then a worker added and removed again, each matched.
async fn sweep(setup: &Setup<'_>) -> Result<Vec<SweepPoint>, BenchError> {
    let state = own_state(&setup.data)?;
    let cluster = Cluster::start(setup, state.path(), STEPS[0]).await?;
    cluster.set_distribute("on").await?;
    cluster.set_matching(true).await?;
    // Else each partition's running maximum prunes row groups of the
    // warming scans (DataFusion's dynamic filters): every block is wanted.
    cluster
        .execute("SET datafusion.optimizer.enable_aggregate_dynamic_filter_pushdown = false")
        .await?;
    let mut points = Vec::new();
    for columns in COLUMN_COUNTS {
        let maxima: Vec<String> = LINEITEM[..columns]
            .iter()
            .map(|c| format!("max({c})"))
            .collect();
        // The filter keeps the maxima from being answered from the files'
        // statistics: every chosen column is read and buffered.
        let warm = format!(
            "SELECT {} FROM lineitem WHERE l_orderkey >= 0",
            maxima.join(", ")
        );
        for _ in 0..setup.runs {
            cluster.execute("SELECT skiff.clear_cache()").await?;
            cluster.execute(&warm).await?;
            let buffered = cluster
                .number(
                    "SELECT coalesce(sum(bytes), 0) FROM skiff.cache \
                     WHERE table_name = 'lineitem'",
                )
                .await?;
            let start = Instant::now();
            let matched = cluster.add_worker(STEPS[0] + 1, true).await?;
            let ready_ms = start.elapsed().as_secs_f64() * 1000.0;
            points.push(SweepPoint {
                columns,
                buffered,
                change: Change::Add,
                ready_ms,
                matched,
            });
            let Some(newest) = cluster.live().await?.last().copied() else {
                return Err(BenchError::Data("no worker left to remove".into()));
            };
            let start = Instant::now();
            let back = cluster.remove_worker(newest, STEPS[0], true).await?;
            let back_ms = start.elapsed().as_secs_f64() * 1000.0;
            points.push(SweepPoint {
                columns,
                buffered,
                change: Change::Remove,
                ready_ms: back_ms,
                matched: back,
            });
            eprintln!(
                "{columns} columns, {:.1} MiB buffered: join{}; removal{}",
                buffered as f64 / MIB,
                matched_note(matched),
                matched_note(back)
            );
        }
    }
    Ok(points)
}

/// The first run after the resize into `step`, and the median of the
/// step's other runs.
fn first_and_steady(runs: &[TraceRun], matching: bool, step: usize) -> (Option<f64>, Option<f64>) {
    let of_step: Vec<&TraceRun> = runs
        .iter()
        .filter(|r| r.matching == matching && r.step == step)
        .collect();
    let first = of_step.iter().find(|r| r.run == 0).map(|r| r.ms);
    let rest: Vec<f64> = of_step.iter().filter(|r| r.run > 0).map(|r| r.ms).collect();
    (first, report::stats(&rest).map(|s| s.median_ms))
}

fn summary(
    title: &str,
    runs: &[TraceRun],
    resizes: &[TraceResize],
    points: &[SweepPoint],
    table: &[ResizeFigure],
) -> String {
    let mut text = format!(
        "\n{title}: the first run after each resize against the steady state (median of the \
         step's other runs), ms; step 0's first run is the cluster's first (cold)\n\
         {:<6} {:<8} {:>9} {:>9} {:>6} {:>9} {:>9} {:>6} {:>10} {:>8}\n",
        "step",
        "workers",
        "matching",
        "steady",
        "ratio",
        "no match",
        "steady",
        "ratio",
        "matched",
        "in ms"
    );
    for (step, &workers) in STEPS.iter().enumerate() {
        let (first_on, steady_on) = first_and_steady(runs, true, step);
        let (first_off, steady_off) = first_and_steady(runs, false, step);
        let matched = resizes
            .iter()
            .find(|r| r.matching && r.step == step)
            .and_then(|r| r.matched);
        let label = if step == 0 {
            format!("{workers}")
        } else {
            format!("{}->{workers}", STEPS[step - 1])
        };
        text.push_str(&format!(
            "{step:<6} {label:<8} {:>9} {:>9} {:>6} {:>9} {:>9} {:>6} {:>10} {:>8}\n",
            fmt_ms(first_on),
            fmt_ms(steady_on),
            ratio(first_on, steady_on),
            fmt_ms(first_off),
            fmt_ms(steady_off),
            ratio(first_off, steady_off),
            matched.map_or("-".into(), |m| format!("{:.1} MiB", m.bytes as f64 / MIB)),
            fmt_ms(matched.map(|m| m.ms)),
        ));
    }
    text.push_str(&format!(
        "\nmatching time against the bytes moved (lineitem buffered on N columns; median \
         over the rounds)\n{:<8} {:>10} {:>10} {:>9} {:>9} {:>10} {:>10} {:>9} {:>9}\n",
        "columns", "buffered", "join MiB", "ms", "MiB/s", "leave MiB", "blocks", "ms", "MiB/s"
    ));
    for columns in COLUMN_COUNTS {
        let of = |change: Change| -> Vec<&SweepPoint> {
            points
                .iter()
                .filter(|p| p.columns == columns && p.change == change)
                .collect()
        };
        let median = |ps: &[&SweepPoint], f: &dyn Fn(&SweepPoint) -> Option<f64>| {
            let values: Vec<f64> = ps.iter().filter_map(|p| f(p)).collect();
            report::stats(&values).map(|s| s.median_ms)
        };
        let (join, leave) = (of(Change::Add), of(Change::Remove));
        let mib = |p: &SweepPoint| p.matched.map(|m| m.bytes as f64 / MIB);
        let ms = |p: &SweepPoint| p.matched.map(|m| m.ms);
        let rate = |ps: &[&SweepPoint]| match (median(ps, &mib), median(ps, &ms)) {
            (Some(b), Some(t)) if t > 0.0 => format!("{:.0}", b / (t / 1000.0)),
            _ => "-".into(),
        };
        let buffered = median(&join, &|p| Some(p.buffered as f64 / MIB));
        text.push_str(&format!(
            "{columns:<8} {:>10} {:>10} {:>9} {:>9} {:>10} {:>10} {:>9} {:>9}\n",
            buffered.map_or("-".into(), |b| format!("{b:.1} MiB")),
            median(&join, &mib).map_or("-".into(), |b| format!("{b:.1}")),
            fmt_ms(median(&join, &ms)),
            rate(&join),
            median(&leave, &mib).map_or("-".into(), |b| format!("{b:.1}")),
            median(&leave, &|p| p.matched.map(|m| m.blocks as f64))
                .map_or("-".into(), |b| format!("{b:.0}")),
            fmt_ms(median(&leave, &ms)),
            rate(&leave),
        ));
    }
    text.push_str(&scale::resize_table(table));
    text
}

fn csv(
    runs: &[TraceRun],
    resizes: &[TraceResize],
    points: &[SweepPoint],
    table: &[ResizeFigure],
) -> String {
    let matched = |m: Option<Matched>| {
        m.map_or(",,,".to_string(), |m| {
            format!("{:.0},{},{},{}", m.ms, m.blocks, m.bytes, m.failures)
        })
    };
    let mut text = String::from(
        "kind,probe,matching,step,workers,run,ms,change,method,columns,buffered_bytes,\
         ready_ms,matching_ms,blocks_matched,bytes_matched,failures\n",
    );
    for r in runs {
        text.push_str(&format!(
            "trace,q01,{},{},{},{},{:.3},,,,,,,,,\n",
            r.matching, r.step, r.workers, r.run, r.ms
        ));
    }
    for r in resizes {
        text.push_str(&format!(
            "trace-resize,,{},{},{}->{},,,{},,,,{:.3},{}\n",
            r.matching,
            r.step,
            r.from,
            r.to,
            if r.to > r.from { "add" } else { "remove" },
            r.ready_ms,
            matched(r.matched)
        ));
    }
    for p in points {
        text.push_str(&format!(
            "sweep,,true,,,,,{},,{},{},{:.3},{}\n",
            change_name(p.change),
            p.columns,
            p.buffered,
            p.ready_ms,
            matched(p.matched)
        ));
    }
    for f in table {
        let (from, to) = f.change.counts();
        text.push_str(&format!(
            "table2,{},,,{from}->{to},,{:.3},{},{},,,{:.3},{}\n",
            f.probe,
            f.total_ms,
            change_name(f.change),
            f.method.name(),
            f.ready_ms,
            matched(f.matching)
        ));
    }
    text
}

fn change_name(change: Change) -> &'static str {
    match change {
        Change::Add => "add",
        Change::Remove => "remove",
    }
}

/// Top: the trace, every run in order, with matching and without. Middle:
/// matching time against the MiB moved. Bottom: Table 2.
fn plot(
    path: &Path,
    title: &str,
    runs: &[TraceRun],
    resizes: &[TraceResize],
    points: &[SweepPoint],
    table: &[ResizeFigure],
) -> Result<(), String> {
    super::plot::fonts()?;
    let root = BitMapBackend::new(path, (1000, 1440)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((3, 1));
    let err = |e: DrawingAreaErrorKind<_>| e.to_string();

    // The trace.
    let max_ms = runs.iter().map(|r| r.ms).fold(1.0, f64::max);
    let per_matching = runs.iter().filter(|r| r.matching).count().max(1);
    let mut chart = ChartBuilder::on(&panels[0])
        .caption(
            format!("{title}: q1 through resizes 2->3->4->3->2 workers, ms per run"),
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..per_matching as f64, 0.0..max_ms * 1.2)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("run (a resize before each step's first)")
        .y_desc("ms")
        .draw()
        .map_err(err)?;
    for (matching, color) in [(true, PALETTE[0]), (false, SINGLE)] {
        let series: Vec<(f64, f64)> = runs
            .iter()
            .filter(|r| r.matching == matching)
            .enumerate()
            .map(|(i, r)| (i as f64 + 0.5, r.ms))
            .collect();
        let label = if matching {
            "matching on"
        } else {
            "matching off"
        };
        chart
            .draw_series(LineSeries::new(series.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
        chart
            .draw_series(series.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
    }
    // A dashed line where each resize happened.
    let runs_per_step = runs
        .iter()
        .filter(|r| r.matching && r.step == 0)
        .count()
        .max(1);
    for r in resizes.iter().filter(|r| r.matching) {
        let x = (r.step * runs_per_step) as f64;
        chart
            .draw_series(DashedLineSeries::new(
                [(x, 0.0), (x, max_ms * 1.15)],
                4,
                4,
                BLACK.mix(0.4).stroke_width(1),
            ))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!("{}->{}", r.from, r.to),
                (x + 0.1, max_ms * 1.15),
                ("sans-serif", 13),
            )))
            .map_err(err)?;
    }
    super::plot::legend(&mut chart, SeriesLabelPosition::UpperRight)?;

    // Matching time against the MiB moved.
    let xy: Vec<(Change, f64, f64)> = points
        .iter()
        .filter_map(|p| {
            let m = p.matched?;
            Some((p.change, m.bytes as f64 / MIB, m.ms))
        })
        .collect();
    let max_mib = xy.iter().map(|p| p.1).fold(1.0, f64::max);
    let max_t = xy.iter().map(|p| p.2).fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&panels[1])
        .caption(
            format!("{title}: matching time against the MiB it moved"),
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..max_mib * 1.1, 0.0..max_t * 1.2)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("MiB moved")
        .y_desc("ms")
        .draw()
        .map_err(err)?;
    for (change, color, label) in [
        (Change::Add, PALETTE[0], "join (old owners send)"),
        (Change::Remove, PALETTE[1], "removal (survivors merge)"),
    ] {
        chart
            .draw_series(
                xy.iter()
                    .filter(|p| p.0 == change)
                    .map(|p| Circle::new((p.1, p.2), 4, color.filled())),
            )
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| Circle::new((x + 6, y), 4, color.filled()));
    }
    super::plot::legend(&mut chart, SeriesLabelPosition::UpperLeft)?;

    scale::resize_bars(&panels[2], title, table)?;
    root.present().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Vec<TraceRun>, Vec<TraceResize>, Vec<SweepPoint>) {
        let mut runs = Vec::new();
        for matching in [true, false] {
            for (step, &workers) in STEPS.iter().enumerate() {
                for run in 0..RUNS_MIN {
                    let slow = if run == 0 && !matching { 3.0 } else { 1.0 };
                    runs.push(TraceRun {
                        matching,
                        step,
                        workers,
                        run,
                        ms: 100.0 * slow,
                    });
                }
            }
        }
        let m = Matched {
            ms: 40.0,
            blocks: 12,
            bytes: 64 << 20,
            failures: 0,
        };
        let resizes = (1..STEPS.len())
            .map(|step| TraceResize {
                matching: true,
                step,
                from: STEPS[step - 1],
                to: STEPS[step],
                ready_ms: 50.0,
                matched: Some(m),
            })
            .collect();
        let points = [Change::Add, Change::Remove]
            .into_iter()
            .map(|change| SweepPoint {
                columns: 2,
                buffered: 192 << 20,
                change,
                ready_ms: 45.0,
                matched: Some(m),
            })
            .collect();
        (runs, resizes, points)
    }

    #[test]
    fn first_runs_are_set_against_the_rest_of_their_step() {
        let (runs, resizes, points) = sample();
        assert_eq!(
            first_and_steady(&runs, false, 1),
            (Some(300.0), Some(100.0))
        );
        assert_eq!(first_and_steady(&runs, true, 1), (Some(100.0), Some(100.0)));
        let text = summary("TPC-H", &runs, &resizes, &points, &[]);
        assert!(text.contains(" 3.00 "), "{text}");
        assert!(text.contains("64.0 MiB"), "{text}");
        // 64 MiB in 40 ms.
        assert!(text.contains("1600"), "{text}");
    }

    #[test]
    fn the_plot_has_three_panels_and_the_csv_a_row_per_figure() {
        let (runs, resizes, points) = sample();
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("matching.png");
        plot(&png, "TPC-H", &runs, &resizes, &points, &[]).unwrap();
        assert_eq!(scale::tests::image_size(&png), (1000, 1440));
        let text = csv(&runs, &resizes, &points, &[]);
        let columns = text.lines().next().unwrap().split(',').count();
        assert_eq!(
            text.lines().count(),
            1 + runs.len() + resizes.len() + points.len()
        );
        for line in text.lines() {
            assert_eq!(line.split(',').count(), columns, "{line}");
        }
    }
}
