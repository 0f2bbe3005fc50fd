//! The output directory: `OUT/<table>/part-N.parquet`.
//!
//! A table is written into `OUT/.tmp-<table>` and renamed to `OUT/<table>`
//! only when all its parts are complete, so a directory named after a table
//! is always a whole table. `.tmp-*` directories are ours by construction:
//! a stale one is left by a crash and is removed before writing again.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::GenError;

pub(crate) fn table_dir(out: &Path, table: &str) -> PathBuf {
    out.join(table)
}

pub(crate) fn staging_dir(out: &Path, table: &str) -> PathBuf {
    out.join(format!(".tmp-{table}"))
}

/// File name of part `part` of `parts`, zero-padded so that name order is
/// generation order.
pub(crate) fn part_file_name(part: usize, parts: usize) -> String {
    let width = parts.saturating_sub(1).to_string().len();
    format!("part-{part:0width$}.parquet")
}

/// Refuses, before anything is touched, when a table would be overwritten
/// without `force`.
pub(crate) fn check_overwrite(out: &Path, tables: &[&str], force: bool) -> Result<(), GenError> {
    if force {
        return Ok(());
    }
    let mut existing = Vec::new();
    for table in tables {
        let path = table_dir(out, table);
        match fs::symlink_metadata(&path) {
            Ok(_) => existing.push(path),
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(GenError::io(path, e)),
        }
    }
    match existing.len() {
        0 => Ok(()),
        n => Err(GenError::TableExists {
            path: existing.swap_remove(0),
            more: n - 1,
        }),
    }
}

/// Creates `out` and an empty staging directory for every table.
pub(crate) fn prepare(out: &Path, tables: &[&str]) -> Result<(), GenError> {
    fs::create_dir_all(out).map_err(|e| GenError::io(out, e))?;
    for table in tables {
        let staging = staging_dir(out, table);
        remove_if_present(&staging)?;
        fs::create_dir(&staging).map_err(|e| GenError::io(&staging, e))?;
    }
    Ok(())
}

/// Moves a finished table into place, replacing an older copy (only reached
/// with `force`, since [`check_overwrite`] ran first).
pub(crate) fn publish(out: &Path, table: &str) -> Result<(), GenError> {
    let staging = staging_dir(out, table);
    let dest = table_dir(out, table);
    remove_if_present(&dest)?;
    fs::rename(&staging, &dest).map_err(|e| GenError::io(&dest, e))
}

/// Best-effort removal of a staging directory after a failure; the failure
/// being reported matters more than a leftover `.tmp-*` directory, which the
/// next run removes anyway.
pub(crate) fn discard(out: &Path, table: &str) {
    let _ = fs::remove_dir_all(staging_dir(out, table));
}

fn remove_if_present(path: &Path) -> Result<(), GenError> {
    let result = match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => Err(e),
    };
    result.map_err(|e| GenError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_names_sort_in_part_order() {
        assert_eq!(part_file_name(0, 1), "part-0.parquet");
        assert_eq!(part_file_name(9, 10), "part-9.parquet");
        assert_eq!(part_file_name(3, 11), "part-03.parquet");
        assert_eq!(part_file_name(10, 11), "part-10.parquet");
    }
}
