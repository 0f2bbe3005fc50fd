//! What stops a bench.

use std::path::PathBuf;

/// What can stop a benchmark before or after it measures. A query that fails
/// is not one of these: it is measured as failed and reported.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Data(String),
    #[error("cannot generate the data: {0}")]
    Gen(#[from] skiff_gen::GenError),
    #[error("{0}")]
    Queries(String),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot plot {path}: {message}")]
    Plot { path: PathBuf, message: String },
}
