//! Tidy: repository-wide rules checked on every test run.
//!
//! - no leftover debugging or placeholders (the debug-print, to-do and
//!   unimplemented macros, fix-me notes);
//! - no bare `tokio::spawn` (use DataFusion's `SpawnedTask`, which aborts the
//!   task when dropped) and no unbounded channels on the data path;
//! - lines of at most 100 columns, as rustfmt is configured to produce.

use std::path::Path;

use skiff_tidy::rust_files;

const LINE_COLUMNS_MAX: usize = 100;

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
