//! Hash partitioning of a managed table (VectorH's over-partitioning,
//! issue 16): `PARTITION BY HASH (k, ...) INTO P PARTITIONS` puts each row
//! in partition `xxh64(key) mod P`, kept as the Delta partition column
//! [`PARTITION_COLUMN`], so a scan of one partition reads only its files.
//!
//! The hash is part of the table format: the same on every node and every
//! version, and documented here so any reader can recompute it.
//!
//! - Each key column contributes, in order, one tag byte (0 for NULL, 1
//!   otherwise) and, when not NULL, its value's canonical bytes: integers,
//!   dates and timestamps as their value widened to i64, little-endian (so
//!   an INT and a BIGINT key of equal value agree); decimals as the
//!   unscaled i128, little-endian; floats as the f64's bits, -0.0 as 0.0 and
//!   every NaN as one; booleans as one byte; strings and binaries as their
//!   length (u32, little-endian) and bytes.
//! - The row's partition is xxHash64 (seed 0) of those bytes, mod P.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int32Array, new_empty_array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Decimal128Type, Field, Float64Type, Int64Type, Schema};
use datafusion::catalog::memory::DataSourceExec;
use datafusion::common::config::ConfigOptions;
use datafusion::common::{Column, DataFusionError, Result, ScalarValue, exec_err, plan_err};
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::logical_expr::expr::{FieldMetadata, ScalarFunction};
use datafusion::logical_expr::{
    ColumnarValue, Expr, LogicalPlan, LogicalPlanBuilder, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility, lit,
};
use datafusion::physical_expr::ScalarFunctionExpr;
use datafusion::physical_expr::expressions::{Column as PhysicalColumn, Literal};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{ExecutionPlan, PhysicalExpr};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer};
use twox_hash::XxHash64;

use skiff_cluster::PARTITIONS_MAX;

use crate::error::TableError;

/// The Delta partition column holding each row's partition; hidden from
/// the table's columns.
pub const PARTITION_COLUMN: &str = "_skiff_partition";

/// Metadata keys of the partition column's field that record the
/// partitioning. (Not the Delta table's configuration: deltalake refuses
/// keys it does not know there when a write creates the table.)
const COLUMNS_KEY: &str = "skiff.partition.columns";
const COUNT_KEY: &str = "skiff.partition.count";

/// Which hash partition a file of a scan holds, attached to each file of a
/// partitioned table's scan (`PartitionedFile::extension`): what places a
/// distributed query's scan tasks on the partitions' owners reads it. Lives
/// in the coordinator's plan only; it is not serialised with the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FilePartition {
    /// The table's P: its equivalence class.
    pub partitions: u32,
    pub partition: u32,
}

/// A table's hash partitioning: key columns, in order, and the number of
/// partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashPartitioning {
    pub columns: Vec<String>,
    pub partitions: u32,
}

impl HashPartitioning {
    /// Checked: at least one key column, 1 to [`PARTITIONS_MAX`] partitions.
    pub fn new(columns: Vec<String>, partitions: u32) -> Result<Self, TableError> {
        if columns.is_empty() {
            return Err(TableError::Unsupported(
                "PARTITION BY HASH needs at least one column".into(),
            ));
        }
        if partitions == 0 || partitions > PARTITIONS_MAX {
            return Err(TableError::Unsupported(format!(
                "a table has between 1 and {PARTITIONS_MAX} partitions, not {partitions}"
            )));
        }
        Ok(Self {
            columns,
            partitions,
        })
    }

    /// The partition column's field metadata that records it.
    pub fn metadata(&self) -> HashMap<String, String> {
        HashMap::from([
            (COLUMNS_KEY.to_string(), self.columns.join(",")),
            (COUNT_KEY.to_string(), self.partitions.to_string()),
        ])
    }

