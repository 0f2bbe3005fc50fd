//! The roles of a Skiff cluster, each a process (or all in one, for tests):
//!
//! - the **coordinator** ([`coordinator`], [`server`]): front doors
//!   ([`pg`] for the PostgreSQL wire protocol, which also streams `COPY ...
//!   FROM STDIN`; [`flight_sql`] for Arrow Flight SQL), users and their
//!   roles ([`auth`]), the persistent catalog (managed tables and `COPY`
//!   loads themselves are `skiff-tables`'),
//!   PostgreSQL's `pg_catalog` for client tools, planning, membership, the
//!   `skiff` system tables and admin functions, shipping plans to workers,
//!   relaying a query's result across migrations, suspensions and restarts,
//!   running a query across several workers on datafusion-distributed
//!   (`skiff.distribute`) with scans of partitioned tables on their
//!   partitions' owners and their progress counted on every node
//!   (`scan_progress`), the partition map, workers joining and leaving
//!   online, and buffer matching (old owners send moved partitions' blocks
//!   to new owners), tables loaded into memory nodes and their routes,
//!   the query batcher (`skiff.batch_window_ms`), and the query planner
//!   that cuts fragments a memory node may run (`skiff.offload`), and the
//!   web console that shows all of it live and acts on it (`console`,
//!   `--http-addr`), and the pods it watches (`--pod`, read-only);
//! - the **worker** ([`worker`]): runs shipped plans on the pipeline engine
//!   (scans through its buffer pool) and hands queries off at pipeline
//!   boundaries, serves the tasks of distributed queries, with the session
//!   settings their query carried ([`carried`]), sends and keeps matched
//!   blocks, reads held tables from the memory nodes, offers them
//!   fragments, and groups the pipelines of each batch it is sent;
//! - the **memory node** ([`memnode`]): the state cache, and tables'
//!   columns held as chunks (with min/max per zone, so that a scan is sent
//!   only the rows its predicate may keep, and sketches of each column)
//!   behind an optionally emulated link, and the fragments it runs in a
//!   worker's place or pushes back.
//!
//! Internal traffic uses `skiff-flight`. This crate never splits or runs
//! pipelines itself beyond asking `skiff-engine` to; it must not reach into
//! the engine's store or executor internals.

pub mod auth;
mod carried;
pub mod config;
mod console;
pub mod coordinator;
pub mod error;
pub mod flight_sql;
pub mod memnode;
pub mod metrics;
pub mod node;
pub mod pg;
mod scan_progress;
pub mod server;
pub mod worker;

pub use auth::Users;
pub use config::{CoordinatorConfig, Limits, TlsFiles};
pub use coordinator::{
    ClientSession, Coordinator, PreparedStatement, StatementResult, WorkerLauncher,
};
pub use error::{Result, ServerError, SqlState};
pub use memnode::{MemnodeConfig, run_memnode};
pub use server::{Listening, serve_coordinator};
pub use worker::{WorkerConfig, run_worker};
