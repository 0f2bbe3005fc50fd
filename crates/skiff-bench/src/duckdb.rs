//! DuckDB as a baseline: a python3 process per query runs `duckdb_child.py`
//! over the same files, registered as views, and reports like a Rust child.
//!
//! DuckDB is optional: without python3 and its `duckdb` module the benchmark
//! still runs and says why DuckDB is missing.

use std::path::Path;
use std::process::{Command, Stdio};

use serde::Serialize;
use skiff_engine::catalog::{self, TableFormat};

/// The driver; passed with `python3 -c` so nothing is written to disk.
const DRIVER: &str = include_str!("duckdb_child.py");

/// Whether DuckDB can run here: its version, or why not.
pub fn probe() -> Result<String, String> {
    let output = Command::new("python3")
        .args(["-c", "import duckdb; print(duckdb.__version__)"])
        .stdin(Stdio::null())
        .output();
    match output {
        Ok(out) if out.status.success() => {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        }
        Ok(_) => Err(missing_module_note()),
        Err(e) => Err(format!("python3 cannot be started ({e})")),
    }
}

fn missing_module_note() -> String {
    // A duckdb CLI alone cannot report per-query peak memory the same way,
    // so it is mentioned but not used.
    let cli = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("duckdb").is_file()));
    let hint = "install it with `pip install duckdb`";
    if cli {
        format!(
            "python3 cannot import the duckdb module ({hint}); the duckdb CLI on \
             PATH is not used because it cannot report per-query peak memory"
        )
    } else {
        format!("python3 cannot import the duckdb module ({hint})")
    }
}

#[derive(Serialize)]
struct Table {
    name: String,
    path: String,
    format: &'static str,
    is_dir: bool,
}

#[derive(Serialize)]
struct Job<'a> {
    tables: Vec<Table>,
    statements: &'a [&'a str],
    runs: u32,
    threads: usize,
    memory_limit: Option<usize>,
    /// A database file to work in; in memory when `None`.
    database: Option<&'a str>,
    /// The tables copied into `database` (once, before the timed runs)
    /// rather than views over the files.
    native: bool,
}

/// The command for one query, and the job to write to its stdin.
pub fn command(
    data: &Path,
    statements: &[&str],
    runs: u32,
    threads: usize,
    memory_limit: Option<usize>,
    database: Option<&str>,
    native: bool,
) -> Result<(Command, String), String> {
    let tables = catalog::discover(data)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|table| {
            let path = table
                .path
                .to_str()
                .ok_or_else(|| format!("path {} is not valid UTF-8", table.path.display()))?
                .to_string();
            Ok(Table {
                name: table.name,
                is_dir: table.path.is_dir(),
                path,
                format: match table.format {
                    TableFormat::Parquet => "parquet",
                    TableFormat::Csv => "csv",
                    TableFormat::Delta => "delta",
                },
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let job = Job {
        tables,
        statements,
        runs,
        threads,
        memory_limit,
        database,
        native,
    };
    let job = serde_json::to_string(&job).map_err(|e| format!("cannot encode the job: {e}"))?;
    let mut command = Command::new("python3");
    command.args(["-c", DRIVER]);
    Ok((command, job))
}
