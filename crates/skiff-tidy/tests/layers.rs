//! Layers: a crate's modules import only from their own layer or below, and
//! no crate's modules import each other in a loop.
//!
//! Every crate is read for loops; a crate with a table of layers (the
//! pod's modules are grouped by concern, and its layers run from the
//! vocabulary every part shares up to a run) also for upward imports. A
//! module that reaches up a layer, or two that import each other, is how
//! an import loop starts; these tests name the edge. Test modules may
//! reach anywhere and are not read: files named `tests.rs` or
//! `*_tests.rs` and everything after a `#[cfg(test)]` module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use skiff_tidy::{TestItem, is_test_file, rust_files, test_item};

/// skiff-pod's layers, lowest first. A pattern names a module; `x::*`
/// names every module below `x`. Every module must match one pattern. The
/// two lowest layers, the vocabulary and the memory, are
/// `skiff-pod-memory` (`POD_MEMORY_LAYERS`); `arch` and `tpcc` here are
/// the parents of the modules left (and TPC-C's row keys).
const POD_LAYERS: &[(&str, &[&str])] = &[
    ("vocabulary", &["arch", "tpcc"]),
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

/// skiff-pod-memory's layers, lowest first: the vocabulary, the memory
/// (the host stats record lives in the coherent region, so the layout
/// sizes it; lock words are words of pod memory), and a run's
/// configuration, which resolves into the memory's parameters.
const POD_MEMORY_LAYERS: &[(&str, &[&str])] = &[
    (
        "vocabulary",
        &["constants", "error", "arch", "tpcc", "tpcc::*"],
    ),
    ("memory", &["memory", "memory::*", "lockword", "stats"]),
    ("configuration", &["config", "testing", ""]),
];

/// skiff-coordinator's layers, lowest first: what the state is made of,
/// the state, the handle every action holds, the actions, the views over
/// them, and the services and the statement path on top.
const COORDINATOR_LAYERS: &[(&str, &[&str])] = &[
    (
        "vocabulary",
        &[
            "auth",
            "batcher",
            "catalog_store",
            "claims",
            "config",
            "cost",
            "membership",
            "memory_tables",
            "placement",
            "stage_commits",
            "stage_reuse",
            "window_keys",
            "workers",
        ],
    ),
    (
        "state",
        &[
            "matching",
            "metrics",
            "partitions",
            "pg_catalog",
            "queries",
            "session",
        ],
    ),
    ("handle", &["inner"]),
    (
        "actions",
        &[
            "copy",
            "dispatch",
            "distributed",
            "fragments",
            "relay",
            "rerun",
            "resize",
            "vacate",
        ],
    ),
    (
        "views",
        &["buffer_view", "groups_view", "memory_view", "system_tables"],
    ),
    ("services", &["", "cluster_service"]),
];

/// `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`; `src/lib.rs` (or a
/// binary's `src/main.rs`) is "". Test files are no module.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?.with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let is_root = parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main");
    if is_root || parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts.first().is_some_and(|p| p == "bin") || parts.last().is_some_and(|p| is_test_file(p)) {
        return None;
    }
    Some(parts.join("::"))
}

/// The source without comments, without the test module it ends with and
/// without declarations of test modules; and the names those declare.
fn code_of(text: &str) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut test_modules = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" {
            match test_item(lines.peek().copied().unwrap_or("")) {
                TestItem::Inline => break,
                TestItem::Declared(name) => {
                    test_modules.push(name.to_string());
                    lines.next();
                    continue;
                }
                TestItem::Other => {}
            }
        }
        let code = line.split("//").next().unwrap_or("");
        out.push_str(code);
        out.push('\n');
    }
    (out, test_modules)
}

