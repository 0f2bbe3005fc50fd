//! The state cache over Flight, in process: a memory node service on a
//! loopback port and the `skiff_flight::state_cache` client calls.

use std::io::Cursor;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{BinaryArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::ipc::writer::StreamWriter;
use arrow::util::pretty::pretty_format_batches;
use datafusion::common::runtime::SpawnedTask;
use datafusion::datasource::MemTable;
use futures::{StreamExt, TryStreamExt};
use rand::RngCore;
use skiff_engine::{Engine, EngineConfig, Pause, PipelineId};
use skiff_flight::{PutOptions, cache_stats, delete_state, get_state, put_state};
use skiff_state::{ExtractedOutput, ExtractedState, Frame};
use tokio_util::sync::CancellationToken;
use tonic::Code;

use super::{CacheConfig, StateCache, serve_cache};

pub(crate) struct Node {
    pub(crate) addr: String,
    shutdown: CancellationToken,
    _served: SpawnedTask<skiff_node::Result<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub(crate) async fn node(capacity: u64) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let cache = StateCache::open(CacheConfig {
        dir: dir.path().to_path_buf(),
        capacity,
        default_ttl: Duration::from_secs(60),
    })
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let shutdown = CancellationToken::new();
    let served = SpawnedTask::spawn(serve_cache(listener, Arc::new(cache), shutdown.clone()));
    Node {
        addr,
        shutdown,
        _served: served,
        _dir: dir,
    }
}

/// The node's files other than its lock.
fn state_files(node: &Node) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(node._dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().is_some_and(|n| n != "lock"))
        .collect()
}

fn table() -> MemTable {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
    ]));
    let partitions = (0..2)
        .map(|p| {
            (0..3)
                .map(|b| {
                    let start = (p * 3 + b) * 1_000;
                    RecordBatch::try_new(
                        Arc::clone(&schema),
                        vec![
                            Arc::new(Int64Array::from_iter_values(
                                (start..start + 1_000).map(|i| i % 97),
                            )),
                            Arc::new(Int64Array::from_iter_values(start..start + 1_000)),
                        ],
                    )
                    .unwrap()
                })
                .collect()
        })
        .collect();
    MemTable::try_new(schema, partitions).unwrap()
}

fn frames(state: &ExtractedState) -> Vec<(Vec<u8>, u32, usize)> {
    state
        .outputs
        .iter()
        .flat_map(|o| o.partitions.iter().flatten())
        .map(|f| (f.bytes.clone(), f.checksum, f.rows))
        .collect()
}

/// A real query paused after its first pipeline, its state sent through
/// the cache and finished on a second engine: the answer is the source's.
#[tokio::test]
async fn an_extracted_state_round_trips_and_finishes_the_query() {
    let node = node(0).await;
    let config = EngineConfig {
        target_partitions: Some(2),
        ..EngineConfig::default()
    };
    let source = Engine::new(&config).unwrap();
    source
        .context()
        .register_table("t", Arc::new(table()))
        .unwrap();
    let sql = "SELECT a.k, count(*) AS n, sum(b.v) AS s FROM t a JOIN t b ON a.v = b.v \
               GROUP BY a.k ORDER BY a.k";
    let plan = source.physical_plan(sql).await.unwrap();
    let execution = source.start(plan).unwrap();
    execution.pause_after(1);
    let stream = execution.execute().unwrap();
    assert!(matches!(
        execution.paused().await,
        Pause::Paused { finished: 1 }
    ));
    let skiff_state::Separated {
        remaining,
        state: extracted,
        ..
    } = skiff_state::separate(&execution, skiff_state::Compression::Lz4)
        .await
        .unwrap();
    assert!(extracted.rows() > 0, "the state holds rows");

    let options = PutOptions {
        ttl: Duration::from_secs(30),
        read_once: true,
        durable: false,
    };
    let stored = put_state(&node.addr, "query-1", &options, &extracted)
        .await
        .unwrap();
    assert_eq!(stored.frames as usize, frames(&extracted).len());
    assert!(stored.bytes >= extracted.bytes());
    let got = get_state(&node.addr, "query-1").await.unwrap();
    assert_eq!(frames(&got), frames(&extracted));
    assert_eq!(got.rows(), extracted.rows());
    for (a, b) in got.outputs.iter().zip(&extracted.outputs) {
        assert_eq!((a.pipeline, &a.schema), (b.pipeline, &b.schema));
    }
    // Read-once: the migration consumed it.
    let again = get_state(&node.addr, "query-1").await.unwrap_err();
    assert_eq!(again.code(), Code::NotFound, "{again}");

    let loaded = skiff_state::load(&got).unwrap();
    let target = Engine::new(&config).unwrap();
    let moved = skiff_state::resume(
        Arc::clone(&remaining.plan),
        &target.context().task_ctx(),
        loaded,
    )
    .unwrap();
    let on_target: Vec<RecordBatch> = moved.execute().unwrap().try_collect().await.unwrap();
    execution.resume();
    let on_source: Vec<RecordBatch> = stream.try_collect().await.unwrap();
    let rows = |b: &[RecordBatch]| b.iter().map(|b| b.num_rows()).sum::<usize>();
    assert_eq!(rows(&on_target), 97);
    assert_eq!(
        pretty_format_batches(&on_target).unwrap().to_string(),
        pretty_format_batches(&on_source).unwrap().to_string()
    );

    let stats = cache_stats(&node.addr).await.unwrap();
    assert_eq!((stats.puts, stats.gets, stats.entries), (1, 1, 0));
}

