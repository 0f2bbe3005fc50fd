//! The cardinality estimator of offloaded fragments (the SmartNIC paper's
//! §V-C): from the node's sketches of the columns a fragment reads, the
//! rows it keeps and the operations it performs, counted by name as the
//! paper's operation vector (Table I): every comparison, boolean, arithmetic
//! and function evaluated over the rows it sees, the filter over its input
//! and the rows it selects, the projected values, the rows grouped and the
//! aggregates updated.
//!
//! A conjunction's selectivity is the product of its terms' (independent
//! columns; one column's lower and upper bounds taken together, `low +
//! high - 1`), a disjunction's `a + b - ab`. A comparison of a column with a
//! constant is judged by the column's KLL quantiles (ranges) or its
//! frequent items and distinct count (equality); a pattern by the heavy
//! hitters it matches; `column % m = c` as `1/m`; any other predicate over
//! numeric columns by evaluating it over rows drawn from their quantiles
//! (independent columns). What is left takes PostgreSQL's defaults
//! (`DEFAULT_EQ_SEL` 0.005, `DEFAULT_INEQ_SEL` 1/3, `DEFAULT_MATCH_SEL`
//! 0.005). Its error is measured by `skiff bench offload`, not assumed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Float64Array, RecordBatch, StringArray};
use arrow::compute::cast;
use arrow::compute::kernels::comparison;
use arrow::datatypes::{DataType, Field};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::execution_props::ExecutionProps;
use datafusion::logical_expr::expr::Like;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator};
use datafusion::physical_expr::create_physical_expr;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use crate::sketches::ColumnSketch;

/// PostgreSQL's selectivity of an equality nothing is known of.
const DEFAULT_EQUALITY: f64 = 0.005;
/// PostgreSQL's selectivity of an inequality nothing is known of.
const DEFAULT_INEQUALITY: f64 = 1.0 / 3.0;
/// PostgreSQL's selectivity of a pattern match.
const DEFAULT_MATCH: f64 = 0.005;

/// What a fragment is estimated to do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Estimate {
    /// Rows the fragment reads.
    pub input_rows: f64,
    /// Rows it keeps.
    pub output_rows: f64,
    /// Operations, by name, and how many times each is performed.
    pub operations: BTreeMap<String, f64>,
}

/// The statistics an estimate reads: the rows of the files a fragment
/// reads, and its columns' sketches over them.
pub trait Statistics {
    fn rows(&self) -> u64;
    fn column(&self, name: &str) -> Option<&ColumnSketch>;
    /// How many partial aggregations the rows are cut into (the node
    /// aggregates each row group on each of its threads apart).
    fn partials(&self) -> u64 {
        1
    }
    /// The type of column `name`, when known (to draw rows of it).
    fn data_type(&self, _name: &str) -> Option<DataType> {
        None
    }
}

/// Estimate `plan`, a fragment (a scan under filters and projections).
pub fn estimate(plan: &LogicalPlan, statistics: &dyn Statistics) -> Estimate {
    let mut estimate = Estimate {
        input_rows: statistics.rows() as f64,
        ..Estimate::default()
    };
    let (rows, _) = visit(plan, statistics, &mut estimate);
    estimate.output_rows = rows;
    estimate
}

/// Count `plan`'s operations into `estimate`: the rows it gives, and the
/// terms of the filters applied on the way (a term applied twice, as a
/// scan's filter and again above it, keeps no fewer rows the second time).
fn visit(
    plan: &LogicalPlan,
    statistics: &dyn Statistics,
    estimate: &mut Estimate,
) -> (f64, Vec<Term>) {
    match plan {
        LogicalPlan::TableScan(scan) => {
            let rows = statistics.rows() as f64;
            count(estimate, "table_rows", rows);
            match scan.filters.iter().cloned().reduce(Expr::and) {
                Some(predicate) => filter(&predicate, rows, Vec::new(), statistics, estimate),
                None => (rows, Vec::new()),
            }
        }
        LogicalPlan::Filter(node) => {
            let (rows, applied) = visit(&node.input, statistics, estimate);
            filter(&node.predicate, rows, applied, statistics, estimate)
        }
        LogicalPlan::Projection(node) => {
            let (rows, applied) = visit(&node.input, statistics, estimate);
            for expr in &node.expr {
                operations(expr, rows, estimate);
            }
            count(estimate, "project", rows * node.expr.len() as f64);
            (rows, applied)
        }
        LogicalPlan::Aggregate(node) => {
            let (rows, applied) = visit(&node.input, statistics, estimate);
            for expr in node.group_expr.iter().chain(&node.aggr_expr) {
                operations(expr, rows, estimate);
            }
            if !node.group_expr.is_empty() {
                count(estimate, "group", rows);
            }
            count(estimate, "aggregate", rows * node.aggr_expr.len() as f64);
            let groups = partial_groups(&node.group_expr, rows, &applied, statistics);
            (groups, applied)
        }
        other => other.inputs().first().map_or((0.0, Vec::new()), |input| {
            visit(input, statistics, estimate)
        }),
    }
}

