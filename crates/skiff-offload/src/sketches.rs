//! Sketches of the data a memory node holds (opportunistic offload: the
//! SmartNIC paper estimates a fragment's output from sketches of the
//! in-transit data): per column of each file held, Apache DataSketches'
//! theta sketch of its distinct values, KLL sketch of its quantiles (range
//! selectivity; numeric and temporal columns, as `f64`) and frequent-items
//! sketch (heavy hitters, for equality), updated with every row group as
//! it is loaded and merged across the files a fragment reads.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{
    DataType, Date32Type, Date64Type, Decimal128Type, Float32Type, Float64Type, Int8Type,
    Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use datasketches::frequencies::{ErrorType, FrequentItemsSketch};
use datasketches::kll::{KllFloat, KllSketch};
use datasketches::theta::{CompactThetaSketch, ThetaSketch, ThetaSketchBuilder, ThetaUnionBuilder};

use crate::limits::{SKETCH_FREQUENT_ITEMS, SKETCH_KLL_K, SKETCH_THETA_LG_K};

/// The heavy hitters of a column, by the type its values hash as.
#[derive(Clone, Debug)]
enum Frequent {
    /// Integers, dates and decimals (unscaled), and floats by their bits.
    Numbers(FrequentItemsSketch<i64>),
    Strings(FrequentItemsSketch<String>),
}

/// Distinct values: a sketch being filled as a file loads, or the union of
/// finished ones.
#[derive(Debug)]
enum Distinct {
    Filling(ThetaSketch),
    Merged(CompactThetaSketch),
}

impl Distinct {
    fn estimate(&self) -> f64 {
        match self {
            Distinct::Filling(sketch) => sketch.estimate(),
            Distinct::Merged(sketch) => sketch.estimate(),
        }
    }

    fn compact(&self) -> CompactThetaSketch {
        match self {
            Distinct::Filling(sketch) => sketch.compact(false),
            Distinct::Merged(sketch) => sketch.clone(),
        }
    }
}

/// The sketches of one column (of one file, or merged over several).
#[derive(Debug)]
pub struct ColumnSketch {
    rows: u64,
    nulls: u64,
    distinct: Distinct,
    /// `None` for a type without an order as `f64` (strings, ...).
    quantiles: Option<KllSketch<KllFloat<f64>>>,
    frequent: Option<Frequent>,
}

/// How a numeric array's row is counted: the integer its distinct values
/// and frequent items key it by (integers and dates as they are, floats by
/// their bits, decimals unscaled), and the value its quantiles are kept
/// over. Chosen once per array: the load calls it for every row.
type Number<'a> = Box<dyn Fn(usize) -> (i64, f64) + 'a>;

fn numbers(array: &dyn Array) -> Option<Number<'_>> {
    macro_rules! integer {
        ($($kind:ty),+) => {
            $(if let Some(values) = array.as_primitive_opt::<$kind>() {
                return Some(Box::new(move |row| {
                    let value = values.value(row);
                    (value as i64, value as f64)
                }));
            })+
        };
    }
    integer!(
        Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
        Date32Type, Date64Type
    );
    if let Some(values) = array.as_primitive_opt::<Float64Type>() {
        return Some(Box::new(move |row| {
            let value = values.value(row);
            (value.to_bits() as i64, value)
        }));
    }
    if let Some(values) = array.as_primitive_opt::<Float32Type>() {
        return Some(Box::new(move |row| {
            let value = values.value(row);
            (i64::from(value.to_bits()), f64::from(value))
        }));
    }
    if let (Some(values), DataType::Decimal128(_, scale)) = (
        array.as_primitive_opt::<Decimal128Type>(),
        array.data_type(),
    ) {
        let unit = 10f64.powi(i32::from(*scale));
        return Some(Box::new(move |row| {
            let value = values.value(row);
            (value as i64, value as f64 / unit)
        }));
    }
    None
}

/// A string array's rows, chosen once per array.
fn strings<'a>(array: &'a dyn Array) -> Option<Box<dyn Fn(usize) -> &'a str + 'a>> {
    Some(match array.data_type() {
        DataType::Utf8 => {
            let values = array.as_string::<i32>();
            Box::new(move |row| values.value(row))
        }
        DataType::LargeUtf8 => {
            let values = array.as_string::<i64>();
            Box::new(move |row| values.value(row))
        }
        DataType::Utf8View => {
            let values = array.as_string_view();
            Box::new(move |row| values.value(row))
        }
        _ => return None,
    })
}

