//! Joins of co-located tables without a shuffle, kept sound (issue 16).
//!
//! A scan of a hash-partitioned table declares its partitioning to
//! DataFusion (`Hash(key columns, N)`, its files grouped partition by
//! partition, `scan::group_by_partition`), so a join or aggregation on the
//! key needs no repartition. But DataFusion takes any two `Hash`
//! partitionings with equal counts as co-partitioned, and its own hash
//! (`create_hashes` mod N) is not the table's xxh64 bucket: a join of a
//! declared scan with a side DataFusion repartitioned, or with a table of
//! another class, would silently miss partners. Two rules close that gap:
//!
//! - [`CoLocation`], right after `EnsureRequirements`: every operator that
//!   reads partition `i` of several inputs together (a partitioned hash,
//!   sort-merge or symmetric join; an interleaved union) is left alone only
//!   when no input's hash partitioning comes from a declared scan, or when
//!   all of them come from declared scans of one equivalence class keyed
//!   in the same order. Otherwise the inputs that come from a declared
//!   scan are repartitioned by DataFusion's hash, like the others (keeping
//!   their order; not by `EnsureRequirements` again, which would take such
//!   a repartition off as unneeded).
//! - [`CoLocatedJoinFilters`], after the last filter pushdown: a partitioned
//!   hash join's dynamic filter routes each probe row to a build partition
//!   by DataFusion's hash; over a declared probe side that routing is
//!   wrong, so those joins run without it. (Skiff's pipeline executor
//!   feeds join filters of its own, whole-table key bounds, which route
//!   nothing.)

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::joins::{
    HashJoinExec, HashJoinExecBuilder, JoinOnRef, PartitionMode, SortMergeJoinExec,
    StreamJoinPartitionMode, SymmetricHashJoinExec,
};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::union::InterleaveExec;
use datafusion::physical_plan::{
    ExecutionPlan, ExecutionPlanProperties, Partitioning, PhysicalExpr,
    replace_children_if_necessary,
};

use crate::partition::{FilePartition, file_scan, is_declared};

/// Where the rows of a hash-partitioned output were put in their
/// partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    /// DataFusion's hash: a `RepartitionExec`.
    DataFusion,
    /// A declared scan of a table of this many partitions (its class).
    Declared(u32),
    /// Anything else that calls itself hash-partitioned.
    Other,
}

/// The sources of `plan`'s hash partitioning (empty when it is not
/// hash-partitioned). An operator passes its inputs' on: all of them, which
/// over-approximates (a join's output is partitioned like one input) and
/// so only ever repartitions more.
fn sources(plan: &Arc<dyn ExecutionPlan>) -> BTreeSet<Source> {
    if !matches!(plan.output_partitioning(), Partitioning::Hash(..)) {
        return BTreeSet::new();
    }
    if plan.is::<RepartitionExec>() {
        return BTreeSet::from([Source::DataFusion]);
    }
    if let Some(scan) = file_scan(plan.as_ref()) {
        return BTreeSet::from([declared_class(scan).map_or(Source::Other, Source::Declared)]);
    }
    let found: BTreeSet<Source> = plan.children().into_iter().flat_map(sources).collect();
    if found.is_empty() {
        BTreeSet::from([Source::Other])
    } else {
        found
    }
}

/// The class of a declared scan of a partitioned table.
fn declared_class(scan: &FileScanConfig) -> Option<u32> {
    if !is_declared(scan) {
        return None;
    }
    let mut files = scan.file_groups.iter().flat_map(|g| g.iter());
    files
        .next()
        .and_then(|f| f.extension::<FilePartition>())
        .map(|tag| tag.partitions)
}

fn involves_declared(sources: &BTreeSet<Source>) -> bool {
    sources.iter().any(|s| matches!(s, Source::Declared(_)))
}

/// The join keys of an operator that reads partition `i` of its two inputs
/// together; `None` for every other operator.
fn partitioned_join_keys(plan: &Arc<dyn ExecutionPlan>) -> Option<JoinOnRef<'_>> {
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        return (*join.partition_mode() == PartitionMode::Partitioned).then(|| join.on());
    }
    if let Some(join) = plan.downcast_ref::<SortMergeJoinExec>() {
        return Some(join.on());
    }
    if let Some(join) = plan.downcast_ref::<SymmetricHashJoinExec>() {
        return (join.partition_mode() == StreamJoinPartitionMode::Partitioned).then(|| join.on());
    }
    None
}

/// The positions in `keys` of the expressions `plan` is hash-partitioned
/// on, in order; `None` when one is not a key.
fn key_positions(
    plan: &Arc<dyn ExecutionPlan>,
    keys: &[&Arc<dyn PhysicalExpr>],
) -> Option<Vec<usize>> {
    let Partitioning::Hash(exprs, _) = plan.output_partitioning() else {
        return None;
    };
    exprs
        .iter()
        .map(|e| keys.iter().position(|k| k.as_ref() == e.as_ref()))
        .collect()
}

