//! `COPY t FROM ...`: loading rows into a table, as PostgreSQL spells it.
//!
//! DataFusion's parser knows only `COPY ... TO 'file'`, so `COPY` statements
//! are parsed here with sqlparser's PostgreSQL dialect. A load reads text
//! and CSV with PostgreSQL's rules (`rows`), Parquet and JSON with
//! DataFusion's readers, against the table's own column types (a value
//! that does not fit is an error naming the file, line and column), fills
//! the columns the statement leaves out with their defaults, and inserts
//! through the table's `insert_into`: one commit, made only after every
//! row was read, so a failed load changes nothing.

mod rows;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arrow::array::{RecordBatch, UInt64Array};
use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::catalog::streaming::StreamingTable;
use datafusion::common::{DataFusionError, Result, TableReference, plan_err};
use datafusion::datasource::{TableProvider, provider_as_source};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, LogicalPlanBuilder, cast, col, lit};
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::prelude::{DataFrame, JsonReadOptions, ParquetReadOptions, SessionContext};
use datafusion::scalar::ScalarValue;
use datafusion::sql::sqlparser::ast::{
    CopyLegacyCsvOption, CopyLegacyOption, CopyOption, CopySource, CopyTarget, Statement,
};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use tokio_util::io::ReaderStream;

use crate::error::TableError;
pub use rows::decode as decode_rows;

/// The one-row `count` batch a command answers with.
pub use crate::command::count_batch;

/// Bytes read from a file at a time by a text or CSV load: large enough
/// that reads are few, small beside a batch.
const READ_CHUNK_BYTES: usize = 1 << 20;

/// The file formats a load reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// PostgreSQL's default: tab-separated, `\N` for NULL.
    Text,
    Csv,
    Parquet,
    /// Newline-delimited JSON objects.
    Json,
}

/// How the source's rows are spelled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyOptions {
    /// `None`: from the file's extension, else text.
    pub format: Option<Format>,
    pub header: bool,
    pub delimiter: Option<char>,
    /// The spelling of NULL; `None` for the format's default.
    pub null: Option<String>,
    pub quote: Option<char>,
    pub escape: Option<char>,
}

/// Where a `COPY ... FROM` reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CopySourceKind {
    /// A file or a directory of files, read by the process running the
    /// statement.
    File(String),
    /// The client's connection (PostgreSQL's copy-in protocol).
    Stdin,
}

/// `COPY table [(columns)] FROM source [WITH (options)]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyFrom {
    pub table: TableReference,
    /// The columns the source holds, in order; empty for all of them.
    pub columns: Vec<String>,
    pub source: CopySourceKind,
    pub options: CopyOptions,
}

/// `COPY { table | (query) } TO STDOUT [WITH (options)]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyTo {
    /// The rows to send, as a query.
    pub query: String,
    pub options: CopyOptions,
}

/// A `COPY` statement Skiff runs itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Copy {
    From(CopyFrom),
    ToStdout(CopyTo),
}

impl Copy {
    /// Parse `sql` if it is a `COPY` Skiff runs: `COPY ... FROM` and
    /// `COPY ... TO STDOUT`. `Ok(None)` for anything else, including
    /// `COPY ... TO 'file'`, which DataFusion runs.
    pub fn parse(sql: &str) -> Result<Option<Copy>> {
        // What PostgreSQL's grammar does not read is DataFusion's own
        // `COPY ... TO 'file' STORED AS ...`, or an error DataFusion's
        // parser reports.
        let Some(Statement::Copy {
            source,
            to,
            target,
            options,
            legacy_options,
            ..
        }) = crate::postgres::statement(sql, "copy")
        else {
            return Ok(None);
        };
        let options = copy_options(&options, &legacy_options)?;
        if to {
            if target != CopyTarget::Stdout {
                return Ok(None);
            }
            let query = match source {
                CopySource::Table {
                    table_name,
                    columns,
                } if columns.is_empty() => format!("SELECT * FROM {table_name}"),
                CopySource::Table {
                    table_name,
                    columns,
                } => {
                    let list: Vec<String> = columns.iter().map(ToString::to_string).collect();
                    format!("SELECT {} FROM {table_name}", list.join(", "))
                }
                CopySource::Query(query) => query.to_string(),
            };
            return Ok(Some(Copy::ToStdout(CopyTo { query, options })));
        }
        let CopySource::Table {
            table_name,
            columns,
        } = source
        else {
            return plan_err!("COPY FROM loads a table, not a query");
        };
        let source = match target {
            CopyTarget::File { filename } => CopySourceKind::File(filename.clone()),
            CopyTarget::Stdin => CopySourceKind::Stdin,
            other => return plan_err!("COPY FROM {other} is not supported"),
        };
        let table =
            datafusion::sql::planner::object_name_to_table_reference(table_name.clone(), true)?;
        Ok(Some(Copy::From(CopyFrom {
            table,
            columns: columns.iter().map(|c| c.value.clone()).collect(),
            source,
            options,
        })))
    }
}

