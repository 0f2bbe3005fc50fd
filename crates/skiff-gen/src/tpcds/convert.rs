//! Rows of the TPC-DS generator to Arrow record batches.
//!
//! tpcdsgen 4.0 exposes every column only through a row's `Display` impl, the
//! reference `dsdgen` DAT line (`|`-separated, trailing `|`, empty = NULL), so
//! that line is what we read. Reading the reference format also means NULL
//! placement, sentinel keys and date rendering are exactly dsdgen's, with no
//! per-table logic here that could drift from it.

use std::fmt::{Display, Write as _};
use std::sync::Arc;

use arrow::array::{
    ArrayRef, Date32Builder, Decimal128Builder, Int32Builder, Int64Builder, RecordBatch,
    StringBuilder,
};
use arrow::datatypes::SchemaRef;

use super::schema::{Column, Kind};
use crate::GenError;

/// Turns an iterator of generator rows into record batches of `batch_rows`.
pub(crate) struct DatBatches<I> {
    rows: I,
    table: &'static str,
    columns: &'static [Column],
    schema: SchemaRef,
    /// call_center and household_demographics print NULL as the literal
    /// `NULL` rather than an empty field (a quirk of the reference generator).
    null_literal: bool,
    batch_rows: usize,
    line: String,
    failed: bool,
}

impl<I> DatBatches<I> {
    pub(crate) fn new(
        rows: I,
        table: &'static str,
        columns: &'static [Column],
        schema: SchemaRef,
        null_literal: bool,
        batch_rows: usize,
    ) -> Self {
        debug_assert_eq!(schema.fields().len(), columns.len());
        Self {
            rows,
            table,
            columns,
            schema,
            null_literal,
            batch_rows,
            line: String::new(),
            failed: false,
        }
    }
}

impl<I, R> Iterator for DatBatches<I>
where
    I: Iterator<Item = R>,
    R: Display,
{
    type Item = Result<RecordBatch, GenError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let result = self.next_batch().transpose();
        if matches!(result, Some(Err(_))) {
            self.failed = true;
        }
        result
    }
}

impl<I, R> DatBatches<I>
where
    I: Iterator<Item = R>,
    R: Display,
{
    fn next_batch(&mut self) -> Result<Option<RecordBatch>, GenError> {
        let mut builders = self
            .columns
            .iter()
            .map(|c| ColumnBuilder::new(c.kind, self.batch_rows))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| self.arrow_error(source))?;
        let mut rows = 0;
        while rows < self.batch_rows {
            let Some(row) = self.rows.next() else { break };
            self.line.clear();
            // Writing into a String cannot fail; a failing Display impl would
            // be a generator bug, reported rather than ignored.
            write!(self.line, "{row}").map_err(|_| self.bad_row("row could not be formatted"))?;
            self.append_line(&mut builders)?;
            rows += 1;
        }
        if rows == 0 {
            return Ok(None);
        }
        let arrays: Vec<ArrayRef> = builders.into_iter().map(ColumnBuilder::finish).collect();
        RecordBatch::try_new(Arc::clone(&self.schema), arrays)
            .map(Some)
            .map_err(|source| self.arrow_error(source))
    }

    fn append_line(&self, builders: &mut [ColumnBuilder]) -> Result<(), GenError> {
        let Some(body) = self.line.strip_suffix('|') else {
            return Err(self.bad_row("DAT line does not end with '|'"));
        };
        let mut fields = body.split('|');
        for (column, builder) in self.columns.iter().zip(builders.iter_mut()) {
            let Some(field) = fields.next() else {
                return Err(self.bad_row("DAT line has too few fields"));
            };
            let is_null = field.is_empty() || (self.null_literal && field == "NULL");
            if is_null {
                builder.append_null();
            } else if !builder.append(field) {
                return Err(GenError::Generator {
                    table: self.table.to_string(),
                    message: format!(
                        "column {}: cannot read {field:?} as {:?}",
                        column.name, column.kind
                    ),
                });
            }
        }
        if fields.next().is_some() {
            return Err(self.bad_row("DAT line has too many fields"));
        }
        Ok(())
    }

    fn bad_row(&self, what: &str) -> GenError {
        GenError::Generator {
            table: self.table.to_string(),
            message: format!("{what}: {:?}", self.line),
        }
    }

    fn arrow_error(&self, source: arrow::error::ArrowError) -> GenError {
        GenError::Arrow {
            table: self.table.to_string(),
            error: source,
        }
    }
}

enum ColumnBuilder {
    Int32(Int32Builder),
    Int64(Int64Builder),
    Decimal {
        builder: Decimal128Builder,
        precision: u8,
        scale: i8,
    },
    Date(Date32Builder),
    Text(StringBuilder),
}