/// The rows the partial aggregations of `rows` rows by `groups` give: each
/// partial aggregation sees its share `n` of the rows and keeps the
/// distinct groups among them, `d (1 - e^(-n/d))` of `d` equally likely
/// groups (`d` the product of the group keys' distinct counts, a key the
/// filters hold equal to one of `k` values counting `k`); without groups,
/// one row each.
fn partial_groups(
    groups: &[Expr],
    rows: f64,
    applied: &[Term],
    statistics: &dyn Statistics,
) -> f64 {
    let partials = statistics.partials().max(1) as f64;
    if groups.is_empty() {
        return partials;
    }
    let n = rows / partials;
    // Columns the filters hold to a few values.
    let fixed: HashMap<&str, f64> = applied
        .iter()
        .filter_map(|t| {
            let (column, values) = equalities(&t.expr)?;
            Some((column_of(column)?, values.len() as f64))
        })
        .collect();
    let distinct = groups
        .iter()
        .map(|g| match column_of(g).and_then(|c| fixed.get(c)) {
            Some(&values) => values,
            None => group_distinct(g, statistics).unwrap_or(rows),
        })
        .product::<f64>()
        .clamp(1.0, rows.max(1.0));
    partials * distinct * (1.0 - (-n / distinct).exp())
}

/// The distinct values of group key `key`: at most the product of its
/// columns' (a value computed from them takes no more), and a residue of
/// `m` at most `m`; `None` when a column has no sketch.
fn group_distinct(key: &Expr, statistics: &dyn Statistics) -> Option<f64> {
    if let Expr::BinaryExpr(BinaryExpr {
        left,
        op: Operator::Modulo,
        right,
    }) = key
        && let Some(modulus) = literal_of(right).and_then(integer)
    {
        let residues = modulus.unsigned_abs().max(1) as f64;
        return Some(group_distinct(left, statistics).map_or(residues, |d| d.min(residues)));
    }
    let columns = key.column_refs();
    if columns.is_empty() {
        return Some(1.0);
    }
    columns
        .iter()
        .map(|c| Some(statistics.column(&c.name)?.distinct().max(1.0)))
        .product()
}

/// The rows of `rows` that `predicate` keeps beyond the terms `applied`
/// already, its operations counted; and the terms applied after it.
fn filter(
    predicate: &Expr,
    rows: f64,
    mut applied: Vec<Term>,
    statistics: &dyn Statistics,
    estimate: &mut Estimate,
) -> (f64, Vec<Term>) {
    operations(predicate, rows, estimate);
    // What the terms applied so far and these together keep, against what
    // those applied kept: a range's two ends may come at two levels.
    let before = conjunction_share(&applied);
    for term in split_conjunction(predicate) {
        let term = unaliased(term);
        if !applied.iter().any(|t| t.expr == term) {
            let share = selectivity(&term, statistics).clamp(0.0, 1.0);
            applied.push(Term { expr: term, share });
        }
    }
    let after = conjunction_share(&applied);
    let share = if before > 0.0 {
        (after / before).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let kept = rows * share;
    count(estimate, "filter", rows);
    count(estimate, "select", kept);
    (kept, applied)
}

/// A term of a conjunction, and the share of rows it keeps alone.
struct Term {
    expr: Expr,
    share: f64,
}

/// The share of rows all of `terms` keep: independent columns multiply,
/// but the bounds of one column's range are taken together (its tightest
/// lower and upper bound: what each leaves out, left out).
fn conjunction_share(terms: &[Term]) -> f64 {
    let mut share = 1.0;
    let mut ranges: HashMap<&str, [Option<f64>; 2]> = HashMap::new();
    for Term { expr, share: kept } in terms {
        let kept = *kept;
        match bound_of(expr) {
            Some((column, end)) => {
                let tightest = &mut ranges.entry(column).or_default()[end];
                *tightest = Some(tightest.map_or(kept, |t| t.min(kept)));
            }
            None => share *= kept,
        }
    }
    for [low, high] in ranges.into_values() {
        share *= match (low, high) {
            (Some(low), Some(high)) => (low + high - 1.0).max(0.0),
            (Some(one), None) | (None, Some(one)) => one,
            (None, None) => 1.0,
        };
    }
    share
}

/// The column `term` bounds and which end (0 below, 1 above), when it
/// compares a column with a constant by `<`, `<=`, `>` or `>=`.
fn bound_of(term: &Expr) -> Option<(&str, usize)> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = term else {
        return None;
    };
    let (column, op) = match (column_of(left), literal_of(right)) {
        (Some(column), Some(_)) => (column, *op),
        _ => (column_of(right)?, op.swap()?),
    };
    match op {
        Operator::Gt | Operator::GtEq => Some((column, 0)),
        Operator::Lt | Operator::LtEq => Some((column, 1)),
        _ => None,
    }
}

