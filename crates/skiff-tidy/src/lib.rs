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

/// Whether a file stem names a file of tests (`tests`, `*_tests`), which
/// counts neither as a module nor towards its crate's size.
pub fn is_test_file(stem: &str) -> bool {
    stem == "tests" || stem.ends_with("_tests")
}

/// What the line `next` after a `#[cfg(test)]` line is: a test module in the file
/// (everything after it is tests), or the declaration of one in a file of
/// its own (named by it), or anything else.
pub enum TestItem<'a> {
    Inline,
    Declared(&'a str),
    Other,
}

pub fn test_item(next: &str) -> TestItem<'_> {
    let next = next.trim_start();
    let rest = match next.strip_prefix("pub") {
        Some(rest) if rest.starts_with('(') => rest.split_once(')').map_or("", |(_, r)| r),
        Some(rest) => rest,
        None => next,
    };
    let Some(rest) = rest.trim_start().strip_prefix("mod ") else {
        return TestItem::Other;
    };
    let name = rest.trim_start();
    let end = name
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(name.len());
    if name[end..].trim_start().starts_with(';') {
        TestItem::Declared(&name[..end])
    } else {
        TestItem::Inline
    }
}
