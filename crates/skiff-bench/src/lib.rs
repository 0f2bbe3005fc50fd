//! Skiff's benchmarks and the tools they share with the tests.
//!
//! Owns `skiff bench` (Skiff's pipeline executor against plain DataFusion,
//! and DuckDB when it is installed, on TPC-H, TPC-DS and a CSV load; the
//! server path, query migration, state sizes, scale-out with the resize
//! experiment, buffer matching, tables in memory nodes with pipeline
//! groups, and offload on the particle data), `skiff gen` (benchmark data
//! with a progress bar), the launcher
//! of a `skiff serve` process that benches and server tests share
//! ([`launch`]), and the PostgreSQL and Flight SQL clients of a running
//! server ([`client`], also `skiff ctl`'s).
//!
//! The query benches orchestrate only: make sure the data exists, run every
//! (query, engine) pair in its own child process ([`child`], [`duckdb`]),
//! then print the table and totals and write the CSV and PNG ([`report`],
//! [`plot`]). The parent never runs a query itself, so its own memory never
//! pollutes a figure.

pub mod args;
pub mod child;
pub mod client;
mod duckdb;
mod error;
mod faults;
pub mod generate;
mod groups;
mod harness;
pub mod launch;
mod load;
mod matching;
mod migration;
mod offload;
pub mod plot;
mod progress;
mod report;
mod scale;
mod state_sizes;
mod via;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use crate::args::{BenchArgs, BenchEngine, BenchTarget, BenchmarkName};
pub use error::BenchError;
use harness::{
    QueryFile, RemoveOnDrop, Setup, available_engines, bench_slug, cores, default_data_dir,
    ensure_data, find_queries, measure_all, names, select_queries, summary, title, write_results,
};
pub use progress::stderr_bar;

/// `skiff bench`.
pub async fn run(args: &BenchArgs) -> Result<(), BenchError> {
    let session = &args.engine;
    if args.benchmark == BenchTarget::Load {
        return load::run(args).await;
    }
    if args.benchmark == BenchTarget::Groups {
        return groups::run(args).await;
    }
    if args.benchmark == BenchTarget::Offload {
        return offload::run(args).await;
    }
    if let Some(csv) = args.summarize.as_deref() {
        return migration::summarize(csv, &title(args));
    }
    if args.matching && args.suite() != BenchmarkName::Tpch {
        return Err(BenchError::Data(
            "--matching measures TPC-H (its lineitem and q1); use skiff bench tpch".into(),
        ));
    }
    // Scale-out reads tables hash-partitioned for its worker counts.
    let partitions = if args.matching {
        Some(scale::partitions_for(&matching::WORKER_COUNTS)?)
    } else if args.scale.is_empty() {
        None
    } else {
        Some(scale::partitions_for(&args.scale)?)
    };
    let data = session.data.clone().unwrap_or_else(|| {
        let plain = default_data_dir(args.suite(), args.sf);
        partitions.map_or_else(|| plain.clone(), |p| scale::default_data_dir(&plain, p))
    });
    ensure_data(&data, args.suite(), args.sf, partitions)?;
    let query_dir = args
        .query_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("tests/queries").join(bench_slug(args.suite())));
    let queries = select_queries(&find_queries(&query_dir)?, &args.queries, &query_dir)?;
    // The state-size mode runs Skiff alone, in process: no engine to probe.
    let (engines, skipped) = if args.state_sizes {
        (vec![BenchEngine::Skiff], None)
    } else {
        available_engines(&args.engines)
    };
    let setup = Setup {
        session,
        data: data.clone(),
        runs: args.runs,
        timeout: Duration::from_secs(args.timeout.max(1)),
        threads: session.partitions.unwrap_or_else(cores).max(1),
        duckdb_database: std::env::temp_dir()
            .join(format!("skiff-bench-{}.duckdb", std::process::id())),
    };
    let _database = RemoveOnDrop(setup.duckdb_database.clone());
    let title = title(args);
    if let Some(via) = args.via {
        return via::run(&setup, args, via, &queries, &title).await;
    }
    if args.migration {
        return migration::run(&setup, args, &queries, &title).await;
    }
    if args.state_sizes {
        return state_sizes::run(&setup, args, &queries, &title).await;
    }
    if !args.scale.is_empty() || args.matching {
        let all = find_queries(&query_dir)?;
        let probes: Vec<QueryFile> = scale::RESIZE_PROBES
            .iter()
            .filter_map(|n| all.iter().find(|q| q.number == *n))
            .map(QueryFile::clone)
            .collect();
        if args.matching {
            return matching::run(&setup, args, &probes, &title).await;
        }
        if args.faults {
            return faults::run(&setup, args, &queries, &title).await;
        }
        return scale::run(&setup, args, &queries, &probes, &title).await;
    }
    let mut header = format!(
        "{title}: {} queries x {} engines ({}), runs per query {}{}, {} partitions, data {}\n",
        queries.len(),
        engines.len(),
        names(&engines),
        args.runs,
        if args.runs > 1 {
            " (first is a warm-up)"
        } else {
            ""
        },
        setup.threads,
        data.display(),
    );
    if let Some(note) = &skipped {
        header.push_str(&format!("duckdb skipped: {note}\n"));
    }
    eprint!("{header}");
    let measurements = measure_all(&setup, &queries, &engines);
    let mut out = std::io::stdout().lock();
    let text = summary(&header, &measurements, &engines);
    // Losing stdout (a closed pipe) must not lose the files below.
    let _ = out.write_all(text.as_bytes());
    let files = write_results(&args.results, args, &title, &measurements, &engines)?;
    let _ = writeln!(out, "\nwrote {}", files.join(", "));
    Ok(())
}
