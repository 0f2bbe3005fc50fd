//! Benchmark data generation: TPC-H and TPC-DS tables, and the SmartNIC
//! paper's particle table ([`particles`]), written as Parquet, one
//! subdirectory per table (`DIR/lineitem/*.parquet`). Owns nothing but files in
//! the output directory it is given; knows nothing of SQL execution.
//!
//! Entry point: [`generate`]. Output is deterministic: the same benchmark and
//! scale factor always give the same rows in the same files, whatever the
//! number of cores.

// The output directory and the generators' rows are inputs: a failure there
// must come back as a GenError, never as a panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod error;
mod options;
mod output;
pub mod particles;
mod run;
mod tpcds;
mod tpch;
mod write;

pub use error::GenError;
pub use options::{Benchmark, GenOptions, GenProgress, GenSummary, NoProgress};

/// Generates every table of `bench` at `opts.sf` into `opts.out`.
///
/// Each table is written to `OUT/.tmp-<table>` and renamed to `OUT/<table>`
/// when complete. Without `opts.force`, fails before touching anything if any
/// `OUT/<table>` already exists. On failure, tables not yet complete are
/// removed; completed ones stay.
pub fn generate(
    bench: Benchmark,
    opts: &GenOptions,
    progress: &dyn GenProgress,
) -> Result<GenSummary, GenError> {
    if !(opts.sf.is_finite() && opts.sf > 0.0) {
        return Err(GenError::BadScaleFactor(opts.sf));
    }
    let sf = opts.sf;
    // The generator crates size their tables with arithmetic that can panic on
    // absurd scale factors; that is a bad argument, not a crash.
    let plan = std::panic::catch_unwind(|| match bench {
        Benchmark::Tpch => Ok(tpch::plan(sf)),
        Benchmark::Tpcds => tpcds::plan(sf),
        Benchmark::Particles => Ok(particles::plan(sf)),
    })
    .map_err(|_| GenError::Generator {
        table: "(all tables)".to_string(),
        message: format!("cannot size the tables for scale factor {sf}"),
    })??;
    run::execute(plan, opts, progress)
}

/// The tables [`generate`] writes for `bench`, in alphabetical order.
pub fn table_names(bench: Benchmark) -> &'static [&'static str] {
    match bench {
        Benchmark::Tpch => tpch::TABLES,
        Benchmark::Tpcds => tpcds::TABLES,
        Benchmark::Particles => particles::TABLES,
    }
}

/// The column a partitioned copy of `table` is hashed on (`skiff gen
/// --partitions`), or `None` for a table kept whole. Chosen so the big
/// joins are on a partition key: TPC-H's lineitem and orders by order key,
/// partsupp and part by part key, customer by customer key; TPC-DS's fact
/// tables (sales, returns, inventory) and item by item key, so a sale
/// and its return, and both with their item, are in the same partition.
/// Supplier, nation, region and the other TPC-DS dimensions are small.
pub fn partition_key(bench: Benchmark, table: &str) -> Option<&'static str> {
    let key = match (bench, table) {
        (Benchmark::Tpch, "lineitem") => "l_orderkey",
        (Benchmark::Tpch, "orders") => "o_orderkey",
        (Benchmark::Tpch, "partsupp") => "ps_partkey",
        (Benchmark::Tpch, "part") => "p_partkey",
        (Benchmark::Tpch, "customer") => "c_custkey",
        (Benchmark::Tpcds, "store_sales") => "ss_item_sk",
        (Benchmark::Tpcds, "store_returns") => "sr_item_sk",
        (Benchmark::Tpcds, "catalog_sales") => "cs_item_sk",
        (Benchmark::Tpcds, "catalog_returns") => "cr_item_sk",
        (Benchmark::Tpcds, "web_sales") => "ws_item_sk",
        (Benchmark::Tpcds, "web_returns") => "wr_item_sk",
        (Benchmark::Tpcds, "inventory") => "inv_item_sk",
        (Benchmark::Tpcds, "item") => "i_item_sk",
        _ => return None,
    };
    Some(key)
}

#[cfg(test)]
mod tests;
