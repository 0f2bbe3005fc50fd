//! Opening an engine from the command-line session arguments.

use std::path::PathBuf;

use datafusion::error::Result;
use skiff_engine::{Engine, EngineConfig};

use crate::cli::SessionArgs;

/// The embedded default data directory: `$SKIFF_HOME/data`, else `~/.skiff/data`.
pub fn default_data_dir() -> PathBuf {
    let home = std::env::var_os("SKIFF_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".skiff")))
        .unwrap_or_else(|| PathBuf::from(".skiff"));
    home.join("data")
}

/// The data directory the session uses.
pub fn data_dir(args: &SessionArgs) -> PathBuf {
    args.data.clone().unwrap_or_else(default_data_dir)
}

/// An engine with every table of the data directory registered. A missing
/// default directory is fine (an empty session); a missing `--data` is not.
pub async fn open(args: &SessionArgs) -> Result<(Engine, PathBuf)> {
    let config = EngineConfig {
        target_partitions: args.partitions,
        memory_limit: args.memory_limit,
        spill_dir: None,
    };
    let engine = Engine::new(&config)?;
    let dir = data_dir(args);
    if args.data.is_none() && !dir.exists() {
        return Ok((engine, dir));
    }
    engine.register_data_dir(&dir).await?;
    Ok((engine, dir))
}