/// One frame: a batch of `rows` random binary values of `width` bytes.
fn random_frame(schema: &Arc<Schema>, rows: usize, width: usize, seed: i64) -> Frame {
    let mut rng = rand::rng();
    let values: Vec<Vec<u8>> = (0..rows)
        .map(|_| {
            let mut value = vec![0u8; width];
            rng.fill_bytes(&mut value);
            value
        })
        .collect();
    let batch = RecordBatch::try_new(
        Arc::clone(schema),
        vec![
            Arc::new(Int64Array::from_iter_values(
                (0..rows as i64).map(|i| i + seed),
            )),
            Arc::new(BinaryArray::from_iter_values(values.iter())),
        ],
    )
    .unwrap();
    let mut bytes = Vec::new();
    let mut writer = StreamWriter::try_new(Cursor::new(&mut bytes), schema).unwrap();
    writer.write(&batch).unwrap();
    writer.finish().unwrap();
    drop(writer);
    Frame {
        checksum: crc32fast::hash(&bytes),
        bytes,
        rows,
    }
}

fn big_state() -> ExtractedState {
    let schema = Arc::new(Schema::new(vec![
        Field::new("i", DataType::Int64, false),
        Field::new("b", DataType::Binary, false),
    ]));
    // 3 partitions x 8 frames x 256 rows x 2 KiB: 12 MiB.
    let partitions = (0..3)
        .map(|p| {
            (0..8)
                .map(|f| random_frame(&schema, 256, 2048, p * 100 + f))
                .collect()
        })
        .collect();
    ExtractedState {
        outputs: vec![ExtractedOutput {
            pipeline: PipelineId(4),
            schema,
            partitions,
        }],
    }
}

/// Larger than any single gRPC message limit, and larger than the node's
/// memory: it streams in, spills to disk and streams back intact.
#[tokio::test]
async fn a_state_larger_than_memory_and_8_mib_round_trips() {
    let node = node(4 << 20).await;
    let state = big_state();
    assert!(state.bytes() > 8 << 20);
    let options = PutOptions {
        ttl: Duration::from_secs(30),
        ..PutOptions::default()
    };
    let stored = put_state(&node.addr, "big", &options, &state)
        .await
        .unwrap();
    assert_eq!(stored.frames, 24);
    let stats = cache_stats(&node.addr).await.unwrap();
    assert_eq!(stats.entries, 1);
    assert_eq!(stats.spilled, 1);
    assert_eq!(stats.memory_bytes, 0);
    assert!(stats.disk_bytes >= state.bytes());
    for _ in 0..2 {
        let got = get_state(&node.addr, "big").await.unwrap();
        assert_eq!(frames(&got), frames(&state));
        let loaded = skiff_state::load(&got).unwrap();
        drop(loaded);
    }
    // A put of the same key replaces it; a delete removes it, twice is fine.
    let small = ExtractedState {
        outputs: vec![ExtractedOutput {
            partitions: vec![vec![state.outputs[0].partitions[0][0].clone()]],
            ..state.outputs[0].clone()
        }],
    };
    put_state(&node.addr, "big", &options, &small)
        .await
        .unwrap();
    assert_eq!(
        frames(&get_state(&node.addr, "big").await.unwrap()).len(),
        1
    );
    delete_state(&node.addr, "big").await.unwrap();
    delete_state(&node.addr, "big").await.unwrap();
    let gone = get_state(&node.addr, "big").await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    let stats = cache_stats(&node.addr).await.unwrap();
    assert_eq!(
        (stats.entries, stats.memory_bytes, stats.disk_bytes),
        (0, 0, 0)
    );
}

