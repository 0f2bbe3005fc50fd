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
    }
}

impl ConfigExtension for SkiffOptions {
    const PREFIX: &'static str = "skiff";
}
