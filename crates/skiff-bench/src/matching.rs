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
//! - Figure 11: matching throughput against the block size, a copy of
//!   four of lineitem's columns written (`CREATE TABLE ... AS`) in row
//!   groups of 16 Ki to 1 Mi rows: a block is one row group's column chunk;
//! - Table 2: a resize until the first answer of q1 and q9, online with
//!   matching (the first query after the blocks arrived, or meanwhile) and
//!   without, against a restart (`scale::resize_round`).

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use plotters::prelude::*;

use super::scale::{
    self, Change, Cluster, MIB, Matched, PALETTE, ResizeFigure, SINGLE, check, fmt_ms, own_state,
    ratio,
};
use crate::args::BenchArgs;
use crate::harness::{BenchError, QueryFile, Setup, publish, read_scripts, results_stem};
use crate::report;

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

/// Rows per row group of the copies of lineitem for Figure 11: from small
/// blocks to DataFusion's default.
const BLOCK_ROWS: [usize; 4] = [16 * 1024, 64 * 1024, 256 * 1024, 1024 * 1024];

/// The copies' columns: the key, a decimal, a date and a string.
const COPY_COLUMNS: [&str; 4] = ["l_orderkey", "l_extendedprice", "l_shipdate", "l_comment"];

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
    /// Rows per row group of the table's files, where the point varies
    /// them (Figure 11); `None` for lineitem as generated.
    block_rows: Option<usize>,
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
    let points = sweep(setup, scale::partitions_for(&WORKER_COUNTS)?).await?;
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
                Matched::note(matched)
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

/// Figures 10 and 11: for each column count, lineitem buffered on that
/// many columns, then for each block size a copy in row groups of that
/// many rows; each time a worker added and removed again, each matched.
async fn sweep(setup: &Setup<'_>, partitions: u32) -> Result<Vec<SweepPoint>, BenchError> {
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
    // Figure 10: lineitem on more and more columns.
    for columns in COLUMN_COUNTS {
        for _ in 0..setup.runs {
            let point = matched_table(&cluster, "lineitem", &LINEITEM[..columns]).await?;
            points.extend(point.map(|p| SweepPoint { columns, ..p }));
        }
    }
    // Figure 11: a copy of four of its columns written in row groups of
    // each size (a block is one row group's column chunk).
    for rows in BLOCK_ROWS {
        let table = format!("lineitem_rg{rows}");
        cluster
            .execute(&format!(
                "SET datafusion.execution.parquet.max_row_group_size = {rows}"
            ))
            .await?;
        cluster
            .execute(&format!(
                "CREATE TABLE {table} PARTITION BY HASH (l_orderkey) INTO {partitions} \
                 PARTITIONS AS SELECT {} FROM lineitem",
                COPY_COLUMNS.join(", ")
            ))
            .await?;
        for _ in 0..setup.runs {
            let point = matched_table(&cluster, &table, &COPY_COLUMNS).await?;
            points.extend(point.map(|p| SweepPoint {
                columns: COPY_COLUMNS.len(),
                block_rows: Some(rows),
                ..p
            }));
        }
        cluster.execute(&format!("DROP TABLE {table}")).await?;
    }
    Ok(points)
}

/// `columns` of `table` buffered alone, then a worker added and removed
/// again; the join's and the removal's points (their `columns` and
/// `block_rows` for the caller to set).
async fn matched_table(
    cluster: &Cluster,
    table: &str,
    columns: &[&str],
) -> Result<[SweepPoint; 2], BenchError> {
    let maxima: Vec<String> = columns.iter().map(|c| format!("max({c})")).collect();
    // The filter keeps the maxima from being answered from the files'
    // statistics: every chosen column is read and buffered.
    let warm = format!(
        "SELECT {} FROM {table} WHERE l_orderkey >= 0",
        maxima.join(", ")
    );
    cluster.execute("SELECT skiff.clear_cache()").await?;
    cluster.execute(&warm).await?;
    let buffered = cluster
        .number(&format!(
            "SELECT coalesce(sum(bytes), 0) FROM skiff.cache WHERE table_name = '{table}'"
        ))
        .await?;
    let start = Instant::now();
    let joined = cluster.add_worker(STEPS[0] + 1, true).await?;
    let join_ms = start.elapsed().as_secs_f64() * 1000.0;
    let Some(newest) = cluster.live().await?.last().copied() else {
        return Err(BenchError::Data("no worker left to remove".into()));
    };
    let start = Instant::now();
    let left = cluster.remove_worker(newest, STEPS[0], true).await?;
    let leave_ms = start.elapsed().as_secs_f64() * 1000.0;
    eprintln!(
        "{table} on {} columns, {:.1} MiB buffered: join{}; removal{}",
        columns.len(),
        buffered as f64 / MIB,
        Matched::note(joined),
        Matched::note(left)
    );
    let point = |change, ready_ms, matched| SweepPoint {
        columns: columns.len(),
        block_rows: None,
        buffered,
        change,
        ready_ms,
        matched,
    };
    Ok([
        point(Change::Add, join_ms, joined),
        point(Change::Remove, leave_ms, left),
    ])
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
    let by_columns: Vec<(String, Vec<&SweepPoint>)> = COLUMN_COUNTS
        .iter()
        .map(|&c| {
            let of = points
                .iter()
                .filter(|p| p.block_rows.is_none() && p.columns == c);
            (c.to_string(), of.collect())
        })
        .collect();
    text.push_str(&sweep_table(
        "matching time against the bytes moved (lineitem buffered on N columns)",
        "columns",
        &by_columns,
    ));
    let by_block: Vec<(String, Vec<&SweepPoint>)> = BLOCK_ROWS
        .iter()
        .map(|&rows| {
            let of = points.iter().filter(|p| p.block_rows == Some(rows));
            (rows.to_string(), of.collect())
        })
        .collect();
    text.push_str(&sweep_table(
        &format!(
            "matching time against the block size (a copy of lineitem's {} in row groups of \
             N rows)",
            COPY_COLUMNS.join(", ")
        ),
        "rows/rg",
        &by_block,
    ));
    text.push_str(&scale::resize_table(table));
    text
}

