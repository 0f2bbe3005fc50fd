//! `skiff memnode calibrate`: train a node's cost models on the node
//! itself, as the SmartNIC paper trains its device's. A generated table
//! (particle-like numbers, a small integer and a short string per row) is
//! written as Parquet, loaded into a chunk store, and a corpus of
//! fragments made from templates with random constants (ranges,
//! equalities, lists, patterns, arithmetic; random projections, or
//! aggregations by few or many groups; from nothing kept to everything)
//! runs through the node's own fragment path on 1 to `threads` threads,
//! each timed in its parts. Bytes of many sizes cross a loopback
//! connection through the node's link. A fifth of each set is held out to
//! measure the fitted models' error; the models saved are then fitted on
//! everything.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Float64Array, Int8Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::runtime::SpawnedTask;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use object_store::ObjectStoreExt;
use object_store::local::LocalFileSystem;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use skiff_engine::buffer::FileVersion;
use skiff_flight::chunks::chunk_file;
use skiff_flight::fragments::schema_bytes;
use skiff_flight::protocol::{
    FragmentCosts, FragmentFile, FragmentRequest, LoadTable, OffloadMode,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::chunks::ChunkStore;
use super::costs::{CostModels, Model, Observed, Sample, Shape};
use super::fragments::{Offloader, prepare};
use super::link::Link;
use crate::config::CALIBRATION_TRANSFER_SLACK;
use crate::coordinator::fragments::fragment;

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

/// The corpus' files (each half the rows of the one before), their row
/// groups, and the chunks they are held in.
const FILES: usize = 6;
const ROW_GROUP_ROWS: usize = 64 * 1024;
const CHUNK_SIZE: usize = 4 << 20;

/// The timed transfers: sizes doubling from the smallest to the largest,
/// each sent this many times, in pieces of `TRANSFER_PIECE`.
const TRANSFER_SMALLEST: usize = 16 << 10;
const TRANSFER_LARGEST: usize = 32 << 20;
const TRANSFER_REPEATS: usize = 3;
const TRANSFER_PIECE: usize = 64 << 10;

/// The corpus table's columns.
const KINDS: [&str; 8] = [
    "electron", "proton", "neutron", "photon", "muon", "pion", "kaon", "gluon",
];

fn schema() -> Arc<Schema> {
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
    RecordBatch::try_new(schema(), vec![id, x, y, z, vx, vy, vz, mass, charge, kind])
        .map_err(|e| e.to_string())
}

/// Write the corpus files, each half the rows of the one before.
fn write_files(dir: &Path, rows: usize, rng: &mut StdRng) -> Result<Vec<PathBuf>, String> {
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

/// A fragment of the corpus: a template's name and its SQL.
fn template(rng: &mut StdRng) -> (&'static str, String) {
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

/// One corpus fragment run: its shape as counted, its threads, its parts.
struct Timed {
    name: &'static str,
    sql: String,
    shape: Shape,
    threads: usize,
    measured: FragmentCosts,
    estimated_rows: f64,
    estimation: Duration,
}

/// Run `sql` over `file` as a worker's fragment would be, on `offloader`.
async fn run_one(
    ctx: &SessionContext,
    store: &Arc<ChunkStore>,
    offloader: &Offloader,
    file: &FileVersion,
    sql: &str,
) -> Result<(Shape, FragmentCosts, f64, Duration), String> {
    let frame = ctx.sql(sql).await.map_err(|e| e.to_string())?;
    let plan = frame.into_optimized_plan().map_err(|e| e.to_string())?;
    let cut = fragment(&plan, &ctx.state()).map_err(|e| e.to_string())?;
    let request = FragmentRequest {
        plan: cut.plan.clone(),
        input_schema: schema_bytes(&cut.input_schema).map_err(|e| e.message().to_string())?,
        files: vec![FragmentFile {
            file: Some(chunk_file(file)),
            ..FragmentFile::default()
        }],
        mode: OffloadMode::Always as i32,
        fragment: true,
        ..FragmentRequest::default()
    };
    let threads = offloader.threads();
    let store = Arc::clone(store);
    let (tx, mut rx) = mpsc::channel(64);
    // The rows are taken as fast as they come, on this runtime: the
    // network is timed apart.
    let drain = SpawnedTask::spawn(async move { while rx.recv().await.is_some() {} });
    let ran = offloader
        .spawn(async move {
            let started = Instant::now();
            let prepared = prepare(&store, &request, threads, None, 0)
                .await
                .map_err(|back| back.reason)?;
            let (shape, estimated, estimation) = (
                prepared.shape.clone(),
                prepared.estimated.output_rows,
                prepared.estimation,
            );
            match prepared.run(&tx, started, 0).await {
                Ok(Some((rows, measured))) => Ok((shape, rows, measured, estimated, estimation)),
                Ok(None) => Err("the corpus' receiver left".to_string()),
                Err(e) => Err(e.message().to_string()),
            }
        })
        .ok_or("the offload threads are stopping")?
        .await
        .map_err(|e| e.to_string())??;
    drain.join().await.map_err(|e| e.to_string())?;
    let (mut shape, rows, measured, estimated, estimation) = ran;
    shape.output_rows = rows as f64;
    shape.output_bytes = measured.output_bytes as f64;
    Ok((shape, measured, estimated, estimation))
}

/// `bytes` through `link` and a loopback TCP connection: the time, within
/// twice the link's time plus [`CALIBRATION_TRANSFER_SLACK`].
async fn send(bytes: usize, link: Option<&Link>) -> Result<Duration, String> {
    let on_link = link.map_or(Duration::ZERO, |l| l.time(bytes));
    let deadline = on_link * 2 + CALIBRATION_TRANSFER_SLACK;
    tokio::time::timeout(deadline, transfer(bytes, link))
        .await
        .map_err(|_| format!("loopback: {bytes} bytes not across within {deadline:?}"))?
}

async fn transfer(bytes: usize, link: Option<&Link>) -> Result<Duration, String> {
    const PIECE: usize = TRANSFER_PIECE;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let reader = SpawnedTask::spawn(async move {
        let (mut socket, _) = listener.accept().await?;
        let mut buffer = vec![0u8; PIECE];
        let mut read = 0;
        while read < bytes {
            let n = socket.read(&mut buffer).await?;
            if n == 0 {
                break;
            }
            read += n;
        }
        Ok::<_, std::io::Error>((read, Instant::now()))
    });
    let mut socket = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let piece = vec![7u8; PIECE];
    let started = Instant::now();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(PIECE);
        if let Some(link) = link {
            link.send(n).await;
        }
        socket
            .write_all(&piece[..n])
            .await
            .map_err(|e| e.to_string())?;
        left -= n;
    }
    socket.flush().await.map_err(|e| e.to_string())?;
    let (read, done) = reader
        .join()
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    if read != bytes {
        return Err(format!("loopback: {read} of {bytes} bytes arrived"));
    }
    Ok(done.saturating_duration_since(started))
}

/// Calibrate: the models fitted on every sample, and the held-out report.
/// `progress` hears of each fragment run (done, all).
pub async fn calibrate(
    calibration: &Calibration,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<(CostModels, Report), String> {
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(calibration.seed);
    let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
    let paths = write_files(dir.path(), calibration.rows.max(1024), &mut rng)?;
    let local = LocalFileSystem::new();
    let mut files = Vec::with_capacity(paths.len());
    for path in &paths {
        let location =
            object_store::path::Path::from_filesystem_path(path).map_err(|e| e.to_string())?;
        let meta = local.head(&location).await.map_err(|e| e.to_string())?;
        files.push(FileVersion::of(&meta));
    }
    let store = Arc::new(ChunkStore::new(u64::MAX, CHUNK_SIZE));
    store
        .load(&LoadTable {
            table: "t".to_string(),
            location: format!("file://{}", dir.path().display()),
            store: "file:///".to_string(),
            files: files.iter().map(chunk_file).collect(),
            columns: schema().fields().iter().map(|f| f.name().clone()).collect(),
        })
        .await
        .map_err(|e| format!("loading the corpus table: {}", e.message()))?;
    // One context per file: each fragment reads one file, as a partition.
    let mut contexts = Vec::with_capacity(paths.len());
    for path in &paths {
        let ctx = SessionContext::new();
        let path = path.to_str().ok_or("a temporary path that is not UTF-8")?;
        ctx.register_parquet("t", path, ParquetReadOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        contexts.push(ctx);
    }
    let threads = calibration.threads.max(1);
    let offloaders = (1..=threads)
        .map(|t| Offloader::new(t).map_err(|e| format!("offload threads: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let mut timed = Vec::with_capacity(calibration.fragments);
    for n in 0..calibration.fragments {
        let (name, sql) = template(&mut rng);
        let file = rng.random_range(0..files.len());
        let offloader = &offloaders[rng.random_range(0..offloaders.len())];
        let (shape, measured, estimated_rows, estimation) =
            run_one(&contexts[file], &store, offloader, &files[file], &sql)
                .await
                .map_err(|e| format!("corpus fragment {sql}: {e}"))?;
        timed.push(Timed {
            name,
            sql,
            shape,
            threads: offloader.threads(),
            measured,
            estimated_rows,
            estimation,
        });
        progress(n + 1, calibration.fragments);
    }
    let link = calibration.link_bits_per_second.map(Link::new);
    let mut transfers = Vec::new();
    for _ in 0..TRANSFER_REPEATS {
        let mut bytes = TRANSFER_SMALLEST;
        while bytes <= TRANSFER_LARGEST {
            transfers.push((bytes, send(bytes, link.as_ref()).await?));
            bytes *= 2;
        }
    }
    let mut report = fit_and_hold_out(&timed, &transfers, calibration.seed)?;
    for t in &timed {
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
        &timed,
        &transfers,
        |_| true,
        calibration.seed,
        threads,
        calibration.link_bits_per_second,
    )?;
    report.elapsed = started.elapsed();
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

#[cfg(test)]
mod tests {
    use super::super::costs::offload_is_faster;
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_calibration_fits_models_that_decide() {
        let calibration = Calibration {
            fragments: 30,
            rows: 64 * 1024,
            threads: 2,
            link_bits_per_second: Some(1_000_000_000),
            seed: 7,
        };
        let seen = std::sync::atomic::AtomicUsize::new(0);
        let (models, report) = calibrate(&calibration, &|done, all| {
            assert_eq!(all, 30);
            seen.store(done, std::sync::atomic::Ordering::Relaxed);
        })
        .await
        .unwrap();
        assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), 30);
        assert_eq!(report.execution.len(), 6);
        assert_eq!(report.cardinality.len(), 30);
        assert!(!report.network.is_empty());
        // The network model learned the link, not loopback: 64 MiB take
        // at least the 0.54 s 1 Gbit/s allows (the ceiling only catches a
        // gross error, such as a wrong unit).
        let sent = models.network(64.0 * (1 << 20) as f64).as_secs_f64();
        assert!((0.4..10.0).contains(&sent), "{sent}");
        // Models decide, the link's seconds outweighing any execution
        // time: 240 MB of rows keeping almost nothing are offloaded; rows
        // kept whole and widened (twice the bytes to send) pushed back.
        let shape = |kept: f64, widened: f64| Shape {
            input_rows: 1e6,
            output_rows: 1e6 * kept,
            input_columns: 3,
            output_columns: 3,
            input_bytes: 240e6,
            output_bytes: 240e6 * kept * widened,
            operations: [
                ("greater".to_string(), 1e6),
                ("filter".to_string(), 1e6),
                ("select".to_string(), 1e6 * kept),
            ]
            .into_iter()
            .collect(),
        };
        assert!(offload_is_faster(&models.predict(&shape(0.001, 1.0), 2, 0)));
        assert!(!offload_is_faster(&models.predict(&shape(1.0, 2.0), 2, 0)));
        let summary = report.summary();
        assert!(summary.contains("execution"), "{summary}");
    }
}