    /// The partitioning a partition column's metadata records (`None`
    /// without one). A damaged record is an error, never read as
    /// unpartitioned.
    pub fn from_metadata(
        table: &str,
        metadata: &HashMap<String, String>,
    ) -> Result<Option<Self>, TableError> {
        let (columns, count) = (metadata.get(COLUMNS_KEY), metadata.get(COUNT_KEY));
        let damaged = |what: String| {
            TableError::Io(format!(
                "table \"{table}\": its partitioning is damaged: {what}"
            ))
        };
        match (columns, count) {
            (None, None) => Ok(None),
            (Some(columns), Some(count)) => {
                let partitions = count
                    .parse::<u32>()
                    .map_err(|e| damaged(format!("{COUNT_KEY} = {count:?}: {e}")))?;
                let columns = columns.split(',').map(str::to_string).collect();
                Self::new(columns, partitions)
                    .map(Some)
                    .map_err(|e| damaged(e.to_string()))
            }
            _ => Err(damaged(format!(
                "{COLUMNS_KEY} and {COUNT_KEY} go together"
            ))),
        }
    }
}

impl HashPartitioning {
    /// Checks the key columns against the table's columns: each exists and
    /// has a type the hash reads.
    pub(crate) fn check_columns(&self, table: &str, schema: &Schema) -> Result<(), TableError> {
        for name in &self.columns {
            let field = schema.field_with_name(name).map_err(|_| {
                TableError::Unsupported(format!(
                    "table \"{table}\" is partitioned by column \"{name}\", which it does not have"
                ))
            })?;
            Canonical::of(&new_empty_array(field.data_type())).map_err(|_| {
                TableError::Unsupported(format!(
                    "table \"{table}\": column \"{name}\" of type {} cannot be a partition key",
                    field.data_type()
                ))
            })?;
        }
        Ok(())
    }

    /// The partition column's field, as stored.
    pub(crate) fn field(&self) -> Field {
        Field::new(PARTITION_COLUMN, DataType::Int32, true).with_metadata(self.metadata())
    }

    fn call(&self, keys: Vec<Expr>) -> Expr {
        let mut args = vec![lit(self.partitions)];
        args.extend(keys);
        Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(PartitionOf::udf()), args))
    }

    /// `input` with each row's partition appended as [`PARTITION_COLUMN`],
    /// for writes deltalake plans itself (`CREATE TABLE ... AS`, bulk
    /// ingest).
    pub(crate) fn add_to_plan(&self, input: LogicalPlan) -> Result<LogicalPlan> {
        let mut exprs: Vec<Expr> = input
            .schema()
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect();
        let keys = self
            .columns
            .iter()
            .map(|c| Expr::Column(Column::from_name(c)))
            .collect();
        let metadata = FieldMetadata::from(self.metadata().into_iter().collect::<BTreeMap<_, _>>());
        exprs.push(
            self.call(keys)
                .alias_with_metadata(PARTITION_COLUMN, Some(metadata)),
        );
        LogicalPlanBuilder::from(input).project(exprs)?.build()
    }

    /// `input` (the table's visible columns) as `target` (the Delta
    /// table's columns) wants them, each row's partition computed: what an
    /// `INSERT` or `COPY` hands deltalake's sink.
    pub(crate) fn add_to_input(
        &self,
        input: Arc<dyn ExecutionPlan>,
        target: &Schema,
        config: Arc<ConfigOptions>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let source = input.schema();
        let column = |name: &str| -> Result<Arc<dyn PhysicalExpr>> {
            Ok(Arc::new(PhysicalColumn::new_with_schema(name, &source)?))
        };
        let mut exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = Vec::new();
        for field in target.fields() {
            let expr: Arc<dyn PhysicalExpr> = if field.name() == PARTITION_COLUMN {
                let mut args: Vec<Arc<dyn PhysicalExpr>> = vec![Arc::new(Literal::new(
                    ScalarValue::UInt32(Some(self.partitions)),
                ))];
                for key in &self.columns {
                    args.push(column(key)?);
                }
                Arc::new(ScalarFunctionExpr::try_new(
                    Arc::new(PartitionOf::udf()),
                    args,
                    &source,
                    Arc::clone(&config),
                )?)
            } else {
                column(field.name())?
            };
            exprs.push((expr, field.name().clone()));
        }
        Ok(Arc::new(ProjectionExec::try_new(exprs, input)?))
    }
}

