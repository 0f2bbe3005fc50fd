//! Shared sqllogictest rules, so a file reads the same whichever way its
//! statements reach Skiff (embedded or through a front door).

use sqllogictest::Normalizer;

/// Compares rows with blank cells dropped and whitespace collapsed (on both
/// sides, also around `<slt:ignore>`), so that EXPLAIN PIPELINES
/// continuation rows read as their operator line.
pub fn validator(normalizer: Normalizer, actual: &[Vec<String>], expected: &[String]) -> bool {
    let joined: Vec<Vec<String>> = actual
        .iter()
        .map(|row| {
            vec![
                row.iter()
                    .map(normalizer)
                    .filter(|cell| !cell.is_empty())
                    .collect::<Vec<_>>()
                    .join(" "),
            ]
        })
        .collect();
    let expected: Vec<String> = expected.iter().map(normalizer).collect();
    sqllogictest::default_validator(normalizer, &joined, &expected)
}

/// [`validator`], except that numbers compare by value: PostgreSQL's text
/// format writes the double 14.0 as `14`, where Arrow writes `14.0`.
pub fn validator_numeric(
    normalizer: Normalizer,
    actual: &[Vec<String>],
    expected: &[String],
) -> bool {
    if validator(normalizer, actual, expected) {
        return true;
    }
    if actual.len() != expected.len() {
        return false;
    }
    actual.iter().zip(expected).all(|(row, line)| {
        let cells: Vec<String> = row
            .iter()
            .map(normalizer)
            .filter(|cell| !cell.is_empty())
            .collect();
        let got: Vec<&str> = cells.iter().flat_map(|c| c.split_whitespace()).collect();
        let want = normalizer(line);
        let want: Vec<&str> = want.split_whitespace().collect();
        got.len() == want.len()
            && got.iter().zip(&want).all(|(g, w)| {
                g == w || matches!((g.parse::<f64>(), w.parse::<f64>()), (Ok(a), Ok(b)) if a == b)
            })
    })
}
