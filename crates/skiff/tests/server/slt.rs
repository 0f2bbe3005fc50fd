//! The sqllogictest files of `tests/slt/` through the PostgreSQL port: the
//! same expected output as the embedded run, each file on a fresh server.

use skiff_engine::statement::{StatementKind, classify};
use skiff_testkit::files_with_extension;
use skiff_testkit::slt::validator_numeric;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType, Runner};
use tokio_postgres::SimpleQueryMessage;

use crate::support::{Options, Server};

struct PgDb {
    client: tokio_postgres::Client,
}

#[derive(Debug)]
struct PgError(String);

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PgError {}

#[async_trait::async_trait]
impl AsyncDB for PgDb {
    type Error = PgError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<Self::ColumnType>, Self::Error> {
        let explain = matches!(classify(sql), StatementKind::ExplainPipelines { .. });
        let messages = self.client.simple_query(sql).await.map_err(|e| {
            PgError(
                e.as_db_error()
                    .map_or_else(|| e.to_string(), |db| db.message().to_string()),
            )
        })?;
        let mut columns = None;
        let mut rows = Vec::new();
        for message in messages {
            match message {
                SimpleQueryMessage::RowDescription(description) => {
                    columns = Some(description.len());
                }
                SimpleQueryMessage::Row(row) => {
                    columns = Some(row.len());
                    rows.push((0..row.len()).map(|i| cell(row.get(i), explain)).collect());
                }
                _ => {}
            }
        }
        match columns {
            None | Some(0) => Ok(DBOutput::StatementComplete(0)),
            Some(n) => Ok(DBOutput::Rows {
                types: vec![DefaultColumnType::Any; n],
                rows,
            }),
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "skiff-pg"
    }

    async fn sleep(duration: std::time::Duration) {
        tokio::time::sleep(duration).await
    }
}

/// A text cell as the embedded runner writes it: NULL, `(empty)`, and
/// booleans spelled out (PostgreSQL sends `t` / `f`).
fn cell(value: Option<&str>, explain: bool) -> String {
    match value {
        None if explain => String::new(),
        None => "NULL".into(),
        Some("") if !explain => "(empty)".into(),
        Some("t") => "true".into(),
        Some("f") => "false".into(),
        Some(text) => text.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqllogictests_through_postgres() {
    let mut failures = Vec::new();
    let files = files_with_extension("tests/slt", "slt");
    assert!(!files.is_empty(), "no .slt files");
    for file in &files {
        let data = tempfile::tempdir().expect("data dir");
        let server = Server::start_in(data.path(), Options::default());
        let config = server.pg_config("skiff");
        let mut runner = Runner::new(move || {
            let config = config.clone();
            async move {
                let client = crate::support::connect(config)
                    .await
                    .map_err(|e| PgError(e.to_string()))?;
                Ok(PgDb { client })
            }
        });
        runner.with_validator(validator_numeric);
        if let Err(e) = runner.run_file_async(file).await {
            failures.push(format!("{}: {}", file.display(), e.display(true)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