fn copy_options(options: &[CopyOption], legacy: &[CopyLegacyOption]) -> Result<CopyOptions> {
    let mut out = CopyOptions {
        format: None,
        header: false,
        delimiter: None,
        null: None,
        quote: None,
        escape: None,
    };
    for option in options {
        match option {
            CopyOption::Format(name) => {
                out.format = Some(match name.value.to_ascii_lowercase().as_str() {
                    "text" => Format::Text,
                    "csv" => Format::Csv,
                    "parquet" => Format::Parquet,
                    "json" => Format::Json,
                    other => return plan_err!("COPY format \"{other}\" not recognized"),
                })
            }
            CopyOption::Header(on) => out.header = *on,
            CopyOption::Delimiter(c) => out.delimiter = Some(*c),
            CopyOption::Null(s) => out.null = Some(s.clone()),
            CopyOption::Quote(c) => out.quote = Some(*c),
            CopyOption::Escape(c) => out.escape = Some(*c),
            CopyOption::Encoding(e) if e.eq_ignore_ascii_case("utf8") => {}
            CopyOption::Encoding(e) if e.eq_ignore_ascii_case("utf-8") => {}
            other => return plan_err!("COPY option {other} is not supported"),
        }
    }
    // psql's `\copy ... csv header` and old drivers send the pre-9.0 form.
    for option in legacy {
        match option {
            CopyLegacyOption::Csv(csv) => {
                out.format = Some(Format::Csv);
                for c in csv {
                    match c {
                        CopyLegacyCsvOption::Header => out.header = true,
                        CopyLegacyCsvOption::Quote(q) => out.quote = Some(*q),
                        CopyLegacyCsvOption::Escape(e) => out.escape = Some(*e),
                        other => return plan_err!("COPY option {other} is not supported"),
                    }
                }
            }
            CopyLegacyOption::Header => out.header = true,
            CopyLegacyOption::Delimiter(c) => out.delimiter = Some(*c),
            CopyLegacyOption::Null(s) => out.null = Some(s.clone()),
            other => return plan_err!("COPY option {other} is not supported"),
        }
    }
    Ok(out)
}

/// How text or CSV fields are spelled: the statement's options, else the
/// format's defaults (PostgreSQL's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spelling {
    /// CSV's quoting; text format has none (backslash escapes instead).
    pub csv: bool,
    pub delimiter: u8,
    /// The spelling of NULL: `\N` in text, nothing in CSV.
    pub null: Vec<u8>,
    pub quote: u8,
    /// The byte before a quote inside quotes; the quote itself by default
    /// (a doubled quote).
    pub escape: u8,
}

impl CopyOptions {
    /// The spelling of `format`'s fields; an error for a format that is
    /// not text or CSV and for options no reader could follow.
    pub fn spelling(&self, format: Format) -> Result<Spelling> {
        let byte = |c: char, what: &str| {
            u8::try_from(c).map_err(|_| {
                DataFusionError::from(TableError::BadInput(format!(
                    "COPY {what} must be a single one-byte character"
                )))
            })
        };
        let csv = match format {
            Format::Text => false,
            Format::Csv => true,
            Format::Parquet | Format::Json => {
                let unsupported = format!("COPY reads and writes {format:?} only with files");
                return Err(TableError::Unsupported(unsupported).into());
            }
        };
        let delimiter = byte(
            self.delimiter.unwrap_or(if csv { ',' } else { '\t' }),
            "delimiter",
        )?;
        let quote = byte(self.quote.unwrap_or('"'), "quote")?;
        if matches!(delimiter, b'\\' | b'\n' | b'\r') || (csv && quote == delimiter) {
            return Err(TableError::BadInput(
                "COPY delimiter cannot be a backslash, a line break or the quote".into(),
            )
            .into());
        }
        let null = match &self.null {
            Some(null) => null.clone(),
            None if csv => String::new(),
            None => "\\N".to_string(),
        };
        Ok(Spelling {
            csv,
            delimiter,
            null: null.into_bytes(),
            quote,
            escape: byte(self.escape.unwrap_or(char::from(quote)), "escape")?,
        })
    }

