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
        if is_conflict(&e) {
            TableError::Conflict {
                table: table.to_string(),
                detail: e.to_string(),
            }
        } else {
            TableError::Delta {
                table: table.to_string(),
                source: e,
            }
        }
    }
}

impl From<TableError> for DataFusionError {
    fn from(e: TableError) -> Self {
        DataFusionError::External(Box::new(e))
    }
}

/// Another writer committed first: a conflicting change, or (after
/// deltalake's retries) always a newer version than this commit's.
fn is_conflict(e: &DeltaTableError) -> bool {
    matches!(
        e,
        DeltaTableError::Transaction {
            source: CommitConflict(_) | MaxCommitAttempts(_),
        } | DeltaTableError::VersionAlreadyExists(_)
    )
}

/// The message of a commit conflict inside `e`: a managed table's, or
/// deltalake's own from a write it ran itself (`INSERT`'s sink).
pub fn conflict(e: &DataFusionError) -> Option<String> {
    let mut current: &(dyn std::error::Error + 'static) = e;
    loop {
        if let Some(found @ TableError::Conflict { .. }) = current.downcast_ref::<TableError>() {
            return Some(found.to_string());
        }
        if let Some(delta) = current.downcast_ref::<DeltaTableError>()
            && is_conflict(delta)
        {
            let why = match delta {
                DeltaTableError::Transaction {
                    source: MaxCommitAttempts(n),
                } => format!("other writers committed first, {n} times over"),
                other => other.to_string(),
            };
            return Some(format!(
                "could not serialize access to a table: {why}; nothing was written, retry"
            ));
        }
        current = current.source()?;
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