/// `term` without the table names of its columns (a scan's filters and
/// the filter above it may name them differently).
fn unaliased(term: &Expr) -> Expr {
    term.clone()
        .transform(|e| match e {
            Expr::Column(column) if column.relation.is_some() => {
                Ok(datafusion::common::tree_node::Transformed::yes(
                    Expr::Column(datafusion::common::Column::new_unqualified(column.name)),
                ))
            }
            other => Ok(datafusion::common::tree_node::Transformed::no(other)),
        })
        .map_or_else(|_| term.clone(), |t| t.data)
}

fn count(estimate: &mut Estimate, name: &str, times: f64) {
    *estimate.operations.entry(name.to_string()).or_default() += times;
}

/// Count what evaluating `expr` over `rows` rows performs: every operator
/// and function node once per row (DataFusion evaluates a batch's column
/// at a time, both sides of a boolean included).
fn operations(expr: &Expr, rows: f64, estimate: &mut Estimate) {
    let _ = expr.apply(|node| {
        let name = match node {
            Expr::BinaryExpr(BinaryExpr { op, .. }) => Some(operator_name(*op)),
            Expr::Not(_) => Some("not".to_string()),
            Expr::IsNull(_) | Expr::IsNotNull(_) => Some("is_null".to_string()),
            Expr::Between(_) => Some("between".to_string()),
            Expr::Like(_) | Expr::SimilarTo(_) => Some("like".to_string()),
            Expr::InList(_) => Some("in_list".to_string()),
            Expr::Cast(_) | Expr::TryCast(_) => Some("cast".to_string()),
            Expr::Case(_) => Some("case".to_string()),
            Expr::ScalarFunction(f) => Some(f.name().to_string()),
            _ => None,
        };
        if let Some(name) = name {
            count(estimate, &name, rows);
        }
        Ok(TreeNodeRecursion::Continue)
    });
}

/// An operator's name in the operation vector (Arrow's kernel names, as
/// in the paper's Table I).
fn operator_name(op: Operator) -> String {
    match op {
        Operator::And => "and_kleene".to_string(),
        Operator::Or => "or_kleene".to_string(),
        Operator::Eq => "equal".to_string(),
        Operator::NotEq => "not_equal".to_string(),
        Operator::Lt => "less".to_string(),
        Operator::LtEq => "less_equal".to_string(),
        Operator::Gt => "greater".to_string(),
        Operator::GtEq => "greater_equal".to_string(),
        Operator::Plus => "add".to_string(),
        Operator::Minus => "subtract".to_string(),
        Operator::Multiply => "multiply".to_string(),
        Operator::Divide => "divide".to_string(),
        Operator::Modulo => "modulo".to_string(),
        other => other.to_string().to_lowercase(),
    }
}

/// The share of rows `predicate` keeps.
pub(crate) fn selectivity(predicate: &Expr, statistics: &dyn Statistics) -> f64 {
    let s = |e: &Expr| selectivity(e, statistics);
    match predicate {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And => {
                let terms: Vec<Term> = split_conjunction(predicate)
                    .into_iter()
                    .map(|e| Term {
                        expr: e.clone(),
                        share: s(e).clamp(0.0, 1.0),
                    })
                    .collect();
                conjunction_share(&terms)
            }
            Operator::Or => match equalities(predicate) {
                // One column equal to one of several values: the values'
                // rows do not overlap.
                Some((column, values)) => values
                    .iter()
                    .map(|v| comparison(column, Operator::Eq, v, statistics))
                    .sum::<f64>()
                    .min(1.0),
                None => {
                    let (a, b) = (s(left), s(right));
                    a + b - a * b
                }
            },
            op => judged(left, *op, right, statistics)
                .or_else(|| residue(left, *op, right))
                .or_else(|| sampled(predicate, statistics))
                .unwrap_or_else(|| default_share(*op)),
        },
        Expr::Not(inner) => 1.0 - s(inner),
        Expr::Between(between) => {
            let low = comparison(&between.expr, Operator::GtEq, &between.low, statistics);
            let high = comparison(&between.expr, Operator::LtEq, &between.high, statistics);
            // Both bounds at once: what each leaves out, left out.
            let kept = (low + high - 1.0).max(0.0);
            if between.negated { 1.0 - kept } else { kept }
        }
        Expr::InList(list) => {
            let kept: f64 = list
                .list
                .iter()
                .map(|value| comparison(&list.expr, Operator::Eq, value, statistics))
                .sum::<f64>()
                .min(1.0);
            if list.negated { 1.0 - kept } else { kept }
        }
        Expr::IsNull(inner) => null_share(inner, statistics).unwrap_or(DEFAULT_EQUALITY),
        Expr::IsNotNull(inner) => 1.0 - null_share(inner, statistics).unwrap_or(DEFAULT_EQUALITY),
        Expr::Like(like) => {
            let matched = pattern_share(like, statistics).unwrap_or(DEFAULT_MATCH);
            if like.negated { 1.0 - matched } else { matched }
        }
        Expr::Literal(ScalarValue::Boolean(Some(true)), _) => 1.0,
        Expr::Literal(ScalarValue::Boolean(_), _) => 0.0,
        _ => sampled(predicate, statistics).unwrap_or(DEFAULT_INEQUALITY),
    }
}

