//! Calibration's corpus and fitting (`skiff memnode calibrate`; the
//! SmartNIC paper trains its device's models on the device itself). A
//! generated table (particle-like numbers, a small integer and a short
//! string per row) is written as Parquet, and a corpus of fragments is
//! made from templates with random constants (ranges, equalities, lists,
//! patterns, arithmetic; random projections, or aggregations by few or
//! many groups; from nothing kept to everything). Once the node has run
//! and timed each fragment and transfer (the memory node's driver), a
//! fifth of each set is held out to measure the fitted models' error; the
//! models returned are then fitted on everything.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, Float64Array, Int8Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use rand::Rng;
use rand::rngs::StdRng;
use skiff_flight::protocol::FragmentCosts;

use crate::costs::{CostModels, Model, Observed, Sample, Shape};

/// What to calibrate on.
#[derive(Clone, Debug)]
pub struct Calibration {
    /// Fragments in the corpus.
    pub fragments: usize,
    /// Rows of the largest file (each file half the one before, six
    /// files).
    pub rows: usize,
    /// The node's offload threads: fragments run on 1 to this many.
    pub threads: usize,
    /// The node's emulated link, if any.
    pub link_bits_per_second: Option<u64>,
    pub seed: u64,
}

/// One held-out prediction: what was predicted and what was measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// The template's name, the fragment's SQL, or the bytes sent.
    pub what: String,
    pub predicted: f64,
    pub measured: f64,
}

/// How well the models did on what they were not fitted on, and the
/// estimator on every fragment.
#[derive(Debug, Default)]
pub struct Report {
    /// Held-out times in nanoseconds, per model.
    pub execution: Vec<Point>,
    pub serialization: Vec<Point>,
    pub network: Vec<Point>,
    /// Rows kept: estimated against counted, every fragment.
    pub cardinality: Vec<Point>,
    /// Each fragment's estimation time as a share of its execution time.
    pub estimation_share: Vec<f64>,
    pub elapsed: Duration,
}

impl Point {
    /// |predicted - measured| / measured.
    pub fn error(&self) -> f64 {
        (self.predicted - self.measured).abs() / self.measured.max(1.0)
    }
}

/// The median and 90th percentile of `values` (0 when empty).
pub fn median_p90(values: impl IntoIterator<Item = f64>) -> (f64, f64) {
    let mut values: Vec<f64> = values.into_iter().collect();
    if values.is_empty() {
        return (0.0, 0.0);
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.9))
}

impl Report {
    /// Every point as CSV: model, what, predicted, measured (times in
    /// nanoseconds, rows for `cardinality`; `estimation` is a share of the
    /// execution, predicted empty).
    pub fn csv(&self) -> String {
        let mut text = String::from("model,what,predicted,measured\n");
        let sets = [
            ("execution", &self.execution),
            ("serialization", &self.serialization),
            ("network", &self.network),
            ("cardinality", &self.cardinality),
        ];
        for (model, points) in sets {
            for p in points {
                let what = p.what.replace('"', "\"\"");
                text.push_str(&format!(
                    "{model},\"{what}\",{:.0},{:.0}\n",
                    p.predicted, p.measured
                ));
            }
        }
        for share in &self.estimation_share {
            text.push_str(&format!("estimation,,,{share:.6}\n"));
        }
        text
    }

    /// A paragraph of the errors.
    pub fn summary(&self) -> String {
        let line = |name: &str, points: &[Point]| {
            let (median, p90) = median_p90(points.iter().map(Point::error));
            // The estimator is not fitted: all its fragments count.
            let which = if name == "cardinality" {
                "fragments"
            } else {
                "held out"
            };
            format!(
                "{name:<14} {:>4} {which:<9} error median {:>5.1}%  p90 {:>5.1}%\n",
                points.len(),
                median * 100.0,
                p90 * 100.0
            )
        };
        let (share, share90) = median_p90(self.estimation_share.iter().copied());
        format!(
            "{}{}{}{}estimation     {:>4} fragments  share of execution \
             median {:.2}%  p90 {:.2}%\n",
            line("execution", &self.execution),
            line("serialization", &self.serialization),
            line("network", &self.network),
            line("cardinality", &self.cardinality),
            self.estimation_share.len(),
            share * 100.0,
            share90 * 100.0
        )
    }
}

