//! `skiff memnode calibrate`: train a node's cost models on the node
//! itself. The corpus and the fitting are `skiff_offload::calibration`'s;
//! here the corpus is loaded into a chunk store, each fragment runs
//! through the node's own fragment path on 1 to `threads` threads, timed
//! in its parts, and bytes of many sizes cross a loopback connection
//! through the node's link.

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::common::runtime::SpawnedTask;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use object_store::ObjectStoreExt;
use object_store::local::LocalFileSystem;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use skiff_engine::buffer::FileVersion;
use skiff_flight::chunks::chunk_file;
use skiff_flight::fragments::schema_bytes;
use skiff_flight::protocol::{
    FragmentCosts, FragmentFile, FragmentRequest, LoadTable, OffloadMode,
};
use skiff_offload::calibration::{
    Calibration, Report, Timed, corpus_schema, fitted, template, transfer_sizes, write_corpus,
};
use skiff_offload::costs::{CostModels, Shape};
use skiff_offload::fragment::fragment;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::chunks::ChunkStore;
use super::fragments::{Offloader, prepare};
use super::link::Link;
use crate::limits::CALIBRATION_TRANSFER_SLACK;

/// The chunks the corpus is held in, and the pieces a transfer is sent in.
const CHUNK_SIZE: usize = 4 << 20;
const TRANSFER_PIECE: usize = 64 << 10;

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
    let paths = write_corpus(dir.path(), calibration.rows.max(1024), &mut rng)?;
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
            columns: corpus_schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect(),
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
    for bytes in transfer_sizes() {
        transfers.push((bytes, send(bytes, link.as_ref()).await?));
    }
    let (models, mut report) = fitted(calibration, &timed, &transfers, threads)?;
    report.elapsed = started.elapsed();
    Ok((models, report))
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_offload::costs::offload_is_faster;

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