/// Splits `PARTITION BY HASH (column, ...) INTO n PARTITIONS` out of a
/// `CREATE TABLE` statement (before its column list's end or its `AS
/// SELECT`): the statement without it, for DataFusion, and the
/// partitioning. `None` for any other statement. Unquoted column names are
/// lower-cased, as DataFusion's are.
pub fn split_clause(sql: &str) -> Result<Option<(String, HashPartitioning)>, TableError> {
    if !sql.to_ascii_uppercase().contains("PARTITION") {
        return Ok(None);
    }
    let dialect = GenericDialect {};
    let Ok(tokens) = Tokenizer::new(&dialect, sql).tokenize_with_location() else {
        // DataFusion's parser says what is wrong with it.
        return Ok(None);
    };
    let tokens: Vec<&TokenWithSpan> = tokens
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_) | Token::EOF))
        .collect();
    let word = |i: usize, kw: Keyword| {
        let token = tokens.get(i).map(|t| &t.token);
        matches!(token, Some(Token::Word(w)) if w.keyword == kw && w.quote_style.is_none())
    };
    if !word(0, Keyword::CREATE) {
        return Ok(None);
    }
    let Some(at) = (0..tokens.len()).find(|&i| {
        word(i, Keyword::PARTITION) && word(i + 1, Keyword::BY) && word(i + 2, Keyword::HASH)
    }) else {
        return Ok(None);
    };
    let table = (1..at).position(|i| word(i, Keyword::TABLE)).map(|p| p + 1);
    let Some(table) = table else {
        return Ok(None);
    };
    if (1..table).any(|i| word(i, Keyword::EXTERNAL)) {
        return Err(TableError::Unsupported(
            "PARTITION BY HASH is for tables Skiff manages, not external ones".into(),
        ));
    }
    let malformed = || {
        TableError::Unsupported("expected PARTITION BY HASH (column, ...) INTO n PARTITIONS".into())
    };
    let mut i = at + 3;
    if !matches!(tokens.get(i).map(|t| &t.token), Some(Token::LParen)) {
        return Err(malformed());
    }
    let mut columns = Vec::new();
    loop {
        i += 1;
        let Some(Token::Word(w)) = tokens.get(i).map(|t| &t.token) else {
            return Err(malformed());
        };
        columns.push(match w.quote_style {
            Some(_) => w.value.clone(),
            None => w.value.to_lowercase(),
        });
        i += 1;
        match tokens.get(i).map(|t| &t.token) {
            Some(Token::Comma) => continue,
            Some(Token::RParen) => break,
            _ => return Err(malformed()),
        }
    }
    if !word(i + 1, Keyword::INTO) {
        return Err(malformed());
    }
    let Some(Token::Number(count, _)) = tokens.get(i + 2).map(|t| &t.token) else {
        return Err(malformed());
    };
    if !word(i + 3, Keyword::PARTITIONS) {
        return Err(malformed());
    }
    let partitions = count.parse::<u32>().map_err(|_| {
        TableError::Unsupported(format!(
            "{count} partitions: a whole number up to {PARTITIONS_MAX}"
        ))
    })?;
    let partitioning = HashPartitioning::new(columns, partitions)?;
    let start = byte_offset(sql, tokens[at].span.start).ok_or_else(malformed)?;
    let last = tokens[i + 3].span.start;
    let end = byte_offset(sql, last).ok_or_else(malformed)? + "PARTITIONS".len();
    let rest = format!("{} {}", &sql[..start], &sql[end..]);
    Ok(Some((rest, partitioning)))
}

/// The byte offset of a token's (1-based) line and column in `sql`.
fn byte_offset(sql: &str, at: Location) -> Option<usize> {
    let mut line_start = 0;
    for _ in 1..at.line {
        line_start += sql[line_start..].find('\n')? + 1;
    }
    let column = usize::try_from(at.column).ok()?.checked_sub(1)?;
    sql[line_start..]
        .char_indices()
        .nth(column)
        .map(|(offset, _)| line_start + offset)
}

