//! Tidy: repository-wide rules checked on every test run.
//!
//! - no leftover debugging or placeholders (the debug-print, to-do and
//!   unimplemented macros, fix-me notes);
//! - no bare `tokio::spawn` (use DataFusion's `SpawnedTask`, which aborts the
//!   task when dropped) and no unbounded channels on the data path;
//! - lines of at most 100 columns, as rustfmt is configured to produce;
//! - no crate's `src` over `CRATE_LINES_MAX` lines (its in-crate tests
//!   not counted): a crate that grows past it holds more than one job.

use std::path::Path;

use skiff_tidy::{TestItem, is_test_file, rust_files, test_item};

const LINE_COLUMNS_MAX: usize = 100;

/// Lines of a crate's `src`, in-crate tests not counted (files named
/// `tests.rs` or `*_tests.rs`, and everything after a `#[cfg(test)]`
/// module).
const CRATE_LINES_MAX: usize = 12_000;

/// Crates over [`CRATE_LINES_MAX`] today, each with the most lines it may
/// have until it is split: the list only shrinks, and a crate under the
/// limit must leave it.
const LARGE_TODAY: &[(&str, usize)] = &[];

/// (needle, why) — built from pieces so this file does not match itself.
fn banned() -> Vec<(String, &'static str)> {
    vec![
        (["dbg", "!("].concat(), "leftover debugging"),
        (["todo", "!("].concat(), "unfinished code"),
        (["unimplemented", "!("].concat(), "unfinished code"),
        (["FIX", "ME"].concat(), "leftover note"),
        (
            ["tokio::", "spawn("].concat(),
            "use SpawnedTask, which aborts on drop",
        ),
        (
            ["unbounded_", "channel"].concat(),
            "every queue needs a bound",
        ),
    ]
}

#[test]
fn sources_follow_the_house_rules() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    rust_files(&crates, &mut files);
    assert!(files.len() > 10, "found only {} files", files.len());
    let banned = banned();
    let mut problems = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read source");
        for (number, line) in text.lines().enumerate() {
            let at = format!("{}:{}", file.display(), number + 1);
            if line.chars().count() > LINE_COLUMNS_MAX {
                problems.push(format!("{at}: longer than {LINE_COLUMNS_MAX} columns"));
            }
            for (needle, why) in &banned {
                if line.contains(needle.as_str()) {
                    problems.push(format!("{at}: `{needle}`: {why}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Lines of `file` that count towards its crate's size.
fn counted_lines(file: &Path) -> usize {
    let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned());
    if stem.is_some_and(|s| is_test_file(&s)) {
        return 0;
    }
    lines_before_tests(&std::fs::read_to_string(file).expect("read source"))
}

/// Lines of `text` before its inline test module (`#[cfg(test)]` then
/// `mod name {`); a declaration of a test module in a file of its own
/// (`#[cfg(test)]` then `mod name;`) does not end the count.
fn lines_before_tests(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .iter()
        .enumerate()
        .position(|(i, line)| {
            let next = lines.get(i + 1).copied().unwrap_or("");
            line.trim() == "#[cfg(test)]" && matches!(test_item(next), TestItem::Inline)
        })
        .unwrap_or(lines.len())
}

#[test]
fn no_crate_outgrows_one_job() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut sizes = Vec::new();
    for entry in std::fs::read_dir(&crates)
        .expect("the crates directory")
        .flatten()
    {
        let src = entry.path().join("src");
        if !src.is_dir() {
            continue;
        }
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let lines: usize = files.iter().map(|f| counted_lines(f)).sum();
        sizes.push((entry.file_name().to_string_lossy().into_owned(), lines));
    }
    assert!(sizes.len() > 10, "found only {} crates", sizes.len());
    let mut problems = Vec::new();
    for (name, _) in LARGE_TODAY {
        if !sizes.iter().any(|(c, _)| c == name) {
            problems.push(format!("LARGE_TODAY names {name}, which is no crate"));
        }
    }
    for (name, lines) in &sizes {
        let allowed = LARGE_TODAY
            .iter()
            .find(|(c, _)| c == name)
            .map_or(CRATE_LINES_MAX, |&(_, most)| most);
        if *lines > allowed {
            problems.push(format!("{name}: {lines} lines of src, more than {allowed}"));
        }
        if allowed > CRATE_LINES_MAX && *lines <= CRATE_LINES_MAX {
            problems.push(format!(
                "{name}: {lines} lines now: remove it from LARGE_TODAY"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The count stops at an inline test module, not at a declared one.
#[test]
fn only_tests_are_left_out_of_a_crates_size() {
    let text = "use a;\n#[cfg(test)]\nmod helpers;\nfn f() {}\n#[cfg(test)]\nmod tests {\n}\n";
    assert_eq!(lines_before_tests(text), 4);
    assert_eq!(lines_before_tests("fn f() {}\n"), 1);
}