/// Whether the inputs of `plan`, which reads partition `i` of each
/// together, may stay as they are: no declared scan is involved, or every
/// input comes from declared scans of one class keyed alike.
fn aligned(plan: &Arc<dyn ExecutionPlan>, inputs: &[BTreeSet<Source>]) -> bool {
    if !inputs.iter().any(involves_declared) {
        return true;
    }
    // One partition holds every key, whatever put it there.
    if plan
        .children()
        .iter()
        .all(|c| c.output_partitioning().partition_count() == 1)
    {
        return true;
    }
    let Some(first) = inputs.first() else {
        return true;
    };
    let one_class = first.len() == 1
        && matches!(first.first(), Some(Source::Declared(_)))
        && inputs.iter().all(|s| s == first);
    let counts: BTreeSet<usize> = plan
        .children()
        .iter()
        .map(|c| c.output_partitioning().partition_count())
        .collect();
    if !one_class || counts.len() != 1 {
        return false;
    }
    match partitioned_join_keys(plan) {
        // Partition `i` of each side must hold the same keys: both hashed
        // on the same join keys in the same order.
        Some(on) => {
            let children = plan.children();
            let (left_keys, right_keys): (Vec<_>, Vec<_>) = on.iter().map(|(l, r)| (l, r)).unzip();
            let left = children.first().and_then(|c| key_positions(c, &left_keys));
            let right = children.get(1).and_then(|c| key_positions(c, &right_keys));
            left.is_some() && left == right
        }
        // An interleaved union requires its inputs' partitionings to be
        // equal: the same columns of its output.
        None => true,
    }
}

/// Whether `plan` reads partition `i` of several inputs together.
fn co_partitions(plan: &Arc<dyn ExecutionPlan>) -> bool {
    partitioned_join_keys(plan).is_some() || plan.is::<InterleaveExec>()
}

/// See the module's doc.
#[derive(Debug, Default)]
pub struct CoLocation;

impl CoLocation {
    pub const NAME: &'static str = "SkiffCoLocation";
}

impl PhysicalOptimizerRule for CoLocation {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            if !co_partitions(&node) {
                return Ok(Transformed::no(node));
            }
            let children: Vec<Arc<dyn ExecutionPlan>> =
                node.children().into_iter().cloned().collect();
            let inputs: Vec<BTreeSet<Source>> = children.iter().map(sources).collect();
            if aligned(&node, &inputs) {
                return Ok(Transformed::no(node));
            }
            let mut rehashed = Vec::with_capacity(children.len());
            for (child, from) in children.into_iter().zip(&inputs) {
                if !involves_declared(from) {
                    rehashed.push(child);
                    continue;
                }
                // The same keys and count, now by DataFusion's hash.
                let partitioning = child.output_partitioning().clone();
                let repartition =
                    RepartitionExec::try_new(child, partitioning)?.with_preserve_order();
                rehashed.push(Arc::new(repartition));
            }
            Ok(Transformed::yes(replace_children_if_necessary(
                node, rehashed,
            )?))
        })
        .data()
    }

    fn name(&self) -> &str {
        Self::NAME
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// See the module's doc.
#[derive(Debug, Default)]
pub struct CoLocatedJoinFilters;

impl CoLocatedJoinFilters {
    pub const NAME: &'static str = "SkiffCoLocatedJoinFilters";
}

impl PhysicalOptimizerRule for CoLocatedJoinFilters {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(join) = node.downcast_ref::<HashJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            let declared_probe = *join.partition_mode() == PartitionMode::Partitioned
                && involves_declared(&sources(join.right()));
            if !declared_probe || node.dynamic_expressions_produced().is_empty() {
                return Ok(Transformed::no(node));
            }
            let without = HashJoinExecBuilder::from(join).reset_state().build_exec()?;
            Ok(Transformed::yes(without))
        })
        .data()
    }

    fn name(&self) -> &str {
        Self::NAME
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// DataFusion's physical optimizer rules with Skiff's two inserted:
/// [`CoLocation`] after `EnsureRequirements`, [`CoLocatedJoinFilters`]
/// after the last filter pushdown. Both places are where soundness needs
/// the rules, so a DataFusion without those rules is a bug to fix here,
/// not a list to append to.
pub fn with_rules(
    mut rules: Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>>,
) -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
    let after = |rules: &[Arc<dyn PhysicalOptimizerRule + Send + Sync>], name: &str| {
        let at = rules.iter().rposition(|r| r.name() == name);
        assert!(at.is_some(), "DataFusion's optimizer has no rule {name}");
        at.map_or(rules.len(), |i| i + 1)
    };
    let at = after(&rules, "EnsureRequirements");
    rules.insert(at, Arc::new(CoLocation));
    let at = after(&rules, "FilterPushdown(Post)");
    rules.insert(at, Arc::new(CoLocatedJoinFilters));
    rules
}