impl ColumnSketch {
    /// Empty sketches for a column of `data_type`.
    pub fn new(data_type: &DataType) -> Self {
        let numeric = data_type.is_numeric() || data_type.is_temporal();
        let strings = matches!(
            data_type,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        );
        let frequent = if strings {
            FrequentItemsSketch::new(SKETCH_FREQUENT_ITEMS)
                .ok()
                .map(Frequent::Strings)
        } else if numeric {
            FrequentItemsSketch::new(SKETCH_FREQUENT_ITEMS)
                .ok()
                .map(Frequent::Numbers)
        } else {
            None
        };
        Self {
            rows: 0,
            nulls: 0,
            distinct: Distinct::Filling(theta()),
            quantiles: numeric.then(|| KllSketch::new(SKETCH_KLL_K).ok()).flatten(),
            frequent,
        }
    }

    /// Count `array`'s values in.
    pub fn update(&mut self, array: &dyn Array) {
        self.rows += array.len() as u64;
        self.nulls += array.null_count() as u64;
        // A merged sketch is not filled again.
        let Distinct::Filling(distinct) = &mut self.distinct else {
            return;
        };
        let valid = (0..array.len()).filter(|&r| array.is_valid(r));
        if let Some(text) = strings(array) {
            for row in valid {
                let text = text(row);
                distinct.update(text);
                if let Some(Frequent::Strings(frequent)) = &mut self.frequent {
                    frequent.update_ref(text);
                }
            }
        } else if let Some(number) = numbers(array) {
            for row in valid {
                let (key, value) = number(row);
                distinct.update(key);
                if let Some(Frequent::Numbers(frequent)) = &mut self.frequent {
                    frequent.update(key);
                }
                if let (Some(quantiles), Ok(value)) =
                    (&mut self.quantiles, KllFloat::<f64>::new(value))
                {
                    quantiles.update(value);
                }
            }
        }
    }

    /// A copy to merge others into (it is not filled again).
    pub fn snapshot(&self) -> ColumnSketch {
        ColumnSketch {
            rows: self.rows,
            nulls: self.nulls,
            distinct: Distinct::Merged(self.distinct.compact()),
            quantiles: self.quantiles.clone(),
            frequent: self.frequent.clone(),
        }
    }

    /// The sketches of this column's values and `other`'s together.
    pub fn merge(&mut self, other: &ColumnSketch) {
        self.rows += other.rows;
        self.nulls += other.nulls;
        if let Ok(mut union) = ThetaUnionBuilder::default().lg_k(SKETCH_THETA_LG_K).build() {
            let (mine, theirs) = (self.distinct.compact(), other.distinct.compact());
            let merged = union.update(&mine).and_then(|()| union.update(&theirs));
            if merged.is_ok() {
                self.distinct = Distinct::Merged(union.to_sketch(false));
            }
        }
        if let (Some(mine), Some(theirs)) = (&mut self.quantiles, &other.quantiles) {
            let _ = mine.merge(theirs);
        }
        match (&mut self.frequent, &other.frequent) {
            (Some(Frequent::Numbers(mine)), Some(Frequent::Numbers(theirs))) => mine.merge(theirs),
            (Some(Frequent::Strings(mine)), Some(Frequent::Strings(theirs))) => mine.merge(theirs),
            _ => {}
        }
    }

    /// Rows counted, and how many were null.
    pub(crate) fn rows(&self) -> (u64, u64) {
        (self.rows, self.nulls)
    }

    /// Distinct non-null values, estimated.
    pub(crate) fn distinct(&self) -> f64 {
        self.distinct.estimate()
    }

    /// The share of non-null values below `value` (or at most it, when
    /// `inclusive`); `None` for a column without quantiles.
    pub(crate) fn share_below(&self, value: f64, inclusive: bool) -> Option<f64> {
        let quantiles = self.quantiles.as_ref()?;
        let value = KllFloat::<f64>::new(value).ok()?;
        let criteria = if inclusive {
            datasketches::common::SearchCriteria::Inclusive
        } else {
            datasketches::common::SearchCriteria::Exclusive
        };
        quantiles.rank(&value, criteria)
    }