    /// The format, from the statement or else the path's extension.
    pub fn format_for(&self, path: &str) -> Format {
        self.format.unwrap_or_else(|| {
            let extension = Path::new(path)
                .extension()
                .and_then(|e| e.to_str())
                .map(str::to_ascii_lowercase);
            match extension.as_deref() {
                Some("csv") => Format::Csv,
                Some("parquet") => Format::Parquet,
                Some("json" | "ndjson" | "jsonl") => Format::Json,
                _ => Format::Text,
            }
        })
    }
}

/// The columns a load supplies: those listed, else all of the table's.
pub fn source_schema(target: &SchemaRef, columns: &[String]) -> Result<SchemaRef> {
    if columns.is_empty() {
        return Ok(Arc::new(Schema::new(
            target
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<Field>>(),
        )));
    }
    let mut fields = Vec::with_capacity(columns.len());
    for name in columns {
        let Ok(field) = target.field_with_name(name) else {
            return plan_err!("column \"{name}\" of the table does not exist");
        };
        fields.push(field.clone().with_nullable(true));
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// Load a file (or a directory of files) into `copy.table`; the rows
/// loaded.
pub async fn load_file(ctx: &SessionContext, copy: &CopyFrom, path: &str) -> Result<u64> {
    load_file_reporting(ctx, copy, path, Arc::default()).await
}

/// How far a load from files has got: the bytes of its files read, and in
/// all. Text and CSV count as they are read; Parquet and JSON, read by
/// DataFusion, report only their total.
#[derive(Debug, Default)]
pub struct LoadProgress {
    read: AtomicU64,
    total: AtomicU64,
}

impl LoadProgress {
    /// (bytes read, bytes in all).
    pub fn bytes(&self) -> (u64, u64) {
        (
            self.read.load(Ordering::Relaxed),
            self.total.load(Ordering::Relaxed),
        )
    }
}

/// [`load_file`], reporting how far it has read in `progress`. Dropping
/// the future cancels the load: the commit is its last step, so a load
/// stopped before it leaves the table as it was.
pub async fn load_file_reporting(
    ctx: &SessionContext,
    copy: &CopyFrom,
    path: &str,
    progress: Arc<LoadProgress>,
) -> Result<u64> {
    read_and_load(ctx, copy, path, progress)
        .await
        .map_err(|e| e.context(format!("COPY {} FROM '{path}'", copy.table)))
}

async fn read_and_load(
    ctx: &SessionContext,
    copy: &CopyFrom,
    path: &str,
    progress: Arc<LoadProgress>,
) -> Result<u64> {
    let table = ctx.table_provider(copy.table.clone()).await?;
    let target = table.schema();
    let file_schema = source_schema(&target, &copy.columns)?;
    let fail = |e: std::io::Error| {
        DataFusionError::Plan(format!("could not open file \"{path}\" for reading: {e}"))
    };
    let meta = std::fs::metadata(path).map_err(fail)?;
    if meta.is_file() {
        // A readable file, or a clear error now rather than deep in a scan.
        std::fs::File::open(path).map_err(fail)?;
    }
    let format = copy.options.format_for(path);
    let extension = if meta.is_dir() {
        match format {
            Format::Csv => ".csv",
            Format::Parquet => ".parquet",
            Format::Json => ".json",
            Format::Text => ".txt",
        }
        .to_string()
    } else {
        Path::new(path)
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| format!(".{e}"))
            .unwrap_or_default()
    };
    let files = files_of(path, meta.is_dir(), &extension)?;
    let total = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    progress.total.store(total, Ordering::Relaxed);
    let source = match format {
        Format::Csv | Format::Text => {
            let options = copy.options.clone();
            let schema = Arc::clone(&file_schema);
            let batches = futures::stream::iter(files)
                .then(move |file| {
                    let (options, schema) = (options.clone(), Arc::clone(&schema));
                    let progress = Arc::clone(&progress);
                    async move {
                        let bytes = tokio::fs::File::open(&file)
                            .await
                            .map(|f| {
                                ReaderStream::with_capacity(f, READ_CHUNK_BYTES)
                                    .inspect_ok(move |chunk| {
                                        let n = chunk.len() as u64;
                                        progress.read.fetch_add(n, Ordering::Relaxed);
                                    })
                                    .map_err(DataFusionError::from)
                            })
                            .map_err(DataFusionError::from)?;
                        let source = file.display().to_string();
                        decode_rows(bytes, schema, &options, format, source)
                    }
                })
                .try_flatten();
            one_shot(ctx, Arc::clone(&file_schema), Box::pin(batches))?
        }
        Format::Parquet => {
            let options = ParquetReadOptions::default().file_extension(&extension);
            let frame = ctx.read_parquet(path, options).await?;
            conform(frame, &file_schema)?
        }
        Format::Json => {
            let options = JsonReadOptions::default()
                .schema(&file_schema)
                .file_extension(&extension);
            ctx.read_json(path, options).await?
        }
    };
    insert(ctx, copy, table, source).await
}

/// Load rows already decoded (`COPY ... FROM STDIN`) into `copy.table`;
/// the rows loaded.
pub async fn load_batches(
    ctx: &SessionContext,
    copy: &CopyFrom,
    batches: SendableRecordBatchStream,
) -> Result<u64> {
    append_batches(ctx, &copy.table, &copy.columns, batches)
        .await
        .map_err(|e| e.context(format!("COPY {} FROM STDIN", copy.table)))
}

/// Append `batches` (the table's `columns`, by name; empty for all) to
/// `table` in one commit; the columns they lack get their defaults. The
/// rows appended.
pub async fn append_batches(
    ctx: &SessionContext,
    table: &TableReference,
    columns: &[String],
    batches: SendableRecordBatchStream,
) -> Result<u64> {
    let provider = ctx.table_provider(table.clone()).await?;
    let source = one_shot(ctx, batches.schema(), batches)?;
    let target = provider.schema();
    let supplied = source_schema(&target, columns)?;
    let plan = fill_defaults(source, &target, &supplied, provider.as_ref())?;
    append_plan(ctx, table, provider, plan).await
}

/// The schema rows for `copy` are decoded into: its listed columns (or all
/// the table's), each nullable.
pub async fn decode_schema(ctx: &SessionContext, copy: &CopyFrom) -> Result<SchemaRef> {
    let table = ctx.table_provider(copy.table.clone()).await?;
    source_schema(&table.schema(), &copy.columns)
}

/// Insert `source` (the columns `copy` lists) into `table`, one commit,
/// and count the rows.
async fn insert(
    ctx: &SessionContext,
    copy: &CopyFrom,
    table: Arc<dyn TableProvider>,
    source: DataFrame,
) -> Result<u64> {
    let target = table.schema();
    let supplied = source_schema(&target, &copy.columns)?;
    let plan = fill_defaults(source, &target, &supplied, table.as_ref())?;
    append_plan(ctx, &copy.table, table, plan).await
}

/// Insert `plan`'s rows (the table's columns) into `table`; the rows.
async fn append_plan(
    ctx: &SessionContext,
    name: &TableReference,
    table: Arc<dyn TableProvider>,
    plan: datafusion::logical_expr::LogicalPlan,
) -> Result<u64> {
    let insert = LogicalPlanBuilder::insert_into(
        plan,
        name.clone(),
        provider_as_source(table),
        InsertOp::Append,
    )?
    .build()?;
    let batches = ctx.execute_logical_plan(insert).await?.collect().await?;
    Ok(count(&batches))
}

/// The files a load reads: the file itself, or a directory's files with
/// `extension`, in name order.
fn files_of(path: &str, is_dir: bool, extension: &str) -> Result<Vec<std::path::PathBuf>> {
    if !is_dir {
        return Ok(vec![Path::new(path).to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path)? {
        let file = entry?.path();
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.starts_with('.') && name.ends_with(extension) && file.is_file() {
            files.push(file);
        }
    }
    files.sort();
    Ok(files)
}

/// A stream of batches as a table scan that runs once.
pub(crate) fn one_shot(
    ctx: &SessionContext,
    schema: SchemaRef,
    batches: BoxStream<'static, Result<RecordBatch>>,
) -> Result<DataFrame> {
    let partition = OneShot {
        schema: Arc::clone(&schema),
        batches: Mutex::new(Some(batches)),
    };
    let table = StreamingTable::try_new(schema, vec![Arc::new(partition)])?;
    let plan = LogicalPlanBuilder::scan("copy_source", provider_as_source(Arc::new(table)), None)?
        .build()?;
    Ok(DataFrame::new(ctx.state(), plan))
}

struct OneShot {
    schema: SchemaRef,
    batches: Mutex<Option<BoxStream<'static, Result<RecordBatch>>>>,
}

impl std::fmt::Debug for OneShot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OneShot")
    }
}

impl PartitionStream for OneShot {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let taken = self.batches.lock().ok().and_then(|mut b| b.take());
        let stream = taken.unwrap_or_else(|| {
            let again = DataFusionError::Internal("a COPY source is read once".into());
            Box::pin(futures::stream::once(async move { Err(again) }))
        });
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            stream,
        ))
    }
}

