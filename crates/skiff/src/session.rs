//! Opening an engine from the command-line session arguments.

use std::path::PathBuf;

use datafusion::error::Result;
use skiff_engine::{Engine, EngineConfig};
use skiff_tables::DataLocation;

use crate::args::SessionArgs;

/// Skiff's home: `$SKIFF_HOME`, else `~/.skiff`.
pub fn skiff_home() -> PathBuf {
    std::env::var_os("SKIFF_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".skiff")))
        .unwrap_or_else(|| PathBuf::from(".skiff"))
}

/// The embedded default data directory: `$SKIFF_HOME/data`, else `~/.skiff/data`.
pub fn default_data_dir() -> PathBuf {
    skiff_home().join("data")
}

/// The data directory the session uses.
pub fn data_dir(args: &SessionArgs) -> PathBuf {
    args.data().unwrap_or_else(default_data_dir)
}

/// The data directory the session uses: `--data s3://bucket/prefix` is an
/// object store (credentials from the `AWS_*` environment).
pub fn data_location(args: &SessionArgs) -> Result<DataLocation> {
    Ok(DataLocation::parse(data_dir(args).as_os_str())?)
}

/// An engine with every table of the data directory registered. A missing
/// default directory is fine (an empty session); a missing `--data` is not.
pub async fn open(args: &SessionArgs) -> Result<(Engine, PathBuf)> {
    let config = EngineConfig {
        target_partitions: args.partitions(),
        memory_limit: args.memory_limit(),
        spill_dir: None,
        cache_memory: args.cache_memory(),
    };
    let engine = Engine::new(&config)?;
    let dir = data_dir(args);
    if args.data().is_none() && !dir.exists() {
        return Ok((engine, dir));
    }
    engine.register_data(&data_location(args)?).await?;
    Ok((engine, dir))
}