/// One table of matchings: per group (a row), the median over its rounds
/// of the join's and the removal's matching.
fn sweep_table(title: &str, key: &str, groups: &[(String, Vec<&SweepPoint>)]) -> String {
    let mut text = format!(
        "\n{title}; median over the rounds\n\
         {key:<8} {:>10} {:>7} {:>9} {:>10} {:>8} {:>8} {:>8} {:>8}\n",
        "buffered", "blocks", "KiB/block", "moved MiB", "join ms", "MiB/s", "leave ms", "MiB/s"
    );
    let median = |ps: &[&SweepPoint], f: &dyn Fn(&SweepPoint) -> Option<f64>| {
        let values: Vec<f64> = ps.iter().filter_map(|p| f(p)).collect();
        report::stats(&values).map(|s| s.median_ms)
    };
    let mib = |p: &SweepPoint| p.matched.map(|m| m.bytes as f64 / MIB);
    let ms = |p: &SweepPoint| p.matched.map(|m| m.ms);
    let rate = |ps: &[&SweepPoint]| match (median(ps, &mib), median(ps, &ms)) {
        (Some(b), Some(t)) if t > 0.0 => format!("{:.0}", b / (t / 1000.0)),
        _ => "-".into(),
    };
    let one = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
    for (label, of) in groups {
        if of.is_empty() {
            continue;
        }
        let (join, leave): (Vec<&SweepPoint>, Vec<&SweepPoint>) =
            of.iter().partition(|p| p.change == Change::Add);
        let blocks = median(&join, &|p| p.matched.map(|m| m.blocks as f64));
        let per_block = median(&join, &|p| {
            let m = p.matched?;
            (m.blocks > 0).then(|| m.bytes as f64 / m.blocks as f64 / 1024.0)
        });
        text.push_str(&format!(
            "{label:<8} {:>10} {:>7} {:>9} {:>10} {:>8} {:>8} {:>8} {:>8}\n",
            median(&join, &|p| Some(p.buffered as f64 / MIB))
                .map_or("-".into(), |b| format!("{b:.1} MiB")),
            blocks.map_or("-".into(), |b| format!("{b:.0}")),
            per_block.map_or("-".into(), |b| format!("{b:.0}")),
            one(median(&join, &mib)),
            fmt_ms(median(&join, &ms)),
            rate(&join),
            fmt_ms(median(&leave, &ms)),
            rate(&leave),
        ));
    }
    text
}

/// The CSV's columns; a row of each kind fills those that apply to it.
const CSV_COLUMNS: [&str; 17] = [
    "kind",
    "probe",
    "matching",
    "step",
    "workers",
    "run",
    "ms",
    "change",
    "method",
    "columns",
    "block_rows",
    "buffered_bytes",
    "ready_ms",
    "matching_ms",
    "blocks_matched",
    "bytes_matched",
    "failures",
];

