//! What a generation is asked for, what it reports, and what it wrote.

use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Benchmark {
    Tpch,
    Tpcds,
    /// One table, `particles` (the SmartNIC paper's data set).
    Particles,
}

pub struct GenOptions {
    /// Scale factor; 1.0 is about 1 GB of raw data. Must be finite and > 0.
    pub sf: f64,
    /// Directory that receives one subdirectory per table.
    pub out: PathBuf,
    /// Replace table directories that already exist instead of refusing.
    pub force: bool,
}

/// Progress reporting for [`crate::generate`].
///
/// Called from generator threads; must be cheap.
pub trait GenProgress: Send + Sync {
    /// Called once, before any rows: the estimated total rows over all tables.
    fn start(&self, total_rows: u64);
    /// Called after every batch (a few thousand rows) written to `table`.
    fn advance(&self, table: &str, rows: u64);
}

/// What [`crate::generate`] wrote.
pub struct GenSummary {
    /// `(table, rows, bytes on disk)`, in [`crate::table_names`] order.
    pub tables: Vec<(String, u64, u64)>,
}

/// A [`GenProgress`] that reports nothing.
pub struct NoProgress;

impl GenProgress for NoProgress {
    fn start(&self, _total_rows: u64) {}
    fn advance(&self, _table: &str, _rows: u64) {}
}
