//! The coordinator's handle and the state behind it, which every action
//! reads: the engine and catalog, the partition map, membership, the
//! queries, the connections to workers, the memory nodes' tables, the
//! batcher, and what holds workers (`claims`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize};

use arrow::datatypes::Schema;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use skiff_engine::Engine;
use skiff_node::error::ServerError;
use skiff_node::scan_progress::ScanTally;
use tracing::warn;

use crate::auth::Users;
use crate::batcher::Batcher;
use crate::catalog_store::CatalogStore;
use crate::claims::{DistributedRuns, Removals, WorkerLauncher};
use crate::config::Limits;
use crate::cost::Bandwidth;
use crate::matching::Matching;
use crate::membership::Membership;
use crate::memory_tables::MemoryTables;
use crate::partitions::Partitions;
use crate::pg_catalog::CatalogSql;
use crate::queries::QueryRegistry;
use crate::workers::WorkerClients;

/// The coordinator role. Cheap to clone.
#[derive(Clone)]
pub struct Coordinator {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) engine: Engine,
    pub(crate) catalog: CatalogStore,
    /// Who owns each partition of the hash-partitioned tables.
    pub(crate) partitions: Partitions,
    /// Distributed queries running, by the workers they may use.
    pub(crate) distributed_runs: DistributedRuns,
    /// Workers being removed (`skiff.remove_worker`).
    pub(crate) removals: Removals,
    /// Whether resizes send buffered blocks to new owners (`matching`).
    pub(crate) matching: Arc<Matching>,
    /// Starts local workers (`skiff.add_workers`), under `skiff serve`.
    pub(crate) launcher: std::sync::OnceLock<Arc<dyn WorkerLauncher>>,
    pub(crate) membership: Arc<Membership>,
    pub(crate) queries: QueryRegistry,
    pub(crate) limits: Limits,
    pub(crate) users: Users,
    /// Whether the test hooks are accepted (`--fault-injection`).
    pub(crate) fault_injection: bool,
    pub(crate) open_sessions: Arc<AtomicUsize>,
    pub(crate) next_session: AtomicU64,
    /// Connections to the workers.
    pub(crate) workers: Arc<WorkerClients>,
    /// Measured state hand-off bandwidth, for the migration decision.
    pub(crate) bandwidth: Bandwidth,
    /// Rewrites of the catalog queries PostgreSQL tools send.
    pub(crate) catalog_sql: CatalogSql,
    /// The scans of distributed queries' tasks the coordinator runs itself.
    pub(crate) scans: Arc<ScanTally>,
    /// Names this run's queries in scan counts (ids start again at 1 after
    /// a restart): its start, in nanoseconds since the epoch.
    pub(crate) scan_run: u64,
    /// The connections of queries that commit stage checkpoints, to the
    /// workers' task services (the library keeps its own for the others)
    /// and to the store.
    pub(crate) checkpoint_connections: skiff_node::checkpoints::Connections,
    /// Which memory node holds which file of the tables loaded into memory.
    pub(crate) memory_tables: MemoryTables,
    /// Queries waiting for their batch to close (`skiff.batch_window_ms`).
    pub(crate) batcher: Arc<Batcher>,
}

impl Inner {
    /// Fail the queries of a node that is gone.
    pub(crate) fn node_lost(&self, id: u64) {
        let reason =
            ServerError::worker_gone(format!("worker {id} was lost while running the query"));
        self.queries.worker_lost(id, &reason);
        for (table, files) in self.memory_tables.node_lost(id) {
            warn!(
                node = id,
                table, files, "memory node lost: its files of the table are read from storage"
            );
        }
        crate::metrics::node_lost();
    }
}

/// A started statement before tracking.
pub(crate) struct Output {
    pub(crate) stream: SendableRecordBatchStream,
    pub(crate) command: Option<String>,
    pub(crate) worker: Option<(u64, String)>,
}

impl Output {
    pub(crate) fn rows(stream: SendableRecordBatchStream) -> Self {
        Self {
            stream,
            command: None,
            worker: None,
        }
    }

    pub(crate) fn command(tag: &str) -> Self {
        let schema = Arc::new(Schema::empty());
        Self {
            stream: Box::pin(RecordBatchStreamAdapter::new(
                schema,
                futures::stream::empty(),
            )),
            command: Some(tag.to_string()),
            worker: None,
        }
    }
}
