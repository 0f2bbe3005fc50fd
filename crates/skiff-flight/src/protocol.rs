//! Messages between roles. Each is a protobuf message derived with prost
//! (no build script), carried in a Flight ticket or action body.
//!
//! Coordinator → worker: a [`RunQuery`] ticket (`DoGet`) whose stream is the
//! query's result as Arrow IPC; [`CancelQuery`] (`DoAction`).
//! Worker or memory node → coordinator: [`Register`] once, then a
//! [`Heartbeat`] every [`HEARTBEAT_INTERVAL`].

use std::time::Duration;

use std::collections::HashMap;

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
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HeartbeatReply {
    /// False when the coordinator does not know the node (it restarted, or
    /// declared the node dead): the node registers again.
    #[prost(bool, tag = "1")]
    pub known: bool,
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
    #[prost(uint64, tag = "4")]
    pub output_rows: u64,
    #[prost(uint64, tag = "5")]
    pub output_bytes: u64,
    #[prost(uint64, tag = "6")]
    pub elapsed_ms: u64,
}
