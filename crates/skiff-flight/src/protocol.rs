//! Messages between roles. Each is a protobuf message derived with prost
//! (no build script), carried in a Flight ticket or action body.
//!
//! Coordinator → worker: a [`RunQuery`] ticket (`DoGet`) whose stream is the
//! query's result as Arrow IPC; [`CancelQuery`] (`DoAction`).
//! Worker or memory node → coordinator: [`Register`] once, then a
//! [`Heartbeat`] every [`HEARTBEAT_INTERVAL`].
//! Any node → memory node: the state cache (`crate::state_cache`): a
//! `DoPut` whose descriptor is a [`StatePut`], a `DoGet` whose ticket is a
//! [`StateKey`], and the [`action::STATE_DELETE`] / [`action::STATE_STATS`]
//! actions; and tables' chunks (`crate::chunks`): [`LoadTable`] /
//! [`UnloadTable`] / [`action::TABLE_STATS`] actions from the coordinator,
//! a `DoGet` whose ticket is a [`ChunkRequest`] from workers.

use std::time::Duration;

use std::collections::HashMap;

use skiff_engine::buffer::{CacheScope, TableCache};

/// How often workers and memory nodes report to the coordinator.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(500);
/// Silence after which the coordinator declares a node dead. With the
/// interval above and the coordinator's sweep, a dead node is marked within
/// three seconds of its last heartbeat.
pub const DEAD_AFTER: Duration = Duration::from_millis(2000);

/// Action names.
pub mod action {
    pub const REGISTER: &str = "skiff.register";
    pub const HEARTBEAT: &str = "skiff.heartbeat";
    pub const CANCEL: &str = "skiff.cancel";
    /// Memory node: drop a cached state ([`super::StateKey`]); fine when absent.
    pub const STATE_DELETE: &str = "skiff.state.delete";
    /// Memory node: drop every cached state whose key begins with the
    /// body's ([`super::StateKey`]): a query's stage checkpoints.
    pub const STATE_DELETE_PREFIX: &str = "skiff.state.delete_prefix";
    /// Memory node: the state cache's counters ([`super::CacheStats`]).
    pub const STATE_STATS: &str = "skiff.state.stats";
    pub const PAUSE: &str = "skiff.pause";
    /// Worker → coordinator: move my queries away, I am stopping.
    pub const VACATE: &str = "skiff.vacate";
    /// Worker: its buffer pool's counters ([`super::BufferStats`]).
    pub const BUFFER_STATS: &str = "skiff.buffer.stats";
    /// Worker: drop every block of its buffer pool ([`super::BufferCleared`]).
    pub const BUFFER_CLEAR: &str = "skiff.buffer.clear";
    /// Worker: send blocks of partitions it lost ([`super::ShipBlocks`]).
    pub const BUFFER_SHIP: &str = "skiff.buffer.ship";
    /// Memory node: hold files' columns as chunks ([`super::LoadTable`] →
    /// [`super::TableLoaded`]).
    pub const TABLE_LOAD: &str = "skiff.table.load";
    /// Memory node: drop a table's chunks ([`super::UnloadTable`] →
    /// [`super::TableLoaded`], what was freed).
    pub const TABLE_UNLOAD: &str = "skiff.table.unload";
    /// Memory node: what its chunk store holds ([`super::MemoryStats`]).
    pub const TABLE_STATS: &str = "skiff.table.stats";
    /// Worker: its latest pipeline groups ([`super::PipelineGroups`]).
    pub const PIPELINE_GROUPS: &str = "skiff.groups.stats";
}

/// The kinds of node that register with a coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Role {
    Worker = 0,
    MemoryNode = 1,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::MemoryNode => "memnode",
        }
    }
}

/// Run a plan; the `DoGet` stream returns its result.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RunQuery {
    #[prost(uint64, tag = "1")]
    pub query_id: u64,
    /// datafusion-proto bytes ([`crate::encode_plan`]).
    #[prost(bytes = "bytes", tag = "2")]
    pub plan: bytes::Bytes,
    /// Session options the plan runs under (`datafusion.*`, `skiff.*`).
    #[prost(map = "string, string", tag = "3")]
    pub options: HashMap<String, String>,
    /// Memory this query may use on the worker, in bytes; 0 = no own limit.
    #[prost(uint64, tag = "4")]
    pub memory_limit: u64,
    /// Run to the end and return `EXPLAIN ANALYZE PIPELINES` rows instead
    /// of the result.
    #[prost(bool, tag = "5")]
    pub explain_analyze: bool,
    /// The statement text, for the worker's log.
    #[prost(string, tag = "6")]
    pub sql: String,
    /// When set, `plan` is a remaining plan: load its state from the state
    /// cache under this key first.
    #[prost(string, tag = "7")]
    pub state_key: String,
    /// The memory node whose state cache the worker reads state from and
    /// hands state off to (`host:port`); empty when there is none.
    #[prost(string, tag = "8")]
    pub state_cache: String,
    /// The coordinator's batch this query came in (`skiff.batch_window_ms`);
    /// 0 for none. The worker groups the pipelines of a batch's queries.
    #[prost(uint64, tag = "9")]
    pub batch_id: u64,
    /// Queries in that batch, all sent to this worker.
    #[prost(uint32, tag = "10")]
    pub batch_size: u32,
}

