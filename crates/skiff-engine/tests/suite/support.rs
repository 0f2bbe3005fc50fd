//! Support for this suite: an engine over a test dataset. Datasets, query
//! files and golden answers come from `skiff-testkit`.

use std::path::Path;

use skiff_engine::{Engine, EngineConfig};

/// An engine over `dir` with fixed parallelism, so plans are stable.
pub async fn engine(dir: Option<&Path>, partitions: usize) -> Engine {
    let config = EngineConfig {
        target_partitions: Some(partitions),
        ..EngineConfig::default()
    };
    let engine = Engine::new(&config).expect("engine");
    if let Some(dir) = dir {
        engine.register_data_dir(dir).await.expect("register data");
    }
    engine
}
