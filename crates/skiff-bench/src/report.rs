//! Turning child reports into figures: per-query statistics, row-count
//! agreement, the table and totals printed for a person, and the CSV.

use std::fmt::Write as _;
use std::io::Write;

use crate::args::BenchEngine;

use super::child::ChildOutcome;

/// Milliseconds over the counted runs of one (engine, query).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunStats {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
}

/// The runs that count: all but the first (a warm-up) when there are several.
pub fn counted_runs(runs_ms: &[f64]) -> &[f64] {
    if runs_ms.len() > 1 {
        &runs_ms[1..]
    } else {
        runs_ms
    }
}

/// Median, min and max; `None` without runs.
pub fn stats(runs_ms: &[f64]) -> Option<RunStats> {
    let mut sorted = runs_ms.to_vec();
    sorted.sort_by(f64::total_cmp);
    let (first, last) = (*sorted.first()?, *sorted.last()?);
    let mid = sorted.len() / 2;
    let median_ms = if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    };
    Some(RunStats {
        median_ms,
        min_ms: first,
        max_ms: last,
    })
}

/// One (query, engine) result: one CSV row.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    pub query: String,
    pub engine: BenchEngine,
    /// Runs asked for, warm-up included.
    pub runs: u32,
    /// `None` when the query failed.
    pub stats: Option<RunStats>,
    pub rows: Option<u64>,
    pub peak_rss_bytes: Option<u64>,
    pub baseline_rss_bytes: Option<u64>,
    pub error: Option<String>,
    /// Set on every engine of a query whose engines disagree on rows.
    pub row_mismatch: Option<String>,
}

impl Measurement {
    pub fn new(query: &str, engine: BenchEngine, runs: u32, outcome: ChildOutcome) -> Self {
        let mut m = Measurement {
            query: query.to_string(),
            engine,
            runs,
            stats: None,
            rows: None,
            peak_rss_bytes: None,
            baseline_rss_bytes: None,
            error: None,
            row_mismatch: None,
        };
        match outcome {
            Ok(report) => {
                m.peak_rss_bytes = report.peak_rss_bytes;
                m.baseline_rss_bytes = report.baseline_rss_bytes;
                m.error = report.error;
                if m.error.is_none() {
                    m.rows = report.rows;
                    m.stats = stats(counted_runs(&report.runs_ms));
                    if m.stats.is_none() {
                        m.error = Some("the child reported no runs".to_string());
                    }
                }
            }
            Err(message) => m.error = Some(message),
        }
        m
    }

    /// The median, only when the query succeeded.
    pub fn median_ms(&self) -> Option<f64> {
        self.stats.map(|s| s.median_ms)
    }

    /// Peak RSS, only when the query succeeded.
    pub fn ok_peak(&self) -> Option<u64> {
        self.stats.and(self.peak_rss_bytes)
    }
}

pub fn engine_name(engine: BenchEngine) -> &'static str {
    match engine {
        BenchEngine::Skiff => "skiff",
        BenchEngine::SkiffCold => "skiff-cold",
        BenchEngine::Datafusion => "datafusion",
        BenchEngine::Duckdb => "duckdb",
        BenchEngine::DuckdbNative => "duckdb-native",
    }
}

/// Mark every measurement of one query when the successful engines disagree
/// on the row count; returns the message, if any.
pub fn check_rows(query: &mut [Measurement]) -> Option<String> {
    let counted: Vec<(BenchEngine, u64)> = query
        .iter()
        .filter(|m| m.error.is_none())
        .filter_map(|m| Some((m.engine, m.rows?)))
        .collect();
    let first = counted.first()?.1;
    if counted.iter().all(|(_, rows)| *rows == first) {
        return None;
    }
    let detail: Vec<String> = counted
        .iter()
        .map(|(engine, rows)| format!("{} {rows}", engine_name(*engine)))
        .collect();
    let message = format!("row counts differ: {}", detail.join(", "));
    for m in query.iter_mut() {
        m.row_mismatch = Some(message.clone());
    }
    Some(message)
}

/// CSV columns; the first nine are the stable interface, later ones are
/// appended only.
const CSV_HEADER: &str = "query,engine,runs,median_ms,min_ms,max_ms,rows,peak_rss_bytes,error,\
                          baseline_rss_bytes,row_mismatch";

