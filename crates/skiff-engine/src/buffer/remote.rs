//! A remote tier between the buffer pool and storage: memory nodes that
//! hold tables' columns (pipeline groups,
//! `../shared/papers/pipeline-groups-disaggregated.txt`). A buffered scan
//! asks it for the projected columns of a row group the pool does not hold
//! before it reads the file; what it gets is checked, kept in the pool like
//! a decoded block, and what it does not get (a column not held, a node
//! gone, a late or corrupt answer) is read from storage. The engine knows
//! only this trait; the server's workers implement it over Flight.

use std::fmt;
use std::sync::Arc;

use arrow::array::ArrayRef;
use futures::future::BoxFuture;

use super::pool::FileVersion;

/// What a scan asks of the remote tier: some columns of one row group.
#[derive(Clone, Debug)]
pub struct ChunkFetch {
    /// The table's location, as the pool names it.
    pub table: Arc<str>,
    pub file: Arc<FileVersion>,
    pub row_group: usize,
    /// Top-level column indices in the file's schema.
    pub columns: Vec<usize>,
    /// Their names, aligned with `columns`.
    pub names: Vec<Arc<str>>,
    /// Rows of the row group.
    pub rows: usize,
}

/// Columns of one row group, each whole or `None` (not held there).
pub type Fetched = Result<Vec<Option<ArrayRef>>, String>;

/// Where tables' columns are held outside the process.
pub trait ChunkSource: Send + Sync + fmt::Debug {
    /// Whether some file of the table at `table` is held (so that its scans
    /// are worth reading through the tier even without a pool).
    fn holds(&self, table: &str) -> bool;

    /// The asked columns, when the file version is held somewhere; `None`
    /// when it is not (the scan reads storage at once).
    fn fetch(&self, fetch: ChunkFetch) -> Option<BoxFuture<'static, Fetched>>;
}

/// The remote tier a session's scans read through (a session extension).
#[derive(Clone, Debug)]
pub struct RemoteTier(pub Arc<dyn ChunkSource>);