/// Why a worker hands a query off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, prost::Enumeration)]
#[repr(i32)]
pub enum HandoffReason {
    /// Move to another worker now (read-once state).
    Migrate = 0,
    /// Stop until resumed (durable state).
    Suspend = 1,
    /// A copy of the state while the query goes on here.
    Snapshot = 2,
}

/// Coordinator → worker: stop `query_id` at a pipeline boundary and hand it
/// off for `reason` (a `DoAction`; the hand-off itself ends the result
/// stream).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PauseQuery {
    #[prost(uint64, tag = "1")]
    pub query_id: u64,
    #[prost(enumeration = "HandoffReason", tag = "2")]
    pub reason: i32,
    /// Abort running pipelines instead of letting them finish.
    #[prost(bool, tag = "3")]
    pub abort: bool,
    /// Stop without storing state: the coordinator chose to restart the
    /// query or to continue it from an older snapshot.
    #[prost(bool, tag = "4")]
    pub discard_state: bool,
}

/// Worker → coordinator: vacate the worker at `addr` (it got SIGTERM).
#[derive(Clone, PartialEq, prost::Message)]
pub struct VacateWorker {
    #[prost(string, tag = "1")]
    pub addr: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PauseReply {
    /// False when the query cannot stop at a boundary any more (its result
    /// pipeline streams) or is unknown here; `detail` says which.
    #[prost(bool, tag = "1")]
    pub accepted: bool,
    #[prost(string, tag = "2")]
    pub detail: String,
}

/// Worker → coordinator, in the result stream as the `app_metadata` of a
/// message without data: the query's state is in the state cache and
/// `plan` continues from it. A migration or suspension ends the stream
/// after it; a snapshot does not.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Handoff {
    #[prost(enumeration = "HandoffReason", tag = "1")]
    pub reason: i32,
    /// Cache key of the state; empty when the state could not be stored
    /// (`error` says why): the query must start over.
    #[prost(string, tag = "2")]
    pub state_key: String,
    /// The remaining plan (datafusion-proto bytes).
    #[prost(bytes = "bytes", tag = "3")]
    pub plan: bytes::Bytes,
    /// Bytes shipped to the cache (Arrow IPC frames).
    #[prost(uint64, tag = "4")]
    pub state_bytes: u64,
    #[prost(uint64, tag = "5")]
    pub state_rows: u64,
    #[prost(uint32, tag = "6")]
    pub pipelines_finished: u32,
    #[prost(uint32, tag = "7")]
    pub pipelines_total: u32,
    /// From the pause request to the stream's end, milliseconds.
    #[prost(uint64, tag = "8")]
    pub pause_ms: u64,
    #[prost(uint64, tag = "9")]
    pub extract_ms: u64,
    #[prost(uint64, tag = "10")]
    pub put_ms: u64,
    #[prost(string, tag = "11")]
    pub error: String,
    /// How long the query had run on this worker when it paused (or was
    /// asked to): the work a restart would redo, milliseconds.
    #[prost(uint64, tag = "12")]
    pub ran_ms: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CancelQuery {
    #[prost(uint64, tag = "1")]
    pub query_id: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Register {
    #[prost(enumeration = "Role", tag = "1")]
    pub role: i32,
    /// Where the node's own Flight service listens (`host:port`).
    #[prost(string, tag = "2")]
    pub addr: String,
    #[prost(uint32, tag = "3")]
    pub cores: u32,
    /// Memory the node offers to queries, in bytes (0 = unbounded).
    #[prost(uint64, tag = "4")]
    pub memory: u64,
    #[prost(uint32, tag = "5")]
    pub pid: u32,
    /// A memory node's tables to load when it registers (`--preload`).
    #[prost(string, repeated, tag = "6")]
    pub preload: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Registered {
    #[prost(uint64, tag = "1")]
    pub node_id: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Heartbeat {
    #[prost(uint64, tag = "1")]
    pub node_id: u64,
    #[prost(message, repeated, tag = "2")]
    pub queries: Vec<RunningQuery>,
    /// How far the node's tasks of distributed queries have scanned.
    #[prost(message, repeated, tag = "3")]
    pub scans: Vec<ScanFiles>,
    /// The memory routes a worker reads with (their epoch; 0: none yet).
    #[prost(uint64, tag = "4")]
    pub memory_epoch: u64,
    /// Bytes the node's work holds in memory now: a worker's memory pool
    /// reservations, a memory node's table chunks and states in memory.
    #[prost(uint64, tag = "5")]
    pub memory_used: u64,
    /// Bytes cached: a worker's buffer pool, a memory node's state cache
    /// (memory and disk).
    #[prost(uint64, tag = "6")]
    pub cache_bytes: u64,
    /// Queries that left the node since its last heartbeat, as they were
    /// when they left (finished, failed or handed off).
    #[prost(message, repeated, tag = "7")]
    pub ended: Vec<RunningQuery>,
}

/// The files (or file ranges) the scans of a distributed query's tasks on
/// a node have finished, as of the heartbeat.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ScanFiles {
    /// Skiff's query id (the coordinator's).
    #[prost(uint64, tag = "1")]
    pub query_id: u64,
    #[prost(uint64, tag = "2")]
    pub files_done: u64,
    /// The coordinator run that gave the query its id.
    #[prost(uint64, tag = "3")]
    pub run: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HeartbeatReply {
    /// False when the coordinator does not know the node (it restarted, or
    /// declared the node dead): the node registers again.
    #[prost(bool, tag = "1")]
    pub known: bool,
    /// The node was removed from the cluster (`skiff.remove_worker`): it
    /// leaves, and must not register again.
    #[prost(bool, tag = "2")]
    pub removed: bool,
    /// A worker's partitions of every hash-partitioned table, as the
    /// partition map has them now (a table it owns none of is named with
    /// none): its buffer pool keeps their blocks longer than others'.
    #[prost(message, repeated, tag = "3")]
    pub owned: Vec<ShipTable>,
    /// The files memory nodes hold, when the worker's epoch is not the
    /// coordinator's (absent: keep the routes it has).
    #[prost(message, optional, tag = "4")]
    pub memory: Option<MemoryRoutes>,
}

/// Which memory node holds which file's columns (pipeline groups: tables
/// in memory nodes). A file not named is read from storage.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MemoryRoutes {
    #[prost(uint64, tag = "1")]
    pub epoch: u64,
    #[prost(message, repeated, tag = "2")]
    pub files: Vec<MemoryRoute>,
}

/// One file version held by the memory node at `addr`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MemoryRoute {
    /// The table's location, as scans name it.
    #[prost(string, tag = "1")]
    pub location: String,
    #[prost(message, optional, tag = "2")]
    pub file: Option<ChunkFile>,
    #[prost(string, tag = "3")]
    pub addr: String,
}

/// One version of one Parquet file (the buffer pool's `FileVersion`).
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct ChunkFile {
    #[prost(string, tag = "1")]
    pub path: String,
    #[prost(uint64, tag = "2")]
    pub size: u64,
    #[prost(int64, tag = "3")]
    pub modified: i64,
    #[prost(string, optional, tag = "4")]
    pub e_tag: Option<String>,
    #[prost(uint32, optional, tag = "5")]
    pub partition: Option<u32>,
}

/// Coordinator → memory node: hold `columns` of `files` as chunks
/// ([`action::TABLE_LOAD`]); all of it or, when it does not fit or a file
/// cannot be read, nothing (what was held of the table before stays).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LoadTable {
    /// The table's name, for reports.
    #[prost(string, tag = "1")]
    pub table: String,
    /// Its location, as scans name it.
    #[prost(string, tag = "2")]
    pub location: String,
    /// The object store the paths are in (`file:///`, `s3://bucket/`).
    #[prost(string, tag = "3")]
    pub store: String,
    #[prost(message, repeated, tag = "4")]
    pub files: Vec<ChunkFile>,
    /// Column names; a file without one of them is held without it.
    #[prost(string, repeated, tag = "5")]
    pub columns: Vec<String>,
}

/// What a load stored, or an unload freed.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TableLoaded {
    #[prost(uint64, tag = "1")]
    pub chunks: u64,
    #[prost(uint64, tag = "2")]
    pub bytes: u64,
    #[prost(uint64, tag = "3")]
    pub files: u64,
}