pub fn write_csv(out: &mut dyn Write, measurements: &[Measurement]) -> std::io::Result<()> {
    writeln!(out, "{CSV_HEADER}")?;
    for m in measurements {
        let ms = |f: fn(&RunStats) -> f64| m.stats.as_ref().map(|s| format!("{:.3}", f(s)));
        let fields = [
            m.query.clone(),
            engine_name(m.engine).to_string(),
            m.runs.to_string(),
            ms(|s| s.median_ms).unwrap_or_default(),
            ms(|s| s.min_ms).unwrap_or_default(),
            ms(|s| s.max_ms).unwrap_or_default(),
            opt(m.rows),
            opt(m.peak_rss_bytes),
            m.error.clone().unwrap_or_default(),
            opt(m.baseline_rss_bytes),
            m.row_mismatch.clone().unwrap_or_default(),
        ];
        let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
        writeln!(out, "{}", line.join(","))?;
    }
    Ok(())
}

fn opt(value: Option<u64>) -> String {
    value.map(|v| v.to_string()).unwrap_or_default()
}

/// RFC 4180 quoting, only where needed.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// `a / b`, when both exist and `b` is not zero.
fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn cell(value: Option<f64>, decimals: usize) -> String {
    match value {
        Some(v) => format!("{v:.decimals$}"),
        None => "-".to_string(),
    }
}

/// Measurements of one query, one per engine in `engines` order.
pub struct QueryRow<'a> {
    pub query: &'a str,
    pub by_engine: Vec<Option<&'a Measurement>>,
}

/// Group measurements per query, keeping the order queries were run in.
pub fn rows<'a>(measurements: &'a [Measurement], engines: &[BenchEngine]) -> Vec<QueryRow<'a>> {
    let mut queries: Vec<&str> = Vec::new();
    for m in measurements {
        if !queries.contains(&m.query.as_str()) {
            queries.push(&m.query);
        }
    }
    queries
        .into_iter()
        .map(|query| QueryRow {
            query,
            by_engine: engines
                .iter()
                .map(|e| {
                    measurements
                        .iter()
                        .find(|m| m.query == query && m.engine == *e)
                })
                .collect(),
        })
        .collect()
}

fn find<'a>(
    row: &QueryRow<'a>,
    engines: &[BenchEngine],
    e: BenchEngine,
) -> Option<&'a Measurement> {
    let i = engines.iter().position(|x| *x == e)?;
    row.by_engine.get(i).copied().flatten()
}

/// The per-query table: times, ratios against Skiff, peak memory.
pub fn table(measurements: &[Measurement], engines: &[BenchEngine]) -> String {
    let baselines: Vec<BenchEngine> = if engines.contains(&BenchEngine::Skiff) {
        engines
            .iter()
            .copied()
            .filter(|e| *e != BenchEngine::Skiff)
            .collect()
    } else {
        Vec::new()
    };
    let mut header = vec!["query".to_string()];
    header.extend(engines.iter().map(|e| format!("{} ms", engine_name(*e))));
    header.extend(baselines.iter().map(|e| format!("skiff/{}", short(*e))));
    header.extend(engines.iter().map(|e| format!("{} MiB", short(*e))));
    header.extend(baselines.iter().map(|e| format!("mem s/{}", short(*e))));
    header.push("rows".to_string());
    header.push("notes".to_string());
    let mut lines = vec![header];
    for row in rows(measurements, engines) {
        let get = |e| find(&row, engines, e);
        let skiff = get(BenchEngine::Skiff);
        let mut line = vec![row.query.to_string()];
        line.extend(engines.iter().map(|e| match get(*e) {
            Some(m) if m.error.is_some() => "ERROR".to_string(),
            m => cell(m.and_then(Measurement::median_ms), 1),
        }));
        line.extend(baselines.iter().map(|e| {
            let base = get(*e).and_then(Measurement::median_ms);
            cell(ratio(skiff.and_then(Measurement::median_ms), base), 2)
        }));
        line.extend(
            engines
                .iter()
                .map(|e| cell(get(*e).and_then(Measurement::ok_peak).map(mib), 0)),
        );
        line.extend(baselines.iter().map(|e| {
            let peak = |m: Option<&Measurement>| m.and_then(Measurement::ok_peak).map(|b| b as f64);
            cell(ratio(peak(skiff), peak(get(*e))), 2)
        }));
        line.push(agreed_rows(&row));
        line.push(notes(&row));
        lines.push(line);
    }
    render(&lines)
}

