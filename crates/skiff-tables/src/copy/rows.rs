//! COPY's row formats, read: PostgreSQL's text format (one row per line,
//! fields split by a tab, `\N` for NULL, backslash escapes such as `\t`,
//! `\n`, `\\`, octal `\123` and hex `\x41` for the bytes that would
//! otherwise end a field or a line) and CSV (quoted fields may hold the
//! delimiter and line breaks; an unquoted empty field is NULL, a quoted
//! `""` the empty string). arrow's CSV reader knows neither the escapes
//! nor a quoted empty field from NULL, so this decoder splits the records
//! itself, gathers the fields as strings and casts each column to the
//! table's type with arrow's cast kernels; a value that does not cast is
//! an error naming the source, line and column.

use std::sync::Arc;

use arrow::array::{Array, ArrayBuilder, ArrayRef, RecordBatch, StringArray, StringBuilder};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use datafusion::common::{DataFusionError, Result};
use futures::StreamExt;
use futures::stream::BoxStream;

use crate::copy::{CopyOptions, Format, Spelling};
use crate::error::TableError;

/// Rows per batch handed to the insert.
const BATCH_ROWS: usize = 8192;

/// Decode text or CSV rows arriving as byte chunks into `schema`'s
/// batches as they come; memory holds one batch and one partial record.
pub fn decode<S>(
    bytes: S,
    schema: SchemaRef,
    options: &CopyOptions,
    format: Format,
    source: String,
) -> Result<BoxStream<'static, Result<RecordBatch>>>
where
    S: futures::Stream<Item = Result<Bytes>> + Send + Unpin + 'static,
{
    if !matches!(format, Format::Text | Format::Csv) {
        let unsupported = format!("COPY FROM {source} reads text or csv, not {format:?}");
        return Err(TableError::Unsupported(unsupported).into());
    }
    let spelling = options.spelling(format)?;
    let state = Records {
        input: bytes,
        pending: Vec::new(),
        eof: false,
        done: false,
        skip_header: options.header,
        ended: false,
        line: 0,
        rows: Rows::new(&schema),
        parse: Parse {
            spelling,
            schema,
            source,
            field: Vec::new(),
        },
    };
    Ok(Box::pin(futures::stream::unfold(state, Records::next)))
}

struct Records<S> {
    input: S,
    /// Bytes after the last complete record.
    pending: Vec<u8>,
    eof: bool,
    done: bool,
    skip_header: bool,
    /// The end-of-data marker `\.` was read.
    ended: bool,
    /// Lines read so far, for error messages.
    line: usize,
    rows: Rows,
    parse: Parse,
}

/// How to read a record, and what to say when it is wrong.
struct Parse {
    /// The NULL spelling in it is compared with a field as written
    /// (unquoted in CSV, before unescaping in text).
    spelling: Spelling,
    schema: SchemaRef,
    source: String,
    /// Scratch for one field's unescaped bytes.
    field: Vec<u8>,
}

/// The rows of the batch being built: one string column per table
/// column, and each row's line number.
struct Rows {
    columns: Vec<StringBuilder>,
    lines: Vec<usize>,
}

impl Rows {
    fn new(schema: &SchemaRef) -> Self {
        Self {
            columns: schema
                .fields()
                .iter()
                .map(|_| StringBuilder::new())
                .collect(),
            lines: Vec::with_capacity(BATCH_ROWS),
        }
    }
}

impl<S> Records<S>
where
    S: futures::Stream<Item = Result<Bytes>> + Send + Unpin + 'static,
{
    async fn next(mut self) -> Option<(Result<RecordBatch>, Self)> {
        if self.done {
            return None;
        }
        let mut start = 0;
        while self.rows.lines.len() < BATCH_ROWS {
            if self.ended {
                self.pending.clear();
                start = 0;
                if self.eof {
                    break;
                }
            } else if let Some(end) = self.parse.record_end(&self.pending[start..]) {
                let end = start + end;
                let taken = self.take_record(start, end);
                start = end + 1;
                if let Err(e) = taken {
                    return self.fail(e);
                }
                continue;
            }
            self.pending.drain(..start);
            start = 0;
            if self.eof {
                if !self.pending.is_empty() {
                    // A last record without its newline.
                    let end = self.pending.len();
                    let taken = self.take_record(0, end);
                    self.pending.clear();
                    if let Err(e) = taken {
                        return self.fail(e);
                    }
                }
                break;
            }
            match self.input.next().await {
                Some(Ok(chunk)) => self.pending.extend_from_slice(&chunk),
                Some(Err(e)) => return self.fail(e),
                None => self.eof = true,
            }
        }
        self.pending.drain(..start);
        if self.rows.lines.is_empty() {
            return None;
        }
        let rows = std::mem::replace(&mut self.rows, Rows::new(&self.parse.schema));
        match self.parse.batch(rows) {
            Ok(batch) => Some((Ok(batch), self)),
            Err(e) => self.fail(e),
        }
    }

    /// Take the record in `pending[start..end]` (its newline at `end`).
    fn take_record(&mut self, start: usize, end: usize) -> Result<()> {
        let record = &self.pending[start..end];
        self.line += 1;
        let first_line = self.line;
        // A CSV record may span lines.
        self.line += record.iter().filter(|&&b| b == b'\n').count();
        let record = record.strip_suffix(b"\r").unwrap_or(record);
        if std::mem::take(&mut self.skip_header) {
            return Ok(());
        }
        if record == b"\\." {
            // The old end-of-data marker: what follows is read (the load
            // still ends when the input does) but is not data.
            self.ended = true;
            return Ok(());
        }
        self.parse.split(record, first_line, &mut self.rows)
    }

    fn fail(mut self, e: DataFusionError) -> Option<(Result<RecordBatch>, Self)> {
        self.done = true;
        Some((Err(e), self))
    }
}