/// The corpus' files (each half the rows of the one before) and their row
/// groups.
const FILES: usize = 6;
const ROW_GROUP_ROWS: usize = 64 * 1024;

/// The timed transfers: sizes doubling from the smallest to the largest,
/// each size sent this many times.
const TRANSFER_SMALLEST: usize = 16 << 10;
const TRANSFER_LARGEST: usize = 32 << 20;
const TRANSFER_REPEATS: usize = 3;

/// The corpus table's columns.
const KINDS: [&str; 8] = [
    "electron", "proton", "neutron", "photon", "muon", "pion", "kaon", "gluon",
];

pub fn corpus_schema() -> Arc<Schema> {
    let mut fields = vec![Field::new("id", DataType::Int64, false)];
    fields.extend(
        ["x", "y", "z", "vx", "vy", "vz", "mass"]
            .map(|name| Field::new(name, DataType::Float64, false)),
    );
    fields.push(Field::new("charge", DataType::Int8, false));
    fields.push(Field::new("kind", DataType::Utf8, false));
    Arc::new(Schema::new(fields))
}

/// `rows` rows starting at id `first`.
fn generate(rows: usize, first: i64, rng: &mut StdRng) -> Result<RecordBatch, String> {
    let mut uniform = || -> ArrayRef {
        Arc::new(Float64Array::from_iter_values(
            (0..rows).map(|_| rng.random::<f64>()),
        ))
    };
    let (x, y, z) = (uniform(), uniform(), uniform());
    // Sums of uniforms: bell-shaped around 0, like the particles' speeds.
    let mut normal = || -> ArrayRef {
        Arc::new(Float64Array::from_iter_values(
            (0..rows).map(|_| (0..4).map(|_| rng.random::<f64>()).sum::<f64>() - 2.0),
        ))
    };
    let (vx, vy, vz) = (normal(), normal(), normal());
    let mass: ArrayRef = Arc::new(Float64Array::from_iter_values(
        (0..rows).map(|_| 10f64.powf(rng.random_range(-1.0..2.0))),
    ));
    let charge: ArrayRef = Arc::new(Int8Array::from_iter_values(
        (0..rows).map(|_| rng.random_range(-1..=1)),
    ));
    // Skewed: the first kinds are the common ones.
    let kind: ArrayRef = Arc::new(StringArray::from_iter_values((0..rows).map(|_| {
        let u: f64 = rng.random();
        KINDS[((u * u * u) * KINDS.len() as f64) as usize % KINDS.len()]
    })));
    let id: ArrayRef = Arc::new(Int64Array::from_iter_values(first..first + rows as i64));
    RecordBatch::try_new(
        corpus_schema(),
        vec![id, x, y, z, vx, vy, vz, mass, charge, kind],
    )
    .map_err(|e| e.to_string())
}

/// Write the corpus files into `dir`, each half the rows of the one
/// before (at least 1024), and return their paths.
pub fn write_corpus(dir: &Path, rows: usize, rng: &mut StdRng) -> Result<Vec<PathBuf>, String> {
    let mut paths = Vec::new();
    let mut first = 0i64;
    for n in 0..FILES {
        let rows = (rows >> n).max(1024);
        let batch = generate(rows, first, rng)?;
        first += rows as i64;
        let path = dir.join(format!("part-{n}.parquet"));
        let properties = WriterProperties::builder()
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .build();
        let file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(properties))
            .map_err(|e| e.to_string())?;
        writer.write(&batch).map_err(|e| e.to_string())?;
        writer.close().map_err(|e| e.to_string())?;
        paths.push(path);
    }
    Ok(paths)
}

