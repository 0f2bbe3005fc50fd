//! Skiff's query engine: SQL planned by DataFusion, run as a graph of
//! pipelines whose outputs are materialized in an intermediate store.
//!
//! Owns: splitting physical plans into pipelines ([`pipeline`]), running them
//! ([`executor`], including pausing them at boundaries), their materialized
//! outputs and the query state ([`store`]), the leaf that reads them in
//! later pipelines, here or after a migration ([`materialized`]), batches
//! ready for IPC
//! ([`batch`]), mid-pipeline cut points ([`morsel`]), the process's buffer
//! pool of decoded blocks that Parquet scans read through, with the remote
//! tier of memory nodes and pipeline groups' shared chunk caches
//! ([`buffer`]), grouping a batch's pipelines by the columns they share
//! ([`grouping`]), the plan node that offers a fragment to the memory node
//! holding its data ([`offload`]), and the embedded session
//! ([`Engine`]), which registers a data directory's tables ([`catalog`]) and
//! hands managed-table DDL and `COPY` to `skiff-tables`. Knows nothing of
//! networks, workers or clients: callers on the coordinator or a worker drive
//! it through [`Engine`] and [`QueryExecution`].

pub mod batch;
pub mod buffer;
pub mod catalog;
pub mod engine;
pub mod executor;
pub mod explain;
pub mod grouping;
pub mod materialized;
pub mod migrated;
pub mod morsel;
pub mod offload;
pub mod options;
pub mod pipeline;
pub mod split;
pub mod statement;
pub mod store;
#[cfg(test)]
mod test_rows;

pub use engine::{Engine, EngineConfig, QueryOutput, memory_pool};
pub use executor::{Pause, PauseMode, Progress, QueryExecution};
pub use materialized::MaterializedExec;
pub use migrated::{MigratedState, MigratedTable};
pub use options::SkiffOptions;
pub use pipeline::{Breaker, Pipeline, PipelineGraph, PipelineId};
pub use split::split;
pub use store::{IntermediateStore, QueryState};
