//! Arrow values on the PostgreSQL wire: the type OID each Arrow type is
//! described with, result values in text and binary format, and parameters
//! decoded from either format.
//!
//! Every Arrow type maps to one PostgreSQL type ([`pg_type`]); before a
//! batch is encoded its columns are cast to the one Arrow type per
//! PostgreSQL type that the encoders know ([`normalize`]), so the two
//! always agree. Types without a PostgreSQL counterpart (lists, structs,
//! maps) travel as `text`, formatted by Arrow.

use skiff_coordinator::TIME_ZONE;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BinaryViewArray, BooleanArray, Date32Array,
    Decimal128Array, Decimal256Array, DurationMicrosecondArray, Float32Array, Float64Array,
    Int16Array, Int32Array, Int64Array, IntervalMonthDayNanoArray, LargeBinaryArray,
    LargeStringArray, RecordBatch, StringArray, StringViewArray, Time64MicrosecondArray,
    TimestampMicrosecondArray,
};
use arrow::buffer::NullBuffer;
use arrow::compute::cast;
use arrow::datatypes::{DataType, IntervalMonthDayNano, IntervalUnit, TimeUnit};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use bytes::{BufMut, BytesMut};
use datafusion::common::ScalarValue;
use pgwire::api::Type;
use pgwire::api::results::FieldFormat;
use pgwire::messages::data::DataRow;
use skiff_tables::copy::Spelling;

use skiff_node::error::{Result, ServerError, SqlState};

/// Days from 1970-01-01 (Arrow's epoch) to 2000-01-01 (PostgreSQL's).
const PG_EPOCH_DAYS: i32 = 10_957;
const MICROS_PER_DAY: i64 = 86_400_000_000;
/// Microseconds from Arrow's epoch to PostgreSQL's.
const PG_EPOCH_MICROS: i64 = PG_EPOCH_DAYS as i64 * MICROS_PER_DAY;

/// The PostgreSQL type a column of `data_type` is described with, and its
/// type modifier (`-1` for none; `numeric(p, s)` carries its precision and
/// scale).
pub(super) fn pg_type(data_type: &DataType) -> (Type, i32) {
    let numeric = |p: u8, s: i8| {
        let typmod = if s >= 0 {
            ((i32::from(p) << 16) | i32::from(s)) + 4
        } else {
            -1
        };
        (Type::NUMERIC, typmod)
    };
    let pg = match data_type {
        DataType::Boolean => Type::BOOL,
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => Type::INT2,
        DataType::Int32 | DataType::UInt16 => Type::INT4,
        DataType::Int64 | DataType::UInt32 => Type::INT8,
        DataType::UInt64 => Type::NUMERIC,
        DataType::Float16 | DataType::Float32 => Type::FLOAT4,
        DataType::Float64 => Type::FLOAT8,
        DataType::Decimal32(p, s) | DataType::Decimal64(p, s) | DataType::Decimal128(p, s) => {
            return numeric(*p, *s);
        }
        DataType::Decimal256(p, s) => return numeric(*p, *s),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => Type::BYTEA,
        DataType::Date32 | DataType::Date64 => Type::DATE,
        DataType::Time32(_) | DataType::Time64(_) => Type::TIME,
        DataType::Timestamp(_, None) => Type::TIMESTAMP,
        DataType::Timestamp(_, Some(_)) => Type::TIMESTAMPTZ,
        DataType::Interval(_) | DataType::Duration(_) => Type::INTERVAL,
        DataType::Dictionary(_, value) => return pg_type(value),
        _ => Type::TEXT,
    };
    (pg, -1)
}

/// `pg_type.typlen` of the types [`pg_type`] returns: the fixed width, or
/// -1 for variable-width types.
pub(super) fn type_size(pg: &Type) -> i16 {
    match *pg {
        Type::BOOL => 1,
        Type::INT2 => 2,
        Type::INT4 | Type::FLOAT4 | Type::DATE => 4,
        Type::INT8 | Type::FLOAT8 | Type::TIME | Type::TIMESTAMP | Type::TIMESTAMPTZ => 8,
        Type::INTERVAL => 16,
        _ => -1,
    }
}

/// Cast `array` to the Arrow type the encoders expect for its PostgreSQL
/// type; arrays already in that form are returned as they are.
fn normalize(array: &ArrayRef) -> Result<ArrayRef> {
    let target = match array.data_type() {
        DataType::Int8 | DataType::UInt8 => DataType::Int16,
        DataType::UInt16 => DataType::Int32,
        DataType::UInt32 => DataType::Int64,
        DataType::UInt64 => DataType::Decimal128(20, 0),
        DataType::Float16 => DataType::Float32,
        DataType::Decimal32(p, s) | DataType::Decimal64(p, s) => DataType::Decimal128(*p, *s),
        DataType::FixedSizeBinary(_) => DataType::Binary,
        DataType::Date64 => DataType::Date32,
        DataType::Time32(_) | DataType::Time64(TimeUnit::Nanosecond) => {
            DataType::Time64(TimeUnit::Microsecond)
        }
        DataType::Timestamp(unit, tz) if *unit != TimeUnit::Microsecond => {
            DataType::Timestamp(TimeUnit::Microsecond, tz.clone())
        }
        DataType::Interval(unit) if *unit != IntervalUnit::MonthDayNano => {
            DataType::Interval(IntervalUnit::MonthDayNano)
        }
        DataType::Duration(unit) if *unit != TimeUnit::Microsecond => {
            DataType::Duration(TimeUnit::Microsecond)
        }
        DataType::Dictionary(_, value) => value.as_ref().clone(),
        _ => return Ok(Arc::clone(array)),
    };
    let cast = cast(array, &target).map_err(|e| {
        ServerError::internal(format!(
            "cannot send a {} column to a PostgreSQL client: {e}",
            array.data_type()
        ))
    })?;
    if matches!(array.data_type(), DataType::Dictionary(..)) {
        // The values may need casting themselves (a dictionary of UInt8).
        return normalize(&cast);
    }
    Ok(cast)
}