/// The share of rows a pattern keeps, judged by the column's heavy
/// hitters (each matched against it, its rows counted) and PostgreSQL's
/// default for the rows the heavy hitters do not hold.
fn pattern_share(like: &Like, statistics: &dyn Statistics) -> Option<f64> {
    let sketch = statistics.column(column_of(&like.expr)?)?;
    let pattern = match literal_of(&like.pattern)? {
        ScalarValue::Utf8(Some(p))
        | ScalarValue::Utf8View(Some(p))
        | ScalarValue::LargeUtf8(Some(p)) => p,
        _ => return None,
    };
    // Arrow's kernels know `\` as the escape only.
    if like.escape_char.is_some_and(|c| c != '\\') {
        return None;
    }
    let heavy = sketch.heavy_strings();
    let (rows, nulls) = sketch.rows();
    let valued = rows.saturating_sub(nulls);
    if heavy.is_empty() || valued == 0 {
        return None;
    }
    let values = StringArray::from_iter_values(heavy.iter().map(|(value, _)| value.as_str()));
    let pattern = StringArray::new_scalar(pattern.as_str());
    let matched = if like.case_insensitive {
        comparison::ilike(&values, &pattern)
    } else {
        comparison::like(&values, &pattern)
    }
    .ok()?;
    let held: u64 = heavy.iter().map(|(_, n)| n).sum();
    let kept: u64 = heavy
        .iter()
        .zip(matched.iter())
        .filter(|(_, m)| m.unwrap_or(false))
        .map(|((_, n), _)| n)
        .sum();
    let rest = valued.saturating_sub(held) as f64 * DEFAULT_MATCH;
    Some(((kept as f64 + rest) / rows as f64).min(1.0))
}

/// The share of rows `column % m = c` (or `<>`) keeps: integers fall
/// evenly into the residues of `m`.
fn residue(left: &Expr, op: Operator, right: &Expr) -> Option<f64> {
    let Expr::BinaryExpr(BinaryExpr {
        left: column,
        op: Operator::Modulo,
        right: modulus,
    }) = left
    else {
        return None;
    };
    column_of(column)?;
    let modulus = integer(literal_of(modulus)?)?.unsigned_abs();
    let value = integer(literal_of(right)?)?;
    if modulus == 0 {
        return None;
    }
    let equal = if value.unsigned_abs() < modulus {
        1.0 / modulus as f64
    } else {
        0.0
    };
    match op {
        Operator::Eq => Some(equal),
        Operator::NotEq => Some(1.0 - equal),
        _ => None,
    }
}

/// Rows drawn from the sketches to judge a predicate nothing else can.
const SAMPLED_ROWS: usize = 2048;

/// The share of rows `predicate` keeps over [`SAMPLED_ROWS`] rows drawn
/// from its columns' quantiles, each column spread as its values are and
/// independent of the others (a stratified sample, shuffled per column);
/// `None` when a column has no quantiles or type known.
fn sampled(predicate: &Expr, statistics: &dyn Statistics) -> Option<f64> {
    let mut columns: Vec<_> = predicate.column_refs().into_iter().collect();
    if columns.is_empty() {
        return None;
    }
    // Each column's draw seeded by its place in name order: the same
    // predicate is judged alike every time.
    columns.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    let mut fields = Vec::with_capacity(columns.len());
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(columns.len());
    let mut valued = 1.0;
    for (seed, column) in columns.into_iter().enumerate() {
        let sketch = statistics.column(&column.name)?;
        let data_type = statistics.data_type(&column.name)?;
        let mut values = sketch.spread(SAMPLED_ROWS)?;
        values.shuffle(&mut StdRng::seed_from_u64(seed as u64));
        let drawn: ArrayRef = Arc::new(Float64Array::from(values));
        arrays.push(cast(&drawn, &data_type).ok()?);
        let (rows, nulls) = sketch.rows();
        valued *= rows.saturating_sub(nulls) as f64 / rows.max(1) as f64;
        fields.push((
            column.relation.clone(),
            Arc::new(Field::new(&column.name, data_type, true)),
        ));
    }
    let schema = DFSchema::new_with_metadata(fields, HashMap::new()).ok()?;
    let physical = create_physical_expr(
        predicate,
        &schema,
        &ExecutionProps::new(),
        &PhysicalPlanningContext::default(),
    )
    .ok()?;
    let rows = RecordBatch::try_new(Arc::clone(schema.inner()), arrays).ok()?;
    let kept = physical
        .evaluate(&rows)
        .ok()?
        .into_array(SAMPLED_ROWS)
        .ok()?;
    let kept = kept.as_boolean_opt()?;
    Some(kept.true_count() as f64 / SAMPLED_ROWS as f64 * valued)
}