/// A module's code without its re-exports (`pub use`, `pub(crate) use`,
/// ...), and what they export: (name, path). A re-export is the module's
/// face, not a use of what it names: the edge goes from whoever uses the
/// name to the module that defines it.
fn split_reexports(code: &str) -> (String, Vec<(String, String)>) {
    let mut kept = String::new();
    let mut exported = Vec::new();
    let mut rest = code;
    loop {
        let Some(at) = find_pub_use(rest) else {
            kept.push_str(rest);
            break;
        };
        kept.push_str(&rest[..at]);
        let statement = &rest[at..];
        let Some(end) = statement.find(';') else {
            break;
        };
        let tree = statement[..end].split_once("use ").map_or("", |(_, t)| t);
        flatten_named(tree, "", &mut exported);
        rest = &statement[end + 1..];
    }
    let exported = exported
        .into_iter()
        .map(|(path, name)| (name, path))
        .collect();
    (kept, exported)
}

/// Where the next `pub use` / `pub(...) use` statement starts.
fn find_pub_use(code: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = code[from..].find("pub") {
        let begin = from + at;
        from = begin + 3;
        if code[..begin].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let mut after = &code[from..];
        if let Some(restricted) = after.strip_prefix('(') {
            let Some(close) = restricted.find(')') else {
                continue;
            };
            after = &restricted[close + 1..];
        }
        if after.trim_start().starts_with("use ") {
            return Some(begin);
        }
    }
    None
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `use` trees flattened: `a::{b, c::{d, e}}` is `a::b`, `a::c::d`, `a::c::e`.
fn flatten(tree: &str, prefix: &str, out: &mut Vec<String>) {
    let mut named = Vec::new();
    flatten_named(tree, prefix, &mut named);
    out.extend(named.into_iter().map(|(path, _)| path));
}

/// Flattened as [`flatten`] does, each path with the name it is known by
/// where it is used: its last segment, or what follows `as`.
fn flatten_named(tree: &str, prefix: &str, out: &mut Vec<(String, String)>) {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let mut parts = tree.split(" as ");
        let path = parts.next().unwrap_or(tree).trim();
        let path = path.strip_suffix("::self").unwrap_or(path);
        let name = parts
            .next()
            .map(str::trim)
            .unwrap_or_else(|| path.rsplit("::").next().unwrap_or(path));
        if !path.is_empty() {
            out.push((format!("{prefix}{path}"), name.to_string()));
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
            let path = format!("{prefix}{}", head.trim_end_matches("::"));
            let name = path.rsplit("::").next().unwrap_or_default().to_string();
            out.push((path, name));
        } else if !item.is_empty() {
            flatten_named(item, &format!("{prefix}{head}"), out);
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
            // `a::{...}`: a use tree, which the first pass flattened.
            if !tail.ends_with("::") {
                out.push(tail);
            }
        }
    }
    out
}

