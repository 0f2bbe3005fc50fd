//! Layers: a crate's modules import only from their own layer or below, and
//! never in a loop.
//!
//! The pod crate's modules are grouped by concern (directories), and its
//! layers run from the vocabulary every part shares up to a run. A module
//! that reaches up a layer, or two that import each other, is how an import
//! loop starts again; this test names the edge. Test modules may reach
//! anywhere and are not read: files named `tests.rs` and everything after a
//! `#[cfg(test)]` module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use skiff_tidy::rust_files;

/// skiff-pod's layers, lowest first. A pattern names a module; `x::*`
/// names every module below `x`. Every module must match one pattern.
const POD_LAYERS: &[(&str, &[&str])] = &[
    (
        "vocabulary",
        &[
            "constants",
            "error",
            "arch",
            "tpcc",
            "tpcc::schema",
            "tpcc::random",
            "tpcc::input",
        ],
    ),
    // The host stats record lives in the coherent region, so the layout
    // sizes it (`run::stats`); lock words are words of pod memory.
    (
        "memory",
        &["memory", "memory::*", "cc::lockword", "run::stats"],
    ),
    ("durability", &["durability", "durability::*"]),
    ("architectures", &["arch::dynamic", "arch::remote"]),
    (
        "transactions",
        &[
            "cc",
            "cc::txn",
            "tpcc::audit",
            "tpcc::check",
            "tpcc::delivery",
            "tpcc::load",
            "tpcc::neworder",
            "tpcc::order_status",
            "tpcc::payment",
            "tpcc::stock_level",
        ],
    ),
    ("run", &["", "run", "run::*"]),
];

/// `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`; `src/lib.rs` is "".
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?.with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") || parts.last().is_some_and(|p| p == "tests") {
        return None;
    }
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    Some(parts.join("::"))
}

/// The source without comments and without its trailing test module.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let next = lines.peek().map(|l| l.trim_start()).unwrap_or("");
        if line.trim() == "#[cfg(test)]"
            && (next.starts_with("mod ") || next.starts_with("pub(crate) mod "))
        {
            break;
        }
        let code = line.split("//").next().unwrap_or("");
        out.push_str(code);
        out.push('\n');
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `use` trees flattened: `a::{b, c::{d, e}}` is `a::b`, `a::c::d`, `a::c::e`.
fn flatten(tree: &str, prefix: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree).trim();
        let path = path.strip_suffix("::self").unwrap_or(path);
        if !path.is_empty() {
            out.push(format!("{prefix}{path}"));
        }
        return;
    };
    let head = &tree[..open];
    let inner = tree[open + 1..].trim_end().trim_end_matches('}');
    let (mut depth, mut start) = (0, 0);
    let mut items = Vec::new();
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    for item in items {
        let item = item.trim();
        if item == "self" {
            out.push(format!("{prefix}{}", head.trim_end_matches("::")));
        } else if !item.is_empty() {
            flatten(item, &format!("{prefix}{head}"), out);
        }
    }
}

/// Every path the code names that may be one of the crate's modules.
fn paths_in(code: &str, children: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = rest[..at].chars().next_back();
        let after = &rest[at + 4..];
        rest = after;
        if before.is_some_and(is_ident) {
            continue;
        }
        if let Some(end) = after.find(';') {
            flatten(&after[..end], "", &mut out);
        }
    }
    let starts: Vec<&str> = ["crate::", "super::"]
        .into_iter()
        .chain(children.iter().map(String::as_str))
        .collect();
    for start in starts {
        let needle = if start.ends_with("::") {
            start.to_string()
        } else {
            format!("{start}::")
        };
        let mut from = 0;
        while let Some(at) = code[from..].find(&needle) {
            let begin = from + at;
            from = begin + needle.len();
            if code[..begin]
                .chars()
                .next_back()
                .is_some_and(|c| is_ident(c) || c == ':')
            {
                continue;
            }
            let tail: String = code[begin..]
                .chars()
                .take_while(|&c| is_ident(c) || c == ':')
                .collect();
            out.push(tail);
        }
    }
    out
}

/// The module a path names, from module `me`: the longest known prefix.
fn resolve(me: &str, path: &str, modules: &BTreeSet<String>) -> Option<String> {
    let mut segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let own: Vec<&str> = me.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<&str> = match segs.first() {
        Some(&"crate") => {
            segs.remove(0);
            Vec::new()
        }
        Some(&"super") => {
            segs.remove(0);
            own[..own.len().saturating_sub(1)].to_vec()
        }
        Some(&"self") => {
            segs.remove(0);
            own.clone()
        }
        Some(first) if modules.contains(&child(me, first)) => own.clone(),
        _ => return None,
    };
    base.extend(segs);
    (0..=base.len())
        .rev()
        .map(|n| base[..n].join("::"))
        .find(|m| modules.contains(m))
}