/// Coordinator → memory node: drop table `table`'s chunks.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UnloadTable {
    #[prost(string, tag = "1")]
    pub table: String,
}

/// A memory node's chunk store ([`action::TABLE_STATS`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct MemoryStats {
    /// Bytes the store may hold.
    #[prost(uint64, tag = "1")]
    pub capacity: u64,
    #[prost(uint64, tag = "2")]
    pub bytes: u64,
    #[prost(uint64, tag = "3")]
    pub chunk_size: u64,
    #[prost(message, repeated, tag = "4")]
    pub columns: Vec<MemoryColumn>,
    /// The fragments it was offered lately, oldest first.
    #[prost(message, repeated, tag = "5")]
    pub fragments: Vec<FragmentRecord>,
}

/// One fragment a memory node was offered: what it decided, estimated and
/// measured.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FragmentRecord {
    /// Its number on the node, from 1.
    #[prost(uint64, tag = "1")]
    pub seq: u64,
    #[prost(bool, tag = "2")]
    pub offloaded: bool,
    #[prost(string, tag = "3")]
    pub reason: String,
    /// Rows read, estimated kept (from the sketches) and kept.
    #[prost(uint64, tag = "4")]
    pub input_rows: u64,
    #[prost(double, tag = "5")]
    pub estimated_rows: f64,
    #[prost(uint64, tag = "6")]
    pub rows: u64,
    /// The node's time on it, from the request to the last row.
    #[prost(uint64, tag = "7")]
    pub execution_nanos: u64,
    #[prost(uint64, tag = "8")]
    pub query_id: u64,
    /// The node's prediction (`auto`), and the parts it measured.
    #[prost(message, optional, tag = "9")]
    pub predicted: Option<FragmentCosts>,
    #[prost(message, optional, tag = "10")]
    pub measured: Option<FragmentCosts>,
    /// `auto`, `always`.
    #[prost(string, tag = "11")]
    pub mode: String,
    /// The node's time estimating the rows kept (from its sketches).
    #[prost(uint64, tag = "12")]
    pub estimation_nanos: u64,
}