/// A fragment of the corpus over table `t`: a template's name and its SQL.
pub fn template(rng: &mut StdRng) -> (&'static str, String) {
    let unit = |rng: &mut StdRng| format!("{:.4}", rng.random::<f64>());
    let speed = |rng: &mut StdRng| format!("{:.3}", rng.random_range(-2.0..2.0));
    let coordinate = |rng: &mut StdRng| ["x", "y", "z"][rng.random_range(0..3)];
    let (name, predicate) = match rng.random_range(0..9) {
        0 => (
            "box",
            format!(
                "x >= {} AND y < {} AND z <= {}",
                unit(rng),
                unit(rng),
                unit(rng)
            ),
        ),
        1 => {
            let (a, b) = (rng.random::<f64>(), rng.random::<f64>());
            (
                "between",
                format!(
                    "{} BETWEEN {:.4} AND {:.4}",
                    coordinate(rng),
                    a.min(b),
                    a.max(b)
                ),
            )
        }
        2 => ("range", format!("{} > {}", coordinate(rng), unit(rng))),
        3 => (
            "speed",
            format!("vx > {} AND vy < {}", speed(rng), speed(rng)),
        ),
        4 => (
            "equality",
            format!(
                "charge = {} AND kind = '{}'",
                rng.random_range(-1..=1),
                KINDS[rng.random_range(0..KINDS.len())]
            ),
        ),
        5 => {
            let kinds: Vec<String> = (0..rng.random_range(1..4))
                .map(|_| format!("'{}'", KINDS[rng.random_range(0..KINDS.len())]))
                .collect();
            ("list", format!("kind IN ({})", kinds.join(", ")))
        }
        6 => (
            "pattern",
            format!(
                "kind LIKE '%{}%' AND mass > {:.2}",
                ["on", "u", "p", "g"][rng.random_range(0..4)],
                10f64.powf(rng.random_range(-1.0..2.0))
            ),
        ),
        7 => (
            "arithmetic",
            format!(
                "x * vx + y * vy > {} OR id % {} = 0",
                speed(rng),
                rng.random_range(2..50)
            ),
        ),
        _ => (
            "disjunction",
            format!(
                "x < {} OR mass > {:.2}",
                unit(rng),
                rng.random_range(1.0..100.0)
            ),
        ),
    };
    if rng.random_bool(AGGREGATED_SHARE) {
        return ("aggregate", aggregated(&predicate, rng));
    }
    let columns = [
        "id", "x", "y", "z", "vx", "vy", "vz", "mass", "charge", "kind",
    ];
    let mut projection: Vec<String> = columns
        .iter()
        .filter(|_| rng.random_bool(0.4))
        .map(|c| c.to_string())
        .collect();
    match rng.random_range(0..6) {
        0 => projection.push("x * vx + y * vy + z * vz AS momentum".to_string()),
        1 => projection.push("sqrt(x * x + y * y) AS radius".to_string()),
        2 => projection.push("upper(kind) AS shout".to_string()),
        _ => {}
    }
    if projection.is_empty() {
        projection.push(columns[rng.random_range(0..columns.len())].to_string());
    }
    (
        name,
        format!("SELECT {} FROM t WHERE {predicate}", projection.join(", ")),
    )
}

/// The share of the corpus' fragments that aggregate what they keep.
const AGGREGATED_SHARE: f64 = 0.25;

/// An aggregation of the rows `predicate` keeps: by nothing, a column of
/// few values, or a computed key of up to a hundred thousand, with one to
/// five aggregates.
fn aggregated(predicate: &str, rng: &mut StdRng) -> String {
    let key = match rng.random_range(0..5) {
        0 => None,
        1 => Some("kind".to_string()),
        2 => Some("charge".to_string()),
        3 => Some("kind, charge".to_string()),
        _ => Some(format!("id % {}", 10u64.pow(rng.random_range(1..6)))),
    };
    let all = ["count(*)", "sum(mass)", "avg(vx)", "min(x)", "max(y * vy)"];
    let mut aggregates: Vec<&str> = all
        .iter()
        .copied()
        .filter(|_| rng.random_bool(0.5))
        .collect();
    if aggregates.is_empty() {
        aggregates.push(all[rng.random_range(0..all.len())]);
    }
    match key {
        Some(key) => format!(
            "SELECT {key}, {} FROM t WHERE {predicate} GROUP BY {key}",
            aggregates.join(", ")
        ),
        None => format!("SELECT {} FROM t WHERE {predicate}", aggregates.join(", ")),
    }
}

