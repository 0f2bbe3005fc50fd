//! Skiff's session settings: the `skiff` namespace of DataFusion's config,
//! so that `SET skiff.<name> = <value>` works in SQL.

use datafusion::common::config::ConfigExtension;
use datafusion::common::extensions_options;

extensions_options! {
    /// Settings of Skiff's pipeline executor.
    pub struct SkiffOptions {
        /// Bytes of materialized pipeline outputs one query keeps in memory;
        /// outputs beyond it are written to spill files. Unlimited when unset
        /// (the memory pool limit still applies).
        pub store_memory_max: Option<usize>, default = None
        /// Test trigger: migrate the query to another worker right after
        /// this many pipelines finished (once; the moved query runs free).
        pub migrate_after_pipelines: Option<usize>, default = None
        /// Test trigger: suspend the query after this many pipelines; it
        /// waits for `skiff.resume(id)`.
        pub suspend_after_pipelines: Option<usize>, default = None
        /// Test trigger: the worker process dies right after this many
        /// pipelines finished (queries with snapshots resume elsewhere).
        pub kill_worker_after_pipelines: Option<usize>, default = None
        /// Snapshot the query's state to the state cache every this many
        /// finished pipelines; off when unset.
        pub snapshot_every_pipelines: Option<usize>, default = None
        /// Snapshot the query's state at the first pipeline boundary after
        /// every this many seconds of running; off when unset.
        pub snapshot_every_seconds: Option<f64>, default = None
        /// Test trigger: hold the query after this many pipelines until an
        /// operation (migrate, suspend, drain) moves it; so that tests can
        /// act on a query that surely runs on its worker.
        pub test_hold_after_pipelines: Option<usize>, default = None
        /// Test trigger: flip one byte of the state after extraction, so
        /// that the target must detect it and the query start over.
        pub test_corrupt_state: bool, default = false
    }
}

impl ConfigExtension for SkiffOptions {
    const PREFIX: &'static str = "skiff";
}