/// What a memory node holds of one column of one table.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MemoryColumn {
    #[prost(string, tag = "1")]
    pub table: String,
    #[prost(string, tag = "2")]
    pub column: String,
    #[prost(uint64, tag = "3")]
    pub chunks: u64,
    #[prost(uint64, tag = "4")]
    pub bytes: u64,
    #[prost(uint64, tag = "5")]
    pub rows: u64,
    /// Chunks and bytes sent to workers since the load.
    #[prost(uint64, tag = "6")]
    pub served_chunks: u64,
    #[prost(uint64, tag = "7")]
    pub served_bytes: u64,
    /// Bytes of the column's sketches (distinct values, quantiles, heavy
    /// hitters) over the files held.
    #[prost(uint64, tag = "8")]
    pub sketch_bytes: u64,
}

/// A `DoGet` ticket for a memory node: the chunks of `columns` (top-level
/// indices in the file's schema) of one row group of one file version.
/// The stream has one message per chunk, a [`BlockHeader`] (with the
/// chunk's first row) and its frame, columns in the asked order and each
/// column's chunks in row order; a column the node does not hold is left
/// out (the worker reads it from storage). A file version the node does
/// not hold fails the call. With `prune`, the stream starts with one
/// [`ChunkSelection`] message and holds only the chunks that meet its rows.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ChunkRequest {
    #[prost(message, optional, tag = "1")]
    pub file: Option<ChunkFile>,
    #[prost(uint64, tag = "2")]
    pub row_group: u64,
    #[prost(uint64, repeated, tag = "3")]
    pub columns: Vec<u64>,
    #[prost(message, optional, tag = "4")]
    pub prune: Option<ChunkPrune>,
    /// Always true: tells a chunk ticket from a [`StateKey`] one.
    #[prost(bool, tag = "15")]
    pub chunks: bool,
}

/// The scan's predicate, for the memory node to prune chunks with: the
/// rows of a row group that the min/max of its held chunks of the
/// predicate's columns rule out are not sent.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ChunkPrune {
    /// The schema the predicate's columns index (the table's), as an
    /// Arrow IPC schema message.
    #[prost(bytes = "vec", tag = "1")]
    pub schema: Vec<u8>,
    /// The predicate, a DataFusion `PhysicalExprNode`.
    #[prost(bytes = "vec", tag = "2")]
    pub predicate: Vec<u8>,
    /// The predicate's columns, by name, and the top-level index of each
    /// in the file's schema (aligned).
    #[prost(string, repeated, tag = "3")]
    pub names: Vec<String>,
    #[prost(uint64, repeated, tag = "4")]
    pub roots: Vec<u64>,
    /// The row group's rows (from the file's footer).
    #[prost(uint64, tag = "5")]
    pub rows: u64,
}

/// The first message of an answer to a pruning [`ChunkRequest`] (its
/// `app_metadata`; no body): the rows of the row group that are sent, as
/// sorted, disjoint `[start, end)` pairs flattened. Every column is sent
/// for exactly these rows, by the chunks that meet them.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ChunkSelection {
    #[prost(uint64, repeated, tag = "1")]
    pub ranges: Vec<u64>,
}