/// Each row's partition (0..`partitions`) from its key columns.
pub fn partition_of(keys: &[ArrayRef], partitions: u32) -> Result<Int32Array> {
    if partitions == 0 || partitions > PARTITIONS_MAX {
        return exec_err!("{partitions} partitions: between 1 and {PARTITIONS_MAX}");
    }
    let rows = keys.first().map_or(0, |k| k.len());
    let columns = keys.iter().map(Canonical::of).collect::<Result<Vec<_>>>()?;
    let mut bytes = Vec::with_capacity(64);
    let mut out = Vec::with_capacity(rows);
    for row in 0..rows {
        bytes.clear();
        for column in &columns {
            column.append(row, &mut bytes);
        }
        let hash = XxHash64::oneshot(0, &bytes);
        out.push((hash % u64::from(partitions)) as i32);
    }
    Ok(Int32Array::from(out))
}

/// A key column as the hash reads it.
enum Canonical {
    Int(ArrayRef),
    Decimal(ArrayRef),
    Float(ArrayRef),
    Bool(ArrayRef),
    Text(ArrayRef),
    Bytes(ArrayRef),
}

impl Canonical {
    fn of(array: &ArrayRef) -> Result<Self> {
        use DataType::*;
        Ok(match array.data_type() {
            Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 | Date32 | Date64 => {
                Self::Int(cast(array, &Int64)?)
            }
            Timestamp(unit, _) => {
                let plain = cast(array, &Timestamp(*unit, None))?;
                Self::Int(cast(&plain, &Int64)?)
            }
            Decimal32(p, s) | Decimal64(p, s) | Decimal128(p, s) => {
                Self::Decimal(cast(array, &Decimal128(*p, *s))?)
            }
            Float16 | Float32 | Float64 => Self::Float(cast(array, &Float64)?),
            Boolean => Self::Bool(Arc::clone(array)),
            Utf8 | LargeUtf8 | Utf8View => Self::Text(cast(array, &Utf8)?),
            Binary | LargeBinary | BinaryView | FixedSizeBinary(_) => {
                Self::Bytes(cast(array, &Binary)?)
            }
            other => {
                return plan_err!("a partition key cannot be of type {other}");
            }
        })
    }

    fn array(&self) -> &ArrayRef {
        match self {
            Self::Int(a) | Self::Decimal(a) | Self::Float(a) | Self::Bool(a) => a,
            Self::Text(a) | Self::Bytes(a) => a,
        }
    }

    fn append(&self, row: usize, out: &mut Vec<u8>) {
        if self.array().is_null(row) {
            out.push(0);
            return;
        }
        out.push(1);
        match self {
            Self::Int(a) => {
                out.extend_from_slice(&a.as_primitive::<Int64Type>().value(row).to_le_bytes())
            }
            Self::Decimal(a) => {
                out.extend_from_slice(&a.as_primitive::<Decimal128Type>().value(row).to_le_bytes())
            }
            Self::Float(a) => {
                let v = a.as_primitive::<Float64Type>().value(row);
                let v = if v == 0.0 {
                    0.0
                } else if v.is_nan() {
                    f64::NAN
                } else {
                    v
                };
                out.extend_from_slice(&v.to_bits().to_le_bytes());
            }
            Self::Bool(a) => out.push(u8::from(a.as_boolean().value(row))),
            Self::Text(a) => length_prefixed(a.as_string::<i32>().value(row).as_bytes(), out),
            Self::Bytes(a) => length_prefixed(a.as_binary::<i32>().value(row), out),
        }
    }
}

