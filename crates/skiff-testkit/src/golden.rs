//! DuckDB's answers stored as golden files under
//! `tests/golden/<bench>/sf<X>/` (tests/golden/README.md gives the format
//! and how to regenerate them), and the rules a result must meet: numbers
//! within a relative tolerance, row order only where the query's ORDER BY
//! fixes it.

use std::path::Path;

use arrow::array::Array;
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};

/// Relative tolerance for numbers: DuckDB and DataFusion round decimal
/// averages and float sums differently in the last digits.
const RELATIVE_TOLERANCE: f64 = 1e-6;

/// One result row as text; `None` is SQL NULL.
pub type Row = Vec<Option<String>>;

pub struct Golden {
    /// 1-based index of the statement of the query file this answers.
    pub statement: usize,
    pub columns: Vec<String>,
    pub rows: Vec<Row>,
    /// How the final ORDER BY fixes the row order; `None` when unordered.
    pub order: Option<Order>,
}

pub enum Order {
    /// Row order must match exactly (the sort keys could not be told).
    Strict,
    /// Rows are ordered by these columns; rows with equal keys may come in
    /// any order, and with `limit_ties` the last run of equal keys may hold
    /// different rows (a LIMIT cut through it).
    Keys {
        columns: Vec<usize>,
        limit_ties: bool,
    },
}

/// What DuckDB said about one query file.
pub enum Expected {
    /// One answer per row-returning statement.
    Answers(Vec<Golden>),
    /// DuckDB raised this error (say, a division by zero at this scale);
    /// Skiff must fail too.
    Error(String),
}

/// The golden answers of `query` (such as "q01") in `dir`.
pub fn load_golden(dir: &Path, query: &str) -> Result<Expected, String> {
    let meta_path = dir.join("meta.json");
    let text =
        std::fs::read_to_string(&meta_path).map_err(|e| format!("{}: {e}", meta_path.display()))?;
    let meta: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", meta_path.display()))?;
    let entry = meta
        .get("queries")
        .and_then(|q| q.get(query))
        .ok_or_else(|| format!("no golden entry for {query}"))?;
    if let Some(error) = entry.get("error").and_then(|e| e.as_str()) {
        return Ok(Expected::Error(error.to_string()));
    }
    let mut answers = vec![load_answer(dir, entry)?];
    if let Some(extra) = entry.get("extra_results").and_then(|e| e.as_array()) {
        for entry in extra {
            answers.push(load_answer(dir, entry)?);
        }
    }
    Ok(Expected::Answers(answers))
}

fn load_answer(dir: &Path, entry: &serde_json::Value) -> Result<Golden, String> {
    let field = |name: &str| {
        entry
            .get(name)
            .ok_or_else(|| format!("golden entry lacks {name}"))
    };
    let statement = field("statement")?.as_u64().ok_or("bad statement")? as usize;
    let file = field("file")?.as_str().ok_or("bad file")?;
    let order = match entry.get("ordered").and_then(|o| o.as_bool()) {
        Some(true) => Some(match entry.get("order_keys").and_then(|k| k.as_array()) {
            Some(keys) => Order::Keys {
                columns: keys
                    .iter()
                    .filter_map(|k| k.get(0).and_then(|i| i.as_u64()))
                    .map(|i| i as usize)
                    .collect(),
                limit_ties: entry
                    .get("limit_ties")
                    .and_then(|t| t.as_bool())
                    .unwrap_or(false),
            },
            None => Order::Strict,
        }),
        _ => None,
    };
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut records = parse_csv(&text)?.into_iter();
    let columns = records
        .next()
        .ok_or_else(|| format!("{}: no header", path.display()))?
        .into_iter()
        .map(Option::unwrap_or_default)
        .collect();
    Ok(Golden {
        statement,
        columns,
        rows: records.collect(),
        order,
    })
}

/// The golden CSV dialect (tests/golden/README.md): fields separated by
/// commas, records by newlines; a quoted field is always a string (so `""`
/// is the empty string and `"NULL"` the word); the unquoted token NULL is
/// SQL NULL.
fn parse_csv(text: &str) -> Result<Vec<Row>, String> {
    let mut records = Vec::new();
    let mut record: Row = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    loop {
        match chars.next() {
            Some('"') if field.is_empty() && !quoted => {
                quoted = true;
                loop {
                    match chars.next() {
                        Some('"') if chars.peek() == Some(&'"') => {
                            chars.next();
                            field.push('"');
                        }
                        Some('"') => break,
                        Some(c) => field.push(c),
                        None => return Err("unterminated quoted field".to_string()),
                    }
                }
            }
            Some(',') => record.push(finish_field(&mut field, &mut quoted)),
            Some('\r') => {}
            Some('\n') => {
                record.push(finish_field(&mut field, &mut quoted));
                records.push(std::mem::take(&mut record));
            }
            None => {
                if !record.is_empty() || !field.is_empty() || quoted {
                    record.push(finish_field(&mut field, &mut quoted));
                    records.push(record);
                }
                return Ok(records);
            }
            Some(c) => field.push(c),
        }
    }
}

