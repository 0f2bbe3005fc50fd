//! A remote tier between the buffer pool and storage: memory nodes that
//! hold tables' columns (pipeline groups,
//! `../shared/papers/pipeline-groups-disaggregated.txt`). A buffered scan
//! asks it for the projected columns of a row group the pool does not hold
//! before it reads the file; what it gets is checked, kept in the pool like
//! a decoded block, and what it does not get (a column not held, a node
//! gone, a late or corrupt answer) is read from storage. A scan may send
//! its predicate along ([`Prune`]): the node then sends only the rows that
//! the min/max of its chunks do not rule out. The engine knows only this
//! trait; the server's workers implement it over Flight.

use std::fmt;
use std::ops::Range;
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

/// A scan's predicate, for the remote tier to leave out rows with;
/// encoded once per file, as every row group's request carries it.
#[derive(Clone, Debug)]
pub struct Prune {
    /// A DataFusion `PhysicalExprNode`, without dynamic parts (a snapshot
    /// as of the file's opening).
    pub predicate: Vec<u8>,
    /// The schema its columns index (the table's), a DataFusion protobuf
    /// `Schema`.
    pub schema: Vec<u8>,
    /// The predicate's columns held in the file: name and top-level index
    /// in the file's schema.
    pub columns: Vec<(Arc<str>, usize)>,
}

/// Every row of a row group of `rows` rows, as [`Pruned`] names rows (no
/// range for none).
pub fn every_row(rows: usize) -> Vec<Range<usize>> {
    std::iter::once(0..rows).filter(|r| !r.is_empty()).collect()
}

/// Some rows of one row group: the rows (sorted, disjoint ranges) and, for
/// each asked column, those rows of it or `None` (not held there).
pub type Pruned = Result<(Vec<Range<usize>>, Vec<Option<ArrayRef>>), String>;

/// Where tables' columns are held outside the process.
pub trait ChunkSource: Send + Sync + fmt::Debug {
    /// Whether some file of the table at `table` is held (so that its scans
    /// are worth reading through the tier even without a pool).
    fn holds(&self, table: &str) -> bool;

    /// The asked columns, when the file version is held somewhere; `None`
    /// when it is not (the scan reads storage at once).
    fn fetch(&self, fetch: ChunkFetch) -> Option<BoxFuture<'static, Fetched>>;

    /// The asked columns of the rows `prune` may keep, when the file
    /// version is held somewhere and this tier prunes; `None` otherwise
    /// (the scan then asks [`ChunkSource::fetch`]).
    fn fetch_pruned(
        &self,
        _fetch: ChunkFetch,
        _prune: Arc<Prune>,
    ) -> Option<BoxFuture<'static, Pruned>> {
        None
    }
}

/// The remote tier a session's scans read through (a session extension).
#[derive(Clone, Debug)]
pub struct RemoteTier(pub Arc<dyn ChunkSource>);