/// A query fragment for a memory node to run over the chunks it holds in
/// the worker's place, or to push back (opportunistic offload,
/// `../shared/papers/opportunistic-query-execution-smartnics.txt`): the
/// `DoGet` ticket. The answer opens with a [`FragmentDecision`]; an
/// offloaded fragment's rows follow as an Arrow IPC stream, each row
/// group's rows closed by a [`FragmentMark`] (so that a worker that loses
/// the node reads only the row groups not yet marked from storage), the
/// last mark with `end` set.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FragmentRequest {
    /// The fragment: a Substrait `Plan` (protobuf) of a scan of one table,
    /// its filter and its projection.
    #[prost(bytes = "vec", tag = "1")]
    pub plan: Vec<u8>,
    /// The columns the fragment's scan reads, with their types, as an
    /// Arrow IPC schema message: the node serves them from its chunks.
    #[prost(bytes = "vec", tag = "2")]
    pub input_schema: Vec<u8>,
    /// The files to run it over, in the order marks name them.
    #[prost(message, repeated, tag = "3")]
    pub files: Vec<FragmentFile>,
    /// Whether the node may push back (`auto`) or must run it (`always`).
    #[prost(enumeration = "OffloadMode", tag = "4")]
    pub mode: i32,
    /// The query it belongs to (the node's records name it).
    #[prost(uint64, tag = "5")]
    pub query_id: u64,
    /// Always true: tells a fragment ticket from chunk and state tickets.
    #[prost(bool, tag = "14")]
    pub fragment: bool,
}

/// A file of a [`FragmentRequest`]: its version and, when `ranged`, the
/// byte range `[start, end)` whose row groups are read (DataFusion's rule:
/// those whose first page starts in it).
#[derive(Clone, PartialEq, prost::Message)]
pub struct FragmentFile {
    #[prost(message, optional, tag = "1")]
    pub file: Option<ChunkFile>,
    #[prost(bool, tag = "2")]
    pub ranged: bool,
    #[prost(int64, tag = "3")]
    pub start: i64,
    #[prost(int64, tag = "4")]
    pub end: i64,
}

/// How a worker asks a memory node to treat a fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, prost::Enumeration)]
#[repr(i32)]
pub enum OffloadMode {
    /// The node decides: run it, or push the raw data back.
    Auto = 0,
    /// The node runs it if it can.
    Always = 1,
}

/// The first message of a fragment's answer (its `app_metadata`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct FragmentDecision {
    /// True: the rows follow. False: pushed back, the stream ends here and
    /// the worker runs the fragment over the raw chunks itself.
    #[prost(bool, tag = "1")]
    pub offload: bool,
    /// Why, in words (for `EXPLAIN ANALYZE` and the log).
    #[prost(string, tag = "2")]
    pub reason: String,
    /// The row groups of each requested file, as the node holds them.
    #[prost(uint32, repeated, tag = "3")]
    pub row_groups: Vec<u32>,
    /// Rows the fragment reads, and those it is estimated to keep (from
    /// the node's sketches of the data).
    #[prost(uint64, tag = "4")]
    pub input_rows: u64,
    #[prost(double, tag = "5")]
    pub estimated_rows: f64,
    /// What the node's cost models predicted for each path (`auto` with
    /// calibrated models only).
    #[prost(message, optional, tag = "6")]
    pub predicted: Option<FragmentCosts>,
    /// Fragments running on the node when it decided, this one excluded
    /// (they share its threads).
    #[prost(uint32, tag = "7")]
    pub load: u32,
}

/// The times of a fragment's parts, in nanoseconds, and its bytes:
/// predicted by the node's cost models (a decision) or measured by the
/// node (the last mark). Offloaded: the node runs it (`execution`: reading
/// its chunks, filtering, projecting), encodes the rows kept
/// (`serialization`) and sends them (`network`). Pushed back: the raw
/// columns cross the link (`push_back_network`) and the worker runs it on
/// one of its threads (`push_back_execution`); predicted only.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct FragmentCosts {
    #[prost(uint64, tag = "1")]
    pub execution_nanos: u64,
    #[prost(uint64, tag = "2")]
    pub serialization_nanos: u64,
    #[prost(uint64, tag = "3")]
    pub network_nanos: u64,
    #[prost(uint64, tag = "4")]
    pub push_back_network_nanos: u64,
    #[prost(uint64, tag = "5")]
    pub push_back_execution_nanos: u64,
    /// Bytes of the rows kept, encoded; and of the raw columns' chunks.
    #[prost(uint64, tag = "6")]
    pub output_bytes: u64,
    #[prost(uint64, tag = "7")]
    pub input_bytes: u64,
}

impl FragmentCosts {
    /// The offloaded path's time, end to end.
    pub fn offload_nanos(&self) -> u64 {
        self.execution_nanos
            .saturating_add(self.serialization_nanos)
            .saturating_add(self.network_nanos)
    }

