//! Command-line definitions.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "skiff",
    version,
    about = "Skiff: an elastic SQL database. Without a subcommand, opens a SQL shell.",
    after_help = "Examples:\n  skiff demo                                   generate TPC-H SF 0.1 once and open the shell\n  skiff --data DIR -c \"SELECT count(*) FROM lineitem\"\n  skiff --data DIR -f queries.sql --format csv\n  skiff gen tpch --sf 1 --out DIR\n  skiff bench tpch --sf 1"
)]
pub struct Cli {
    #[command(flatten)]
    pub session: SessionArgs,

    /// Run this SQL (one or more statements) and exit.
    #[arg(short = 'c', long = "command", conflicts_with = "file")]
    pub command: Option<String>,

    /// Run the statements in this file and exit.
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,

    #[command(subcommand)]
    pub subcommand: Option<Command>,
}

/// How the session is set up; shared by the shell, -c, -f and bench.
#[derive(Args, Debug, Clone)]
pub struct SessionArgs {
    /// Data directory: every Parquet/CSV table in it is registered.
    /// Defaults to the embedded default directory ($SKIFF_HOME/data, or ~/.skiff/data).
    #[arg(long, global = true, env = "SKIFF_DATA")]
    pub data: Option<PathBuf>,

    /// Output format of query results.
    #[arg(long, value_enum, default_value_t = Format::Table, global = true)]
    pub format: Format,

    /// Memory limit for query execution, e.g. 512M or 4G; unbounded by default.
    #[arg(long, value_parser = parse_bytes, global = true)]
    pub memory_limit: Option<usize>,

    /// Partitions (parallelism) per pipeline; defaults to the number of cores.
    #[arg(long, global = true)]
    pub partitions: Option<usize>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Generate TPC-H SF 0.1 into the default data directory (first use only) and open the shell.
    Demo,
    /// Generate benchmark data as Parquet, one subdirectory per table.
    Gen(GenArgs),
    /// Measure Skiff against baselines on a benchmark.
    Bench(BenchArgs),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchmarkName {
    Tpch,
    Tpcds,
}

#[derive(Args, Debug)]
pub struct GenArgs {
    /// Which benchmark's tables to generate.
    #[arg(value_enum)]
    pub benchmark: BenchmarkName,
    /// Scale factor (1 = about 1 GB of raw data).
    #[arg(long, default_value_t = 1.0)]
    pub sf: f64,
    /// Output directory; one subdirectory per table is created in it.
    #[arg(long)]
    pub out: PathBuf,
    /// Replace tables that already exist in the output directory.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Which benchmark to run.
    #[arg(value_enum)]
    pub benchmark: BenchmarkName,
    /// Scale factor; data is generated under bench/data/ when missing.
    #[arg(long, default_value_t = 1.0)]
    pub sf: f64,
    /// Runs per query and engine (the first is a warm-up and not counted when > 1).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Only these queries (comma-separated numbers, e.g. 1,5,18).
    #[arg(long, value_delimiter = ',')]
    pub queries: Vec<usize>,
    /// Where CSV and PNG results go.
    #[arg(long, default_value = "bench/results")]
    pub results: PathBuf,
}

/// Parse a byte size such as `512M`, `4G`, `1.5GiB` or `1000000`.
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size like 512M or 4G"))?;
    let multiplier = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1u64,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        other => return Err(format!("unknown size unit '{other}' (use K, M, G or T)")),
    };
    let bytes = number * multiplier as f64;
    if !bytes.is_finite() || bytes < 1.0 {
        return Err(format!("'{text}' is not a positive size"));
    }
    Ok(bytes as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_bytes("1024"), Ok(1024));
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("1.5GiB"), Ok(3 << 29));
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("5X").is_err());
        assert!(parse_bytes("0").is_err());
    }
}
