//! The options several commands share: the session's (data directory,
//! partitions, memory limit) and the output format.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use skiff_engine::options::parse_bytes;

/// How the shell's session is set up (`skiff`, `-c`, `-f`). Subcommands
/// take the few of these they use as their own options (see [`DataArg`],
/// [`PartitionsArg`], [`MemoryLimitArg`]); given before the subcommand
/// (`skiff --data DIR serve`) they still apply, the subcommand's own win.
#[derive(Args, Debug, Clone)]
pub struct SessionArgs {
    #[command(flatten)]
    pub data: DataArg,

    /// Output format of query results.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,

    #[command(flatten)]
    pub memory: MemoryLimitArg,

    #[command(flatten)]
    pub partitions: PartitionsArg,

    /// Run statements with DataFusion's streaming executor instead of
    /// Skiff's pipelines (for comparisons; no progress, no EXPLAIN PIPELINES).
    #[arg(long, hide = true)]
    pub streaming: bool,
}

impl SessionArgs {
    /// These arguments with a subcommand's own in place of the ones given
    /// before it.
    pub fn with(
        &self,
        data: Option<&DataArg>,
        partitions: Option<&PartitionsArg>,
        memory: Option<&MemoryLimitArg>,
    ) -> SessionArgs {
        let mut merged = self.clone();
        if let Some(path) = data.and_then(|d| d.data.clone()) {
            merged.data.data = Some(path);
        }
        if let Some(n) = partitions.and_then(|p| p.partitions) {
            merged.partitions.partitions = Some(n);
        }
        if let Some(bytes) = memory.and_then(|m| m.memory_limit) {
            merged.memory.memory_limit = Some(bytes);
        }
        if let Some(bytes) = memory.and_then(|m| m.cache_memory) {
            merged.memory.cache_memory = Some(bytes);
        }
        merged
    }

    /// `--data`, else `SKIFF_DATA`. The variable is read here, after the
    /// flags are merged, so that a flag given anywhere beats it.
    pub fn data(&self) -> Option<PathBuf> {
        self.data
            .data
            .clone()
            .or_else(|| std::env::var_os(DATA_ENV).map(PathBuf::from))
    }

    pub fn partitions(&self) -> Option<usize> {
        self.partitions.partitions
    }

    pub fn memory_limit(&self) -> Option<usize> {
        self.memory.memory_limit
    }

    pub fn cache_memory(&self) -> Option<usize> {
        self.memory.cache_memory
    }
}

/// The environment variable that stands for `--data` when no flag is given.
pub const DATA_ENV: &str = "SKIFF_DATA";

/// `--data`.
#[derive(Args, Debug, Clone, Default)]
pub struct DataArg {
    /// Data directory (or s3://bucket/prefix): every Parquet/CSV table in
    /// it is registered. Without it, $SKIFF_DATA, else the embedded default
    /// directory ($SKIFF_HOME/data, or ~/.skiff/data).
    #[arg(long)]
    pub data: Option<PathBuf>,
}

/// `--partitions`.
#[derive(Args, Debug, Clone, Default)]
pub struct PartitionsArg {
    /// Partitions (parallelism) per pipeline; defaults to the number of
    /// cores. A worker also computes on this many threads.
    #[arg(long)]
    pub partitions: Option<usize>,
}

/// `--memory-limit`.
#[derive(Args, Debug, Clone, Default)]
pub struct MemoryLimitArg {
    /// Memory limit for query execution, e.g. 512M or 4G; unbounded by
    /// default.
    #[arg(long, value_parser = parse_bytes)]
    pub memory_limit: Option<usize>,
    /// Memory of the buffer pool (decoded blocks of tables' files kept
    /// for later scans), e.g. 2G; 0 turns it off. By default a quarter of
    /// the machine's memory (shared by `serve`'s workers), at most half
    /// of --memory-limit.
    #[arg(long, value_parser = parse_bytes)]
    pub cache_memory: Option<usize>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
}
