//! `skiff gen`: benchmark data with a progress bar.

use std::path::{Path, PathBuf};
use std::time::Instant;

use futures::TryStreamExt;

use indicatif::ProgressBar;
use skiff_gen::{Benchmark, GenOptions, GenProgress, GenSummary};

use skiff_engine::{Engine, EngineConfig};

use crate::BenchError;
use crate::args::{BenchmarkName, GenArgs};
use crate::progress::stderr_bar;

impl From<BenchmarkName> for Benchmark {
    fn from(name: BenchmarkName) -> Self {
        match name {
            BenchmarkName::Tpch => Benchmark::Tpch,
            BenchmarkName::Tpcds => Benchmark::Tpcds,
            BenchmarkName::Particles => Benchmark::Particles,
        }
    }
}

struct Bar(ProgressBar);

impl GenProgress for Bar {
    fn start(&self, total_rows: u64) {
        self.0.set_length(total_rows);
    }

    fn advance(&self, table: &str, rows: u64) {
        self.0.inc(rows);
        self.0.set_message(table.to_string());
    }
}

/// Generate the data; prints a per-table summary.
pub fn run(args: &GenArgs) -> Result<GenSummary, BenchError> {
    if let Some(partitions) = args.partitions {
        return partitioned(args, partitions);
    }
    let bar =
        stderr_bar("{spinner} [{elapsed_precise}] [{bar:30}] {percent:>3}% rows, eta {eta}  {msg}");
    let started = Instant::now();
    let options = GenOptions {
        sf: args.sf,
        out: args.out.clone(),
        force: args.force,
    };
    let summary = skiff_gen::generate(args.benchmark.into(), &options, &Bar(bar.clone()))?;
    bar.finish_and_clear();
    let rows: u64 = summary.tables.iter().map(|t| t.1).sum();
    let bytes: u64 = summary.tables.iter().map(|t| t.2).sum();
    eprintln!(
        "generated {} tables, {} rows, {:.1} MB of Parquet in {} in {:.1} s",
        summary.tables.len(),
        rows,
        bytes as f64 / 1e6,
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(summary)
}

/// The directory a partitioned generation stages its Parquet files in;
/// hidden, so a data directory never shows it as a table.
const STAGING: &str = ".staging-partitioned";

/// `--partitions P`: the Parquet tables generated into a staging directory,
/// then each table with a partition key ([`skiff_gen::partition_key`])
/// written as a managed table `PARTITION BY HASH (key) INTO P PARTITIONS`
/// through the engine's own `CREATE TABLE ... AS SELECT`, the others moved
/// into place as Parquet. A table is complete once its first Delta commit
/// is, so an interrupted run leaves whole tables or none.
fn partitioned(args: &GenArgs, partitions: u32) -> Result<GenSummary, BenchError> {
    let bench: Benchmark = args.benchmark.into();
    skiff_tables::partition::HashPartitioning::new(vec!["key".into()], partitions)
        .map_err(|e| BenchError::Data(e.to_string()))?;
    let io = |what: &str, path: &Path, e: std::io::Error| {
        BenchError::Data(format!("cannot {what} {}: {e}", path.display()))
    };
    let names = skiff_gen::table_names(bench);
    let existing: Vec<PathBuf> = names
        .iter()
        .map(|t| args.out.join(t))
        .filter(|p| p.exists())
        .collect();
    if let Some(first) = existing.first() {
        if !args.force {
            return Err(skiff_gen::GenError::TableExists {
                path: first.clone(),
                more: existing.len() - 1,
            }
            .into());
        }
        for path in &existing {
            std::fs::remove_dir_all(path).map_err(|e| io("remove", path, e))?;
        }
    }
    let staging = args.out.join(STAGING);
    let staged = GenArgs {
        out: staging.clone(),
        force: true,
        partitions: None,
        ..args.clone()
    };
    let summary = run(&staged)?;
    let started = Instant::now();
    // A runtime of its own on a thread of its own: callers may be inside
    // one already (the binary's main).
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| BenchError::Data(format!("cannot start the runtime: {e}")))?
                    .block_on(write_partitioned(bench, &args.out, &staging, partitions))
            })
            .join()
            .unwrap_or_else(|_| Err(BenchError::Data("writing the tables panicked".into())))
    })?;
    std::fs::remove_dir_all(&staging).map_err(|e| io("remove", &staging, e))?;
    eprintln!(
        "wrote the tables with a partition key as managed tables in {partitions} partitions \
         in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(summary)
}

async fn write_partitioned(
    bench: Benchmark,
    out: &Path,
    staging: &Path,
    partitions: u32,
) -> Result<(), BenchError> {
    let failed = |table: &str, e: datafusion::error::DataFusionError| {
        BenchError::Data(format!("cannot write table {table}: {e}"))
    };
    let engine = Engine::new(&EngineConfig::default()).map_err(|e| failed("(none)", e))?;
    engine
        .register_data_dir(out)
        .await
        .map_err(|e| failed("(none)", e))?;
    let bar = stderr_bar("{spinner} [{elapsed_precise}] [{bar:30}] {pos}/{len} tables  {msg}");
    let names = skiff_gen::table_names(bench);
    bar.set_length(names.len() as u64);
    for &table in names {
        bar.set_message(table);
        let source = staging.join(table);
        match skiff_gen::partition_key(bench, table) {
            None => std::fs::rename(&source, out.join(table))
                .map_err(|e| BenchError::Data(format!("cannot move {}: {e}", source.display())))?,
            Some(key) => {
                let staged = format!("staged_{table}");
                let location = source.to_string_lossy().replace('\'', "''");
                let statements = [
                    format!(
                        "CREATE EXTERNAL TABLE {staged} STORED AS PARQUET LOCATION '{location}/'"
                    ),
                    format!(
                        "CREATE TABLE {table} PARTITION BY HASH ({key}) INTO {partitions} \
                         PARTITIONS AS SELECT * FROM {staged}"
                    ),
                    format!("DROP TABLE {staged}"),
                ];
                for sql in statements {
                    let output = engine.execute(&sql).await.map_err(|e| failed(table, e))?;
                    output
                        .stream
                        .try_collect::<Vec<_>>()
                        .await
                        .map_err(|e| failed(table, e))?;
                }
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(())
}