    /// `n` values spread as the column's are: its quantiles at ranks
    /// `(i + 1/2) / n`, smallest first; `None` for a column without
    /// quantiles or values.
    pub(crate) fn spread(&self, n: usize) -> Option<Vec<f64>> {
        let quantiles = self.quantiles.as_ref()?;
        let ranks: Vec<f64> = (0..n).map(|i| (i as f64 + 0.5) / n as f64).collect();
        let values = quantiles
            .quantiles(&ranks, datasketches::common::SearchCriteria::Inclusive)
            .ok()??;
        Some(values.into_iter().map(|v| v.into_inner()).collect())
    }

    /// The strings the sketch is sure are heavy hitters, each with the rows
    /// holding it (the middle of its bounds).
    pub(crate) fn heavy_strings(&self) -> Vec<(String, u64)> {
        match &self.frequent {
            Some(Frequent::Strings(frequent)) => frequent
                .frequent_items(ErrorType::NoFalsePositives)
                .iter()
                .map(|r| (r.item().clone(), (r.lower_bound() + r.upper_bound()) / 2))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Bounds on how many rows hold a number equal to `value` (by the
    /// integer it counts as), when it is a heavy hitter; `None` otherwise.
    pub(crate) fn count_of_number(&self, value: i64) -> Option<(u64, u64)> {
        match &self.frequent {
            Some(Frequent::Numbers(frequent)) => heavy(frequent, &value),
            _ => None,
        }
    }

    /// Bounds on how many rows hold `value`, when it is a heavy hitter.
    pub(crate) fn count_of_string(&self, value: &str) -> Option<(u64, u64)> {
        match &self.frequent {
            Some(Frequent::Strings(frequent)) => heavy(frequent, &value.to_owned()),
            _ => None,
        }
    }

    /// The heavy hitters the sketch is sure of: how many, and the rows
    /// they hold together (the middle of each one's bounds).
    pub(crate) fn heavy_hitters(&self) -> (usize, u64) {
        fn total<T: Eq + std::hash::Hash + Clone>(f: &FrequentItemsSketch<T>) -> (usize, u64) {
            let rows = f.frequent_items(ErrorType::NoFalsePositives);
            let held = rows
                .iter()
                .map(|r| (r.lower_bound() + r.upper_bound()) / 2)
                .sum();
            (rows.len(), held)
        }
        match &self.frequent {
            Some(Frequent::Numbers(f)) => total(f),
            Some(Frequent::Strings(f)) => total(f),
            None => (0, 0),
        }
    }

    /// Bytes the sketches take, as serialized.
    pub fn bytes(&self) -> usize {
        let distinct = self.distinct.compact().serialize().len();
        let quantiles = self.quantiles.as_ref().map_or(0, |q| q.serialize().len());
        let frequent = match &self.frequent {
            Some(Frequent::Numbers(f)) => f.serialize().len(),
            Some(Frequent::Strings(f)) => f.serialize().len(),
            None => 0,
        };
        distinct + quantiles + frequent
    }
}

/// Bounds on the count of `value` when the sketch is sure it is among the
/// frequent items.
fn heavy<T: Eq + std::hash::Hash + Clone>(
    frequent: &FrequentItemsSketch<T>,
    value: &T,
) -> Option<(u64, u64)> {
    frequent
        .frequent_items(ErrorType::NoFalsePositives)
        .iter()
        .find(|r| r.item() == value)
        .map(|r| (r.lower_bound(), r.upper_bound()))
}

fn theta() -> ThetaSketch {
    // Within the library's bounds (`SKETCH_THETA_LG_K` is checked by a
    // test); its default otherwise.
    ThetaSketchBuilder::default()
        .lg_k(SKETCH_THETA_LG_K)
        .build()
        .or_else(|_| ThetaSketchBuilder::default().build())
        .expect("the default theta sketch builds")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Date32Array, Decimal128Array, Int64Array, StringArray};

    use super::*;

    /// Values with duplicates and a heavy hitter (7, every tenth row).
    fn numbers(from: i64, to: i64) -> ArrayRef {
        Arc::new(Int64Array::from_iter(
            (from..to).map(|i| Some(if i % 10 == 0 { 7 } else { i / 2 })),
        ))
    }

    fn sketch(arrays: &[&ArrayRef]) -> ColumnSketch {
        let mut sketch = ColumnSketch::new(arrays[0].data_type());
        for array in arrays {
            sketch.update(array.as_ref());
        }
        sketch
    }

    #[test]
    fn the_library_takes_the_configured_sizes() {
        assert!(
            ThetaSketchBuilder::default()
                .lg_k(SKETCH_THETA_LG_K)
                .build()
                .is_ok()
        );
        assert!(KllSketch::<KllFloat<f64>>::new(SKETCH_KLL_K).is_ok());
        assert!(FrequentItemsSketch::<i64>::new(SKETCH_FREQUENT_ITEMS).is_ok());
    }

    #[test]
    fn merged_sketches_are_the_sketch_of_the_union_within_their_error() {
        let (a, b) = (numbers(0, 300_000), numbers(200_000, 500_000));
        let mut merged = sketch(&[&a]).snapshot();
        merged.merge(&sketch(&[&b]));
        let whole = sketch(&[&a, &b]);
        assert_eq!(merged.rows(), whole.rows());
        assert_eq!(merged.rows(), (600_000, 0));
        // Exact distinct values: i / 2 for i not a multiple of ten, and 7.
        let exact: std::collections::HashSet<i64> = (0..500_000)
            .map(|i| if i % 10 == 0 { 7 } else { i / 2 })
            .collect();
        let exact = exact.len() as f64;
        // Three relative standard errors of a 4096-hash theta sketch.
        let bound = 3.0 / 4096f64.sqrt();
        for estimate in [merged.distinct(), whole.distinct()] {
            assert!(
                (estimate - exact).abs() / exact < bound,
                "{estimate} against {exact}"
            );
        }
        // Ranks: the share of values below a point, against the exact one.
        let values: Vec<i64> = (0..300_000)
            .chain(200_000..500_000)
            .map(|i| if i % 10 == 0 { 7 } else { i / 2 })
            .collect();
        for point in [1_000.0, 60_000.0, 125_000.0, 200_000.0, 240_000.0] {
            let below = values.iter().filter(|&&v| (v as f64) < point).count();
            let exact = below as f64 / values.len() as f64;
            for sketch in [&merged, &whole] {
                let got = sketch.share_below(point, false).unwrap();
                assert!((got - exact).abs() < 0.01, "{point}: {got} against {exact}");
            }
        }
        // The heavy hitter, its count within the bounds both give, and
        // those within the library's error (3.5 / 64 of the rows).
        let sevens = values.iter().filter(|&&v| v == 7).count() as u64;
        for sketch in [&merged, &whole] {
            let (low, high) = sketch.count_of_number(7).unwrap();
            assert!(low <= sevens && sevens <= high, "{low}..{high}: {sevens}");
            assert!(
                high - low <= values.len() as u64 * 35 / 640,
                "{low}..{high}"
            );
        }
        assert_eq!(merged.count_of_number(123_457), None, "not a heavy hitter");
    }

    #[test]
    fn strings_dates_and_decimals_are_sketched_as_their_values() {
        let names: ArrayRef = Arc::new(StringArray::from_iter((0..1000).map(|i| {
            (i % 5 != 4).then(|| {
                if i % 2 == 0 {
                    "even".to_string()
                } else {
                    format!("n{i}")
                }
            })
        })));
        let sketch = sketch(&[&names]);
        assert_eq!(sketch.rows(), (1000, 200));
        // "even" and the 400 odd names that are not null.
        assert!(
            (sketch.distinct() - 401.0).abs() < 1.0,
            "{}",
            sketch.distinct()
        );
        let (low, high) = sketch.count_of_string("even").unwrap();
        assert!(low <= 400 && 400 <= high, "{low}..{high}");
        assert!(
            sketch.share_below(1.0, false).is_none(),
            "strings keep no quantiles"
        );

        let days: ArrayRef = Arc::new(Date32Array::from_iter_values(0..100));
        let days = super::tests::sketch(&[&days]);
        assert_eq!(days.share_below(50.0, false), Some(0.5));
        let prices: ArrayRef = Arc::new(
            Decimal128Array::from_iter_values((0..100).map(|i| i * 25))
                .with_precision_and_scale(10, 2)
                .unwrap(),
        );
        let prices = super::tests::sketch(&[&prices]);
        // 0.00, 0.25, ... 24.75: a quarter of them below 6.25.
        assert_eq!(prices.share_below(6.25, false), Some(0.25));
        assert!(prices.bytes() > 0);
    }
}
