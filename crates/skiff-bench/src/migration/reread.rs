//! `skiff bench ... --migration --summarize FILE`: the rows of a migration
//! CSV written by an earlier run, read back so that its summary can be
//! printed again, with whatever analysis the summary has gained since.

use std::path::Path;

use super::{CSV_HEADER, Row, VACATE_MODES};
use crate::BenchError;

/// The kinds of rows a migration CSV holds.
const KINDS: [&str; 8] = [
    "symmetric",
    "faster",
    "vacate",
    "local",
    "zero_never",
    "zero_snapshot",
    "zero_cuts",
    "zero_adaptive",
];

/// Read the rows of the migration CSV at `path`.
pub(super) fn read(path: &Path) -> Result<Vec<Row>, BenchError> {
    let bad = |why: String| BenchError::Data(format!("{}: {why}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let mut records = records(&text).map_err(bad)?.into_iter();
    let header = records.next().unwrap_or_default();
    let expected: Vec<&str> = CSV_HEADER.trim_end().split(',').collect();
    // Files written before `finished_ms` end one column earlier.
    let older = &expected[..expected.len() - 1];
    if header != expected && header != older {
        return Err(bad(
            "not a migration CSV of this version (its header differs)".into(),
        ));
    }
    records
        .enumerate()
        .map(|(i, fields)| {
            if fields.len() != header.len() {
                let why = format!("{} fields, expected {}", fields.len(), header.len());
                return Err(bad(format!("row {}: {why}", i + 1)));
            }
            row(&fields).map_err(|e| bad(format!("row {}: {e}", i + 1)))
        })
        .collect()
}

/// CSV records: fields split at commas, double quotes around a field that
/// may hold commas, newlines and doubled quotes.
fn records(text: &str) -> Result<Vec<Vec<String>>, String> {
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.is_empty() => quoted = true,
            (false, ',') => record.push(std::mem::take(&mut field)),
            (false, '\n') => {
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
            }
            (false, c) => field.push(c),
        }
    }
    if quoted {
        return Err("a quoted field does not end".into());
    }
    if !field.is_empty() || !record.is_empty() {
        record.push(field);
        records.push(record);
    }
    Ok(records)
}

fn row(fields: &[String]) -> Result<Row, String> {
    let text = |i: usize| fields[i].as_str();
    let number = |i: usize| parsed::<f64>(text(i));
    let whole = |i: usize| parsed::<u64>(text(i));
    let flag = |i: usize| match text(i) {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    };
    let kind = KINDS
        .into_iter()
        .find(|k| *k == text(0))
        .ok_or_else(|| format!("unknown kind {:?}", text(0)))?;
    // Runs before the modes were renamed wrote `drain` and `immediate`.
    let how = match text(18) {
        "drain" => "finish",
        "immediate" => "abort",
        other => other,
    };
    let vacate_how = VACATE_MODES.into_iter().find(|m| *m == how).unwrap_or("");
    Ok(Row {
        kind,
        query: text(1).to_string(),
        k: whole(2)?.map(|k| k as usize),
        pipelines_total: whole(3)?,
        progress: number(4)?,
        state_bytes: whole(5)?,
        local_ms: number(6)?,
        time_at_k_ms: number(7)?,
        measured_ms: number(8)?,
        // 9-11 and 13 (overhead, ratio, beats restart) are derived.
        restart_ms: number(12)?,
        concurrency: whole(14)?.map(|c| c as usize),
        rep: whole(15)?.map(|r| r as usize),
        vacate_ms: number(16)?,
        server_vacate_ms: number(17)?,
        vacate_how,
        rows: whole(19)?,
        rows_ok: flag(20),
        error: Some(text(21).to_string()).filter(|e| !e.is_empty()),
        decision: text(22).to_string(),
        finished_ms: if fields.len() > 23 { number(23)? } else { None },
        answer: None,
    })
}

/// An empty field is `None`.
fn parsed<T: std::str::FromStr>(field: &str) -> Result<Option<T>, String> {
    if field.is_empty() {
        return Ok(None);
    }
    field
        .parse()
        .map(Some)
        .map_err(|_| format!("{field:?} is not a number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_written_are_read_back() {
        let written = vec![
            Row {
                kind: "symmetric",
                query: "q07".into(),
                k: Some(4),
                pipelines_total: Some(9),
                progress: Some(0.17),
                state_bytes: Some(26_403_902),
                local_ms: Some(360.7),
                time_at_k_ms: Some(61.0),
                measured_ms: Some(550.0),
                restart_ms: Some(421.7),
                decision: "migrated after 4/9 pipelines at 61 ms: 26403902 B of state, \
                           \"paused\" in 47 ms"
                    .into(),
                ..Row::default()
            },
            Row {
                kind: "vacate",
                query: "q18+q17".into(),
                concurrency: Some(2),
                rep: Some(1),
                vacate_ms: Some(168.964),
                vacate_how: "abort",
                finished_ms: Some(402.5),
                rows_ok: Some(false),
                error: Some("q17: 3 rows,\nexpected 4".into()),
                ..Row::default()
            },
        ];
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("m.csv");
        std::fs::write(&path, super::super::csv(&written)).expect("write");
        let read = read(&path).expect("read back");
        assert_eq!(read.len(), 2);
        assert_eq!(format!("{:?}", read[0]), format!("{:?}", written[0]));
        assert_eq!(format!("{:?}", read[1]), format!("{:?}", written[1]));
    }

    #[test]
    fn a_file_from_before_finished_ms_is_read() {
        let written = vec![Row {
            kind: "vacate",
            query: "q18".into(),
            concurrency: Some(1),
            vacate_ms: Some(12.5),
            vacate_how: "finish",
            finished_ms: Some(80.0),
            ..Row::default()
        }];
        let text = super::super::csv(&written);
        // Drop the last column of every line, as an older run wrote it.
        let older: String = text
            .lines()
            .map(|l| format!("{}\n", &l[..l.rfind(',').expect("a comma")]))
            .collect();
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("old.csv");
        std::fs::write(&path, older).expect("write");
        let read = read(&path).expect("read back");
        assert_eq!(read[0].vacate_ms, Some(12.5));
        assert_eq!(read[0].finished_ms, None);
    }

    #[test]
    fn another_file_is_refused_with_its_name() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("other.csv");
        std::fs::write(&path, "a,b\n1,2\n").expect("write");
        let error = read(&path).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            error.contains("other.csv") && error.contains("header"),
            "{error}"
        );
        std::fs::write(&path, format!("{CSV_HEADER}symmetric,\"q1\n")).expect("write");
        let error = read(&path).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("does not end"), "{error}");
    }
}
