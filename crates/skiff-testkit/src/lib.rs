//! Test support shared by the test suites of several crates: benchmark
//! datasets generated once per machine, query files, and the DuckDB golden
//! answers with the comparison rules that judge a result against them.
//! Used only from tests; it panics on broken fixtures, never on results.

pub mod data;
pub mod golden;
pub mod slt;

pub use data::{dataset, files_with_extension, queries, repo_root};
pub use golden::{Expected, Golden, Row, compare, load_golden, render_rows, same_failure};