    /// The pushed-back path's time, end to end.
    pub fn push_back_nanos(&self) -> u64 {
        self.push_back_network_nanos
            .saturating_add(self.push_back_execution_nanos)
    }
}

/// A mark in an offloaded fragment's answer (`app_metadata` of a message
/// without payload): the rows of row group `row_group` of file `file` (an
/// index into the request's files) were all sent before it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FragmentMark {
    #[prost(uint32, tag = "1")]
    pub file: u32,
    #[prost(uint32, tag = "2")]
    pub row_group: u32,
    /// Rows the row group gave (with `end`: every row group together).
    #[prost(uint64, tag = "3")]
    pub rows: u64,
    /// The last mark: every row group of every file was sent.
    #[prost(bool, tag = "4")]
    pub end: bool,
    /// With `end`: the node's time on the fragment, from the request to
    /// the last row, in nanoseconds.
    #[prost(uint64, tag = "5")]
    pub execution_nanos: u64,
    /// With `end`: that time's parts as measured (execution,
    /// serialization, network: the time spent waiting to send).
    #[prost(message, optional, tag = "6")]
    pub measured: Option<FragmentCosts>,
}

/// A query running on a worker, as of the heartbeat.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RunningQuery {
    #[prost(uint64, tag = "1")]
    pub query_id: u64,
    #[prost(uint32, tag = "2")]
    pub pipelines_finished: u32,
    #[prost(uint32, tag = "3")]
    pub pipelines_total: u32,
    #[prost(uint64, tag = "4")]
    pub rows_running: u64,
    #[prost(message, repeated, tag = "5")]
    pub pipelines: Vec<PipelineReport>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PipelineReport {
    #[prost(uint32, tag = "1")]
    pub id: u32,
    /// The breaker that ends the pipeline, as `EXPLAIN PIPELINES` names it.
    #[prost(string, tag = "2")]
    pub breaker: String,
    /// `waiting`, `running` or `finished`.
    #[prost(string, tag = "3")]
    pub status: String,
    /// Of `output_bytes`, those spilled to disk.
    #[prost(uint64, tag = "9")]
    pub spilled_bytes: u64,
    #[prost(uint64, tag = "4")]
    pub output_rows: u64,
    #[prost(uint64, tag = "5")]
    pub output_bytes: u64,
    #[prost(uint64, tag = "6")]
    pub elapsed_ms: u64,
    /// Pipelines whose outputs this one reads (Definition 5's edges).
    #[prost(uint32, repeated, tag = "7")]
    pub inputs: Vec<u32>,
    /// The pipeline group it runs in (`batch.n`); empty outside one.
    #[prost(string, tag = "8")]
    pub group: String,
}

/// The descriptor command of a state cache `DoPut`: where the state goes and
/// how long it stays. The stream's messages follow `crate::state_cache`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StatePut {
    #[prost(string, tag = "1")]
    pub key: String,
    /// Time to live in milliseconds; 0 = the memory node's default.
    /// Ignored for durable entries, which never expire.
    #[prost(uint64, tag = "2")]
    pub ttl_ms: u64,
    /// Delete the entry once a get has streamed it completely.
    #[prost(bool, tag = "3")]
    pub read_once: bool,
    /// Write the entry to disk (fsync, atomic rename) and keep it until it
    /// is deleted: suspended queries must survive restarts.
    #[prost(bool, tag = "4")]
    pub durable: bool,
    /// Messages in the stream, this first one included. A client that goes
    /// away can look like a stream that simply ended; a stream that ends
    /// short of this count stores nothing.
    #[prost(uint64, tag = "5")]
    pub messages: u64,
}

/// A state cache key: the `DoGet` ticket, and the body of
/// [`action::STATE_DELETE`] (a prefix of keys for
/// [`action::STATE_DELETE_PREFIX`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct StateKey {
    #[prost(string, tag = "1")]
    pub key: String,
}

/// The `DoPut` reply (one `PutResult`'s `app_metadata`): what the memory
/// node now holds for the key.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StateStored {
    /// Bytes of every message's metadata and body.
    #[prost(uint64, tag = "1")]
    pub bytes: u64,
    /// Messages stored, the header included.
    #[prost(uint64, tag = "2")]
    pub chunks: u64,
}

/// The first message of a state stream (its `app_metadata`): the outputs,
/// in order. The frames follow, one message each.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StateHeader {
    #[prost(message, repeated, tag = "1")]
    pub outputs: Vec<StateOutput>,
    /// Frame messages that follow: a stream that ends short is refused.
    #[prost(uint64, tag = "2")]
    pub frames: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StateOutput {
    #[prost(uint64, tag = "1")]
    pub pipeline: u64,
    /// The output's schema as an Arrow IPC stream with no batches.
    #[prost(bytes = "bytes", tag = "2")]
    pub schema: bytes::Bytes,
    #[prost(uint32, tag = "3")]
    pub partitions: u32,
}