fn finish_field(field: &mut String, quoted: &mut bool) -> Option<String> {
    let text = std::mem::take(field);
    let was_quoted = std::mem::replace(quoted, false);
    (was_quoted || text != "NULL").then_some(text)
}

fn numbers_match(a: &str, b: &str) -> Option<bool> {
    let (x, y) = (a.trim().parse::<f64>().ok()?, b.trim().parse::<f64>().ok()?);
    let scale = x.abs().max(y.abs()).max(1.0);
    Some((x - y).abs() <= RELATIVE_TOLERANCE * scale)
}

fn cells_match(expected: &Option<String>, actual: &Option<String>) -> bool {
    match (expected, actual) {
        (None, None) => true,
        (Some(e), Some(a)) => numbers_match(e, a).unwrap_or_else(|| e.trim_end() == a.trim_end()),
        _ => false,
    }
}

/// Sort key that puts rows equal within tolerance next to each other.
fn sort_key(row: &Row) -> Vec<String> {
    row.iter()
        .map(|cell| match cell {
            None => "\u{0}NULL".to_string(),
            Some(text) => match text.trim().parse::<f64>() {
                Ok(n) => format!("{n:+.5e}"),
                Err(_) => text.trim_end().to_string(),
            },
        })
        .collect()
}

fn rows_match(expected: &Row, actual: &Row) -> bool {
    expected.iter().zip(actual).all(|(e, a)| cells_match(e, a))
}

/// Check `actual` (rows of a result with `actual_columns` columns)
/// against `golden`.
pub fn compare(golden: &Golden, mut actual: Vec<Row>, actual_columns: usize) -> Result<(), String> {
    if actual_columns != golden.columns.len() {
        return Err(format!(
            "{actual_columns} columns, expected {}",
            golden.columns.len()
        ));
    }
    if actual.len() != golden.rows.len() {
        return Err(format!(
            "{} rows, expected {}",
            actual.len(),
            golden.rows.len()
        ));
    }
    let mut expected = golden.rows.clone();
    match &golden.order {
        None => {
            expected.sort_by_key(sort_key);
            actual.sort_by_key(sort_key);
            compare_rows(&expected, &actual, 0)
        }
        Some(Order::Strict) => compare_rows(&expected, &actual, 0),
        Some(Order::Keys {
            columns,
            limit_ties,
        }) => compare_by_keys(&expected, &actual, columns, *limit_ties),
    }
}

fn compare_rows(expected: &[Row], actual: &[Row], offset: usize) -> Result<(), String> {
    for (index, (e, a)) in expected.iter().zip(actual).enumerate() {
        if !rows_match(e, a) {
            return Err(format!("row {}: got {a:?}, expected {e:?}", offset + index));
        }
    }
    Ok(())
}

/// Ordered comparison that lets rows with equal sort keys come in any
/// order: the key columns must match row by row, and each run of equal keys
/// must hold the same rows.
fn compare_by_keys(
    expected: &[Row],
    actual: &[Row],
    keys: &[usize],
    limit_ties: bool,
) -> Result<(), String> {
    let key = |row: &Row| -> Row {
        keys.iter()
            .map(|&k| row.get(k).cloned().flatten())
            .collect()
    };
    for (index, (e, a)) in expected.iter().zip(actual).enumerate() {
        if !rows_match(&key(e), &key(a)) {
            return Err(format!(
                "row {index} out of order: got {a:?}, expected {e:?}"
            ));
        }
    }
    let mut start = 0;
    while start < expected.len() {
        let mut end = start + 1;
        while end < expected.len() && rows_match(&key(&expected[start]), &key(&expected[end])) {
            end += 1;
        }
        // With a LIMIT cutting through the last run of ties, either engine
        // may keep any of the tied rows.
        let cut_by_limit = limit_ties && end == expected.len();
        if !cut_by_limit {
            let mut e = expected[start..end].to_vec();
            let mut a = actual[start..end].to_vec();
            e.sort_by_key(sort_key);
            a.sort_by_key(sort_key);
            compare_rows(&e, &a, start)?;
        }
        start = end;
    }
    Ok(())
}

/// Both engines failed for the same reason. The only expected failures are
/// divisions by zero, which each engine words its own way.
pub fn same_failure(duckdb: &str, skiff: &str) -> bool {
    let by_zero = |e: &str| e.to_ascii_lowercase().contains("by zero");
    by_zero(duckdb) && by_zero(skiff)
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
