//! Registering a data directory: every Parquet or CSV table found in it
//! becomes a table of the session.
//!
//! A table is a subdirectory holding a Delta table (a `_delta_log`: a
//! managed table, see `skiff_tables`), a subdirectory holding `*.parquet`
//! (or `*.csv`) files — the layout `skiff gen` writes — or a single
//! `NAME.parquet` / `NAME.csv` file. Hidden entries (a leading `.`) are skipped: `skiff gen` writes
//! tables there before renaming them into place.

use std::path::{Path, PathBuf};

use datafusion::common::Result;
use datafusion::error::DataFusionError;
use datafusion::prelude::{CsvReadOptions, ParquetReadOptions, SessionContext};

/// The database's name: the default catalog, which PostgreSQL clients see
/// as `current_database()` and in `pg_database`.
pub const DATABASE: &str = "skiff";
/// The schema of Skiff's own tables (`skiff.table_history`, and the
/// server's `skiff.queries`, ...).
pub const SYSTEM_SCHEMA: &str = "skiff";

/// The schema unqualified names resolve in.
pub const DEFAULT_SCHEMA: &str = "public";

/// Why a data directory could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("data directory {0} does not exist or is not a directory")]
    NotADirectory(PathBuf),
    #[error("cannot list {path}: {source}")]
    List {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot resolve {path}: {source}")]
    Resolve {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0} mixes Parquet and CSV files; a table holds one format")]
    MixedFormats(PathBuf),
    #[error("path {0} is not valid UTF-8")]
    NotUtf8(PathBuf),
}

impl From<CatalogError> for DataFusionError {
    fn from(e: CatalogError) -> Self {
        DataFusionError::External(Box::new(e))
    }
}

fn list(dir: &Path) -> Result<Vec<PathBuf>> {
    let listing = |e| CatalogError::List {
        path: dir.to_path_buf(),
        source: e,
    };
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(listing)? {
        paths.push(entry.map_err(listing)?.path());
    }
    Ok(paths)
}

/// The file format of a registered table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableFormat {
    Parquet,
    Csv,
    /// A managed table: a Delta table Skiff writes.
    Delta,
}

/// A table found in a data directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundTable {
    pub name: String,
    pub path: PathBuf,
    pub format: TableFormat,
}

/// Tables in `dir`, sorted by name. Reads only the directory listing.
pub fn discover(dir: &Path) -> Result<Vec<FoundTable>> {
    if !dir.is_dir() {
        return Err(CatalogError::NotADirectory(dir.to_path_buf()).into());
    }
    let mut tables = Vec::new();
    for path in list(dir)? {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let found = if path.is_dir() && skiff_tables::is_delta_table(&path) {
            Some((name.to_string(), TableFormat::Delta))
        } else if path.is_dir() {
            directory_format(&path)?.map(|format| (name.to_string(), format))
        } else {
            file_format(&path).and_then(|format| {
                let stem = path.file_stem()?.to_str()?;
                Some((stem.to_string(), format))
            })
        };
        if let Some((name, format)) = found {
            tables.push(FoundTable { name, path, format });
        }
    }
    tables.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(tables)
}

fn file_format(path: &Path) -> Option<TableFormat> {
    // Exact lowercase only: DataFusion's listing matches the extension
    // case-sensitively, so `b.PARQUET` would silently not be read.
    match path.extension()?.to_str()? {
        "parquet" => Some(TableFormat::Parquet),
        "csv" => Some(TableFormat::Csv),
        _ => None,
    }
}

/// The format of the files in a table directory; mixing formats is an error
/// because a listing table reads one format.
fn directory_format(dir: &Path) -> Result<Option<TableFormat>> {
    let mut format = None;
    for path in list(dir)? {
        let Some(found) = file_format(&path) else {
            continue;
        };
        match format {
            None => format = Some(found),
            Some(f) if f == found => {}
            Some(_) => return Err(CatalogError::MixedFormats(dir.to_path_buf()).into()),
        }
    }
    Ok(format)
}

/// `name` as a quoted SQL identifier, which keeps its case:
/// `Orders.parquet` is the table "Orders".
pub(crate) fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Register every table of `dir` in `ctx`; returns what was registered.
pub async fn register_data_dir(ctx: &SessionContext, dir: &Path) -> Result<Vec<FoundTable>> {
    let tables = discover(dir)?;
    for table in &tables {
        let Some(path) = table.path.to_str() else {
            return Err(CatalogError::NotUtf8(table.path.clone()).into());
        };
        let name = quoted(&table.name);
        match table.format {
            TableFormat::Parquet => {
                let options = ParquetReadOptions::default();
                ctx.register_parquet(name.as_str(), path, options).await?
            }
            TableFormat::Csv => {
                let options = CsvReadOptions::new()
                    .has_header(true)
                    .file_extension(".csv");
                ctx.register_csv(name.as_str(), path, options).await?
            }
            TableFormat::Delta => {
                let resolve = |source| CatalogError::Resolve {
                    path: table.path.clone(),
                    source,
                };
                let absolute = std::fs::canonicalize(&table.path).map_err(resolve)?;
                // A canonical path is absolute, which is all a file URL needs.
                let url = url::Url::from_directory_path(&absolute)
                    .map_err(|()| CatalogError::NotUtf8(absolute.clone()))?;
                let managed = skiff_tables::ManagedTable::open(&table.name, url).await?;
                ctx.register_table(name.as_str(), std::sync::Arc::new(managed))?;
            }
        }
    }
    Ok(tables)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"").unwrap();
    }

    #[test]
    fn finds_table_directories_and_files_and_skips_hidden_ones() {
        let dir = tempfile::tempdir().unwrap();
        touch(&dir.path().join("lineitem/part-0.parquet"));
        touch(&dir.path().join("lineitem/part-1.parquet"));
        touch(&dir.path().join("events/a.csv"));
        touch(&dir.path().join("Nation.parquet"));
        touch(&dir.path().join("notes.txt"));
        touch(&dir.path().join(".tmp-orders/part-0.parquet"));
        std::fs::create_dir_all(dir.path().join("empty")).unwrap();
        let found = discover(dir.path()).unwrap();
        let summary: Vec<(&str, TableFormat)> =
            found.iter().map(|t| (t.name.as_str(), t.format)).collect();
        assert_eq!(
            summary,
            vec![
                ("Nation", TableFormat::Parquet),
                ("events", TableFormat::Csv),
                ("lineitem", TableFormat::Parquet),
            ]
        );
    }

    #[test]
    fn rejects_a_missing_directory_and_mixed_formats() {
        let dir = tempfile::tempdir().unwrap();
        let missing = discover(&dir.path().join("nope")).unwrap_err().to_string();
        assert!(missing.contains("does not exist"), "{missing}");
        touch(&dir.path().join("t/a.csv"));
        touch(&dir.path().join("t/b.parquet"));
        let mixed = discover(dir.path()).unwrap_err().to_string();
        assert!(mixed.contains("mixes Parquet and CSV"), "{mixed}");
    }
}