fn short(engine: BenchEngine) -> &'static str {
    match engine {
        BenchEngine::Skiff => "skiff",
        BenchEngine::SkiffCold => "cold",
        BenchEngine::Datafusion => "df",
        BenchEngine::Duckdb => "duckdb",
        BenchEngine::DuckdbNative => "ddb-nat",
    }
}

fn agreed_rows(row: &QueryRow) -> String {
    let rows: Vec<u64> = row
        .by_engine
        .iter()
        .flatten()
        .filter(|m| m.error.is_none())
        .filter_map(|m| m.rows)
        .collect();
    match rows.first() {
        Some(first) if rows.iter().all(|r| r == first) => first.to_string(),
        Some(_) => "MISMATCH".to_string(),
        None => "-".to_string(),
    }
}

fn notes(row: &QueryRow) -> String {
    let mut notes: Vec<String> = row
        .by_engine
        .iter()
        .flatten()
        .filter(|m| m.error.is_some())
        .map(|m| format!("{} failed", engine_name(m.engine)))
        .collect();
    if let Some(mismatch) = row
        .by_engine
        .iter()
        .flatten()
        .find_map(|m| m.row_mismatch.as_ref())
    {
        notes.push(format!("!! {mismatch}"));
    }
    notes.join("; ")
}