/// The module a path names, from module `me`: the longest known prefix,
/// and the segment that follows it (an item of that module), if any.
fn resolve(me: &str, path: &str, modules: &BTreeSet<String>) -> Option<(String, Option<String>)> {
    let mut segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let own: Vec<&str> = me.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<&str> = match segs.first() {
        Some(&"crate") => {
            segs.remove(0);
            Vec::new()
        }
        Some(&"super") => {
            let mut base = own.clone();
            while segs.first() == Some(&"super") {
                segs.remove(0);
                base.pop();
            }
            base
        }
        Some(&"self") => {
            segs.remove(0);
            own.clone()
        }
        Some(first) if modules.contains(&child(me, first)) => own.clone(),
        _ => return None,
    };
    base.extend(segs);
    (0..=base.len()).rev().find_map(|n| {
        let module = base[..n].join("::");
        modules
            .contains(&module)
            .then(|| (module, base.get(n).map(|s| s.to_string())))
    })
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

/// Module -> the crate's modules it imports. A name a module re-exports
/// counts as an import of the module that defines it; a module's own
/// re-exports are imports only where its own code uses them. A module below
/// the root may use its parents' items (a directory and the file that
/// declares it are one unit); the crate root counts like any module, so a
/// root that defines what its modules use, and uses them, makes a loop.
/// Modules only tests compile are left out. What the text does not name
/// (a method called on a value of another module's type) is not seen.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut test_only = BTreeSet::new();
    let mut sources: BTreeMap<String, (String, Vec<(String, String)>)> = BTreeMap::new();
    for f in &files {
        let (Some(m), Ok(text)) = (module_of(src, f), std::fs::read_to_string(f)) else {
            continue;
        };
        let (code, tests) = code_of(&text);
        test_only.extend(tests.iter().map(|t| child(&m, t)));
        sources.insert(m, split_reexports(&code));
    }
    sources.retain(|m, _| {
        !test_only
            .iter()
            .any(|t| m == t || m.starts_with(&format!("{t}::")))
    });
    let modules: BTreeSet<String> = sources.keys().cloned().collect();
    // (module, name) -> the module the name is defined in, followed through
    // chains of re-exports until nothing changes.
    let mut exported: BTreeMap<(String, String), String> = BTreeMap::new();
    for _ in 0..=modules.len() {
        let mut changed = false;
        for (me, (_, reexports)) in &sources {
            for (name, path) in reexports {
                let Some((module, item)) = resolve(me, path, &modules) else {
                    continue;
                };
                let defined = item
                    .and_then(|item| exported.get(&(module.clone(), item)).cloned())
                    .unwrap_or(module);
                let key = (me.clone(), name.clone());
                if exported.get(&key) != Some(&defined) {
                    exported.insert(key, defined);
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    let children_of = |me: &str| -> BTreeSet<String> {
        modules
            .iter()
            .filter_map(|m| {
                let name = if me.is_empty() {
                    m.as_str()
                } else {
                    m.strip_prefix(&format!("{me}::"))?
                };
                (!name.is_empty() && !name.contains("::")).then(|| name.to_string())
            })
            .collect()
    };
    sources
        .iter()
        .map(|(me, (code, reexports))| {
            let mut paths = paths_in(code, &children_of(me));
            // A re-exported name the module's own code uses is an import.
            paths.extend(
                reexports
                    .iter()
                    .filter(|(name, _)| names(code, name))
                    .map(|(_, path)| path.clone()),
            );
            let targets = paths
                .iter()
                .filter_map(|p| resolve(me, p, &modules))
                .map(|(module, item)| {
                    item.and_then(|item| exported.get(&(module.clone(), item)).cloned())
                        .unwrap_or(module)
                })
                .filter(|t| t != me && (t.is_empty() || !me.starts_with(&format!("{t}::"))))
                .collect();
            (me.clone(), targets)
        })
        .collect()
}

/// Whether `code` names the identifier `name`.
fn names(code: &str, name: &str) -> bool {
    code.match_indices(name).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + name.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
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

/// Import loops allowed to stand, each as the modules of one loop (a set
/// of modules that all reach each other): none. A loop not listed fails
/// the test, and so does a listed one that changed or is gone; the list
/// is there so that a loop found in code that cannot be fixed at once is
/// named here, where review sees it, and only shrinks.
const LOOPS_TODAY: &[(&str, &[&str])] = &[];

/// The sets of modules that reach each other through imports (strongly
/// connected, more than one module), each sorted (Tarjan's algorithm).
fn loops(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<BTreeSet<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            let graph = self.graph;
            for w in graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut set = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    set.insert(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if set.len() > 1 {
                    self.found.push(set);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

/// What is wrong with the loops of crate `name` (its `src` at `src`),
/// against the ones `known` lists.
fn check_loops(name: &str, src: &Path, known: &[(&str, &[&str])]) -> Vec<String> {
    let graph = imports(src);
    let listed: Vec<BTreeSet<String>> = known
        .iter()
        .filter(|(c, _)| *c == name)
        .map(|(_, modules)| modules.iter().map(|m| m.to_string()).collect())
        .collect();
    let found = loops(&graph);
    let mut problems = Vec::new();
    for set in &found {
        if listed.contains(set) {
            continue;
        }
        let start = set.iter().next().map(String::as_str).unwrap_or_default();
        let example = cycle_from(start, &graph)
            .map(|c| format!("{} -> {start}", c.join(" -> ")))
            .unwrap_or_default();
        let modules: Vec<&str> = set.iter().map(String::as_str).collect();
        problems.push(format!(
            "{name}: import loop through {} modules, for example {example}; \
             if it is what is left of a listed loop, list it as {modules:?}",
            set.len()
        ));
    }
    for set in &listed {
        if !found.contains(set) {
            problems.push(format!(
                "{name}: the listed loop {set:?} is gone or changed: remove it from LOOPS_TODAY"
            ));
        }
    }
    problems
}

/// The workspace's crates: (name, its `src`).
fn crates() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found: Vec<(String, PathBuf)> = std::fs::read_dir(&root)
        .expect("the crates directory")
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.path().join("src"),
            )
        })
        .filter(|(_, src)| src.is_dir())
        .collect();
    found.sort();
    found
}

#[test]
fn no_crate_imports_its_modules_in_a_loop() {
    let crates = crates();
    assert!(crates.len() > 10, "found only {} crates", crates.len());
    let mut problems = Vec::new();
    for (name, src) in &crates {
        problems.extend(check_loops(name, src, LOOPS_TODAY));
    }
    for (name, _) in LOOPS_TODAY {
        assert!(
            crates.iter().any(|(c, _)| c == name),
            "LOOPS_TODAY names {name}, which is no crate"
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The loop checker finds a planted loop, reports a listed one that
/// changed, and passes a listed one.
#[test]
fn the_loop_checker_names_a_new_loop_and_a_stale_listing() {
    let dir = std::env::temp_dir().join(format!("skiff-tidy-loops-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("b")).expect("temp dir");
    for n in 0..9 {
        std::fs::write(dir.join(format!("filler{n}.rs")), "").expect("write");
    }
    let files = [
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("a.rs", "use crate::b::part::X;\n"),
        ("b/mod.rs", "pub(crate) mod part;\n"),
        ("b/part.rs", "use super::super::c;\n"),
        ("c.rs", "pub(crate) fn f() { crate::a::g() }\n"),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).expect("write");
    }
    let new = check_loops("planted", &dir, &[]).join("\n");
    let exact: &[(&str, &[&str])] = &[("planted", &["a", "b::part", "c"])];
    let listed = check_loops("planted", &dir, exact);
    let stale: &[(&str, &[&str])] = &[("planted", &["a", "c"])];
    let changed = check_loops("planted", &dir, stale).join("\n");
    // The root's own use of a name it re-exports, and a module's use of an
    // item the root defines, after a test module declared mid-file.
    std::fs::write(
        dir.join("lib.rs"),
        "mod a;\nmod b;\nmod c;\n#[cfg(test)]\nmod d;\npub use c::C;\n\
         pub struct R;\nfn f(_: C) {}\n",
    )
    .expect("write");
    std::fs::write(dir.join("c.rs"), "pub struct C(crate::R);\n").expect("write");
    std::fs::write(dir.join("d.rs"), "use crate::a::Anything;\n").expect("write");
    let rooted = check_loops("planted", &dir, exact).join("\n");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(new.contains("import loop through 3 modules"), "{new}");
    assert!(new.contains(r#"["a", "b::part", "c"]"#), "{new}");
    assert!(listed.is_empty(), "{listed:?}");
    assert!(changed.contains("gone or changed"), "{changed}");
    assert!(changed.contains("import loop through 3"), "{changed}");
    assert!(rooted.contains(r#"["", "c"]"#), "{rooted}");
    assert!(
        !rooted.contains("\"d\""),
        "a test-only module is no module: {rooted}"
    );
}

#[test]
fn coordinator_modules_import_down_the_layers_without_a_loop() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../skiff-coordinator/src");
    let problems = check_layers(&src, COORDINATOR_LAYERS);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn pod_modules_import_down_the_layers_without_a_loop() {
    for (krate, layers) in [
        ("skiff-pod", POD_LAYERS),
        ("skiff-pod-memory", POD_MEMORY_LAYERS),
    ] {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../{krate}/src"));
        let problems = check_layers(&src, layers);
        assert!(problems.is_empty(), "{krate}: {}", problems.join("\n"));
    }
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