impl Parse {
    /// Where the first record of `bytes` ends (its newline), if it is all
    /// there: in CSV a newline inside quotes is data.
    fn record_end(&self, bytes: &[u8]) -> Option<usize> {
        let Spelling {
            csv, quote, escape, ..
        } = self.spelling;
        if !csv {
            return bytes.iter().position(|&b| b == b'\n');
        }
        let mut quoted = false;
        let mut i = 0;
        while i < bytes.len() {
            let byte = bytes[i];
            if quoted {
                if byte == escape && escape != quote && bytes.get(i + 1) == Some(&quote) {
                    i += 1;
                } else if byte == quote {
                    // A doubled quote is a quote; `quoted` flips twice.
                    quoted = false;
                }
            } else if byte == quote {
                quoted = true;
            } else if byte == b'\n' {
                return Some(i);
            }
            i += 1;
        }
        None
    }

    /// Split one record into its fields onto `rows`.
    fn split(&mut self, record: &[u8], line: usize, rows: &mut Rows) -> Result<()> {
        let width = rows.columns.len();
        let mut fields = 0;
        let mut rest = record;
        loop {
            if fields == width {
                return Err(self.bad(line, "extra data after last expected column"));
            }
            self.field.clear();
            let spelling = &self.spelling;
            let (is_null, more) = if spelling.csv {
                let (raw, quoted, more) = split_csv_field(
                    rest,
                    spelling.delimiter,
                    spelling.quote,
                    spelling.escape,
                    &mut self.field,
                );
                (!quoted && raw == spelling.null.as_slice(), more)
            } else {
                let (raw, more) = split_text_field(rest, spelling.delimiter);
                let is_null = raw == spelling.null.as_slice();
                if !is_null {
                    unescape(raw, &mut self.field);
                }
                (is_null, more)
            };
            if is_null {
                rows.columns[fields].append_null();
            } else {
                let Ok(text) = std::str::from_utf8(&self.field) else {
                    let name = self.schema.field(fields).name().clone();
                    let what = format!("invalid byte sequence for encoding UTF8 in column {name}");
                    return Err(self.bad(line, &what));
                };
                rows.columns[fields].append_value(text);
            }
            fields += 1;
            match more {
                Some(next) => rest = next,
                None => break,
            }
        }
        if fields < width {
            let name = self.schema.field(fields).name();
            return Err(self.bad(line, &format!("missing data for column \"{name}\"")));
        }
        rows.lines.push(line);
        Ok(())
    }

    /// The gathered rows, each column cast to the table's type.
    fn batch(&self, mut rows: Rows) -> Result<RecordBatch> {
        // `split` appends one value per column per row, or fails the load.
        assert!(
            rows.columns.iter().all(|c| c.len() == rows.lines.len()),
            "a row's fields did not line up with the table's columns"
        );
        let strict = CastOptions {
            safe: false,
            ..Default::default()
        };
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(rows.columns.len());
        for (i, builder) in rows.columns.iter_mut().enumerate() {
            let text: ArrayRef = Arc::new(builder.finish());
            let target = self.schema.field(i).data_type();
            match cast_with_options(&text, target, &strict) {
                Ok(array) => arrays.push(array),
                Err(e) => return Err(self.bad_value(&text, i, &rows.lines, &e)),
            }
        }
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), arrays)?)
    }

    /// The first value of column `i` that does not cast, said as
    /// PostgreSQL says it: "invalid input syntax for type Int32: 'oops'
    /// (rows.csv, line 4, column a)".
    fn bad_value(
        &self,
        text: &ArrayRef,
        i: usize,
        lines: &[usize],
        e: &arrow::error::ArrowError,
    ) -> DataFusionError {
        let field = self.schema.field(i);
        let lenient = cast_with_options(text, field.data_type(), &CastOptions::default());
        let strings = text.as_any().downcast_ref::<StringArray>();
        let found = lenient.ok().zip(strings).and_then(|(cast, strings)| {
            (0..strings.len()).find(|&r| strings.is_valid(r) && cast.is_null(r))
        });
        let message = match (found, strings) {
            (Some(row), Some(strings)) => format!(
                "invalid input syntax for type {}: '{}' ({}, line {}, column {})",
                field.data_type(),
                strings.value(row),
                self.source,
                lines.get(row).copied().unwrap_or(0),
                field.name()
            ),
            _ => format!(
                "bad COPY data in {}, column {}: {e}",
                self.source,
                field.name()
            ),
        };
        TableError::BadInput(message).into()
    }

    fn bad(&self, line: usize, what: &str) -> DataFusionError {
        TableError::BadInput(format!(
            "bad COPY data: {what} ({}, line {line})",
            self.source
        ))
        .into()
    }
}