/// A normalized column, downcast once per batch.
enum Column<'a> {
    Null,
    Bool(&'a BooleanArray),
    Int2(&'a Int16Array),
    Int4(&'a Int32Array),
    Int8(&'a Int64Array),
    Float4(&'a Float32Array),
    Float8(&'a Float64Array),
    Decimal128(&'a Decimal128Array, i8),
    Decimal256(&'a Decimal256Array, i8),
    Text(&'a StringArray),
    LargeText(&'a LargeStringArray),
    TextView(&'a StringViewArray),
    Bytea(&'a BinaryArray),
    LargeBytea(&'a LargeBinaryArray),
    ByteaView(&'a BinaryViewArray),
    Date(&'a Date32Array),
    Time(&'a Time64MicrosecondArray),
    Timestamp(&'a TimestampMicrosecondArray, bool),
    Interval(&'a IntervalMonthDayNanoArray),
    Duration(&'a DurationMicrosecondArray),
    Other(ArrayFormatter<'a>),
}

/// Arrow's text for types without a PostgreSQL counterpart.
const OTHER_FORMAT: FormatOptions<'static> = FormatOptions::new().with_null("");

impl<'a> Column<'a> {
    fn new(array: &'a ArrayRef) -> Result<Self> {
        Ok(match array.data_type() {
            DataType::Null => Column::Null,
            DataType::Boolean => Column::Bool(array.as_boolean()),
            DataType::Int16 => Column::Int2(array.as_primitive()),
            DataType::Int32 => Column::Int4(array.as_primitive()),
            DataType::Int64 => Column::Int8(array.as_primitive()),
            DataType::Float32 => Column::Float4(array.as_primitive()),
            DataType::Float64 => Column::Float8(array.as_primitive()),
            DataType::Decimal128(_, s) => Column::Decimal128(array.as_primitive(), *s),
            DataType::Decimal256(_, s) => Column::Decimal256(array.as_primitive(), *s),
            DataType::Utf8 => Column::Text(array.as_string()),
            DataType::LargeUtf8 => Column::LargeText(array.as_string()),
            DataType::Utf8View => Column::TextView(array.as_string_view()),
            DataType::Binary => Column::Bytea(array.as_binary()),
            DataType::LargeBinary => Column::LargeBytea(array.as_binary()),
            DataType::BinaryView => Column::ByteaView(array.as_binary_view()),
            DataType::Date32 => Column::Date(array.as_primitive()),
            DataType::Time64(TimeUnit::Microsecond) => Column::Time(array.as_primitive()),
            DataType::Timestamp(TimeUnit::Microsecond, tz) => {
                Column::Timestamp(array.as_primitive(), tz.is_some())
            }
            DataType::Interval(IntervalUnit::MonthDayNano) => {
                Column::Interval(array.as_primitive())
            }
            DataType::Duration(TimeUnit::Microsecond) => Column::Duration(array.as_primitive()),
            _ => Column::Other(
                ArrayFormatter::try_new(array.as_ref(), &OTHER_FORMAT).map_err(|e| {
                    ServerError::internal(format!("cannot format {}: {e}", array.data_type()))
                })?,
            ),
        })
    }

    /// Write the value at `row` (not null) in text format.
    fn write_text(&self, row: usize, out: &mut BytesMut) {
        match self {
            Column::Null => {}
            Column::Bool(a) => out.put_u8(if a.value(row) { b't' } else { b'f' }),
            Column::Int2(a) => put_display(out, a.value(row)),
            Column::Int4(a) => put_display(out, a.value(row)),
            Column::Int8(a) => put_display(out, a.value(row)),
            Column::Float4(a) => put_float(out, f64::from(a.value(row)), 6),
            Column::Float8(a) => put_float(out, a.value(row), 15),
            Column::Decimal128(a, s) => put_decimal(out, &a.value(row).to_string(), *s),
            Column::Decimal256(a, s) => put_decimal(out, &a.value(row).to_string(), *s),
            Column::Text(a) => out.put_slice(a.value(row).as_bytes()),
            Column::LargeText(a) => out.put_slice(a.value(row).as_bytes()),
            Column::TextView(a) => out.put_slice(a.value(row).as_bytes()),
            Column::Bytea(a) => put_hex(out, a.value(row)),
            Column::LargeBytea(a) => put_hex(out, a.value(row)),
            Column::ByteaView(a) => put_hex(out, a.value(row)),
            Column::Date(a) => put_date(out, a.value(row)),
            Column::Time(a) => put_time(out, a.value(row)),
            Column::Timestamp(a, tz) => put_timestamp(out, a.value(row), *tz),
            Column::Interval(a) => {
                let v = a.value(row);
                put_interval(out, v.months, v.days, v.nanoseconds / 1000);
            }
            Column::Duration(a) => put_interval(out, 0, 0, a.value(row)),
            Column::Other(f) => put_display(out, f.value(row)),
        }
    }

    /// Write the value at `row` (not null) in binary format.
    fn write_binary(&self, row: usize, out: &mut BytesMut) {
        match self {
            Column::Null => {}
            Column::Bool(a) => out.put_u8(u8::from(a.value(row))),
            Column::Int2(a) => out.put_i16(a.value(row)),
            Column::Int4(a) => out.put_i32(a.value(row)),
            Column::Int8(a) => out.put_i64(a.value(row)),
            Column::Float4(a) => out.put_f32(a.value(row)),
            Column::Float8(a) => out.put_f64(a.value(row)),
            Column::Decimal128(a, s) => put_numeric(out, &a.value(row).to_string(), *s),
            Column::Decimal256(a, s) => put_numeric(out, &a.value(row).to_string(), *s),
            Column::Text(a) => out.put_slice(a.value(row).as_bytes()),
            Column::LargeText(a) => out.put_slice(a.value(row).as_bytes()),
            Column::TextView(a) => out.put_slice(a.value(row).as_bytes()),
            Column::Bytea(a) => out.put_slice(a.value(row)),
            Column::LargeBytea(a) => out.put_slice(a.value(row)),
            Column::ByteaView(a) => out.put_slice(a.value(row)),
            Column::Date(a) => out.put_i32(a.value(row).saturating_sub(PG_EPOCH_DAYS)),
            Column::Time(a) => out.put_i64(a.value(row)),
            Column::Timestamp(a, _) => out.put_i64(a.value(row).saturating_sub(PG_EPOCH_MICROS)),
            Column::Interval(a) => {
                let v = a.value(row);
                out.put_i64(v.nanoseconds / 1000);
                out.put_i32(v.days);
                out.put_i32(v.months);
            }
            Column::Duration(a) => {
                out.put_i64(a.value(row));
                out.put_i32(0);
                out.put_i32(0);
            }
            Column::Other(f) => put_display(out, f.value(row)),
        }
    }
}

/// `batch`'s columns normalized for the encoders, and their logical nulls
/// (a NullArray has no validity buffer but is all null).
fn normalized(batch: &RecordBatch) -> Result<(Vec<ArrayRef>, Vec<Option<NullBuffer>>)> {
    let arrays = batch
        .columns()
        .iter()
        .map(normalize)
        .collect::<Result<Vec<_>>>()?;
    let nulls = arrays.iter().map(|a| a.logical_nulls()).collect();
    Ok((arrays, nulls))
}

/// Encode the rows of `batch` as `DataRow` messages, each column in the
/// format the client asked for.
pub(super) fn encode_batch(batch: &RecordBatch, formats: &[FieldFormat]) -> Result<Vec<DataRow>> {
    if formats.len() != batch.num_columns() {
        return Err(ServerError::internal(format!(
            "{} result formats for {} columns",
            formats.len(),
            batch.num_columns()
        )));
    }
    let (arrays, nulls) = normalized(batch)?;
    let columns = arrays.iter().map(Column::new).collect::<Result<Vec<_>>>()?;
    let field_count = i16::try_from(columns.len())
        .map_err(|_| ServerError::internal("too many columns for the PostgreSQL wire"))?;
    let mut buf = BytesMut::with_capacity(64 * columns.len().max(1));
    let mut rows = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        for ((column, format), nulls) in columns.iter().zip(formats).zip(&nulls) {
            if nulls.as_ref().is_some_and(|n| n.is_null(row)) {
                buf.put_i32(-1);
                continue;
            }
            let at = buf.len();
            buf.put_i32(0);
            match format {
                FieldFormat::Text => column.write_text(row, &mut buf),
                FieldFormat::Binary => column.write_binary(row, &mut buf),
            }
            let len = i32::try_from(buf.len() - at - 4)
                .map_err(|_| ServerError::internal("a value is too large for the wire"))?;
            buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
        }
        rows.push(DataRow::new(buf.split(), field_count));
    }
    Ok(rows)
}

fn put_display(out: &mut BytesMut, value: impl std::fmt::Display) {
    use std::fmt::Write;
    let _ = write!(Writer(out), "{value}");
}

/// `fmt::Write` into a `BytesMut`.
struct Writer<'a>(&'a mut BytesMut);

impl std::fmt::Write for Writer<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.put_slice(s.as_bytes());
        Ok(())
    }
}

/// A float as PostgreSQL prints it (shortest exact digits): plain notation
/// for decimal exponents in `-4..digits`, else `1.5e-05` / `1e+300`.
fn put_float(out: &mut BytesMut, value: f64, digits: i32) {
    if value.is_nan() {
        out.put_slice(b"NaN");
    } else if value.is_infinite() {
        out.put_slice(if value > 0.0 {
            b"Infinity"
        } else {
            b"-Infinity"
        });
    } else {
        out.put_slice(format_float(value, digits).as_bytes());
    }
}

fn format_float(value: f64, digits: i32) -> String {
    // `{:e}` gives the shortest digits that read back as the same value.
    let scientific = if digits <= 6 {
        format!("{:e}", value as f32)
    } else {
        format!("{value:e}")
    };
    let Some((mantissa, exponent)) = scientific.split_once('e') else {
        return scientific;
    };
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..digits).contains(&exponent) {
        return if digits <= 6 {
            (value as f32).to_string()
        } else {
            value.to_string()
        };
    }
    let sign = if exponent < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exponent.abs())
}

/// Split an unscaled integer's decimal text and a scale into sign, integer
/// digits and fraction digits: ("-", "12", "05") for -1205 at scale 2.
fn decimal_parts(unscaled: &str, scale: i8) -> (bool, String, String) {
    let (negative, digits) = match unscaled.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, unscaled),
    };
    if scale <= 0 {
        let mut int = digits.to_string();
        if int != "0" {
            int.extend(std::iter::repeat_n('0', usize::from(scale.unsigned_abs())));
        }
        return (negative, int, String::new());
    }
    let scale = usize::from(scale.unsigned_abs());
    let padded = if digits.len() <= scale {
        format!("{}{digits}", "0".repeat(scale + 1 - digits.len()))
    } else {
        digits.to_string()
    };
    let (int, frac) = padded.split_at(padded.len() - scale);
    (negative, int.to_string(), frac.to_string())
}

/// A decimal as text with exactly `scale` fraction digits ("1234.50").
fn put_decimal(out: &mut BytesMut, unscaled: &str, scale: i8) {
    let (negative, int, frac) = decimal_parts(unscaled, scale);
    if negative {
        out.put_u8(b'-');
    }
    out.put_slice(int.as_bytes());
    if !frac.is_empty() {
        out.put_u8(b'.');
        out.put_slice(frac.as_bytes());
    }
}

/// A decimal in NUMERIC's binary form: digit count, weight, sign, display
/// scale, then base-10000 digits (most significant first; leading and
/// trailing zero digits dropped).
fn put_numeric(out: &mut BytesMut, unscaled: &str, scale: i8) {
    let (negative, int, frac) = decimal_parts(unscaled, scale);
    let int = int.trim_start_matches('0');
    // Whole base-10000 digits: pad the integer part on the left and the
    // fraction on the right to multiples of 4.
    let int_pad = (4 - int.len() % 4) % 4;
    let frac_pad = (4 - frac.len() % 4) % 4;
    let all = format!("{}{int}{frac}{}", "0".repeat(int_pad), "0".repeat(frac_pad));
    let mut groups: Vec<i16> = all
        .as_bytes()
        .chunks(4)
        .map(|c| c.iter().fold(0i16, |acc, d| acc * 10 + i16::from(d - b'0')))
        .collect();
    let mut weight = ((int.len() + int_pad) / 4) as i16 - 1;
    let leading = groups.iter().take_while(|&&g| g == 0).count();
    groups.drain(..leading);
    weight -= leading as i16;
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    out.put_i16(groups.len() as i16);
    out.put_i16(weight);
    out.put_u16(if negative && !groups.is_empty() {
        0x4000
    } else {
        0
    });
    out.put_i16(i16::from(scale.max(0)));
    for g in groups {
        out.put_i16(g);
    }
}

fn put_hex(out: &mut BytesMut, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.put_slice(b"\\x");
    for b in bytes {
        out.put_u8(HEX[usize::from(b >> 4)]);
        out.put_u8(HEX[usize::from(b & 0xf)]);
    }
}

/// (year, month, day) of a day count from 1970-01-01, proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Days from 1970-01-01 to a (year, month, day), the inverse of
/// [`civil_from_days`].
#[cfg(test)]
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `YYYY-MM-DD`, with ` BC` for years before 1 (year 0 is 1 BC).
fn put_date(out: &mut BytesMut, days: i32) {
    let (year, month, day) = civil_from_days(i64::from(days));
    put_ymd(out, year, month, day);
    put_bc(out, year);
}

fn put_ymd(out: &mut BytesMut, year: i64, month: u32, day: u32) {
    let shown = if year <= 0 { 1 - year } else { year };
    put_display(out, format_args!("{shown:04}-{month:02}-{day:02}"));
}

fn put_bc(out: &mut BytesMut, year: i64) {
    if year <= 0 {
        out.put_slice(b" BC");
    }
}

/// `HH:MM:SS` plus `.ffffff` without trailing zeros when there is a
/// fraction. `hours` may exceed 23 (intervals).
fn put_clock(out: &mut BytesMut, micros: u64) {
    let secs = micros / 1_000_000;
    let frac = micros % 1_000_000;
    put_display(
        out,
        format_args!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60),
    );
    if frac != 0 {
        let digits = format!("{frac:06}");
        out.put_u8(b'.');
        out.put_slice(digits.trim_end_matches('0').as_bytes());
    }
}

fn put_time(out: &mut BytesMut, micros: i64) {
    put_clock(out, micros.rem_euclid(MICROS_PER_DAY) as u64);
}

/// `YYYY-MM-DD HH:MM:SS[.ffffff]`, with `+00` for timestamps with a zone
/// (shown in UTC, the session's `TimeZone`).
fn put_timestamp(out: &mut BytesMut, micros: i64, with_zone: bool) {
    let days = micros.div_euclid(MICROS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    put_ymd(out, year, month, day);
    out.put_u8(b' ');
    put_clock(out, micros.rem_euclid(MICROS_PER_DAY) as u64);
    if with_zone {
        out.put_slice(b"+00");
    }
    put_bc(out, year);
}

/// An interval in PostgreSQL's default `IntervalStyle` (`postgres`):
/// `1 year 2 mons -3 days +04:05:06.5`.
fn put_interval(out: &mut BytesMut, months: i32, days: i32, micros: i64) {
    let mut empty = true;
    let mut before_negative = false;
    let mut part = |out: &mut BytesMut, value: i64, unit: &str| {
        if value == 0 {
            return;
        }
        if !empty {
            out.put_u8(b' ');
        }
        let sign = if before_negative && value > 0 {
            "+"
        } else {
            ""
        };
        let plural = if value == 1 { "" } else { "s" };
        put_display(out, format_args!("{sign}{value} {unit}{plural}"));
        empty = false;
        before_negative = value < 0;
    };
    part(out, i64::from(months / 12), "year");
    part(out, i64::from(months % 12), "mon");
    part(out, i64::from(days), "day");
    if empty || micros != 0 {
        if !empty {
            out.put_u8(b' ');
        }
        if micros < 0 {
            out.put_u8(b'-');
        } else if before_negative {
            out.put_u8(b'+');
        }
        put_clock(out, micros.unsigned_abs());
    }
}

/// How a client sends one parameter.
pub(super) struct ParamWire<'a> {
    pub value: Option<&'a [u8]>,
    pub binary: bool,
    /// The type the value is encoded as: the client's declared type, else
    /// the one the server described.
    pub pg: &'a Type,
}

/// Decode a parameter and cast it to `target`, the type DataFusion inferred
/// for it. Without a target the value keeps the type it was sent as (text
/// stays text, for DataFusion to coerce).
pub(super) fn decode_param(wire: &ParamWire<'_>, target: Option<&DataType>) -> Result<ScalarValue> {
    let as_sent = match wire.value {
        None => ScalarValue::Null,
        Some(bytes) if wire.binary => decode_binary(bytes, wire.pg)?,
        Some(bytes) => decode_text(bytes, wire.pg)?,
    };
    let target = match target {
        Some(t) => t.clone(),
        None => return Ok(as_sent),
    };
    if as_sent.data_type() == target {
        return Ok(as_sent);
    }
    if as_sent.is_null() {
        return ScalarValue::try_from(&target).map_err(ServerError::from);
    }
    as_sent.cast_to(&target).map_err(|e| {
        ServerError::new(
            SqlState::DataException,
            format!(
                "invalid value for a {target} parameter: {}",
                skiff_node::error::one_line(&e.to_string())
            ),
        )
    })
}

fn invalid(pg: &Type, what: &str) -> ServerError {
    ServerError::new(
        SqlState::ProtocolViolation,
        format!(
            "invalid binary value for a parameter of type {}: {what}",
            pg.name()
        ),
    )
}

fn fixed<const N: usize>(bytes: &[u8], pg: &Type) -> Result<[u8; N]> {
    bytes
        .try_into()
        .map_err(|_| invalid(pg, &format!("{} bytes, expected {N}", bytes.len())))
}

fn utf8<'a>(bytes: &'a [u8], pg: &Type) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|_| invalid(pg, "not UTF-8"))
}

/// A text-format parameter, typed by the type it was declared with when
/// that type has an Arrow counterpart; else as text.
fn decode_text(bytes: &[u8], pg: &Type) -> Result<ScalarValue> {
    let text = std::str::from_utf8(bytes).map_err(|_| {
        ServerError::new(
            SqlState::DataException,
            "a text parameter is not valid UTF-8",
        )
    })?;
    let value = ScalarValue::Utf8(Some(text.to_string()));
    let target = match *pg {
        Type::BOOL => DataType::Boolean,
        Type::INT2 => DataType::Int16,
        Type::INT4 => DataType::Int32,
        Type::INT8 | Type::OID => DataType::Int64,
        Type::FLOAT4 => DataType::Float32,
        Type::FLOAT8 => DataType::Float64,
        Type::NUMERIC => return numeric_from_text(text),
        Type::DATE => DataType::Date32,
        Type::TIMESTAMP => DataType::Timestamp(TimeUnit::Microsecond, None),
        Type::TIMESTAMPTZ => DataType::Timestamp(TimeUnit::Microsecond, Some(TIME_ZONE.into())),
        Type::BYTEA => return bytea_from_text(text),
        _ => return Ok(value),
    };
    value.cast_to(&target).map_err(|_| {
        ServerError::new(
            SqlState::DataException,
            format!("invalid input syntax for type {}: \"{text}\"", pg.name()),
        )
    })
}

/// A decimal from its text, at the scale the text has.
fn numeric_from_text(text: &str) -> Result<ScalarValue> {
    let trimmed = text.trim();
    let scale = trimmed.split_once('.').map_or(0, |(_, f)| f.len());
    let target = DataType::Decimal128(38, i8::try_from(scale.min(38)).unwrap_or(38));
    ScalarValue::Utf8(Some(trimmed.to_string()))
        .cast_to(&target)
        .map_err(|_| {
            ServerError::new(
                SqlState::DataException,
                format!("invalid input syntax for type numeric: \"{text}\""),
            )
        })
}

/// `\x`-hex bytea text, or the raw text when it has no `\x` prefix.
fn bytea_from_text(text: &str) -> Result<ScalarValue> {
    let Some(hex) = text.strip_prefix("\\x") else {
        return Ok(ScalarValue::Binary(Some(text.as_bytes().to_vec())));
    };
    let bad = || ServerError::new(SqlState::DataException, "invalid hexadecimal bytea value");
    if hex.len() % 2 != 0 {
        return Err(bad());
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(bad)?;
    Ok(ScalarValue::Binary(Some(bytes)))
}

fn decode_binary(bytes: &[u8], pg: &Type) -> Result<ScalarValue> {
    Ok(match *pg {
        Type::BOOL => ScalarValue::Boolean(Some(fixed::<1>(bytes, pg)?[0] != 0)),
        Type::INT2 => ScalarValue::Int16(Some(i16::from_be_bytes(fixed(bytes, pg)?))),
        Type::INT4 => ScalarValue::Int32(Some(i32::from_be_bytes(fixed(bytes, pg)?))),
        Type::OID => ScalarValue::Int64(Some(i64::from(u32::from_be_bytes(fixed(bytes, pg)?)))),
        Type::INT8 => ScalarValue::Int64(Some(i64::from_be_bytes(fixed(bytes, pg)?))),
        Type::FLOAT4 => ScalarValue::Float32(Some(f32::from_be_bytes(fixed(bytes, pg)?))),
        Type::FLOAT8 => ScalarValue::Float64(Some(f64::from_be_bytes(fixed(bytes, pg)?))),
        Type::NUMERIC => numeric_from_text(&numeric_binary_text(bytes, pg)?)?,
        Type::BYTEA => ScalarValue::Binary(Some(bytes.to_vec())),
        Type::DATE => {
            let days = i32::from_be_bytes(fixed(bytes, pg)?);
            ScalarValue::Date32(Some(days.saturating_add(PG_EPOCH_DAYS)))
        }
        Type::TIME => ScalarValue::Time64Microsecond(Some(i64::from_be_bytes(fixed(bytes, pg)?))),
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let micros = i64::from_be_bytes(fixed(bytes, pg)?).saturating_add(PG_EPOCH_MICROS);
            let zone = (*pg == Type::TIMESTAMPTZ).then(|| TIME_ZONE.into());
            ScalarValue::TimestampMicrosecond(Some(micros), zone)
        }
        Type::INTERVAL => {
            let raw = fixed::<16>(bytes, pg)?;
            let word = |i: usize| [raw[i], raw[i + 1], raw[i + 2], raw[i + 3]];
            let micros = i64::from_be_bytes(fixed(&raw[..8], pg)?);
            ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano {
                months: i32::from_be_bytes(word(12)),
                days: i32::from_be_bytes(word(8)),
                nanoseconds: micros.saturating_mul(1000),
            }))
        }
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN | Type::JSON => {
            ScalarValue::Utf8(Some(utf8(bytes, pg)?.to_string()))
        }
        _ => {
            return Err(ServerError::new(
                SqlState::FeatureNotSupported,
                format!("binary parameters of type {} are not supported", pg.name()),
            ));
        }
    })
}

/// The text of a NUMERIC in binary form.
fn numeric_binary_text(bytes: &[u8], pg: &Type) -> Result<String> {
    let word = |i: usize| -> Result<i16> {
        let b = bytes
            .get(i..i + 2)
            .ok_or_else(|| invalid(pg, "truncated"))?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    };
    let ndigits = usize::try_from(word(0)?).map_err(|_| invalid(pg, "negative digit count"))?;
    let weight = i64::from(word(2)?);
    let sign = word(4)? as u16;
    let dscale = usize::try_from(word(6)?).map_err(|_| invalid(pg, "negative scale"))?;
    if sign == 0xC000 {
        return Err(ServerError::new(
            SqlState::DataException,
            "NaN is not a valid decimal",
        ));
    }
    if bytes.len() != 8 + 2 * ndigits {
        return Err(invalid(pg, "length does not match the digit count"));
    }
    let digits = (0..ndigits)
        .map(|i| word(8 + 2 * i))
        .collect::<Result<Vec<i16>>>()?;
    // Integer part: digit groups with weight >= 0; fraction: the rest.
    let mut int = String::new();
    for w in 0..=weight.max(-1) {
        let g = usize::try_from(w)
            .ok()
            .and_then(|w| digits.get(w))
            .copied()
            .unwrap_or(0);
        int.push_str(&format!("{g:04}"));
    }
    let int = int.trim_start_matches('0');
    let mut frac = String::new();
    let mut w = -1i64;
    while frac.len() < dscale {
        let index = weight - w;
        let g = usize::try_from(index)
            .ok()
            .and_then(|i| digits.get(i))
            .copied()
            .unwrap_or(0);
        frac.push_str(&format!("{g:04}"));
        w -= 1;
    }
    frac.truncate(dscale);
    let sign = if sign == 0x4000 { "-" } else { "" };
    let int = if int.is_empty() { "0" } else { int };
    Ok(if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    })
}

/// The header line: the column names, spelled as values are.
pub(super) fn copy_header(names: &[&str], format: &Spelling) -> bytes::Bytes {
    let mut line = BytesMut::new();
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            line.put_u8(format.delimiter);
        }
        if format.csv {
            put_csv_field(&mut line, name.as_bytes(), format);
        } else {
            put_text_field(&mut line, name.as_bytes(), format.delimiter);
        }
    }
    line.put_u8(b'\n');
    line.freeze()
}

/// Encode the rows of `batch` as `COPY` lines, one per row, each ending in
/// a newline; values are spelled as in text-format results.
pub(super) fn encode_copy_batch(
    batch: &RecordBatch,
    format: &Spelling,
) -> Result<Vec<bytes::Bytes>> {
    let (arrays, nulls) = normalized(batch)?;
    let columns = arrays.iter().map(Column::new).collect::<Result<Vec<_>>>()?;
    let mut value = BytesMut::with_capacity(64);
    let mut line = BytesMut::with_capacity(64 * columns.len().max(1));
    let mut lines = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        for (i, (column, nulls)) in columns.iter().zip(&nulls).enumerate() {
            if i > 0 {
                line.put_u8(format.delimiter);
            }
            if nulls.as_ref().is_some_and(|n| n.is_null(row)) {
                line.put_slice(&format.null);
                continue;
            }
            value.clear();
            column.write_text(row, &mut value);
            if format.csv {
                put_csv_field(&mut line, &value, format);
            } else {
                put_text_field(&mut line, &value, format.delimiter);
            }
        }
        line.put_u8(b'\n');
        lines.push(line.split().freeze());
    }
    Ok(lines)
}

/// A value in COPY's text format: backslash before the characters that
/// would end the field or the line.
fn put_text_field(out: &mut BytesMut, value: &[u8], delimiter: u8) {
    for &byte in value {
        match byte {
            b'\\' => out.put_slice(b"\\\\"),
            b'\n' => out.put_slice(b"\\n"),
            b'\r' => out.put_slice(b"\\r"),
            b'\t' if delimiter == b'\t' => out.put_slice(b"\\t"),
            b if b == delimiter => {
                out.put_u8(b'\\');
                out.put_u8(b);
            }
            b => out.put_u8(b),
        }
    }
}

/// A value in CSV: quoted when it holds the delimiter, the quote, a line
/// break, or spells NULL (an empty string is `""`, NULL is nothing).
fn put_csv_field(out: &mut BytesMut, value: &[u8], format: &Spelling) {
    let quote = value == format.null.as_slice()
        || value
            .iter()
            .any(|&b| b == format.delimiter || b == format.quote || b == b'\n' || b == b'\r');
    if !quote {
        out.put_slice(value);
        return;
    }
    out.put_u8(format.quote);
    for &byte in value {
        if byte == format.quote || byte == format.escape {
            out.put_u8(format.escape);
        }
        out.put_u8(byte);
    }
    out.put_u8(format.quote);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{
        BooleanArray, Date32Array, Decimal128Array, Float64Array, Int32Array, NullArray,
        StringArray, TimestampMicrosecondArray, UInt64Array,
    };
    use arrow::datatypes::{Field, Schema};

    use super::*;

    /// The text of every row of a one-column batch; `None` for NULL.
    fn texts(array: ArrayRef) -> Vec<Option<String>> {
        cells(array, FieldFormat::Text)
            .into_iter()
            .map(|c| c.map(|b| String::from_utf8(b).unwrap()))
            .collect()
    }

    fn cells(array: ArrayRef, format: FieldFormat) -> Vec<Option<Vec<u8>>> {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "c",
            array.data_type().clone(),
            true,
        )]));
        let batch = RecordBatch::try_new(schema, vec![array]).unwrap();
        encode_batch(&batch, &[format])
            .unwrap()
            .into_iter()
            .map(|row| {
                assert_eq!(row.field_count, 1);
                let len = i32::from_be_bytes(row.data[..4].try_into().unwrap());
                (len >= 0).then(|| row.data[4..].to_vec())
            })
            .collect()
    }

    fn s(text: &str) -> Option<String> {
        Some(text.to_string())
    }

    #[test]
    fn type_oids() {
        assert_eq!(pg_type(&DataType::Int64), (Type::INT8, -1));
        assert_eq!(pg_type(&DataType::Int32), (Type::INT4, -1));
        assert_eq!(pg_type(&DataType::Utf8View), (Type::TEXT, -1));
        assert_eq!(pg_type(&DataType::Date32), (Type::DATE, -1));
        assert_eq!(pg_type(&DataType::Boolean), (Type::BOOL, -1));
        assert_eq!(pg_type(&DataType::Null), (Type::TEXT, -1));
        assert_eq!(pg_type(&DataType::Float64), (Type::FLOAT8, -1));
        // numeric(15, 2): typmod = (precision << 16 | scale) + 4
        assert_eq!(
            pg_type(&DataType::Decimal128(15, 2)),
            (Type::NUMERIC, (15 << 16 | 2) + 4)
        );
        let tz = DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()));
        assert_eq!(pg_type(&tz).0, Type::TIMESTAMPTZ);
        let dict = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
        assert_eq!(pg_type(&dict).0, Type::TEXT);
    }

    #[test]
    fn decimal_text_keeps_the_column_scale() {
        let array = Decimal128Array::from(vec![Some(123456), Some(-5), Some(0), None, Some(100)])
            .with_precision_and_scale(15, 2)
            .unwrap();
        assert_eq!(
            texts(Arc::new(array)),
            vec![s("1234.56"), s("-0.05"), s("0.00"), None, s("1.00")]
        );
        let whole = Decimal128Array::from(vec![Some(42)])
            .with_precision_and_scale(10, 0)
            .unwrap();
        assert_eq!(texts(Arc::new(whole)), vec![s("42")]);
        let big = UInt64Array::from(vec![u64::MAX]);
        assert_eq!(texts(Arc::new(big)), vec![s("18446744073709551615")]);
    }

    #[test]
    fn decimal_binary_is_base_10000() {
        let array = Decimal128Array::from(vec![Some(123456), Some(-5), Some(0), Some(1_0000_0000)])
            .with_precision_and_scale(15, 2)
            .unwrap();
        let cells = cells(Arc::new(array), FieldFormat::Binary);
        let words = |b: &Option<Vec<u8>>| -> Vec<i16> {
            b.as_ref()
                .unwrap()
                .chunks(2)
                .map(|c| i16::from_be_bytes([c[0], c[1]]))
                .collect()
        };
        // 1234.56 = 1234 . 5600: 2 digits, weight 0, +, scale 2
        assert_eq!(words(&cells[0]), vec![2, 0, 0, 2, 1234, 5600]);
        // -0.05 = 0 . 0500: 1 digit, weight -1, -, scale 2
        assert_eq!(words(&cells[1]), vec![1, -1, 0x4000, 2, 500]);
        assert_eq!(words(&cells[2]), vec![0, 0, 0, 2]);
        // 1000000.00 = 100 0000: trailing zero group dropped
        assert_eq!(words(&cells[3]), vec![1, 1, 0, 2, 100]);
        for (i, text) in ["1234.56", "-0.05", "0.00", "1000000.00"]
            .iter()
            .enumerate()
        {
            let back = numeric_binary_text(cells[i].as_ref().unwrap(), &Type::NUMERIC).unwrap();
            assert_eq!(&back, text);
        }
    }

    #[test]
    fn dates_and_timestamps() {
        // Year 0 is 1 BC.
        let bc = days_from_civil(0, 12, 31) as i32;
        let dates = Date32Array::from(vec![Some(0), Some(10_957), Some(-1), None, Some(bc)]);
        assert_eq!(
            texts(Arc::new(dates)),
            vec![
                s("1970-01-01"),
                s("2000-01-01"),
                s("1969-12-31"),
                None,
                s("0001-12-31 BC")
            ]
        );
        let binary = cells(
            Arc::new(Date32Array::from(vec![10_958])),
            FieldFormat::Binary,
        );
        assert_eq!(binary[0].as_deref(), Some(&1i32.to_be_bytes()[..]));
        let days = days_from_civil(1998, 12, 1);
        assert_eq!(civil_from_days(days), (1998, 12, 1));
        let micros = days * MICROS_PER_DAY + 3_723_500_000;
        let ts = TimestampMicrosecondArray::from(vec![micros]);
        assert_eq!(texts(Arc::new(ts)), vec![s("1998-12-01 01:02:03.5")]);
    }

    #[test]
    fn booleans_nulls_floats_and_text() {
        let bools = BooleanArray::from(vec![Some(true), Some(false), None]);
        assert_eq!(texts(Arc::new(bools)), vec![s("t"), s("f"), None]);
        let nulls = NullArray::new(2);
        assert_eq!(texts(Arc::new(nulls)), vec![None, None]);
        let floats = Float64Array::from(vec![1.0, 0.1, 1e300, 1.5e-5, f64::NAN, -f64::INFINITY]);
        assert_eq!(
            texts(Arc::new(floats)),
            vec![
                s("1"),
                s("0.1"),
                s("1e+300"),
                s("1.5e-05"),
                s("NaN"),
                s("-Infinity")
            ]
        );
        let strings = StringArray::from(vec![Some("a'b"), Some(""), None]);
        assert_eq!(texts(Arc::new(strings)), vec![s("a'b"), s(""), None]);
        let ints = cells(Arc::new(Int32Array::from(vec![-2])), FieldFormat::Binary);
        assert_eq!(ints[0].as_deref(), Some(&(-2i32).to_be_bytes()[..]));
    }

    #[test]
    fn intervals_in_postgres_style() {
        let text = |months, days, micros| {
            let mut out = BytesMut::new();
            put_interval(&mut out, months, days, micros);
            String::from_utf8(out.to_vec()).unwrap()
        };
        assert_eq!(text(0, 0, 0), "00:00:00");
        assert_eq!(text(14, 3, 14_706_000_000), "1 year 2 mons 3 days 04:05:06");
        assert_eq!(text(0, -1, 7_200_000_000), "-1 days +02:00:00");
        assert_eq!(text(0, 1, 0), "1 day");
    }

    #[test]
    fn parameters_from_text_and_binary() {
        let text = |v: &'static str, pg: &'static Type, target: Option<&DataType>| {
            let wire = ParamWire {
                value: Some(v.as_bytes()),
                binary: false,
                pg,
            };
            decode_param(&wire, target)
        };
        assert_eq!(
            text("42", &Type::INT8, None).unwrap(),
            ScalarValue::Int64(Some(42))
        );
        assert_eq!(
            text("42", &Type::TEXT, Some(&DataType::Int32)).unwrap(),
            ScalarValue::Int32(Some(42))
        );
        assert_eq!(
            text("abc", &Type::TEXT, None).unwrap(),
            ScalarValue::Utf8(Some("abc".into()))
        );
        assert_eq!(
            text("1998-12-01", &Type::UNKNOWN, Some(&DataType::Date32)).unwrap(),
            ScalarValue::Date32(Some(days_from_civil(1998, 12, 1) as i32))
        );
        assert_eq!(
            text("12.5", &Type::NUMERIC, Some(&DataType::Decimal128(15, 2))).unwrap(),
            ScalarValue::Decimal128(Some(1250), 15, 2)
        );
        assert_eq!(
            text("t", &Type::BOOL, None).unwrap(),
            ScalarValue::Boolean(Some(true))
        );
        let bad = text("x1", &Type::INT4, None).unwrap_err();
        assert_eq!(bad.state, SqlState::DataException);

        let bytes = 7i64.to_be_bytes();
        let wire = ParamWire {
            value: Some(&bytes),
            binary: true,
            pg: &Type::INT8,
        };
        assert_eq!(
            decode_param(&wire, Some(&DataType::Int32)).unwrap(),
            ScalarValue::Int32(Some(7))
        );
        let short = ParamWire {
            value: Some(&bytes[..3]),
            binary: true,
            pg: &Type::INT8,
        };
        assert_eq!(
            decode_param(&short, None).unwrap_err().state,
            SqlState::ProtocolViolation
        );
        let null = ParamWire {
            value: None,
            binary: true,
            pg: &Type::INT8,
        };
        assert_eq!(
            decode_param(&null, Some(&DataType::Date32)).unwrap(),
            ScalarValue::Date32(None)
        );
    }
}
