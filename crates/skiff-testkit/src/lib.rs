//! Test support shared by the test suites of several crates: benchmark
//! datasets generated once per machine, query files, and the DuckDB golden
//! answers with the comparison rules that judge a result against them, the
//! client libraries the client tests drive (Python's, JDBC), an S3 API
//! server for the object-store tests ([`s3`]), and the switch for the slow
//! tests (`SKIFF_SLOW_TESTS`).
//! Used only from tests; it panics on broken fixtures, never on results.

pub mod clients;
pub mod data;
pub mod golden;
pub mod s3;
pub mod slt;

pub use data::{bench_name, dataset, files_with_extension, queries, repo_root};
pub use golden::{Expected, Golden, Row, compare, load_golden, render_rows, same_failure};

/// Whether the slow tests run (`SKIFF_SLOW_TESTS` is set; CI sets it). When
/// not, says which test was skipped and how to run it.
pub fn slow_tests(what: &str) -> bool {
    let on = std::env::var_os("SKIFF_SLOW_TESTS").is_some();
    if !on {
        eprintln!("{what}: set SKIFF_SLOW_TESTS=1 to run (CI does)");
    }
    on
}