fn length_prefixed(bytes: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// `skiff_partition(P, key, ...)`: each row's partition among `P`, as
/// [`partition_of`]; what writes to a partitioned table add as its
/// [`PARTITION_COLUMN`].
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PartitionOf {
    signature: Signature,
}

impl PartitionOf {
    pub const NAME: &'static str = "skiff_partition";

    pub fn udf() -> ScalarUDF {
        ScalarUDF::from(Self {
            signature: Signature::variadic_any(Volatility::Immutable),
        })
    }
}

impl ScalarUDFImpl for PartitionOf {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        if arg_types.len() < 2 {
            return plan_err!("{}(partitions, key, ...) needs a key", Self::NAME);
        }
        Ok(DataType::Int32)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let Some((count, keys)) = args.args.split_first() else {
            return exec_err!("{}: no arguments", Self::NAME);
        };
        let partitions = match count {
            ColumnarValue::Scalar(value) => match value.cast_to(&DataType::UInt32)? {
                ScalarValue::UInt32(Some(p)) => p,
                other => return exec_err!("{}: partitions {other}", Self::NAME),
            },
            ColumnarValue::Array(_) => {
                return Err(DataFusionError::Execution(format!(
                    "{}: the number of partitions must be a constant",
                    Self::NAME
                )));
            }
        };
        let keys = keys
            .iter()
            .map(|k| k.to_array(args.number_rows))
            .collect::<Result<Vec<_>>>()?;
        Ok(ColumnarValue::Array(Arc::new(partition_of(
            &keys, partitions,
        )?)))
    }
}

/// The file scan `plan` is, when it is one: a `DataSourceExec` over files.
pub fn file_scan(plan: &dyn ExecutionPlan) -> Option<&FileScanConfig> {
    plan.downcast_ref::<DataSourceExec>()?
        .data_source()
        .downcast_ref::<FileScanConfig>()
}

/// Whether `scan` is a declared scan of a partitioned table: its groups
/// are [`crate::group_by_partition`]'s and its partitioning says so.
pub fn is_declared(scan: &FileScanConfig) -> bool {
    scan.output_partitioning.is_some()
        && scan
            .file_groups
            .iter()
            .flat_map(|g| g.iter())
            .all(|f| f.extension::<FilePartition>().is_some())
}

#[cfg(test)]
mod tests {
    use arrow::array::{Date32Array, Decimal128Array, Int32Array, Int64Array, StringArray};

    use super::*;

    fn of(keys: Vec<ArrayRef>, p: u32) -> Vec<i32> {
        partition_of(&keys, p).unwrap().values().to_vec()
    }

    /// The documented hash, recomputed by hand for one key: a change to the
    /// canonical bytes or the hash would move every stored row.
    #[test]
    fn the_hash_is_the_documented_one() {
        let mut bytes = vec![1u8];
        bytes.extend_from_slice(&42i64.to_le_bytes());
        let expected = (XxHash64::oneshot(0, &bytes) % 16) as i32;
        assert_eq!(
            of(vec![Arc::new(Int64Array::from(vec![42]))], 16),
            vec![expected]
        );
        let mut text = vec![1u8];
        text.extend_from_slice(&5u32.to_le_bytes());
        text.extend_from_slice(b"skiff");
        let expected = (XxHash64::oneshot(0, &text) % 7) as i32;
        assert_eq!(
            of(vec![Arc::new(StringArray::from(vec!["skiff"]))], 7),
            vec![expected]
        );
    }

    #[test]
    fn equal_keys_of_different_widths_agree() {
        let narrow: ArrayRef = Arc::new(Int32Array::from(vec![1, -7, 1_000_000]));
        let wide: ArrayRef = Arc::new(Int64Array::from(vec![1, -7, 1_000_000]));
        assert_eq!(of(vec![narrow], 64), of(vec![wide], 64));
        let days: ArrayRef = Arc::new(Date32Array::from(vec![19000]));
        let number: ArrayRef = Arc::new(Int64Array::from(vec![19000]));
        assert_eq!(of(vec![days], 10), of(vec![number], 10));
    }