fn child(me: &str, name: &str) -> String {
    if me.is_empty() {
        name.to_string()
    } else {
        format!("{me}::{name}")
    }
}

fn layer_of(module: &str, layers: &[(&str, &[&str])]) -> Option<usize> {
    layers.iter().position(|(_, patterns)| {
        patterns.iter().any(|p| match p.strip_suffix("::*") {
            Some(parent) => module.starts_with(&format!("{parent}::")),
            None => *p == module,
        })
    })
}

/// Module -> the crate's modules it imports.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let sources: BTreeMap<String, String> = files
        .iter()
        .filter_map(|f| {
            let m = module_of(src, f)?;
            Some((m, code_of(&std::fs::read_to_string(f).ok()?)))
        })
        .collect();
    let modules: BTreeSet<String> = sources.keys().cloned().collect();
    sources
        .iter()
        .map(|(me, code)| {
            let children: BTreeSet<String> = modules
                .iter()
                .filter_map(|m| {
                    let name = if me.is_empty() {
                        m.as_str()
                    } else {
                        m.strip_prefix(&format!("{me}::"))?
                    };
                    (!name.is_empty() && !name.contains("::")).then(|| name.to_string())
                })
                .collect();
            let targets = paths_in(code, &children)
                .iter()
                .filter_map(|p| resolve(me, p, &modules))
                .filter(|t| t != me && !me.starts_with(&format!("{t}::")) && !t.is_empty())
                .collect();
            (me.clone(), targets)
        })
        .collect()
}

/// A loop through `start`, if the graph has one.
fn cycle_from(start: &str, graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    let mut path = vec![start.to_string()];
    let mut seen = BTreeSet::new();
    fn walk(
        start: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
        graph: &BTreeMap<String, BTreeSet<String>>,
    ) -> bool {
        let last = path.last().cloned().unwrap_or_default();
        for next in graph.get(&last).into_iter().flatten() {
            if next == start {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(start, path, seen, graph) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    walk(start, &mut path, &mut seen, graph).then_some(path)
}

fn check_layers(src: &Path, layers: &[(&str, &[&str])]) -> Vec<String> {
    let graph = imports(src);
    assert!(graph.len() > 10, "found only {} modules", graph.len());
    let mut problems = Vec::new();
    for (module, targets) in &graph {
        let Some(mine) = layer_of(module, layers) else {
            problems.push(format!("`{module}` is in no layer: add it to the table"));
            continue;
        };
        for t in targets {
            if let Some(theirs) = layer_of(t, layers).filter(|&l| l > mine) {
                problems.push(format!(
                    "`{module}` ({}) imports `{t}` ({}), a layer above it",
                    layers[mine].0, layers[theirs].0
                ));
            }
        }
        if let Some(cycle) = cycle_from(module, &graph) {
            problems.push(format!("import loop: {} -> {module}", cycle.join(" -> ")));
        }
    }
    problems
}

#[test]
fn pod_modules_import_down_the_layers_without_a_loop() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../skiff-pod/src");
    let problems = check_layers(&src, POD_LAYERS);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The checker itself finds an upward import and a loop.
#[test]
fn the_checker_names_an_upward_import_and_a_loop() {
    let dir = std::env::temp_dir().join(format!("skiff-tidy-layers-{}", std::process::id()));
    let files = [
        ("lib.rs", "mod low;\nmod high;\n"),
        ("low.rs", "use crate::high::Thing;\n"),
        ("high/mod.rs", "pub(crate) mod part;\nuse part::X;\n"),
        ("high/part.rs", "use crate::{low, high::Y};\n"),
    ];
    std::fs::create_dir_all(dir.join("high")).expect("temp dir");
    for n in 0..9 {
        std::fs::write(dir.join(format!("filler{n}.rs")), "").expect("write");
    }
    for (name, text) in files {
        std::fs::write(dir.join(name), text).expect("write");
    }
    let mut layers: Vec<(&str, &[&str])> = vec![("low", &["low"]), ("high", &["high", "high::*"])];
    layers.push((
        "rest",
        &["", "filler0", "filler1", "filler2", "filler3", "filler4"],
    ));
    layers.push(("more", &["filler5", "filler6", "filler7", "filler8"]));
    let problems = check_layers(&dir, &layers);
    let _ = std::fs::remove_dir_all(&dir);
    let text = problems.join("\n");
    assert!(text.contains("`low` (low) imports `high` (high)"), "{text}");
    assert!(text.contains("import loop"), "{text}");
    assert!(!text.contains("in no layer"), "{text}");
}