/// The sizes of the timed transfers, in the order they are sent.
pub fn transfer_sizes() -> Vec<usize> {
    let mut sizes = Vec::new();
    for _ in 0..TRANSFER_REPEATS {
        let mut bytes = TRANSFER_SMALLEST;
        while bytes <= TRANSFER_LARGEST {
            sizes.push(bytes);
            bytes *= 2;
        }
    }
    sizes
}

/// One corpus fragment run: its shape as counted, its threads, its parts.
pub struct Timed {
    pub name: &'static str,
    pub sql: String,
    pub shape: Shape,
    pub threads: usize,
    pub measured: FragmentCosts,
    pub estimated_rows: f64,
    pub estimation: Duration,
}

/// The models fitted on every sample, and the report: the held-out errors,
/// the estimator's rows against the counted ones, and the estimation's
/// share of each fragment's execution. `threads`: the most the fragments
/// ran on. The report's `elapsed` is the caller's to set.
pub fn fitted(
    calibration: &Calibration,
    timed: &[Timed],
    transfers: &[(usize, Duration)],
    threads: usize,
) -> Result<(CostModels, Report), String> {
    let mut report = fit_and_hold_out(timed, transfers, calibration.seed)?;
    for t in timed {
        report.cardinality.push(Point {
            what: t.sql.clone(),
            predicted: t.estimated_rows,
            measured: t.shape.output_rows,
        });
        if t.measured.execution_nanos > 0 {
            report
                .estimation_share
                .push(t.estimation.as_nanos() as f64 / t.measured.execution_nanos as f64);
        }
    }
    let models = fit(
        timed,
        transfers,
        |_| true,
        calibration.seed,
        threads,
        calibration.link_bits_per_second,
    )?;
    Ok((models, report))
}

/// Models fitted on the samples `keep` admits (by index).
fn fit(
    timed: &[Timed],
    transfers: &[(usize, Duration)],
    keep: impl Fn(usize) -> bool,
    seed: u64,
    threads: usize,
    link: Option<u64>,
) -> Result<CostModels, String> {
    let mut observed = Observed::default();
    for (i, t) in timed.iter().enumerate() {
        if keep(i) {
            observed.add(&t.shape, t.threads, &t.measured);
        }
    }
    let network: Vec<Sample> = transfers
        .iter()
        .enumerate()
        .filter(|(i, _)| keep(*i))
        .map(|(_, &(bytes, took))| Observed::network(bytes as f64, took))
        .collect();
    Ok(CostModels {
        execution: Model::fit(observed.execution, seed)?,
        serialization: Model::fit(observed.serialization, seed)?,
        network: Model::fit(network, seed)?,
        threads,
        link_bits_per_second: link.unwrap_or(0),
    })
}

/// Fit on four fifths, predict the fifth held out.
fn fit_and_hold_out(
    timed: &[Timed],
    transfers: &[(usize, Duration)],
    seed: u64,
) -> Result<Report, String> {
    let held_out = |i: usize| i % 5 == 4;
    let models = fit(timed, transfers, |i| !held_out(i), seed, 1, None)?;
    let mut report = Report::default();
    for (_, t) in timed.iter().enumerate().filter(|(i, _)| held_out(*i)) {
        report.execution.push(Point {
            what: format!("{} ({} threads): {}", t.name, t.threads, t.sql),
            predicted: models.execution(&t.shape, t.threads).as_nanos() as f64,
            measured: t.measured.execution_nanos as f64,
        });
        if t.shape.output_rows >= 1.0 {
            report.serialization.push(Point {
                what: format!(
                    "{} rows, {} bytes",
                    t.shape.output_rows, t.shape.output_bytes
                ),
                predicted: models.serialization(&t.shape).as_nanos() as f64,
                measured: t.measured.serialization_nanos as f64,
            });
        }
    }
    for &(bytes, took) in transfers
        .iter()
        .enumerate()
        .filter(|(i, _)| held_out(*i))
        .map(|(_, t)| t)
    {
        report.network.push(Point {
            what: format!("{bytes} bytes"),
            predicted: models.network(bytes as f64).as_nanos() as f64,
            measured: took.as_nanos() as f64,
        });
    }
    Ok(report)
}