/// A state with no outputs is a state too; a short TTL lets it expire.
#[tokio::test]
async fn an_empty_state_round_trips_and_expires() {
    let node = node(0).await;
    let options = PutOptions {
        ttl: Duration::from_millis(100),
        ..PutOptions::default()
    };
    let stored = put_state(&node.addr, "e", &options, &ExtractedState::default())
        .await
        .unwrap();
    assert_eq!(stored.frames, 0);
    let got = get_state(&node.addr, "e").await.unwrap();
    assert!(got.outputs.is_empty());
    tokio::time::sleep(Duration::from_millis(150)).await;
    // Past its time to live at once, swept within a second or so.
    let gone = get_state(&node.addr, "e").await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while cache_stats(&node.addr).await.unwrap().expired == 0 {
        assert!(tokio::time::Instant::now() < deadline, "never swept");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(cache_stats(&node.addr).await.unwrap().entries, 0);
}

/// A byte flipped in a spilled entry fails the get with DataLoss, naming
/// the key, and leaves the entry (no read happened).
#[tokio::test]
async fn a_damaged_spill_is_data_loss_over_flight() {
    let node = node(1 << 20).await;
    let state = big_state();
    let options = PutOptions {
        read_once: true,
        ..PutOptions::default()
    };
    put_state(&node.addr, "q42", &options, &state)
        .await
        .unwrap();
    let spills = state_files(&node);
    assert_eq!(spills.len(), 1);
    let mut bytes = std::fs::read(&spills[0]).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    std::fs::write(&spills[0], &bytes).unwrap();
    let error = get_state(&node.addr, "q42").await.unwrap_err();
    assert_eq!(error.code(), Code::DataLoss, "{error}");
    assert!(error.message().contains("q42"), "{}", error.message());
    assert_eq!(cache_stats(&node.addr).await.unwrap().entries, 1);
}

/// A put whose client goes away midway stores nothing.
#[tokio::test]
async fn a_put_broken_off_midway_leaves_nothing() {
    use arrow_flight::FlightDescriptor;
    use prost::Message;
    use skiff_flight::protocol::StatePut;
    use skiff_flight::state_cache::{frame_messages, header_message};

    let node = node(0).await;
    let state = big_state();
    let mut first = header_message(&state).unwrap();
    let put = StatePut {
        key: "half".into(),
        messages: 25,
        ..StatePut::default()
    };
    first.flight_descriptor = Some(FlightDescriptor::new_cmd(put.encode_to_vec()));
    let some: Vec<_> = std::iter::once(first)
        .chain(frame_messages(&state).take(5))
        .collect();
    // The messages, then silence: the call never completes by itself.
    let requests = futures::stream::iter(some).chain(futures::stream::pending());
    let mut client = skiff_flight::connect(&node.addr).await.unwrap();
    let call = client.do_put(requests);
    let cut = tokio::time::timeout(Duration::from_millis(500), call).await;
    assert!(cut.is_err(), "the put cannot finish without its end");
    drop(client);
    // The server notices the reset, and nothing is stored or left on disk.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let files = state_files(&node).len();
        if files == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{files} files left");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let gone = get_state(&node.addr, "half").await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    let stats = cache_stats(&node.addr).await.unwrap();
    assert_eq!((stats.entries, stats.puts), (0, 0));
}

/// A put the node refuses at once (here: a key too long) fails promptly,
/// though the client still has most of a large state to send.
#[tokio::test]
async fn a_refused_put_fails_without_hanging() {
    let node = node(0).await;
    let state = big_state();
    let key = "k".repeat(5_000);
    let options = PutOptions::default();
    let put = put_state(&node.addr, &key, &options, &state);
    let error = tokio::time::timeout(Duration::from_secs(20), put)
        .await
        .expect("the put returns")
        .unwrap_err();
    assert_eq!(error.code(), Code::InvalidArgument, "{error}");
    assert!(error.message().contains("longer than"), "{error}");
    assert_eq!(cache_stats(&node.addr).await.unwrap().entries, 0);
    assert!(state_files(&node).is_empty());
}
