//! A query's answer as the client saw it, kept to check every migrated,
//! cut or vacated run against the same query's local run: the same rows
//! with the same values, not only as many of them.

/// Rows as text cells, in the order they came.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Answer(pub(super) Vec<Vec<Option<String>>>);

/// Sums of floats are added up in a different order on another worker or
/// after a cut: they may differ in their last digits.
const RELATIVE_TOLERANCE: f64 = 1e-9;

impl Answer {
    pub(super) fn len(&self) -> u64 {
        self.0.len() as u64
    }

    pub(super) fn extend(&mut self, rows: Vec<Vec<Option<String>>>) {
        self.0.extend(rows);
    }

    /// Whether `self` has `expected`'s rows, in any order (ties of an
    /// ORDER BY may come in either order), numbers equal up to rounding.
    pub(super) fn check(&self, expected: &Answer) -> Result<(), String> {
        if self.len() != expected.len() {
            return Err(format!("{} rows, expected {}", self.len(), expected.len()));
        }
        let (mut got, mut want) = (self.0.clone(), expected.0.clone());
        got.sort();
        want.sort();
        for (row, (g, w)) in got.iter().zip(&want).enumerate() {
            if g.len() != w.len() || g.iter().zip(w).any(|(a, b)| !same_cell(a, b)) {
                return Err(format!("row {row} (sorted) is {g:?}, expected {w:?}"));
            }
        }
        Ok(())
    }
}

fn same_cell(a: &Option<String>, b: &Option<String>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) if a != b => match (a.parse::<f64>(), b.parse::<f64>()) {
            (Ok(x), Ok(y)) => (x - y).abs() <= RELATIVE_TOLERANCE * x.abs().max(y.abs()),
            _ => false,
        },
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(rows: &[&[&str]]) -> Answer {
        Answer(
            rows.iter()
                .map(|r| r.iter().map(|c| Some(c.to_string())).collect())
                .collect(),
        )
    }

    #[test]
    fn rows_in_another_order_with_rounded_sums_match() {
        let local = answer(&[&["a", "0.30000000000000004"], &["b", "2"]]);
        let moved = answer(&[&["b", "2"], &["a", "0.3"]]);
        assert_eq!(moved.check(&local), Ok(()));
    }

    #[test]
    fn a_missing_row_or_another_value_does_not_match() {
        let local = answer(&[&["a", "1"], &["b", "2"]]);
        let short = answer(&[&["a", "1"]]);
        assert!(short.check(&local).is_err_and(|e| e.contains("1 rows")));
        let other = answer(&[&["a", "1"], &["b", "2.5"]]);
        assert!(other.check(&local).is_err_and(|e| e.contains("2.5")));
        let null = Answer(vec![vec![Some("a".into())], vec![None]]);
        let text = answer(&[&["a"], &["b"]]);
        assert!(null.check(&text).is_err());
    }
}