fn csv(
    runs: &[TraceRun],
    resizes: &[TraceResize],
    points: &[SweepPoint],
    table: &[ResizeFigure],
) -> String {
    let mut text = CSV_COLUMNS.join(",");
    text.push('\n');
    let mut row = |fields: &[(&str, String)], matched: Option<Matched>| {
        let mut cells = vec![String::new(); CSV_COLUMNS.len()];
        let mut put = |name: &str, value: String| {
            if let Some(at) = CSV_COLUMNS.iter().position(|c| *c == name) {
                cells[at] = value;
            }
        };
        for (name, value) in fields {
            put(name, value.clone());
        }
        if let Some(m) = matched {
            put("matching_ms", format!("{:.0}", m.ms));
            put("blocks_matched", m.blocks.to_string());
            put("bytes_matched", m.bytes.to_string());
            put("failures", m.failures.to_string());
        }
        text.push_str(&cells.join(","));
        text.push('\n');
    };
    for r in runs {
        let fields = [
            ("kind", "trace".to_string()),
            ("matching", r.matching.to_string()),
            ("step", r.step.to_string()),
            ("workers", r.workers.to_string()),
            ("run", r.run.to_string()),
            ("ms", format!("{:.3}", r.ms)),
        ];
        row(&fields, None);
    }
    for r in resizes {
        let change = if r.to > r.from { "add" } else { "remove" };
        let fields = [
            ("kind", "trace-resize".to_string()),
            ("matching", r.matching.to_string()),
            ("step", r.step.to_string()),
            ("workers", format!("{}->{}", r.from, r.to)),
            ("change", change.to_string()),
            ("ready_ms", format!("{:.3}", r.ready_ms)),
        ];
        row(&fields, r.matched);
    }
    for p in points {
        let fields = [
            ("kind", "sweep".to_string()),
            ("matching", "true".to_string()),
            ("change", p.change.name().to_string()),
            ("columns", p.columns.to_string()),
            (
                "block_rows",
                p.block_rows.map_or(String::new(), |r| r.to_string()),
            ),
            ("buffered_bytes", p.buffered.to_string()),
            ("ready_ms", format!("{:.3}", p.ready_ms)),
        ];
        row(&fields, p.matched);
    }
    for f in table {
        let (from, to) = f.change.counts();
        let fields = [
            ("kind", "table2".to_string()),
            ("probe", f.probe.clone()),
            ("workers", format!("{from}->{to}")),
            ("ms", format!("{:.3}", f.total_ms)),
            ("change", f.change.name().to_string()),
            ("method", f.method.name().to_string()),
            ("ready_ms", format!("{:.3}", f.ready_ms)),
        ];
        row(&fields, f.matching);
    }
    text
}

/// Top: the trace, every run in order, with matching and without. Then
/// matching time against the MiB moved, throughput against the block
/// size, and Table 2.
fn plot(
    path: &Path,
    title: &str,
    runs: &[TraceRun],
    resizes: &[TraceResize],
    points: &[SweepPoint],
    table: &[ResizeFigure],
) -> Result<(), String> {
    super::plot::fonts()?;
    let root = BitMapBackend::new(path, (1000, 1920)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((4, 1));
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

    // Figure 10: matching time against the MiB moved.
    let moved: Vec<(Change, f64, f64)> = points
        .iter()
        .filter(|p| p.block_rows.is_none())
        .filter_map(|p| {
            let m = p.matched?;
            Some((p.change, m.bytes as f64 / MIB, m.ms))
        })
        .collect();
    scatter(
        &panels[1],
        format!("{title}: matching time against the MiB it moved"),
        ("MiB moved", "ms"),
        &moved,
    )?;
    // Figure 11: throughput against the block size.
    let blocks: Vec<(Change, f64, f64)> = points
        .iter()
        .filter(|p| p.block_rows.is_some())
        .filter_map(|p| {
            let m = p.matched?;
            let per_block = m.bytes as f64 / m.blocks.max(1) as f64 / 1024.0;
            Some((
                p.change,
                per_block,
                m.bytes as f64 / MIB / (m.ms.max(1.0) / 1000.0),
            ))
        })
        .collect();
    scatter(
        &panels[2],
        format!(
            "{title}: matching throughput against the block size ({} in row groups of {} rows)",
            COPY_COLUMNS.len(),
            BLOCK_ROWS
                .iter()
                .map(|r| format!("{}Ki", r / 1024))
                .collect::<Vec<_>>()
                .join("/")
        ),
        ("KiB per block (mean)", "MiB/s"),
        &blocks,
    )?;
    scale::resize_bars(&panels[3], title, table)?;
    root.present().map_err(|e| e.to_string())
}

/// Points (x, y) of joins and removals on `area`.
fn scatter(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    caption: String,
    (x_desc, y_desc): (&str, &str),
    xy: &[(Change, f64, f64)],
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<_>| e.to_string();
    let max_x = xy.iter().map(|p| p.1).fold(1.0, f64::max);
    let max_y = xy.iter().map(|p| p.2).fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..max_x * 1.1, 0.0..max_y * 1.2)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
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
    super::plot::legend(&mut chart, SeriesLabelPosition::UpperLeft)
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
        let points = [None, Some(BLOCK_ROWS[0])]
            .into_iter()
            .flat_map(|block_rows| {
                [Change::Add, Change::Remove].map(|change| SweepPoint {
                    columns: 2,
                    block_rows,
                    buffered: 192 << 20,
                    change,
                    ready_ms: 45.0,
                    matched: Some(m),
                })
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
    fn the_plot_has_four_panels_and_the_csv_a_row_per_figure() {
        let (runs, resizes, points) = sample();
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("matching.png");
        plot(&png, "TPC-H", &runs, &resizes, &points, &[]).unwrap();
        assert_eq!(scale::tests::image_size(&png), (1000, 1920));
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
