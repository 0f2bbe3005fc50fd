use std::path::PathBuf;

/// Why [`crate::generate`] failed. Each `Display` is one self-contained line
/// that already includes the underlying cause, so callers print it as is.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    #[error("scale factor must be a finite number greater than 0, got {0}")]
    BadScaleFactor(f64),

    #[error(
        "{} already exists{}; refusing to overwrite without force",
        path.display(),
        more_text(*more)
    )]
    TableExists { path: PathBuf, more: usize },

    #[error("I/O error on {}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },

    #[error("writing Parquet file {}: {error}", path.display())]
    Parquet {
        path: PathBuf,
        error: parquet::errors::ParquetError,
    },

    #[error("building Arrow data for table {table}: {error}")]
    Arrow {
        table: String,
        error: arrow::error::ArrowError,
    },

    /// The generator produced something this crate cannot represent. A bug in
    /// the generator or in this crate, never a user error.
    #[error("generator for table {table}: {message}")]
    Generator { table: String, message: String },

    #[error("a generator thread panicked while writing table {table}")]
    Panicked { table: String },
}

fn more_text(more: usize) -> String {
    match more {
        0 => String::new(),
        1 => " (and 1 more table directory)".to_string(),
        n => format!(" (and {n} more table directories)"),
    }
}

impl GenError {
    pub(crate) fn io(path: impl Into<PathBuf>, error: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            error,
        }
    }
}
