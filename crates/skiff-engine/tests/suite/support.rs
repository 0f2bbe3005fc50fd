//! Shared test support: benchmark datasets generated once per machine under
//! `target/skiff-testdata`, value rendering, and reading query files.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use arrow::array::Array;
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use skiff_engine::{Engine, EngineConfig};
use skiff_gen::{Benchmark, GenOptions, NoProgress};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory of `bench` at `sf`, generating it on first use. Tests of
/// one process share it; `skiff-gen` renames finished tables into place, so
/// a killed run never leaves a table that looks complete.
pub fn dataset(bench: Benchmark, sf: f64) -> PathBuf {
    static LOCK: OnceLock<Mutex<()>> = OnceLock::new();
    let _guard = LOCK
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let name = match bench {
        Benchmark::Tpch => "tpch",
        Benchmark::Tpcds => "tpcds",
    };
    let dir = repo_root().join(format!("target/skiff-testdata/{name}-sf{sf}"));
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

/// An engine over `dir` with fixed parallelism, so plans are stable.
pub async fn engine(dir: Option<&Path>, partitions: usize) -> Engine {
    let config = EngineConfig {
        target_partitions: Some(partitions),
        ..EngineConfig::default()
    };
    let engine = Engine::new(&config).expect("engine");
    if let Some(dir) = dir {
        engine.register_data_dir(dir).await.expect("register data");
    }
    engine
}

/// Cells of `batches` as text; `None` is SQL NULL.
pub fn render_rows(batches: &[RecordBatch]) -> Vec<Vec<Option<String>>> {
    let options = FormatOptions::default();
    let mut rows = Vec::new();
    for batch in batches {
        let formatters: Vec<_> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).expect("formatter"))
            .collect();
        for row in 0..batch.num_rows() {
            rows.push(
                batch
                    .columns()
                    .iter()
                    .zip(&formatters)
                    .map(|(column, f)| (!column.is_null(row)).then(|| f.value(row).to_string()))
                    .collect(),
            );
        }
    }
    rows
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
