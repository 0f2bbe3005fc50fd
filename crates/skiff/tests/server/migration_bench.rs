//! `skiff bench tpch --migration` end to end at SF 0.01 on two queries: the
//! command starts its own clusters, and its CSV has a row per (query, k)
//! with sane figures, vacate rows per concurrency and the zero-overhead
//! rows.

use std::path::Path;
use std::process::Command;

use skiff_gen::Benchmark;
use skiff_testkit::dataset;

/// One CSV record as (column, value) pairs.
fn records(csv: &str) -> Vec<Vec<(String, String)>> {
    let mut lines = csv.lines();
    let header: Vec<String> = lines
        .next()
        .expect("header")
        .split(',')
        .map(str::to_string)
        .collect();
    lines
        .map(|line| {
            // Quoted fields (error, decision) come last; the figures before
            // them hold no commas.
            header
                .iter()
                .cloned()
                .zip(line.split(',').map(str::to_string))
                .collect()
        })
        .collect()
}

fn field<'a>(record: &'a [(String, String)], name: &str) -> &'a str {
    record
        .iter()
        .find(|(k, _)| k == name)
        .map_or("", |(_, v)| v.as_str())
}

fn number(record: &[(String, String)], name: &str) -> f64 {
    field(record, name)
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a number in {record:?}"))
}

#[test]
fn migration_bench_writes_a_row_per_query_and_boundary() {
    let tables = dataset(Benchmark::Tpch, 0.01);
    // A data directory of its own: the bench's coordinators lock theirs.
    // Results are named after it.
    let scratch = tempfile::tempdir().expect("data dir");
    let data = scratch.path().join("tpch-sf0.01");
    std::fs::create_dir(&data).expect("data dir");
    for entry in std::fs::read_dir(&tables).expect("dataset") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("name").to_owned();
        if !name.to_string_lossy().starts_with('.') {
            std::os::unix::fs::symlink(&path, data.join(name)).expect("link table");
        }
    }
    let results = tempfile::tempdir().expect("results dir");
    let queries = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/queries/tpch");
    let output = Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args([
            "bench",
            "tpch",
            "--sf",
            "0.01",
            "--migration",
            "--queries",
            "3,12",
        ])
        .args(["--runs", "1", "--partitions", "2"])
        .arg("--data")
        .arg(&data)
        .arg("--query-dir")
        .arg(&queries)
        .arg("--results")
        .arg(results.path())
        .output()
        .expect("run skiff bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    for needle in [
        "mean overhead, states < 50 MB",
        "Vacating a worker",
        "never fires",
    ] {
        assert!(stdout.contains(needle), "no '{needle}' in\n{stdout}");
    }
    let csv = std::fs::read_to_string(results.path().join("tpch-sf0.01-migration-latest.csv"))
        .expect("latest csv");
    assert!(
        results
            .path()
            .join("tpch-sf0.01-migration-latest.png")
            .exists()
    );
    let records = records(&csv);
    for query in ["q03", "q12"] {
        for kind in ["symmetric", "faster"] {
            let rows: Vec<&Vec<(String, String)>> = records
                .iter()
                .filter(|r| field(r, "kind") == kind && field(r, "query") == query)
                .collect();
            assert!(
                rows.len() >= 2,
                "{kind} {query}: {} rows\n{csv}",
                rows.len()
            );
            let total = number(rows[0], "pipelines_total") as usize;
            // One row per boundary 0, 1, ... up to the last non-result pipeline.
            let ks: Vec<usize> = rows.iter().map(|r| number(r, "k") as usize).collect();
            assert_eq!(ks, (0..ks.len()).collect::<Vec<_>>(), "{kind} {query}");
            assert!(ks.len() <= total, "{kind} {query}: {} of {total}", ks.len());
            for r in rows {
                assert_eq!(field(r, "error"), "", "{r:?}");
                assert_eq!(field(r, "rows_ok"), "true", "{r:?}");
                assert!(number(r, "local_ms") > 0.0, "{r:?}");
                assert!(number(r, "measured_ms") > 0.0, "{r:?}");
                let progress = number(r, "progress");
                assert!((0.0..5.0).contains(&progress), "{r:?}");
                assert!(number(r, "restart_ms") > number(r, "time_at_k_ms"), "{r:?}");
                assert!(field(r, "decision").contains("migrated after"), "{r:?}");
                assert!(
                    field(r, "beats_restart") == "true" || field(r, "beats_restart") == "false"
                );
            }
        }
        for kind in ["zero_never", "zero_snapshot", "zero_cuts"] {
            let row = records
                .iter()
                .find(|r| field(r, "kind") == kind && field(r, "query") == query)
                .unwrap_or_else(|| panic!("no {kind} row for {query}"));
            assert!(number(row, "ratio") > 0.0, "{row:?}");
            assert_eq!(field(row, "rows_ok"), "true", "{row:?}");
        }
    }
    for n in [1, 2, 4, 8] {
        let reps: Vec<&Vec<(String, String)>> = records
            .iter()
            .filter(|r| field(r, "kind") == "vacate" && field(r, "concurrency") == n.to_string())
            .collect();
        for how in ["finish", "abort", "cut"] {
            assert!(
                reps.iter().any(|r| field(r, "vacate_how") == how),
                "no {how} vacate rows for {n}\n{csv}"
            );
        }
        for r in reps {
            assert_eq!(field(r, "rows_ok"), "true", "{r:?}");
            assert!(number(r, "vacate_ms") >= 0.0, "{r:?}");
        }
    }
}