    #[test]
    fn rows_spread_over_every_partition_and_stay_in_range() {
        let keys: ArrayRef = Arc::new(Int64Array::from((0..10_000).collect::<Vec<i64>>()));
        let parts = of(vec![keys], 32);
        assert!(parts.iter().all(|&p| (0..32).contains(&p)));
        let mut counts = [0usize; 32];
        parts.iter().for_each(|&p| counts[p as usize] += 1);
        assert!(counts.iter().all(|&c| c > 200), "{counts:?}");
    }

    #[test]
    fn nulls_and_column_order_count() {
        let a: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), None]));
        let b: ArrayRef = Arc::new(Int64Array::from(vec![Some(2), Some(2)]));
        let ab = of(vec![Arc::clone(&a), Arc::clone(&b)], 1024);
        let ba = of(vec![b, a], 1024);
        assert_ne!(ab[0], ba[0], "(1, 2) and (2, 1) differ");
        let decimal: ArrayRef = Arc::new(
            Decimal128Array::from(vec![Some(1234), None])
                .with_precision_and_scale(15, 2)
                .unwrap(),
        );
        assert_eq!(of(vec![decimal], 1).len(), 2);
    }

    #[test]
    fn the_metadata_round_trips_and_refuses_damage() {
        let p = HashPartitioning::new(vec!["o_orderkey".into()], 64).unwrap();
        let config = p.metadata();
        assert_eq!(
            HashPartitioning::from_metadata("t", &config).unwrap(),
            Some(p)
        );
        assert_eq!(
            HashPartitioning::from_metadata("t", &HashMap::new()).unwrap(),
            None
        );
        let mut bad = config.clone();
        bad.insert(COUNT_KEY.into(), "lots".into());
        let err = HashPartitioning::from_metadata("t", &bad).unwrap_err();
        assert!(err.to_string().contains("damaged"), "{err}");
        bad.remove(COUNT_KEY);
        assert!(HashPartitioning::from_metadata("t", &bad).is_err());
        assert!(HashPartitioning::new(vec![], 4).is_err());
        assert!(HashPartitioning::new(vec!["k".into()], 0).is_err());
        assert!(HashPartitioning::new(vec!["k".into()], PARTITIONS_MAX + 1).is_err());
    }

    #[test]
    fn the_clause_is_split_out_of_create_table() {
        let sql =
            "CREATE TABLE t (a INT, \"B\" TEXT)\n  partition by hash (A, \"B\") INTO 8 PARTITIONS";
        let (rest, p) = split_clause(sql).unwrap().unwrap();
        assert_eq!(rest.trim_end(), "CREATE TABLE t (a INT, \"B\" TEXT)");
        assert_eq!(p.columns, vec!["a".to_string(), "B".to_string()]);
        assert_eq!(p.partitions, 8);
        let ctas = concat!(
            "CREATE TABLE o PARTITION BY HASH (o_orderkey) INTO 4 PARTITIONS ",
            "AS SELECT 1 AS o_orderkey"
        );
        let (rest, p) = split_clause(ctas).unwrap().unwrap();
        assert_eq!(rest, "CREATE TABLE o   AS SELECT 1 AS o_orderkey");
        assert_eq!(p.partitions, 4);
        assert_eq!(split_clause("SELECT 'PARTITION BY HASH'").unwrap(), None);
        assert_eq!(split_clause("CREATE TABLE t (a INT)").unwrap(), None);
        let bad = split_clause("CREATE TABLE t (a INT) PARTITION BY HASH a INTO 4 PARTITIONS");
        assert!(
            bad.unwrap_err()
                .to_string()
                .contains("expected PARTITION BY HASH")
        );
        let zero = split_clause("CREATE TABLE t (a INT) PARTITION BY HASH (a) INTO 0 PARTITIONS");
        assert!(zero.unwrap_err().to_string().contains("between 1 and"));
        let external = concat!(
            "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION 'x' ",
            "PARTITION BY HASH (a) INTO 2 PARTITIONS"
        );
        assert!(
            split_clause(external)
                .unwrap_err()
                .to_string()
                .contains("external")
        );
    }
}