/// A disjunction of equalities of one column with constants (what an
/// `IN` list becomes): the column, and the constants.
fn equalities(predicate: &Expr) -> Option<(&Expr, Vec<&Expr>)> {
    match predicate {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Or,
            right,
        }) => {
            let (column, mut values) = equalities(left)?;
            let (other, more) = equalities(right)?;
            (column_of(column)? == column_of(other)?).then(|| {
                values.extend(more);
                (column, values)
            })
        }
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) => match (column_of(left), literal_of(right)) {
            (Some(_), Some(_)) => Some((left.as_ref(), vec![right.as_ref()])),
            _ => None,
        },
        Expr::InList(list) if !list.negated && column_of(&list.expr).is_some() => {
            Some((list.expr.as_ref(), list.list.iter().collect()))
        }
        _ => None,
    }
}

/// The column an expression reads as is (through casts).
fn column_of(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Column(column) => Some(&column.name),
        Expr::Cast(cast) => column_of(&cast.expr),
        Expr::TryCast(cast) => column_of(&cast.expr),
        _ => None,
    }
}

fn literal_of(expr: &Expr) -> Option<&ScalarValue> {
    match expr {
        Expr::Literal(value, _) => Some(value),
        Expr::Cast(cast) => literal_of(&cast.expr),
        _ => None,
    }
}

/// A literal as the number quantiles are kept over.
fn number(value: &ScalarValue) -> Option<f64> {
    Some(match value {
        ScalarValue::Int8(Some(v)) => f64::from(*v),
        ScalarValue::Int16(Some(v)) => f64::from(*v),
        ScalarValue::Int32(Some(v)) => f64::from(*v),
        ScalarValue::Int64(Some(v)) => *v as f64,
        ScalarValue::UInt8(Some(v)) => f64::from(*v),
        ScalarValue::UInt16(Some(v)) => f64::from(*v),
        ScalarValue::UInt32(Some(v)) => f64::from(*v),
        ScalarValue::UInt64(Some(v)) => *v as f64,
        ScalarValue::Float32(Some(v)) => f64::from(*v),
        ScalarValue::Float64(Some(v)) => *v,
        ScalarValue::Date32(Some(v)) => f64::from(*v),
        ScalarValue::Date64(Some(v)) => *v as f64,
        ScalarValue::Decimal128(Some(v), _, scale) => *v as f64 / 10f64.powi(i32::from(*scale)),
        _ => return None,
    })
}

/// An integer literal's value.
fn integer(value: &ScalarValue) -> Option<i64> {
    match value {
        ScalarValue::Float32(_) | ScalarValue::Float64(_) | ScalarValue::Decimal128(..) => None,
        other => counted_as(other),
    }
}

/// A literal as the integer frequent items count it by.
fn counted_as(value: &ScalarValue) -> Option<i64> {
    Some(match value {
        ScalarValue::Int8(Some(v)) => i64::from(*v),
        ScalarValue::Int16(Some(v)) => i64::from(*v),
        ScalarValue::Int32(Some(v)) => i64::from(*v),
        ScalarValue::Int64(Some(v)) => *v,
        ScalarValue::UInt8(Some(v)) => i64::from(*v),
        ScalarValue::UInt16(Some(v)) => i64::from(*v),
        ScalarValue::UInt32(Some(v)) => i64::from(*v),
        ScalarValue::UInt64(Some(v)) => *v as i64,
        ScalarValue::Date32(Some(v)) => i64::from(*v),
        ScalarValue::Date64(Some(v)) => *v,
        ScalarValue::Float64(Some(v)) => v.to_bits() as i64,
        ScalarValue::Float32(Some(v)) => i64::from(v.to_bits()),
        ScalarValue::Decimal128(Some(v), ..) => *v as i64,
        _ => return None,
    })
}

fn null_share(expr: &Expr, statistics: &dyn Statistics) -> Option<f64> {
    let sketch = statistics.column(column_of(expr)?)?;
    let (rows, nulls) = sketch.rows();
    (rows > 0).then(|| nulls as f64 / rows as f64)
}

/// PostgreSQL's share of a comparison nothing is known of.
fn default_share(op: Operator) -> f64 {
    match op {
        Operator::Eq => DEFAULT_EQUALITY,
        Operator::NotEq => 1.0 - DEFAULT_EQUALITY,
        _ => DEFAULT_INEQUALITY,
    }
}

