//! What can go wrong with a managed table, in words a user can act on.

use datafusion::error::DataFusionError;
use deltalake_core::DeltaTableError;
use deltalake_core::kernel::transaction::TransactionError::{CommitConflict, MaxCommitAttempts};

/// A managed table's failure. Travels inside `DataFusionError::External`
/// so front doors can give each kind its SQLSTATE.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// Another statement committed a conflicting change first; the
    /// statement changed nothing and may be retried.
    #[error(
        "could not serialize access to table \"{table}\": {detail}; nothing was written, retry"
    )]
    Conflict { table: String, detail: String },
    #[error("relation \"{0}\" already exists")]
    Exists(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("table \"{table}\": {source}")]
    Delta {
        table: String,
        #[source]
        source: DeltaTableError,
    },
    #[error("{0}")]
    Io(String),
    /// A value or row of loaded data that does not fit the table: where it
    /// is (source, line, column) and why.
    #[error("{0}")]
    BadInput(String),
}

impl TableError {
    /// Wrap a Delta error, telling commit conflicts from the rest.
    pub(crate) fn delta(table: &str, e: DeltaTableError) -> Self {
        match &e {
            DeltaTableError::Transaction {
                source: CommitConflict(_) | MaxCommitAttempts(_),
            }
            | DeltaTableError::VersionAlreadyExists(_) => TableError::Conflict {
                table: table.to_string(),
                detail: e.to_string(),
            },
            _ => TableError::Delta {
                table: table.to_string(),
                source: e,
            },
        }
    }
}

impl From<TableError> for DataFusionError {
    fn from(e: TableError) -> Self {
        DataFusionError::External(Box::new(e))
    }
}

/// The managed-table error inside `e`, if there is one.
pub fn find(e: &DataFusionError) -> Option<&TableError> {
    let mut current: &(dyn std::error::Error + 'static) = e;
    loop {
        if let Some(found) = current.downcast_ref::<TableError>() {
            return Some(found);
        }
        current = current.source()?;
    }
}
