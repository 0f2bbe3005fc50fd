//! The buffer pool: decoded column chunks (*blocks*) of tables' Parquet
//! files, kept per process so that a warm scan skips I/O and decoding
//! (VectorH's per-node buffer pool, `../shared/papers/elastic-scaling-vectorh.txt` §6).
//!
//! [`BufferPool`] holds the blocks within a byte budget, counted in the
//! process's DataFusion memory pool and given back under memory pressure;
//! [`RemoteTier`] is what memory nodes hold of tables, between the pool
//! and storage; [`BufferedSource`] is the Parquet scan that reads through
//! both;
//! [`read_through`] puts it under a plan's scans where the plan runs (the
//! pipeline executor, a worker's distributed tasks), so plans on the wire
//! stay plain DataFusion scans.

mod group;
mod pool;
mod remote;
mod scan;
pub mod system;

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::config::ConfigOptions;
use datafusion::datasource::physical_plan::{FileScanConfig, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;

pub use group::{GroupCache, GroupCounters, GroupStats, MemberId};
pub use pool::{
    Block, BlockKey, BufferPool, CONSUMER, CacheScope, FileVersion, OTHER_CHANCES, OWNED_CHANCES,
    Owned, TableCache,
};
pub use remote::{ChunkFetch, ChunkSource, Fetched, Prune, Pruned, RemoteTier, every_row};
pub use scan::{BufferedSource, table_location};

use crate::options::SkiffOptions;

/// The pool's default share of the machine's memory (of all the
/// processes of one machine together; `skiff serve` divides it).
pub const DEFAULT_SHARE_OF_MEMORY: f64 = 0.25;
/// Its default share of a `--memory-limit`, when one is set.
pub const DEFAULT_SHARE_OF_LIMIT: f64 = 0.5;
/// Assumed when the machine's memory cannot be read.
const MACHINE_MEMORY_UNKNOWN: usize = 4 << 30;

/// The budget a pool gets when none is given: a share of the machine's
/// memory split over `processes`, and at most a share of `memory_limit`.
pub fn default_budget(memory_limit: Option<usize>, processes: usize) -> usize {
    let machine = machine_memory().unwrap_or(MACHINE_MEMORY_UNKNOWN);
    let share = (machine as f64 * DEFAULT_SHARE_OF_MEMORY) as usize / processes.max(1);
    match memory_limit {
        Some(limit) => share.min((limit as f64 * DEFAULT_SHARE_OF_LIMIT) as usize),
        None => share,
    }
}

/// Total memory of this machine, from `/proc/meminfo`.
pub fn machine_memory() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Where a process's scans find blocks before storage: its pool (unless
/// the session turned it off) and the memory nodes.
#[derive(Clone, Debug, Default)]
pub struct Tiers {
    pub pool: Option<Arc<BufferPool>>,
    pub remote: Option<RemoteTier>,
    /// Row groups fetched ahead from the remote tier (`skiff.prefetch_depth`).
    pub prefetch: usize,
    /// The pipeline group whose cache the plan's scans read the remote
    /// tier through, when the plan is a grouped pipeline.
    pub group: Option<GroupScans>,
    /// Scans send their predicates to the remote tier, which leaves out
    /// rows that its chunks' min/max rule out (`skiff.chunk_pruning`, and
    /// no cut points: a scan so pruned emits rows that depend on where it
    /// reads, which a morsel gate's positions must not).
    pub prune_chunks: bool,
}

/// A grouped pipeline's scans in its group's cache.
#[derive(Clone, Debug)]
pub struct GroupScans {
    /// The group's name (`batch.group`), shown on its scans in `EXPLAIN`.
    pub label: Arc<str>,
    pub cache: Arc<GroupCache>,
    /// The member each Parquet scan of the pipeline's plan is registered
    /// as (in [`parquet_scans`] order), `None` for a scan outside the group.
    pub members: Vec<Option<MemberId>>,
}

impl Tiers {
    /// The tiers `ctx`'s session carries.
    pub fn of(ctx: &TaskContext) -> Self {
        let config = ctx.session_config();
        Self {
            pool: config
                .get_extension::<BufferPool>()
                .filter(|_| enabled(config.options())),
            remote: config
                .get_extension::<RemoteTier>()
                .map(|r| r.as_ref().clone()),
            prefetch: prefetch_depth(config.options()),
            group: None,
            prune_chunks: prune_chunks(config.options()),
        }
    }
}

/// Most row groups a scan fetches ahead, whatever a session sets: each
/// holds a row group's columns in the worker's memory until its turn.
pub const PREFETCH_DEPTH_MAX: usize = 16;

/// Row groups scans fetch ahead from memory nodes (`skiff.prefetch_depth`,
/// at most [`PREFETCH_DEPTH_MAX`]).
pub fn prefetch_depth(options: &ConfigOptions) -> usize {
    let depth = options.extensions.get::<SkiffOptions>().map_or_else(
        || SkiffOptions::default().prefetch_depth,
        |o| o.prefetch_depth,
    );
    depth.min(PREFETCH_DEPTH_MAX)
}

/// Whether scans send their predicates to the remote tier
/// (`skiff.chunk_pruning`, and no cut points: see [`Tiers::prune_chunks`]).
pub fn prune_chunks(options: &ConfigOptions) -> bool {
    options
        .extensions
        .get::<SkiffOptions>()
        .is_none_or(|o| o.chunk_pruning && !o.mid_pipeline_cuts)
}

/// `plan` with each Parquet scan that [`BufferedSource`] can read wrapped
/// in it, reading through the tiers `ctx`'s session carries; `plan` as it
/// is when the session has neither a pool (or `skiff.buffer_pool` is off)
/// nor memory nodes holding the scan's table.
pub fn read_through(
    plan: Arc<dyn ExecutionPlan>,
    ctx: &TaskContext,
) -> Result<Arc<dyn ExecutionPlan>> {
    wrap_scans(plan, &Tiers::of(ctx), ctx)
}

/// Whether the session reads through the pool (`skiff.buffer_pool`).
pub fn enabled(options: &ConfigOptions) -> bool {
    options
        .extensions
        .get::<SkiffOptions>()
        .is_none_or(|o| o.buffer_pool)
}

/// `plan` with each Parquet scan [`BufferedSource`] can read reading
/// through `tiers` (file metadata through `ctx`'s runtime cache).
pub fn wrap_scans(
    plan: Arc<dyn ExecutionPlan>,
    tiers: &Tiers,
    ctx: &TaskContext,
) -> Result<Arc<dyn ExecutionPlan>> {
    if tiers.pool.is_none() && tiers.remote.is_none() {
        return Ok(plan);
    }
    let metadata = ctx.runtime_env().cache_manager.get_file_metadata_cache();
    // Leaves come in the same order bottom-up as `parquet_scans` finds
    // them top-down, so the nth scan here is the grouper's nth.
    let mut nth = 0;
    let plain = Tiers {
        group: None,
        ..tiers.clone()
    };
    let plan = plan
        .transform_up(|node| {
            let Some((config, parquet)) = parquet_scan(&node) else {
                return Ok(Transformed::no(node));
            };
            let member = tiers
                .group
                .as_ref()
                .and_then(|g| Some((g, (*g.members.get(nth)?)?)));
            nth += 1;
            let grouped;
            let tiers = match member {
                // A member dropped unused (the scan is not wrapped) ends, so
                // that the group's entries stop waiting for it.
                Some((group, id)) => {
                    grouped = Tiers {
                        remote: Some(RemoteTier(group.cache.member(id))),
                        group: Some(group.clone()),
                        ..plain.clone()
                    };
                    &grouped
                }
                None => &plain,
            };
            let Some(source) = BufferedSource::wrap(parquet, config, tiers, Arc::clone(&metadata))
            else {
                return Ok(Transformed::no(node));
            };
            let mut config = config.clone();
            config.file_source = Arc::new(source);
            let wrapped: Arc<dyn ExecutionPlan> = DataSourceExec::from_data_source(config);
            Ok(Transformed::yes(wrapped))
        })
        .data()?;
    // Else some registered scan never ends and its group's entries wait
    // for it until the group's last scan is gone.
    debug_assert!(
        tiers.group.as_ref().is_none_or(|g| g.members.len() == nth),
        "the grouper saw the pipeline's scans as they are"
    );
    Ok(plan)
}

/// The Parquet file scans of `plan`, leaves left to right.
pub fn parquet_scans(plan: &Arc<dyn ExecutionPlan>) -> Vec<(FileScanConfig, ParquetSource)> {
    let mut scans = Vec::new();
    let _ = plan.apply(|node| {
        if let Some((config, parquet)) = parquet_scan(node) {
            scans.push((config.clone(), parquet.clone()));
        }
        Ok(TreeNodeRecursion::Continue)
    });
    scans
}

fn parquet_scan(node: &Arc<dyn ExecutionPlan>) -> Option<(&FileScanConfig, &ParquetSource)> {
    let config = node
        .downcast_ref::<DataSourceExec>()?
        .data_source()
        .downcast_ref::<FileScanConfig>()?;
    let parquet = config.file_source().downcast_ref::<ParquetSource>()?;
    Some((config, parquet))
}