/// The share of rows `left op right` keeps, when one side is a column and
/// the other a constant; else the default.
fn comparison(left: &Expr, op: Operator, right: &Expr, statistics: &dyn Statistics) -> f64 {
    judged(left, op, right, statistics).unwrap_or_else(|| default_share(op))
}

/// The share of rows `left op right` keeps by the column's sketches, when
/// one side is a column and the other a constant.
fn judged(left: &Expr, op: Operator, right: &Expr, statistics: &dyn Statistics) -> Option<f64> {
    let (column, value, op) = match (column_of(left), literal_of(right)) {
        (Some(column), Some(value)) => (column, value, op),
        _ => match (column_of(right), literal_of(left), op.swap()) {
            (Some(column), Some(value), Some(op)) => (column, value, op),
            _ => return None,
        },
    };
    let sketch = statistics.column(column)?;
    let (rows, nulls) = sketch.rows();
    if rows == 0 {
        return Some(0.0);
    }
    // Comparisons keep no null; shares below are of the values.
    let valued = (rows - nulls) as f64 / rows as f64;
    let below = |inclusive| number(value).and_then(|v| sketch.share_below(v, inclusive));
    let share = match op {
        Operator::Lt => below(false),
        Operator::LtEq => below(true),
        Operator::Gt => below(true).map(|b| 1.0 - b),
        Operator::GtEq => below(false).map(|b| 1.0 - b),
        Operator::Eq => Some(equal_share(sketch, value, rows - nulls)),
        Operator::NotEq => Some(1.0 - equal_share(sketch, value, rows - nulls)),
        _ => None,
    };
    Some(share.unwrap_or_else(|| default_share(op)) * valued)
}

