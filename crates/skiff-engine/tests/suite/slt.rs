//! sqllogictest files under `tests/slt/`, each in its own engine (one
//! session shared by the file's connections).
//!
//! `SKIFF_SLT_COMPLETE=1 cargo test -p skiff-engine --test suite slt` rewrites
//! the expected output in place; review the diff before committing it.

use arrow::array::Array;
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::error::DataFusionError;
use futures::TryStreamExt;
use skiff_engine::Engine;
use skiff_engine::statement::{StatementKind, classify};
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType, Runner};

use skiff_testkit::files_with_extension;
use skiff_testkit::slt::validator;

use crate::support::engine;

/// Partitions per pipeline in slt sessions: fixed so plans are stable.
const SLT_PARTITIONS: usize = 2;

struct SkiffDb {
    engine: Engine,
}

#[async_trait::async_trait]
impl AsyncDB for SkiffDb {
    type Error = DataFusionError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<Self::ColumnType>, Self::Error> {
        let explain = matches!(classify(sql), StatementKind::ExplainPipelines { .. });
        let output = self.engine.execute(sql).await?;
        let schema = output.stream.schema();
        let batches: Vec<RecordBatch> = output.stream.try_collect().await?;
        if schema.fields().is_empty() {
            return Ok(DBOutput::StatementComplete(0));
        }
        let types = schema
            .fields()
            .iter()
            .map(|f| column_type(f.data_type()))
            .collect();
        Ok(DBOutput::Rows {
            types,
            rows: rows(&batches, explain)?,
        })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "skiff"
    }

    async fn sleep(duration: std::time::Duration) {
        tokio::time::sleep(duration).await
    }
}

fn column_type(data_type: &DataType) -> DefaultColumnType {
    if data_type.is_integer() {
        DefaultColumnType::Integer
    } else if data_type.is_floating() || matches!(data_type, DataType::Decimal128(..)) {
        DefaultColumnType::FloatingPoint
    } else if matches!(
        data_type,
        DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8
    ) {
        DefaultColumnType::Text
    } else {
        DefaultColumnType::Any
    }
}

/// Cells as slt text: NULL, `(empty)` for an empty string — except in
/// EXPLAIN PIPELINES, whose continuation rows leave the other columns blank.
fn rows(batches: &[RecordBatch], explain: bool) -> Result<Vec<Vec<String>>, DataFusionError> {
    let options = FormatOptions::default();
    let mut rows = Vec::new();
    for batch in batches {
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            let cells = batch.columns().iter().zip(&formatters).map(|(c, f)| {
                if c.is_null(row) {
                    return if explain {
                        String::new()
                    } else {
                        "NULL".to_string()
                    };
                }
                match f.value(row).to_string() {
                    text if text.is_empty() && !explain => "(empty)".to_string(),
                    text => text,
                }
            });
            rows.push(cells.collect());
        }
    }
    Ok(rows)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqllogictests() {
    let complete = std::env::var_os("SKIFF_SLT_COMPLETE").is_some();
    let mut failures = Vec::new();
    let files = files_with_extension("tests/slt", "slt");
    assert!(!files.is_empty(), "no .slt files");
    for file in &files {
        let engine = engine(None, SLT_PARTITIONS).await;
        let mut runner = Runner::new(move || {
            let engine = engine.clone();
            async move { Ok(SkiffDb { engine }) }
        });
        runner.with_validator(validator);
        let outcome = if complete {
            runner
                .update_test_file(
                    file,
                    " ",
                    validator,
                    sqllogictest::default_normalizer,
                    sqllogictest::default_column_validator,
                )
                .await
                .map_err(|e| e.to_string())
        } else {
            runner
                .run_file_async(file)
                .await
                .map_err(|e| e.display(true).to_string())
        };
        if let Err(e) = outcome {
            failures.push(format!("{}: {e}", file.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