/// Where one frame belongs (its message's `app_metadata`; the frame's bytes
/// are the message's `data_body`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct StateFrame {
    /// Index into [`StateHeader::outputs`].
    #[prost(uint32, tag = "1")]
    pub output: u32,
    #[prost(uint32, tag = "2")]
    pub partition: u32,
    /// CRC-32 of the frame's bytes, as extracted.
    #[prost(uint32, tag = "3")]
    pub checksum: u32,
    #[prost(uint64, tag = "4")]
    pub rows: u64,
}

/// A worker's latest pipeline groups ([`action::PIPELINE_GROUPS`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PipelineGroups {
    #[prost(message, repeated, tag = "1")]
    pub groups: Vec<PipelineGroupReport>,
}

/// One pipeline group: who is in it, what it shares, what its fetches did.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PipelineGroupReport {
    /// `batch.n`.
    #[prost(string, tag = "1")]
    pub group: String,
    /// `query.Pn` of each member pipeline.
    #[prost(string, tag = "2")]
    pub members: String,
    /// `table.column` read by two or more members.
    #[prost(string, tag = "3")]
    pub shared: String,
    /// Bytes of the columns the members read, as statistics give them.
    #[prost(uint64, tag = "4")]
    pub column_bytes: u64,
    #[prost(uint64, tag = "5")]
    pub chunks_fetched: u64,
    #[prost(uint64, tag = "6")]
    pub bytes_fetched: u64,
    #[prost(uint64, tag = "7")]
    pub chunks_shared: u64,
    #[prost(uint64, tag = "8")]
    pub wait_us: u64,
    /// The most bytes the group's cache held at once.
    #[prost(uint64, tag = "9")]
    pub held_max_bytes: u64,
}

/// A worker's buffer pool ([`action::BUFFER_STATS`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct BufferStats {
    /// The pool's budget in bytes (0: the worker keeps no pool).
    #[prost(uint64, tag = "1")]
    pub budget: u64,
    #[prost(uint64, tag = "2")]
    pub bytes: u64,
    #[prost(message, repeated, tag = "3")]
    pub tables: Vec<BufferTable>,
}

/// What a worker's pool holds of one table, and how its reads went.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BufferTable {
    /// The table's location (its files' shared directory).
    #[prost(string, tag = "1")]
    pub location: String,
    #[prost(uint64, tag = "2")]
    pub blocks: u64,
    #[prost(uint64, tag = "3")]
    pub bytes: u64,
    #[prost(uint64, tag = "4")]
    pub hits: u64,
    #[prost(uint64, tag = "5")]
    pub misses: u64,
    #[prost(uint64, tag = "6")]
    pub evictions: u64,
    /// The hash partition, for a partitioned table's counters.
    #[prost(uint32, optional, tag = "7")]
    pub partition: Option<u32>,
    /// Blocks sent to new owners / received from old ones (matching).
    #[prost(uint64, tag = "8")]
    pub sent: u64,
    #[prost(uint64, tag = "9")]
    pub received: u64,
    /// The worker owns the partition (or the table is not partitioned).
    #[prost(bool, tag = "10")]
    pub owned: bool,
}

impl BufferTable {
    /// A pool's counters of one scope, for the wire.
    pub fn new(scope: &CacheScope, cache: &TableCache) -> Self {
        BufferTable {
            location: scope.location.to_string(),
            partition: scope.partition,
            blocks: cache.blocks,
            bytes: cache.bytes,
            hits: cache.hits,
            misses: cache.misses,
            evictions: cache.evictions,
            sent: cache.sent,
            received: cache.received,
            owned: cache.owned,
        }
    }

    /// The scope and counters this names, as the pool has them.
    pub fn to_pool(&self) -> (CacheScope, TableCache) {
        let scope = CacheScope {
            location: self.location.as_str().into(),
            partition: self.partition,
        };
        let cache = TableCache {
            blocks: self.blocks,
            bytes: self.bytes,
            hits: self.hits,
            misses: self.misses,
            evictions: self.evictions,
            sent: self.sent,
            received: self.received,
            owned: self.owned,
        };
        (scope, cache)
    }
}

/// Worker: send the buffered blocks of partitions it no longer owns to
/// their new owners ([`action::BUFFER_SHIP`]); answered with
/// [`BlocksShipped`] once every target took them or failed.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ShipBlocks {
    #[prost(message, repeated, tag = "1")]
    pub targets: Vec<ShipTarget>,
    /// At most this many bytes of blocks per target, most important first.
    #[prost(uint64, tag = "2")]
    pub bytes_max: u64,
    /// A pause after each block sent, in milliseconds: 0 but for a test
    /// hook (`skiff.test_matching_pause_ms`).
    #[prost(uint64, tag = "3")]
    pub pause_ms: u64,
}

