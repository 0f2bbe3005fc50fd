//! Style rules that a test enforces so reviewers do not have to: see
//! `tests/tidy.rs` (house rules) and `tests/layers.rs` (module layers).
//! Owns no runtime code: only what those tests share.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively; unreadable directories are
/// skipped (the tests assert they found enough).
pub fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}