impl ColumnBuilder {
    fn new(kind: Kind, capacity: usize) -> Result<Self, arrow::error::ArrowError> {
        Ok(match kind {
            Kind::Int32 => Self::Int32(Int32Builder::with_capacity(capacity)),
            Kind::Int64 => Self::Int64(Int64Builder::with_capacity(capacity)),
            Kind::Decimal(precision, scale) => Self::Decimal {
                builder: Decimal128Builder::with_capacity(capacity)
                    .with_precision_and_scale(precision, scale)?,
                precision,
                scale,
            },
            Kind::Date => Self::Date(Date32Builder::with_capacity(capacity)),
            // Dimension text is short; 16 bytes a value is a fair first guess.
            Kind::Text => Self::Text(StringBuilder::with_capacity(capacity, capacity * 16)),
        })
    }

    fn append_null(&mut self) {
        match self {
            Self::Int32(b) => b.append_null(),
            Self::Int64(b) => b.append_null(),
            Self::Decimal { builder, .. } => builder.append_null(),
            Self::Date(b) => b.append_null(),
            Self::Text(b) => b.append_null(),
        }
    }

    /// Appends `field` parsed as this column's type; false if it does not parse.
    fn append(&mut self, field: &str) -> bool {
        match self {
            Self::Int32(b) => field.parse().map(|v| b.append_value(v)).is_ok(),
            Self::Int64(b) => field.parse().map(|v| b.append_value(v)).is_ok(),
            Self::Decimal {
                builder,
                precision,
                scale,
            } => parse_decimal(field, *precision, *scale)
                .map(|v| builder.append_value(v))
                .is_some(),
            Self::Date(b) => parse_date(field).map(|v| b.append_value(v)).is_some(),
            Self::Text(b) => {
                b.append_value(field);
                true
            }
        }
    }

    fn finish(self) -> ArrayRef {
        match self {
            Self::Int32(mut b) => Arc::new(b.finish()),
            Self::Int64(mut b) => Arc::new(b.finish()),
            Self::Decimal { mut builder, .. } => Arc::new(builder.finish()),
            Self::Date(mut b) => Arc::new(b.finish()),
            Self::Text(mut b) => Arc::new(b.finish()),
        }
    }
}

/// Parses `-123.45`, `7` or `0.5` into the unscaled value of a
/// `decimal(precision, scale)`. Refuses (never rounds) text with more
/// fractional digits than `scale` or more integer digits than the type holds,
/// because either would silently change the generated value.
pub(crate) fn parse_decimal(text: &str, precision: u8, scale: i8) -> Option<i128> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let scale = usize::try_from(scale).ok()?;
    if (whole.is_empty() && fraction.is_empty()) || fraction.len() > scale {
        return None;
    }
    let padding = std::iter::repeat_n(b'0', scale - fraction.len());
    let mut value: i128 = 0;
    for digit in whole.bytes().chain(fraction.bytes()).chain(padding) {
        if !digit.is_ascii_digit() {
            return None;
        }
        value = value
            .checked_mul(10)?
            .checked_add(i128::from(digit - b'0'))?;
    }
    if value >= 10i128.checked_pow(u32::from(precision))? {
        return None;
    }
    Some(if negative { -value } else { value })
}

/// Parses `YYYY-MM-DD` (proleptic Gregorian) into days since 1970-01-01.
pub(crate) fn parse_date(text: &str) -> Option<i32> {
    let mut parts = text.splitn(3, '-');
    let year: i32 = parts.next()?.parse().ok()?;
    let month: u32 = parts.next()?.parse().ok()?;
    let day: u32 = parts.next()?.parse().ok()?;
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    Some(days_from_civil(year, month, day))
}

fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Howard Hinnant's `days_from_civil`: eras of 400 years make the Gregorian
/// leap rule periodic, and starting the year in March puts Feb 29 last.
fn days_from_civil(year: i32, month: u32, day: u32) -> i32 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year as i32;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_parse_exactly() {
        assert_eq!(parse_decimal("-779.73", 7, 2), Some(-77973));
        assert_eq!(parse_decimal("-0.05", 7, 2), Some(-5));
        assert_eq!(parse_decimal("-5", 5, 2), Some(-500));
        assert_eq!(parse_decimal("0.1", 5, 2), Some(10));
        assert_eq!(parse_decimal("99999.99", 7, 2), Some(9_999_999));
        assert_eq!(parse_decimal("100000.00", 7, 2), None);
        assert_eq!(parse_decimal("1.234", 7, 2), None);
        assert_eq!(parse_decimal("1.2x", 7, 2), None);
        assert_eq!(parse_decimal("-", 7, 2), None);
        assert_eq!(parse_decimal(".", 7, 2), None);
    }

    #[test]
    fn dates_parse_to_days_since_epoch() {
        assert_eq!(parse_date("1970-01-01"), Some(0));
        assert_eq!(parse_date("1969-12-31"), Some(-1));
        assert_eq!(parse_date("2000-02-29"), Some(11_016));
        assert_eq!(parse_date("1900-01-02"), Some(-25_566));
        assert_eq!(parse_date("1900-02-29"), None);
        assert_eq!(parse_date("2001-13-01"), None);
        assert_eq!(parse_date("2001-1"), None);
    }
}
