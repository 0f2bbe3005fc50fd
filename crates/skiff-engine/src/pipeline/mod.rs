//! The pipeline graph: a DataFusion physical plan split at its pipeline breakers.
//!
//! A [`Pipeline`] is a subtree of the physical plan whose leaves are base-table
//! scans or [`MaterializedExec`](crate::materialized::MaterializedExec)s that
//! read the materialized output of other pipelines. It ends at a [`Breaker`].
//! Pipelines are numbered so that every input has a smaller id than its
//! reader; the result pipeline has the largest id.

mod breaker;

use std::fmt;
use std::sync::Arc;

use datafusion::logical_expr::physical_planning_context::{ScalarSubqueryResults, SubqueryIndex};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::ExecutionPlan;

pub use breaker::{Breaker, input_breaker, is_opaque, output_breaker};

/// Index of a pipeline within its query's [`PipelineGraph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PipelineId(pub usize);

impl fmt::Display for PipelineId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "P{}", self.0)
    }
}

/// One pipeline: its subplan, what it reads and what ends it.
#[derive(Debug, Clone)]
pub struct Pipeline {
    pub id: PipelineId,
    /// The subplan; materialized inputs appear as `MaterializedExec` leaves.
    pub plan: Arc<dyn ExecutionPlan>,
    pub breaker: Breaker,
    /// Pipelines whose output this one reads ("reads the output of" edges):
    /// through a `MaterializedExec` leaf, or as a scalar subquery value.
    pub inputs: Vec<PipelineId>,
    /// The reader collects this output whole and concatenates each partition
    /// (a join build side). The store then seals each partition as a single
    /// batch, which makes the reader's concatenation a zero-copy slice, so the
    /// store and the join's hash table share one copy of the tuples.
    pub read_whole: bool,
}

/// A scalar subquery's value: the single row of pipeline `source`'s output,
/// stored into slot `index` of the container its expressions read.
#[derive(Debug, Clone)]
pub struct SubqueryBinding {
    pub source: PipelineId,
    pub results: ScalarSubqueryResults,
    pub index: SubqueryIndex,
}

/// A hash join's dynamic filter, fed early from its materialized build side.
///
/// DataFusion pushes a join's dynamic filter into scans anywhere below the
/// join's probe side, including scans Skiff runs in earlier pipelines than
/// the join. DataFusion's pull order builds the join first, so those scans
/// see the filter; Skiff has the build side's tuples as soon as pipeline
/// `source` finishes, sets the filter to their key bounds then, and makes
/// every pipeline below the probe side wait for `source`. The join later
/// tightens the filter itself, as in DataFusion.
#[derive(Debug, Clone)]
pub struct FilterFeed {
    pub source: PipelineId,
    /// The join's `DynamicFilterPhysicalExpr`.
    pub filter: Arc<dyn PhysicalExpr>,
    /// Join keys over the build side (evaluated on `source`'s output).
    pub build_keys: Vec<Arc<dyn PhysicalExpr>>,
    /// The same keys over the probe side (what the filter is written in).
    pub probe_keys: Vec<Arc<dyn PhysicalExpr>>,
}

/// All pipelines of one query, dependencies before readers.
#[derive(Debug, Clone)]
pub struct PipelineGraph {
    pipelines: Vec<Pipeline>,
    bindings: Vec<SubqueryBinding>,
    feeds: Vec<FilterFeed>,
}

impl PipelineGraph {
    pub(crate) fn new(
        pipelines: Vec<Pipeline>,
        bindings: Vec<SubqueryBinding>,
        feeds: Vec<FilterFeed>,
    ) -> Self {
        debug_assert!(pipelines.iter().enumerate().all(|(i, p)| p.id.0 == i));
        debug_assert!(
            pipelines
                .iter()
                .all(|p| p.inputs.iter().all(|input| input.0 < p.id.0))
        );
        Self {
            pipelines,
            bindings,
            feeds,
        }
    }

    /// The same graph with each pipeline's plan replaced (same ids, breakers
    /// and edges).
    pub(crate) fn with_pipelines(self, pipelines: Vec<Pipeline>) -> Self {
        debug_assert_eq!(pipelines.len(), self.pipelines.len());
        Self { pipelines, ..self }
    }

    /// Dynamic filters to set when their build pipelines finish.
    pub fn feeds(&self) -> &[FilterFeed] {
        &self.feeds
    }

    /// Scalar subquery values to bind when their pipelines finish.
    pub fn bindings(&self) -> &[SubqueryBinding] {
        &self.bindings
    }

    pub fn pipelines(&self) -> &[Pipeline] {
        &self.pipelines
    }

    pub fn len(&self) -> usize {
        self.pipelines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pipelines.is_empty()
    }

    pub fn get(&self, id: PipelineId) -> &Pipeline {
        &self.pipelines[id.0]
    }

    /// The pipeline that produces the query result (always the last).
    pub fn result(&self) -> &Pipeline {
        // `split` always pushes the result pipeline last.
        &self.pipelines[self.pipelines.len() - 1]
    }

    /// Pipelines that read the output of `id`.
    pub fn readers(&self, id: PipelineId) -> impl Iterator<Item = PipelineId> + '_ {
        self.pipelines
            .iter()
            .filter(move |p| p.inputs.contains(&id))
            .map(|p| p.id)
    }
}