/// Left-aligned first and last columns, right-aligned numbers between.
fn render(lines: &[Vec<String>]) -> String {
    let columns = lines.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            lines
                .iter()
                .map(|l| l.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        let mut text = String::new();
        for (c, field) in line.iter().enumerate() {
            let width = widths[c];
            if c == 0 || c + 1 == columns {
                let _ = write!(text, "{field:<width$}  ");
            } else {
                let _ = write!(text, "{field:>width$}  ");
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
        if i == 0 {
            let total: usize = widths.iter().sum::<usize>() + 2 * columns.saturating_sub(1);
            out.push_str(&"-".repeat(total));
            out.push('\n');
        }
    }
    out
}

/// Skiff against one baseline over the queries both ran successfully.
#[derive(Debug, PartialEq)]
pub struct Comparison {
    pub baseline: BenchEngine,
    pub queries: usize,
    pub skiff_total_ms: f64,
    pub baseline_total_ms: f64,
    /// Largest peak over the queries: Skiff's / the baseline's.
    pub max_peak_ratio: Option<f64>,
    /// Geometric mean of the per-query peak ratios.
    pub geomean_peak_ratio: Option<f64>,
    /// The per-query time ratios, worst (largest) first.
    pub time_ratios: Vec<(String, f64)>,
    /// The per-query peak ratios, worst first.
    pub peak_ratios: Vec<(String, f64)>,
}

impl Comparison {
    pub fn time_ratio(&self) -> Option<f64> {
        ratio(Some(self.skiff_total_ms), Some(self.baseline_total_ms))
    }
}

pub fn compare(measurements: &[Measurement], baseline: BenchEngine) -> Comparison {
    let engines = [BenchEngine::Skiff, baseline];
    let mut c = Comparison {
        baseline,
        queries: 0,
        skiff_total_ms: 0.0,
        baseline_total_ms: 0.0,
        max_peak_ratio: None,
        geomean_peak_ratio: None,
        time_ratios: Vec::new(),
        peak_ratios: Vec::new(),
    };
    let (mut skiff_peak_max, mut base_peak_max) = (0u64, 0u64);
    for row in rows(measurements, &engines) {
        let (Some(Some(s)), Some(Some(b))) = (row.by_engine.first(), row.by_engine.get(1)) else {
            continue;
        };
        let (Some(s_ms), Some(b_ms)) = (s.median_ms(), b.median_ms()) else {
            continue;
        };
        c.queries += 1;
        c.skiff_total_ms += s_ms;
        c.baseline_total_ms += b_ms;
        if let Some(r) = ratio(Some(s_ms), Some(b_ms)) {
            c.time_ratios.push((row.query.to_string(), r));
        }
        if let (Some(sp), Some(bp)) = (s.ok_peak(), b.ok_peak()) {
            skiff_peak_max = skiff_peak_max.max(sp);
            base_peak_max = base_peak_max.max(bp);
            if let Some(r) = ratio(Some(sp as f64), Some(bp as f64)) {
                c.peak_ratios.push((row.query.to_string(), r));
            }
        }
    }
    c.max_peak_ratio = ratio(Some(skiff_peak_max as f64), Some(base_peak_max as f64));
    c.geomean_peak_ratio = geomean(c.peak_ratios.iter().map(|(_, r)| *r));
    c.time_ratios.sort_by(|a, b| b.1.total_cmp(&a.1));
    c.peak_ratios.sort_by(|a, b| b.1.total_cmp(&a.1));
    c
}

pub fn geomean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (mut log_sum, mut n) = (0.0, 0usize);
    for v in values.filter(|v| *v > 0.0) {
        log_sum += v.ln();
        n += 1;
    }
    (n > 0).then(|| (log_sum / n as f64).exp())
}

/// Targets from the issue that asked for this benchmark.
const TIME_RATIO_TARGET: f64 = 1.05;
const PEAK_RATIO_TARGET: f64 = 1.2;
/// How many of the worst queries the totals name.
const WORST_SHOWN: usize = 5;

/// Totals per engine and Skiff's ratios against each baseline.
pub fn totals(measurements: &[Measurement], engines: &[BenchEngine]) -> String {
    let mut out = String::from("Totals (sum of medians over the queries that succeeded):\n");
    for engine in engines {
        let mine: Vec<&Measurement> = measurements
            .iter()
            .filter(|m| m.engine == *engine)
            .collect();
        let ok: Vec<&Measurement> = mine.iter().copied().filter(|m| m.stats.is_some()).collect();
        let total: f64 = ok.iter().filter_map(|m| m.median_ms()).sum();
        let peak = ok.iter().filter_map(|m| m.ok_peak()).max();
        let base = median_u64(mine.iter().filter_map(|m| m.baseline_rss_bytes).collect());
        let _ = writeln!(
            out,
            "  {:<10}  {:>10.1} ms over {} queries, {} failed; max peak {} MiB; \
             fixed overhead (RSS after registering tables, median) {} MiB",
            engine_name(*engine),
            total,
            ok.len(),
            mine.len() - ok.len(),
            cell(peak.map(mib), 0),
            cell(base.map(mib), 0),
        );
    }
    if engines.contains(&BenchEngine::Skiff) {
        for baseline in engines.iter().filter(|e| **e != BenchEngine::Skiff) {
            out.push_str(&comparison_text(&compare(measurements, *baseline)));
        }
    }
    out
}

fn comparison_text(c: &Comparison) -> String {
    let name = engine_name(c.baseline);
    let mut out = format!("Skiff / {name} over the {} queries both ran:\n", c.queries);
    let target = |t: f64| match c.baseline {
        BenchEngine::Datafusion => format!(" (target <= {t})"),
        _ => String::new(),
    };
    let _ = writeln!(
        out,
        "  time        {} ({:.1} ms / {:.1} ms){}",
        cell(c.time_ratio(), 3),
        c.skiff_total_ms,
        c.baseline_total_ms,
        target(TIME_RATIO_TARGET)
    );
    let _ = writeln!(
        out,
        "  peak memory {} max over queries, {} geometric mean of per-query ratios{}",
        cell(c.max_peak_ratio, 3),
        cell(c.geomean_peak_ratio, 3),
        target(PEAK_RATIO_TARGET)
    );
    let worst = |ratios: &[(String, f64)]| {
        ratios
            .iter()
            .take(WORST_SHOWN)
            .map(|(q, r)| format!("{q} {r:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(out, "  worst time ratios   {}", worst(&c.time_ratios));
    let _ = writeln!(out, "  worst memory ratios {}", worst(&c.peak_ratios));
    out
}

fn median_u64(mut values: Vec<u64>) -> Option<u64> {
    values.sort_unstable();
    values.get(values.len() / 2).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::child::ChildReport;

    fn ok(query: &str, engine: BenchEngine, runs_ms: &[f64], rows: u64, peak: u64) -> Measurement {
        let report = ChildReport {
            runs_ms: runs_ms.to_vec(),
            rows: Some(rows),
            baseline_rss_bytes: Some(1),
            peak_rss_bytes: Some(peak),
            error: None,
        };
        Measurement::new(query, engine, runs_ms.len() as u32, Ok(report))
    }

    #[test]
    fn first_run_is_a_warm_up_only_when_there_are_more() {
        assert_eq!(counted_runs(&[9.0]), &[9.0]);
        assert_eq!(counted_runs(&[9.0, 1.0, 2.0]), &[1.0, 2.0]);
        assert!(counted_runs(&[]).is_empty());
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        let s = stats(&[5.0, 1.0, 3.0]).expect("runs");
        assert_eq!((s.median_ms, s.min_ms, s.max_ms), (3.0, 1.0, 5.0));
        let s = stats(&[4.0, 1.0, 3.0, 2.0]).expect("runs");
        assert_eq!((s.median_ms, s.min_ms, s.max_ms), (2.5, 1.0, 4.0));
        assert_eq!(stats(&[]), None);
    }

    #[test]
    fn measurement_drops_the_warm_up() {
        let m = ok("q01", BenchEngine::Skiff, &[100.0, 10.0, 20.0, 30.0], 4, 7);
        assert_eq!(m.median_ms(), Some(20.0));
        assert_eq!(m.runs, 4);
    }

    #[test]
    fn failures_keep_their_message_and_have_no_time() {
        let m = Measurement::new("q02", BenchEngine::Duckdb, 3, Err("timed out".to_string()));
        assert_eq!(m.error.as_deref(), Some("timed out"));
        assert_eq!(m.median_ms(), None);
        let report = ChildReport {
            runs_ms: vec![1.0],
            rows: Some(1),
            peak_rss_bytes: Some(5),
            error: Some("boom".to_string()),
            ..ChildReport::default()
        };
        let m = Measurement::new("q02", BenchEngine::Skiff, 3, Ok(report));
        assert_eq!((m.median_ms(), m.ok_peak(), m.rows), (None, None, None));
        assert_eq!(m.peak_rss_bytes, Some(5));
    }

    #[test]
    fn row_mismatch_marks_every_engine_of_the_query() {
        let mut query = vec![
            ok("q03", BenchEngine::Skiff, &[1.0], 10, 1),
            ok("q03", BenchEngine::Datafusion, &[1.0], 11, 1),
            Measurement::new("q03", BenchEngine::Duckdb, 1, Err("x".to_string())),
        ];
        let message = check_rows(&mut query).expect("a mismatch");
        assert_eq!(message, "row counts differ: skiff 10, datafusion 11");
        assert!(
            query
                .iter()
                .all(|m| m.row_mismatch.as_ref() == Some(&message))
        );
        let mut agree = vec![
            ok("q04", BenchEngine::Skiff, &[1.0], 10, 1),
            ok("q04", BenchEngine::Datafusion, &[1.0], 10, 1),
        ];
        assert_eq!(check_rows(&mut agree), None);
    }

    #[test]
    fn csv_has_one_row_per_measurement_and_quotes_errors() {
        let mut failed = Measurement::new(
            "q02",
            BenchEngine::Datafusion,
            3,
            Err("bad \"thing\", here".to_string()),
        );
        failed.row_mismatch = None;
        let measurements = vec![
            ok("q01", BenchEngine::Skiff, &[9.0, 1.0, 2.0], 4, 2048),
            failed,
        ];
        let mut out = Vec::new();
        write_csv(&mut out, &measurements).expect("writes");
        let text = String::from_utf8(out).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[0],
            "query,engine,runs,median_ms,min_ms,max_ms,rows,peak_rss_bytes,error,\
             baseline_rss_bytes,row_mismatch"
        );
        assert_eq!(lines[1], "q01,skiff,3,1.500,1.000,2.000,4,2048,,1,");
        assert_eq!(
            lines[2],
            "q02,datafusion,3,,,,,,\"bad \"\"thing\"\", here\",,"
        );
    }

    #[test]
    fn comparison_sums_common_queries_and_ratios_memory() {
        let measurements = vec![
            ok("q01", BenchEngine::Skiff, &[30.0], 1, 200),
            ok("q01", BenchEngine::Datafusion, &[10.0], 1, 100),
            ok("q02", BenchEngine::Skiff, &[10.0], 1, 100),
            ok("q02", BenchEngine::Datafusion, &[10.0], 1, 400),
            ok("q03", BenchEngine::Skiff, &[50.0], 1, 100),
            Measurement::new("q03", BenchEngine::Datafusion, 1, Err("x".to_string())),
        ];
        let c = compare(&measurements, BenchEngine::Datafusion);
        assert_eq!(c.queries, 2);
        assert_eq!((c.skiff_total_ms, c.baseline_total_ms), (40.0, 20.0));
        assert_eq!(c.time_ratio(), Some(2.0));
        assert_eq!(c.max_peak_ratio, Some(0.5));
        let geomean = c.geomean_peak_ratio.expect("ratios");
        assert!((geomean - 0.5f64.sqrt()).abs() < 1e-9);
        assert_eq!(c.time_ratios.first().map(|(q, _)| q.as_str()), Some("q01"));
    }
}