/// The raw bytes of the first text-format field of `record` and what
/// follows its delimiter, if one does. A backslash keeps the byte after it
/// in the field, the delimiter included.
fn split_text_field(record: &[u8], delimiter: u8) -> (&[u8], Option<&[u8]>) {
    let mut i = 0;
    while i < record.len() {
        match record[i] {
            b'\\' => i += 2,
            b if b == delimiter => return (&record[..i], Some(&record[i + 1..])),
            _ => i += 1,
        }
    }
    (record, None)
}

/// The first CSV field of `record`: its bytes as written, whether any of
/// it was quoted, and what follows its delimiter; its value (quotes
/// removed, escapes resolved) goes to `out`.
fn split_csv_field<'a>(
    record: &'a [u8],
    delimiter: u8,
    quote: u8,
    escape: u8,
    out: &mut Vec<u8>,
) -> (&'a [u8], bool, Option<&'a [u8]>) {
    let mut quoted = false;
    let mut in_quotes = false;
    let mut i = 0;
    while i < record.len() {
        let byte = record[i];
        if in_quotes {
            if byte == escape && record.get(i + 1) == Some(&quote) {
                // `""` (or the escape before a quote): a quote.
                out.push(quote);
                i += 2;
                continue;
            }
            if byte == quote {
                in_quotes = false;
            } else {
                out.push(byte);
            }
        } else if byte == quote {
            quoted = true;
            in_quotes = true;
        } else if byte == delimiter {
            return (&record[..i], quoted, Some(&record[i + 1..]));
        } else {
            out.push(byte);
        }
        i += 1;
    }
    (record, quoted, None)
}

/// Resolve PostgreSQL's backslash escapes.
fn unescape(raw: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < raw.len() {
        let byte = raw[i];
        i += 1;
        if byte != b'\\' || i == raw.len() {
            out.push(byte);
            continue;
        }
        let next = raw[i];
        i += 1;
        match next {
            b'b' => out.push(0x08),
            b'f' => out.push(0x0c),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(0x0b),
            b'0'..=b'7' => {
                let mut value = u32::from(next - b'0');
                for _ in 0..2 {
                    match raw.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            value = value * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push((value & 0xff) as u8);
            }
            b'x' if raw.get(i).is_some_and(u8::is_ascii_hexdigit) => {
                let mut value = 0u32;
                for _ in 0..2 {
                    match raw.get(i).and_then(|d| char::from(*d).to_digit(16)) {
                        Some(d) => {
                            value = value * 16 + d;
                            i += 1;
                        }
                        None => break,
                    }
                }
                out.push((value & 0xff) as u8);
            }
            other => out.push(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_fields(record: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut rest = record;
        loop {
            let (raw, more) = split_text_field(rest, b'\t');
            let mut field = Vec::new();
            unescape(raw, &mut field);
            out.push(field);
            match more {
                Some(next) => rest = next,
                None => return out,
            }
        }
    }

    fn csv_fields(record: &[u8]) -> Vec<(Vec<u8>, bool)> {
        let mut out = Vec::new();
        let mut rest = record;
        loop {
            let mut field = Vec::new();
            let (_, quoted, more) = split_csv_field(rest, b',', b'"', b'"', &mut field);
            out.push((field, quoted));
            match more {
                Some(next) => rest = next,
                None => return out,
            }
        }
    }

    #[test]
    fn text_escapes_resolve_as_in_postgresql() {
        assert_eq!(
            text_fields(b"a\\tb\tc\\\\d\\ne\t\\101\\x42\\q\t"),
            [
                b"a\tb".to_vec(),
                b"c\\d\ne".to_vec(),
                b"ABq".to_vec(),
                Vec::new()
            ]
        );
        // An escaped delimiter is data, not a split.
        assert_eq!(text_fields(b"x\\\ty"), [b"x\ty".to_vec()]);
    }

    #[test]
    fn csv_quotes_keep_delimiters_and_tell_empty_from_null() {
        assert_eq!(
            csv_fields(b"1,\"a,\"\"b\"\"\",,\"\""),
            [
                (b"1".to_vec(), false),
                (b"a,\"b\"".to_vec(), true),
                (Vec::new(), false),
                (Vec::new(), true)
            ]
        );
    }
}
