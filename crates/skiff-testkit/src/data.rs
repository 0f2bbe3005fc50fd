//! Benchmark datasets generated once per machine under
//! `target/skiff-testdata`, and the query files under `tests/queries`.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use skiff_gen::{Benchmark, GenOptions, NoProgress};

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The benchmark's name in paths: `tests/queries/<name>`,
/// `tests/golden/<name>`, the dataset directory.
pub fn bench_name(bench: Benchmark) -> &'static str {
    match bench {
        Benchmark::Tpch => "tpch",
        Benchmark::Tpcds => "tpcds",
        Benchmark::Particles => "particles",
    }
}

/// The directory of `bench` at `sf`, generating it on first use. Tests of
/// one process share it through a mutex, test binaries running at once
/// through a lock file; `skiff-gen` renames finished tables into place, so
/// a killed run never leaves a table that looks complete.
pub fn dataset(bench: Benchmark, sf: f64) -> PathBuf {
    static LOCK: OnceLock<Mutex<()>> = OnceLock::new();
    let _guard = LOCK
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let name = bench_name(bench);
    let root = repo_root().join("target/skiff-testdata");
    std::fs::create_dir_all(&root).expect("test data directory");
    let lock_file = std::fs::File::create(root.join(format!("{name}-sf{sf}.lock")))
        .expect("test data lock file");
    lock_file.lock().expect("lock test data");
    let dir = root.join(format!("{name}-sf{sf}"));
    let complete = skiff_gen::table_names(bench)
        .iter()
        .all(|t| dir.join(t).is_dir());
    if !complete {
        let options = GenOptions {
            sf,
            out: dir.clone(),
            force: true,
        };
        skiff_gen::generate(bench, &options, &NoProgress).expect("generate test data");
    }
    dir
}

/// Files of `dir` (below the repository root) ending in `.extension`, sorted.
pub fn files_with_extension(dir: &str, extension: &str) -> Vec<PathBuf> {
    let dir = repo_root().join(dir);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == extension))
        .collect();
    files.sort();
    files
}

/// Query files of `bench`, sorted: (name such as "q01", SQL text).
pub fn queries(bench: &str) -> Vec<(String, String)> {
    files_with_extension(&format!("tests/queries/{bench}"), "sql")
        .into_iter()
        .map(|p| {
            let name = p
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_string();
            (name, std::fs::read_to_string(&p).expect("query file"))
        })
        .collect()
}