/// The share of the `valued` non-null rows equal to `value`: a heavy
/// hitter's count, else one distinct value's share.
fn equal_share(sketch: &ColumnSketch, value: &ScalarValue, valued: u64) -> f64 {
    if valued == 0 {
        return 0.0;
    }
    let heavy = match value {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::Utf8View(Some(s))
        | ScalarValue::LargeUtf8(Some(s)) => sketch.count_of_string(s),
        other => counted_as(other).and_then(|v| sketch.count_of_number(v)),
    };
    if let Some((low, high)) = heavy {
        return (low + high) as f64 / 2.0 / valued as f64;
    }
    // One of the values that are not heavy hitters, all alike.
    let (items, held) = sketch.heavy_hitters();
    let rest = valued.saturating_sub(held) as f64 / valued as f64;
    let others = (sketch.distinct() - items as f64).max(1.0);
    rest / others
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Float64Array, StringArray};
    use datafusion::logical_expr::{col, lit};

    use super::*;

    struct Sketched {
        rows: u64,
        columns: HashMap<String, ColumnSketch>,
    }

    impl Statistics for Sketched {
        fn rows(&self) -> u64 {
            self.rows
        }

        fn column(&self, name: &str) -> Option<&ColumnSketch> {
            self.columns.get(name)
        }

        fn data_type(&self, name: &str) -> Option<DataType> {
            match name {
                "label" => Some(DataType::Utf8),
                name => self.columns.contains_key(name).then_some(DataType::Float64),
            }
        }
    }

    /// `rows` rows: x, y, z uniform in [0, 1) (a fixed sequence), and a
    /// label, "a" for half the rows, else one of 1000 others.
    fn particles(rows: usize) -> Sketched {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut columns = HashMap::new();
        for name in ["x", "y", "z"] {
            let values: ArrayRef =
                Arc::new(Float64Array::from_iter_values((0..rows).map(|_| next())));
            let mut sketch = ColumnSketch::new(values.data_type());
            sketch.update(values.as_ref());
            columns.insert(name.to_string(), sketch);
        }
        let labels: ArrayRef = Arc::new(StringArray::from_iter_values((0..rows).map(|i| {
            if i % 2 == 0 {
                "a".to_string()
            } else {
                format!("l{}", i % 1000)
            }
        })));
        let mut sketch = ColumnSketch::new(labels.data_type());
        sketch.update(labels.as_ref());
        columns.insert("label".to_string(), sketch);
        Sketched {
            rows: rows as u64,
            columns,
        }
    }

    /// A table of `columns`, none nullable.
    fn table(columns: &[(&str, DataType)]) -> Arc<dyn datafusion::logical_expr::TableSource> {
        let fields: Vec<Field> = columns
            .iter()
            .map(|(name, data_type)| Field::new(*name, data_type.clone(), false))
            .collect();
        Arc::new(
            datafusion::logical_expr::logical_plan::builder::LogicalTableSource::new(Arc::new(
                arrow::datatypes::Schema::new(fields),
            )),
        )
    }

    fn close(got: f64, expected: f64, within: f64) {
        assert!((got - expected).abs() <= within, "{got} against {expected}");
    }

    #[test]
    fn independent_ranges_multiply() {
        let data = particles(200_000);
        // CQ1 of the paper: 0.3 * 0.3 * 0.1 of uniform columns.
        let cq1 = col("x")
            .gt_eq(lit(0.7))
            .and(col("y").lt(lit(0.3)))
            .and(col("z").lt_eq(lit(0.1)));
        close(selectivity(&cq1, &data), 0.009, 0.001);
        close(
            selectivity(&col("x").between(lit(0.2), lit(0.5)), &data),
            0.3,
            0.01,
        );
        close(
            selectivity(&Expr::Not(Box::new(col("x").lt(lit(0.5)))), &data),
            0.5,
            0.01,
        );
        let either = col("x").lt(lit(0.5)).or(col("y").lt(lit(0.5)));
        close(selectivity(&either, &data), 0.75, 0.01);
        // A constant on the left.
        close(selectivity(&lit(0.25).gt(col("z")), &data), 0.25, 0.01);
        // Equalities of one column do not overlap.
        let labels = col("label").eq(lit("a")).or(col("label").eq(lit("l7")));
        close(selectivity(&labels, &data), 0.5 + 0.5 / 500.0, 0.03);
        let listed = col("label").in_list(vec![lit("l7"), lit("l9")], false);
        close(selectivity(&listed, &data), 2.0 * 0.5 / 500.0, 0.0005);
    }

    #[test]
    fn equality_uses_heavy_hitters_then_distinct_values() {
        let data = particles(100_000);
        close(selectivity(&col("label").eq(lit("a")), &data), 0.5, 0.03);
        // One of the 500 others (odd remainders of 1000): half of 1/500.
        close(
            selectivity(&col("label").eq(lit("l7")), &data),
            0.5 / 500.0,
            0.0003,
        );
        // Unknown columns take the defaults.
        close(
            selectivity(&col("nope").eq(lit(1)), &data),
            DEFAULT_EQUALITY,
            0.0,
        );
    }

    #[test]
    fn a_term_applied_twice_keeps_rows_once() {
        let data = particles(50_000);
        let table = table(&[("x", DataType::Float64), ("y", DataType::Float64)]);
        // The scan carries `x >= 0.7` (an inexact pushdown), the filter
        // above applies it again with `y < 0.3`.
        let plan = datafusion::logical_expr::LogicalPlanBuilder::scan_with_filters(
            "particles",
            table,
            None,
            vec![col("x").gt_eq(lit(0.7))],
        )
        .unwrap()
        .filter(
            col("particles.x")
                .gt_eq(lit(0.7))
                .and(col("y").lt(lit(0.3))),
        )
        .unwrap()
        .build()
        .unwrap();
        let estimate = estimate(&plan, &data);
        close(estimate.output_rows / 50_000.0, 0.09, 0.005);
        // The scan's filter sees every row, the one above the 30% it kept.
        close(estimate.operations["filter"], 65_000.0, 1_000.0);
    }

    #[test]
    fn the_operation_vector_counts_what_runs_on_which_rows() {
        let data = particles(10_000);
        let table = table(&[
            ("x", DataType::Float64),
            ("y", DataType::Float64),
            ("z", DataType::Float64),
        ]);
        let plan = datafusion::logical_expr::LogicalPlanBuilder::scan("particles", table, None)
            .unwrap()
            .filter(
                col("x")
                    .gt_eq(lit(0.7))
                    .and(col("y").lt(lit(0.3)))
                    .and(col("z").lt_eq(lit(0.1))),
            )
            .unwrap()
            .project(vec![col("x"), col("y") * lit(2.0)])
            .unwrap()
            .build()
            .unwrap();
        let estimate = estimate(&plan, &data);
        let ops = &estimate.operations;
        assert_eq!(estimate.input_rows, 10_000.0);
        assert_eq!(ops["table_rows"], 10_000.0);
        assert_eq!(ops["filter"], 10_000.0);
        // Two ANDs, and each comparison, over every row (as Table I).
        assert_eq!(ops["and_kleene"], 20_000.0);
        for op in ["greater_equal", "less", "less_equal"] {
            assert_eq!(ops[op], 10_000.0, "{op}");
        }
        close(ops["select"], 90.0, 30.0);
        assert_eq!(ops["select"], estimate.output_rows);
        // The projection's multiplication runs on the rows kept.
        assert_eq!(ops["multiply"], estimate.output_rows);
        assert_eq!(ops["project"], 2.0 * estimate.output_rows);
    }

    #[test]
    fn the_two_ends_of_a_range_are_taken_together() {
        let data = particles(50_000);
        // As the optimizer writes `x BETWEEN 0.2 AND 0.5`: 0.3, not 0.8 x 0.5.
        let range = col("x").gt_eq(lit(0.2)).and(col("x").lt_eq(lit(0.5)));
        close(selectivity(&range, &data), 0.3, 0.02);
        // The tightest bound of each end; other columns multiply.
        let tighter = range
            .clone()
            .and(col("x").lt(lit(0.4)))
            .and(col("y").lt(lit(0.5)));
        close(selectivity(&tighter, &data), 0.2 * 0.5, 0.02);
        // One end in the scan, the other in the filter above it.
        let table = table(&[("x", DataType::Float64)]);
        let plan = datafusion::logical_expr::LogicalPlanBuilder::scan_with_filters(
            "particles",
            table,
            None,
            vec![col("x").gt_eq(lit(0.2))],
        )
        .unwrap()
        .filter(col("x").lt_eq(lit(0.5)))
        .unwrap()
        .build()
        .unwrap();
        close(estimate(&plan, &data).output_rows / 50_000.0, 0.3, 0.02);
    }

    #[test]
    fn what_no_one_column_judges_is_drawn_from_the_sketches() {
        let data = particles(10_000);
        // Uniform independent x, y: P(xy > 1/4) = 3/4 - ln(4)/4.
        let product = (col("x") * col("y")).gt(lit(0.25));
        close(selectivity(&product, &data), 0.75 - 4f64.ln() / 4.0, 0.02);
        let sum = (col("x") + col("y")).lt(lit(0.5));
        close(selectivity(&sum, &data), 0.125, 0.01);
        // Residues, without any sketch.
        close(
            selectivity(&(col("id") % lit(10i64)).eq(lit(3i64)), &data),
            0.1,
            1e-9,
        );
        close(
            selectivity(&(col("id") % lit(10i64)).not_eq(lit(3i64)), &data),
            0.9,
            1e-9,
        );
        // A pattern by the heavy hitters it matches: "a" is half the rows;
        // the rest take the default.
        let pattern = col("label").like(lit("a%"));
        close(
            selectivity(&pattern, &data),
            0.5 + 0.5 * DEFAULT_MATCH,
            0.03,
        );
        let none = col("label").like(lit("zz%"));
        close(selectivity(&none, &data), 0.5 * DEFAULT_MATCH, 0.001);
        // A column with no sketch keeps the default.
        close(
            selectivity(&(col("w") * col("x")).gt(lit(0.25)), &data),
            DEFAULT_INEQUALITY,
            1e-9,
        );
    }

    #[test]
    fn an_aggregation_keeps_the_groups_its_rows_fall_into() {
        let data = particles(10_000);
        let table = table(&[
            ("id", DataType::Int64),
            ("x", DataType::Float64),
            ("label", DataType::Utf8),
        ]);
        let filtered = || {
            datafusion::logical_expr::LogicalPlanBuilder::scan(
                "particles",
                Arc::clone(&table),
                None,
            )
            .unwrap()
            .filter(col("x").gt_eq(lit(0.7)))
            .unwrap()
        };
        let sum = datafusion::functions_aggregate::sum::sum(col("x") * lit(2.0));
        let count = datafusion::functions_aggregate::count::count(lit(1));
        let grouped = filtered()
            .aggregate(vec![col("label")], vec![sum.clone(), count.clone()])
            .unwrap()
            .build()
            .unwrap();
        let estimate = estimate(&grouped, &data);
        let ops = &estimate.operations;
        let kept = ops["select"];
        close(kept, 3_000.0, 150.0);
        // Every row kept is grouped, and updates both aggregates; the
        // multiplication runs on each.
        assert_eq!(ops["group"], kept);
        assert_eq!(ops["aggregate"], 2.0 * kept);
        assert_eq!(ops["multiply"], kept);
        // Half the rows are "a", the rest fall into 500 labels: about 476
        // groups among 3000 rows; the estimate takes the 501 labels as
        // equally likely.
        assert!(
            (450.0..=501.0).contains(&estimate.output_rows),
            "{}",
            estimate.output_rows
        );
        // A residue key: at most its modulus of groups.
        let residues = filtered()
            .aggregate(vec![col("id") % lit(7i64)], vec![sum.clone()])
            .unwrap()
            .build()
            .unwrap();
        assert!(estimate_of(&residues, &data) <= 7.0);
        // A key the filter holds to one value: one group.
        let one = filtered()
            .filter(col("label").eq(lit("a")))
            .unwrap()
            .aggregate(vec![col("label")], vec![sum.clone()])
            .unwrap()
            .build()
            .unwrap();
        close(estimate_of(&one, &data), 1.0, 1e-6);
        // Without groups, one row per partial aggregation.
        let total = filtered()
            .aggregate(Vec::<Expr>::new(), vec![count])
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(estimate_of(&total, &data), 1.0);
    }

    fn estimate_of(plan: &LogicalPlan, data: &Sketched) -> f64 {
        estimate(plan, data).output_rows
    }
}
