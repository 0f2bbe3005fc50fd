//! `skiff gen`: benchmark data with a progress bar.

use std::time::Instant;

use indicatif::ProgressBar;
use skiff_gen::{Benchmark, GenOptions, GenProgress, GenSummary};

use crate::args::{BenchmarkName, GenArgs};
use crate::stderr_bar;

impl From<BenchmarkName> for Benchmark {
    fn from(name: BenchmarkName) -> Self {
        match name {
            BenchmarkName::Tpch => Benchmark::Tpch,
            BenchmarkName::Tpcds => Benchmark::Tpcds,
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
pub fn run(args: &GenArgs) -> Result<GenSummary, skiff_gen::GenError> {
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