/// A Parquet file's columns, by name, cast to the table's types.
fn conform(frame: DataFrame, schema: &SchemaRef) -> Result<DataFrame> {
    let exprs: Vec<Expr> = schema
        .fields()
        .iter()
        .map(|f| cast(col(format!("\"{}\"", f.name())), f.data_type().clone()).alias(f.name()))
        .collect();
    frame.select(exprs)
}

/// The source's rows as the table's columns: those the source lacks get
/// their default, else NULL.
fn fill_defaults(
    source: DataFrame,
    target: &SchemaRef,
    supplied: &SchemaRef,
    table: &dyn TableProvider,
) -> Result<datafusion::logical_expr::LogicalPlan> {
    let exprs: Vec<Expr> = target
        .fields()
        .iter()
        .map(|f| {
            let value = if supplied.field_with_name(f.name()).is_ok() {
                col(format!("\"{}\"", f.name()))
            } else if let Some(default) = table.get_column_default(f.name()) {
                default.clone()
            } else {
                lit(ScalarValue::Null)
            };
            cast(value, f.data_type().clone()).alias(f.name())
        })
        .collect();
    Ok(source.select(exprs)?.into_unoptimized_plan())
}

/// The rows a DML result's `count` column reports.
pub fn count(batches: &[arrow::array::RecordBatch]) -> u64 {
    batches
        .iter()
        .filter_map(|b| b.column_by_name("count"))
        .filter_map(|c| c.as_any().downcast_ref::<UInt64Array>())
        .map(|c| c.iter().flatten().sum::<u64>())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_copy_forms_skiff_runs() {
        let Some(Copy::From(from)) =
            Copy::parse("COPY t (a, b) FROM '/x/y.csv' WITH (FORMAT csv, HEADER true)").unwrap()
        else {
            panic!("not a COPY FROM");
        };
        assert_eq!(from.table, TableReference::bare("t"));
        assert_eq!(from.columns, ["a", "b"]);
        assert_eq!(from.source, CopySourceKind::File("/x/y.csv".into()));
        assert_eq!(from.options.format, Some(Format::Csv));
        assert!(from.options.header);
        let Some(Copy::From(stdin)) = Copy::parse("copy t from stdin csv header").unwrap() else {
            panic!("not a COPY FROM STDIN");
        };
        assert_eq!(stdin.source, CopySourceKind::Stdin);
        assert_eq!(stdin.options.format, Some(Format::Csv));
        let Some(Copy::ToStdout(to)) =
            Copy::parse("COPY (SELECT 1 AS x) TO STDOUT WITH (FORMAT csv)").unwrap()
        else {
            panic!("not a COPY TO STDOUT");
        };
        assert_eq!(to.query, "SELECT 1 AS x");
        assert!(
            Copy::parse("COPY t TO '/tmp/out.parquet'")
                .unwrap()
                .is_none()
        );
        assert!(Copy::parse("SELECT 1").unwrap().is_none());
        assert!(Copy::parse("COPY t FROM '/x' WITH (FORMAT xml)").is_err());
    }

    #[test]
    fn the_format_follows_the_extension() {
        let options = Copy::parse("COPY t FROM '/x.txt'").unwrap();
        let Some(Copy::From(from)) = options else {
            panic!()
        };
        assert_eq!(from.options.format_for("/x.txt"), Format::Text);
        assert_eq!(from.options.format_for("/x.CSV"), Format::Csv);
        assert_eq!(from.options.format_for("/x.ndjson"), Format::Json);
    }
}