/// One new owner and the partitions it takes over.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ShipTarget {
    /// The new owner's Flight address.
    #[prost(string, tag = "1")]
    pub addr: String,
    #[prost(message, repeated, tag = "2")]
    pub tables: Vec<ShipTable>,
}

/// Partitions of one table, by location: those that move to a target
/// (buffer matching), or those a worker owns (a heartbeat's reply).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ShipTable {
    #[prost(string, tag = "1")]
    pub location: String,
    #[prost(uint32, repeated, tag = "2")]
    pub partitions: Vec<u32>,
}

/// What a [`ShipBlocks`] did, per target in its order.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BlocksShipped {
    #[prost(message, repeated, tag = "1")]
    pub targets: Vec<BlocksStored>,
}

/// The descriptor of a `DoPut` of blocks: how many follow.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BlocksPut {
    #[prost(uint64, tag = "1")]
    pub blocks: u64,
}

/// A receiver's answer to a `DoPut` of blocks.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BlocksStored {
    /// Blocks sent (by the sender) / kept, refused (a bad checksum or
    /// frame), or not kept (already held, no room).
    #[prost(uint64, tag = "1")]
    pub sent: u64,
    #[prost(uint64, tag = "2")]
    pub kept: u64,
    #[prost(uint64, tag = "3")]
    pub refused: u64,
    #[prost(uint64, tag = "4")]
    pub bytes: u64,
    /// Why the transfer failed, when it did (the blocks are read from
    /// storage later; nothing waits on them).
    #[prost(string, tag = "5")]
    pub error: String,
}

/// One block on the wire: what names it and its frame's checksum. The
/// frame (`data_body`) is an Arrow IPC stream of one one-column batch.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BlockHeader {
    #[prost(string, tag = "1")]
    pub table: String,
    #[prost(string, tag = "2")]
    pub path: String,
    #[prost(uint64, tag = "3")]
    pub size: u64,
    #[prost(int64, tag = "4")]
    pub modified: i64,
    #[prost(string, optional, tag = "5")]
    pub e_tag: Option<String>,
    #[prost(uint32, optional, tag = "6")]
    pub partition: Option<u32>,
    #[prost(uint64, tag = "7")]
    pub row_group: u64,
    #[prost(uint64, tag = "8")]
    pub column: u64,
    /// CRC-32 of the frame.
    #[prost(uint32, tag = "9")]
    pub checksum: u32,
    /// A memory node's chunk: the row of the row group it starts at (a
    /// block, a whole column of a row group, starts at 0).
    #[prost(uint64, tag = "10")]
    pub first_row: u64,
}

/// The bytes a worker's pool freed ([`action::BUFFER_CLEAR`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct BufferCleared {
    #[prost(uint64, tag = "1")]
    pub bytes: u64,
}

/// The state cache's counters ([`action::STATE_STATS`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct CacheStats {
    /// Entries visible now.
    #[prost(uint64, tag = "1")]
    pub entries: u64,
    #[prost(uint64, tag = "2")]
    pub memory_bytes: u64,
    #[prost(uint64, tag = "3")]
    pub disk_bytes: u64,
    /// Completed puts since start.
    #[prost(uint64, tag = "4")]
    pub puts: u64,
    /// Gets served completely since start.
    #[prost(uint64, tag = "5")]
    pub gets: u64,
    /// Entries removed because their time to live ran out.
    #[prost(uint64, tag = "6")]
    pub expired: u64,
    /// Entries moved from memory to disk to make room.
    #[prost(uint64, tag = "7")]
    pub spilled: u64,
    /// The memory limit in bytes (0 = none).
    #[prost(uint64, tag = "8")]
    pub capacity: u64,
}

/// A Flight message that carries only `metadata`: its IPC header is a
/// message of type NONE, which Flight decoders pass through as "no
/// payload" (an empty header would not decode).
pub fn metadata_message(metadata: bytes::Bytes) -> arrow_flight::FlightData {
    use arrow::ipc::{MessageBuilder, MessageHeader, MetadataVersion};
    let mut builder = flatbuffers::FlatBufferBuilder::new();
    let mut message = MessageBuilder::new(&mut builder);
    message.add_version(MetadataVersion::V5);
    message.add_header_type(MessageHeader::NONE);
    message.add_bodyLength(0);
    let message = message.finish();
    builder.finish(message, None);
    arrow_flight::FlightData {
        data_header: builder.finished_data().to_vec().into(),
        app_metadata: metadata,
        ..arrow_flight::FlightData::default()
    }
}
