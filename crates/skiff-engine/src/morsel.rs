//! Mid-pipeline cuts: ending running pipelines at a morsel boundary so that
//! their partial work can move with the query (beyond the paper, which only
//! moves state at pipeline boundaries).
//!
//! A *morsel* is one batch of a pipeline's driving input. With cut points
//! on ([`add_cut_points`]), every driving leaf of a cuttable pipeline reads
//! through a [`MorselGateExec`]: on a cut it stops pulling before the next
//! morsel and ends its stream, so the pipeline drains and its sink sees
//! exactly the morsels read so far. The gate records how many input rows
//! each of its partitions consumed; the pipeline that finishes the work
//! elsewhere reads the same leaf through a gate that skips them.
//!
//! Which sinks can be cut, and what stands for their partial work:
//! * a join build side (the pipeline's output is tuples): the tuples so far;
//!   the rest's tuples are added to them;
//! * a sort or top-k: the rows sorted so far; sorted again with the rest;
//! * a final aggregation fed by a partial one in the same pipeline: the
//!   partial aggregation's rows so far, recorded by a [`SinkTapExec`] in
//!   front of the final stage (which cannot hand out its own state), and
//!   merged with the rest's partial rows by the same final stage.
//!
//! Everything between the gates and the sink must treat each row on its
//! own (filters, projections, exchanges, probes of joins whose build side is
//! materialized), so that the sink over "read so far" plus "the rest" equals
//! the sink over everything: [`cut_kind`] decides. At a cut, the executor
//! aborts the running pipelines without cut points (their work starts over
//! wherever the query goes on), as an immediate pause does.

use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::utils::memory::get_record_batch_memory_size;
use datafusion::common::{JoinType, Result, Statistics, internal_err};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::{RecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{CrossJoinExec, HashJoinExec, NestedLoopJoinExec};
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::statistics::ChildStats;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties,
    InputOrderMode, PlanProperties, ReplaceChildrenOptions, SendableRecordBatchStream,
    StatisticsArgs, replace_children_if_necessary,
};
use futures::{Stream, StreamExt};
use tokio::sync::watch;

use crate::materialized::MaterializedExec;
use crate::pipeline::{Breaker, Pipeline, PipelineGraph, PipelineId, input_breaker};

/// How a cut pipeline's partial work joins the rest of its work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CutKind {
    /// The pipeline's output is its input's tuples (a join build side).
    Union,
    /// The sink is a sort (or top-k) at the pipeline's root.
    Sort,
    /// The sink is a final aggregation over a partial one in the pipeline.
    Aggregate,
}

/// Whether `pipeline` can be cut in the middle, and how.
pub fn cut_kind(pipeline: &Pipeline) -> Option<CutKind> {
    let kind = sink_kind(pipeline)?;
    // A gate's counts are positions in what its leaf emits. A scan that
    // reads a dynamic filter prunes by whatever the filter holds when it
    // opens each file or row group. A top-k or an aggregation tightens its
    // filter while the scans of its own pipeline run (and the rest would
    // start from another state): the same positions would name other rows.
    // A hash join's filter is whole before its probe side reads a row, on
    // the source and on the rest alike.
    let tightening = produces_dynamic_filter(&pipeline.plan);
    (!(tightening && reads_dynamic_filter(&pipeline.plan))).then_some(kind)
}

fn sink_kind(pipeline: &Pipeline) -> Option<CutKind> {
    let plan = &pipeline.plan;
    match pipeline.breaker {
        Breaker::HashJoinBuild { .. } | Breaker::NestedLoopJoinBuild | Breaker::CrossJoinBuild => {
            (plan.output_ordering().is_none() && row_wise(plan)).then_some(CutKind::Union)
        }
        Breaker::Sort | Breaker::TopK { .. } => {
            let sort = plan.downcast_ref::<SortExec>()?;
            row_wise(sort.input()).then_some(CutKind::Sort)
        }
        Breaker::Aggregate => {
            let partial = partial_below(plan)?;
            row_wise(partial.input()).then_some(CutKind::Aggregate)
        }
        Breaker::Window | Breaker::ScalarSubquery | Breaker::Result => None,
    }
}

/// Whether an operator of `plan` other than a hash join produces a dynamic
/// filter (a top-k's threshold, an aggregation's min or max so far).
fn produces_dynamic_filter(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.exists(|node| {
        Ok(!node.is::<HashJoinExec>() && !node.dynamic_expressions_produced().is_empty())
    })
    .unwrap_or(false)
}

/// Whether an operator of `plan` other than the joins that produce them
/// reads a dynamic filter (a scan it was pushed into).
fn reads_dynamic_filter(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.exists(|node| {
        let mut found = false;
        if !node.is::<HashJoinExec>() {
            node.apply_expressions(&mut |expr| {
                found =
                    expr.exists(|e| Ok(e.downcast_ref::<DynamicFilterPhysicalExpr>().is_some()))?;
                Ok(if found {
                    TreeNodeRecursion::Stop
                } else {
                    TreeNodeRecursion::Continue
                })
            })?;
        }
        Ok(found)
    })
    .unwrap_or(false)
}

/// The partial aggregation that feeds the final one at `root` through
/// exchanges only.
fn partial_below(root: &Arc<dyn ExecutionPlan>) -> Option<&AggregateExec> {
    let last = root.downcast_ref::<AggregateExec>()?;
    if !matches!(
        last.mode(),
        AggregateMode::Final | AggregateMode::FinalPartitioned
    ) {
        return None;
    }
    let mut node = last.input();
    loop {
        if let Some(partial) = node.downcast_ref::<AggregateExec>() {
            let linear = matches!(partial.input_order_mode(), InputOrderMode::Linear);
            return (matches!(partial.mode(), AggregateMode::Partial) && linear).then_some(partial);
        }
        if !is_exchange(node) || node.fetch().is_some() {
            return None;
        }
        node = node.children().into_iter().next()?;
    }
}

fn is_exchange(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.is::<RepartitionExec>() || node.is::<CoalescePartitionsExec>()
}

/// Every operator of `plan` maps each input row on its own: the output over
/// a prefix of the driving inputs plus the output over the rest is the
/// output over all of them.
fn row_wise(plan: &Arc<dyn ExecutionPlan>) -> bool {
    if plan.fetch().is_some() {
        return false;
    }
    let probe_side = |join_type: &JoinType| {
        matches!(
            join_type,
            JoinType::Inner
                | JoinType::Right
                | JoinType::RightSemi
                | JoinType::RightAnti
                | JoinType::RightMark
        )
    };
    let own = if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        probe_side(join.join_type())
    } else if let Some(join) = plan.downcast_ref::<NestedLoopJoinExec>() {
        probe_side(join.join_type())
    } else {
        plan.is::<CrossJoinExec>()
            || plan.is::<FilterExec>()
            || plan.is::<ProjectionExec>()
            || plan.is::<UnionExec>()
            || is_exchange(plan)
            || plan.is::<DataSourceExec>()
            || plan.is::<MaterializedExec>()
            || plan.is::<MorselGateExec>()
    };
    own && plan
        .children()
        .into_iter()
        .enumerate()
        // A build side is a materialized leaf, read whole: not driving.
        .filter(|(index, _)| input_breaker(plan, *index).is_none())
        .all(|(_, child)| row_wise(child))
}

/// One partition of a gate, as the cut found it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GatePartition {
    /// Input rows read (skipped ones included): where the rest starts.
    pub consumed: u64,
    /// The cut ended this partition before its input did.
    pub cut: bool,
}

#[derive(Debug)]
struct Gate {
    pipeline: PipelineId,
    partitions: Vec<GatePartition>,
}

#[derive(Debug)]
struct Tap {
    pipeline: PipelineId,
    schema: SchemaRef,
    bytes: usize,
    partitions: Vec<Vec<RecordBatch>>,
    /// Rows kept from the final stage after a cut was asked for: its
    /// result misses them, so the pipeline counts as cut even when every
    /// gate had read its input whole.
    withheld: bool,
}

/// Counts events and says when the count reaches the armed one.
#[derive(Debug)]
struct CountTrigger {
    count: AtomicU64,
    at: AtomicU64,
}

impl Default for CountTrigger {
    fn default() -> Self {
        Self {
            count: AtomicU64::new(0),
            at: AtomicU64::new(u64::MAX),
        }
    }
}

impl CountTrigger {
    /// Fire at `at` events; true when that many have already happened.
    fn arm(&self, at: u64) -> bool {
        self.at.store(at, Ordering::SeqCst);
        self.count.load(Ordering::SeqCst) >= at
    }

    fn disarm(&self) {
        self.at.store(u64::MAX, Ordering::SeqCst);
    }

    /// One more event; true when the armed count is reached.
    fn count(&self) -> bool {
        self.count.fetch_add(1, Ordering::SeqCst) + 1 >= self.at.load(Ordering::SeqCst)
    }
}

/// The cut points of one query execution: a session-config extension the
/// gates and taps report to.
#[derive(Debug)]
pub struct CutControl {
    requested: AtomicBool,
    /// Tells the driver of a request (it aborts what cannot be cut).
    signal: watch::Sender<bool>,
    /// Morsels the gates let through.
    morsels: CountTrigger,
    /// Gate partitions whose input ended.
    ends: CountTrigger,
    /// Partial aggregation bytes a tap keeps at most.
    tap_max_bytes: usize,
    /// Pipelines whose tap overflowed: their partial work is not kept, so
    /// a cut loses it (they start over on the target).
    overflowed: Vec<AtomicBool>,
    kinds: Vec<Option<CutKind>>,
    gates: Mutex<Vec<Gate>>,
    taps: Mutex<Vec<Tap>>,
}

impl CutControl {
    fn new(
        kinds: Vec<Option<CutKind>>,
        gates: Vec<Gate>,
        taps: Vec<Tap>,
        tap_max_bytes: usize,
    ) -> Self {
        Self {
            requested: AtomicBool::new(false),
            signal: watch::Sender::new(false),
            morsels: CountTrigger::default(),
            ends: CountTrigger::default(),
            tap_max_bytes,
            overflowed: kinds.iter().map(|_| AtomicBool::new(false)).collect(),
            kinds,
            gates: Mutex::new(gates),
            taps: Mutex::new(taps),
        }
    }

    /// Cut now: gates end before their next morsel, no pipeline starts,
    /// and the driver aborts the running pipelines that cannot be cut.
    pub fn request(&self) {
        self.requested.store(true, Ordering::SeqCst);
        self.signal.send_replace(true);
    }

    /// Changes when a cut is asked for or withdrawn.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.signal.subscribe()
    }

    /// Whether `pipeline` has cut points (so that a cut ends it at its
    /// next morsel rather than aborting it).
    pub fn cuttable(&self, pipeline: PipelineId) -> bool {
        self.kinds.get(pipeline.0).copied().flatten().is_some()
    }

    /// Take back a cut that ended no pipeline early (it came when every
    /// running pipeline's input was already read): the query may go on.
    pub fn withdraw(&self) {
        self.morsels.disarm();
        self.ends.disarm();
        self.requested.store(false, Ordering::SeqCst);
        self.signal.send_replace(false);
    }

    pub fn requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }

    /// Cut once the gates have let `morsels` morsels through (a
    /// deterministic trigger for tests and benchmarks).
    pub fn cut_after_morsels(&self, morsels: u64) {
        if self.morsels.arm(morsels) {
            self.request();
        }
    }

    /// Cut once `ends` gate partitions have read their input whole: the
    /// moments when a pipeline's sink may still be working on input that
    /// no gate will stop (a deterministic trigger for tests).
    pub fn cut_after_gate_ends(&self, ends: u64) {
        if self.ends.arm(ends) {
            self.request();
        }
    }

    fn input_ended(&self) {
        if self.ends.count() {
            self.request();
        }
    }

    fn morsel_passed(&self) {
        if self.morsels.count() {
            self.request();
        }
    }

    fn gates(&self) -> MutexGuard<'_, Vec<Gate>> {
        // Every critical section leaves the records consistent.
        self.gates.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn taps(&self) -> MutexGuard<'_, Vec<Tap>> {
        self.taps.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update_gate(&self, slot: usize, partition: usize, f: impl FnOnce(&mut GatePartition)) {
        if let Some(record) = self
            .gates()
            .get_mut(slot)
            .and_then(|g| g.partitions.get_mut(partition))
        {
            f(record);
        }
    }

    /// Keep a partial aggregation batch (unless the tap overflowed: then
    /// the kept rows are dropped and a cut loses the pipeline's work), and
    /// say whether to pass it on to the final stage: not once a cut was
    /// asked for, whose result is then not used.
    fn record_tap(&self, slot: usize, partition: usize, batch: &RecordBatch) -> bool {
        let mut taps = self.taps();
        let Some(tap) = taps.get_mut(slot) else {
            return true;
        };
        if self.overflowed[tap.pipeline.0].load(Ordering::SeqCst) {
            return true;
        }
        tap.bytes += get_record_batch_memory_size(batch);
        if tap.bytes > self.tap_max_bytes {
            self.overflowed[tap.pipeline.0].store(true, Ordering::SeqCst);
            tap.partitions.iter_mut().for_each(Vec::clear);
            return true;
        }
        if let Some(batches) = tap.partitions.get_mut(partition) {
            batches.push(batch.clone());
        }
        if self.requested() {
            tap.withheld = true;
            return false;
        }
        true
    }

    /// Whether the cut ended `pipeline` early: a gate of it stopped before
    /// its input did, or its tap withheld rows from the final stage.
    fn ended_early(&self, pipeline: PipelineId) -> bool {
        let gate_cut = self
            .gates()
            .iter()
            .any(|g| g.pipeline == pipeline && g.partitions.iter().any(|p| p.cut));
        gate_cut
            || self
                .taps()
                .iter()
                .any(|t| t.pipeline == pipeline && t.withheld)
    }

    /// What the cut left of `pipeline` after it ran to its (early) end:
    /// `None` when it did not end early (its input was read whole and its
    /// sink saw all of it, so it simply finished) or when its partial work
    /// was not kept.
    pub fn cut_of(&self, pipeline: PipelineId) -> Option<Cut> {
        let kind = self.kinds.get(pipeline.0).copied().flatten()?;
        if !self.ended_early(pipeline) {
            return None;
        }
        let gates = self.gates();
        let mine: Vec<(usize, &Gate)> = gates
            .iter()
            .enumerate()
            .filter(|(_, g)| g.pipeline == pipeline)
            .collect();
        let consumed = mine
            .iter()
            .map(|(slot, g)| (*slot, g.partitions.iter().map(|p| p.consumed).collect()))
            .collect();
        let tapped = if kind == CutKind::Aggregate {
            if self.overflowed[pipeline.0].load(Ordering::SeqCst) {
                return None;
            }
            let taps = self.taps();
            let tap = taps.iter().find(|t| t.pipeline == pipeline)?;
            Some((Arc::clone(&tap.schema), tap.partitions.clone()))
        } else {
            None
        };
        Some(Cut {
            pipeline,
            kind,
            consumed,
            tapped,
        })
    }

    /// Whether `pipeline` was cut but its partial work is lost (its tap
    /// overflowed): it must start over, as after an immediate pause.
    pub fn lost(&self, pipeline: PipelineId) -> bool {
        self.ended_early(pipeline) && self.overflowed[pipeline.0].load(Ordering::SeqCst)
    }
}

/// A pipeline ended by a cut: where each gate partition stopped, and, for
/// an aggregation, the partial rows its final stage had been fed.
#[derive(Clone, Debug)]
pub struct Cut {
    pub pipeline: PipelineId,
    pub kind: CutKind,
    /// Per gate slot, rows consumed per partition.
    pub consumed: Vec<(usize, Vec<u64>)>,
    /// The tapped partial aggregation rows, per partition of the final
    /// stage's input.
    pub tapped: Option<(SchemaRef, Vec<Vec<RecordBatch>>)>,
}

/// Whether `graph` reads through gates (its own cut points, or the rest of
/// a pipeline cut elsewhere). Such a graph's scans must read exactly their
/// own file groups: a gate's counts are positions in its partition's input,
/// which DataFusion's work stealing between sibling partitions would shift.
pub fn has_gates(graph: &PipelineGraph) -> bool {
    graph.pipelines().iter().any(|p| {
        p.plan
            .exists(|node| Ok(node.is::<MorselGateExec>()))
            .unwrap_or(false)
    })
}

/// `graph` with gates on the driving leaves of every cuttable pipeline and
/// taps in front of the final aggregations, plus the control they report to.
/// A tap keeps at most `tap_max_bytes` of partial aggregation rows.
pub fn add_cut_points(
    graph: PipelineGraph,
    tap_max_bytes: usize,
) -> Result<(PipelineGraph, Arc<CutControl>)> {
    let mut gates = Vec::new();
    let mut taps = Vec::new();
    let mut kinds = Vec::with_capacity(graph.len());
    let pipelines = graph
        .pipelines()
        .iter()
        .map(|pipeline| {
            let kind = cut_kind(pipeline);
            kinds.push(kind);
            let mut pipeline = pipeline.clone();
            let id = pipeline.id;
            pipeline.plan = match kind {
                None => pipeline.plan,
                Some(CutKind::Union) => gate_leaves(&pipeline.plan, id, &mut gates)?,
                Some(CutKind::Sort) => {
                    let input = only_child(&pipeline.plan)?;
                    let gated = gate_leaves(&input, id, &mut gates)?;
                    replace_children_if_necessary(pipeline.plan, vec![gated])?
                }
                Some(CutKind::Aggregate) => {
                    tap_aggregate(&pipeline.plan, id, &mut gates, &mut taps)?
                }
            };
            Ok(pipeline)
        })
        .collect::<Result<Vec<_>>>()?;
    let control = Arc::new(CutControl::new(kinds, gates, taps, tap_max_bytes));
    Ok((graph.with_pipelines(pipelines), control))
}

/// The final aggregation at `root` with a tap in front of it and gates on
/// the leaves below its partial stage.
fn tap_aggregate(
    root: &Arc<dyn ExecutionPlan>,
    pipeline: PipelineId,
    gates: &mut Vec<Gate>,
    taps: &mut Vec<Tap>,
) -> Result<Arc<dyn ExecutionPlan>> {
    fn below(
        node: &Arc<dyn ExecutionPlan>,
        pipeline: PipelineId,
        gates: &mut Vec<Gate>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if let Some(partial) = node.downcast_ref::<AggregateExec>() {
            let gated = gate_leaves(partial.input(), pipeline, gates)?;
            return replace_children_if_necessary(Arc::clone(node), vec![gated]);
        }
        let gated = below(&only_child(node)?, pipeline, gates)?;
        replace_children_if_necessary(Arc::clone(node), vec![gated])
    }
    let input = only_child(root)?;
    let gated = below(&input, pipeline, gates)?;
    let partitions = gated.output_partitioning().partition_count();
    let slot = taps.len();
    taps.push(Tap {
        pipeline,
        schema: gated.schema(),
        bytes: 0,
        partitions: vec![Vec::new(); partitions],
        withheld: false,
    });
    let tap: Arc<dyn ExecutionPlan> = Arc::new(SinkTapExec::new(gated, pipeline, slot));
    replace_children_if_necessary(Arc::clone(root), vec![tap])
}

fn only_child(node: &Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    match node.children().as_slice() {
        [child] => Ok(Arc::clone(*child)),
        _ => internal_err!("{} has no single input to cut", node.name()),
    }
}

/// `plan` with a gate on every driving leaf (not on join build sides).
/// A gate already there (from a rest plan) keeps its skips.
fn gate_leaves(
    plan: &Arc<dyn ExecutionPlan>,
    pipeline: PipelineId,
    gates: &mut Vec<Gate>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let mut new_gate = |leaf: Arc<dyn ExecutionPlan>, skip: Vec<u64>| {
        let slot = gates.len();
        let partitions = leaf.output_partitioning().partition_count();
        gates.push(Gate {
            pipeline,
            partitions: vec![GatePartition::default(); partitions],
        });
        Arc::new(MorselGateExec::new(leaf, skip).with_slot(pipeline, slot))
            as Arc<dyn ExecutionPlan>
    };
    if let Some(gate) = plan.downcast_ref::<MorselGateExec>() {
        return Ok(new_gate(Arc::clone(&gate.input), gate.skip.clone()));
    }
    if plan.children().is_empty() {
        return Ok(new_gate(Arc::clone(plan), Vec::new()));
    }
    let children: Vec<Arc<dyn ExecutionPlan>> = plan.children().into_iter().cloned().collect();
    let mut gated = Vec::with_capacity(children.len());
    for (index, child) in children.into_iter().enumerate() {
        gated.push(if input_breaker(plan, index).is_some() {
            child
        } else {
            gate_leaves(&child, pipeline, gates)?
        });
    }
    replace_children_if_necessary(Arc::clone(plan), gated)
}

/// Where a gate reports: set when cut points are added to an execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    pipeline: PipelineId,
    index: usize,
}

/// Passes its input through one morsel at a time, ending early on a cut;
/// skips the rows an earlier cut consumed.
#[derive(Debug)]
pub struct MorselGateExec {
    input: Arc<dyn ExecutionPlan>,
    /// Input rows to skip, per partition (none when shorter).
    skip: Vec<u64>,
    slot: Option<Slot>,
    metrics: ExecutionPlanMetricsSet,
}

impl MorselGateExec {
    pub fn new(input: Arc<dyn ExecutionPlan>, skip: Vec<u64>) -> Self {
        Self {
            input,
            skip,
            slot: None,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    fn with_slot(mut self, pipeline: PipelineId, index: usize) -> Self {
        self.slot = Some(Slot { pipeline, index });
        self
    }

    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    /// Rows skipped per partition.
    pub fn skip(&self) -> &[u64] {
        &self.skip
    }

    /// The slot its records are kept under in its execution's control.
    pub fn slot(&self) -> Option<usize> {
        self.slot.map(|s| s.index)
    }

    /// The same gate over the same input, skipping `skip`.
    pub fn skipping(&self, skip: Vec<u64>) -> Self {
        Self::new(Arc::clone(&self.input), skip)
    }
}

impl DisplayAs for MorselGateExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "MorselGateExec")?;
        if self.skip.iter().any(|&n| n > 0) {
            write!(f, ": skip={:?}", self.skip)?;
        }
        Ok(())
    }
}

impl ExecutionPlan for MorselGateExec {
    fn name(&self) -> &str {
        "MorselGateExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return internal_err!("MorselGateExec has one child");
        }
        Ok(Arc::new(Self {
            input: children.swap_remove(0),
            skip: self.skip.clone(),
            slot: self.slot,
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let control = self.slot.and_then(|slot| {
            context
                .session_config()
                .get_extension::<CutControl>()
                .map(|control| (control, slot))
        });
        let input = self.input.execute(partition, context)?;
        Ok(Box::pin(GateStream {
            schema: input.schema(),
            input,
            skip: self.skip.get(partition).copied().unwrap_or(0),
            consumed: 0,
            control,
            partition,
            done: false,
            metrics: BaselineMetrics::new(&self.metrics, partition),
        }))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<ChildStats> {
        vec![ChildStats::At(partition)]
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        passed_through(self, input_stats)
    }
}

struct GateStream {
    schema: SchemaRef,
    input: SendableRecordBatchStream,
    skip: u64,
    consumed: u64,
    control: Option<(Arc<CutControl>, Slot)>,
    partition: usize,
    done: bool,
    metrics: BaselineMetrics,
}

impl Stream for GateStream {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if let Some((control, slot)) = &this.control
                && control.requested()
            {
                this.done = true;
                control.update_gate(slot.index, this.partition, |r| r.cut = true);
                return Poll::Ready(None);
            }
            let batch = match this.input.poll_next_unpin(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.done = true;
                    if let Some((control, _)) = &this.control {
                        control.input_ended();
                    }
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(batch))) => batch,
            };
            let rows = batch.num_rows() as u64;
            let start = this.consumed;
            this.consumed += rows;
            let consumed = this.consumed;
            if let Some((control, slot)) = &this.control {
                control.update_gate(slot.index, this.partition, |r| r.consumed = consumed);
            }
            let skip = this.skip.saturating_sub(start).min(rows);
            if skip == rows {
                continue;
            }
            let batch = batch.slice(skip as usize, (rows - skip) as usize);
            if let Some((control, _)) = &this.control {
                control.morsel_passed();
            }
            this.metrics.record_output(batch.num_rows());
            return Poll::Ready(Some(Ok(batch)));
        }
    }
}

impl RecordBatchStream for GateStream {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

/// Passes the partial aggregation rows to the final stage and keeps a copy
/// (shared buffers), so that a cut can hand them over; after a cut it keeps
/// them without passing them on (the final stage's result is not used).
#[derive(Debug)]
pub struct SinkTapExec {
    input: Arc<dyn ExecutionPlan>,
    pipeline: PipelineId,
    slot: usize,
}

impl SinkTapExec {
    fn new(input: Arc<dyn ExecutionPlan>, pipeline: PipelineId, slot: usize) -> Self {
        Self {
            input,
            pipeline,
            slot,
        }
    }

    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }
}

impl DisplayAs for SinkTapExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "SinkTapExec")
    }
}

impl ExecutionPlan for SinkTapExec {
    fn name(&self) -> &str {
        "SinkTapExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return internal_err!("SinkTapExec has one child");
        }
        Ok(Arc::new(Self::new(
            children.swap_remove(0),
            self.pipeline,
            self.slot,
        )))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let control = context.session_config().get_extension::<CutControl>();
        let input = self.input.execute(partition, context)?;
        let schema = input.schema();
        let slot = self.slot;
        let tapped = input.filter_map(move |batch| {
            let passed = match (&batch, &control) {
                (Ok(batch), Some(control)) => control.record_tap(slot, partition, batch),
                _ => true,
            };
            std::future::ready(passed.then_some(batch))
        });
        Ok(Box::pin(
            datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, tapped),
        ))
    }

    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<ChildStats> {
        vec![ChildStats::At(partition)]
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        passed_through(self, input_stats)
    }
}

/// Statistics of a node that passes its one input through.
fn passed_through(
    node: &dyn ExecutionPlan,
    input_stats: &[Arc<Statistics>],
) -> Result<Arc<Statistics>> {
    match input_stats.first() {
        Some(stats) => Ok(Arc::clone(stats)),
        None => internal_err!("{} without input statistics", node.name()),
    }
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionConfig;
    use futures::TryStreamExt;

    use super::*;
    use crate::test_rows::{scan, schema, values};

    /// One partition whose morsels are `batches`.
    fn input(batches: &[&[i64]]) -> Arc<dyn ExecutionPlan> {
        scan(&[batches])
    }

    /// A control over one pipeline of `kind` with one gate and one tap.
    fn control(kind: CutKind, tap_max_bytes: usize) -> Arc<CutControl> {
        let pipeline = PipelineId(0);
        let gates = vec![Gate {
            pipeline,
            partitions: vec![GatePartition::default()],
        }];
        let taps = vec![Tap {
            pipeline,
            schema: schema(),
            bytes: 0,
            partitions: vec![Vec::new()],
            withheld: false,
        }];
        Arc::new(CutControl::new(
            vec![Some(kind)],
            gates,
            taps,
            tap_max_bytes,
        ))
    }

    fn context(control: &Arc<CutControl>) -> Arc<TaskContext> {
        let config = SessionConfig::new().with_extension(Arc::clone(control));
        Arc::new(TaskContext::default().with_session_config(config))
    }

    async fn run(plan: &Arc<dyn ExecutionPlan>, ctx: Arc<TaskContext>) -> Vec<i64> {
        let stream = plan.execute(0, ctx).expect("execute");
        values(&stream.try_collect::<Vec<_>>().await.expect("rows"))
    }

    #[tokio::test]
    async fn a_gate_skips_what_an_earlier_cut_consumed_across_morsels() {
        let gate: Arc<dyn ExecutionPlan> = Arc::new(MorselGateExec::new(
            input(&[&[1, 2, 3], &[4, 5], &[6]]),
            vec![4],
        ));
        let rows = run(&gate, Arc::new(TaskContext::default())).await;
        assert_eq!(rows, vec![5, 6]);
    }

    #[tokio::test]
    async fn a_gate_without_a_cut_passes_everything_and_records_it() {
        let control = control(CutKind::Union, usize::MAX);
        let gate: Arc<dyn ExecutionPlan> = Arc::new(
            MorselGateExec::new(input(&[&[1, 2], &[3]]), vec![]).with_slot(PipelineId(0), 0),
        );
        assert_eq!(run(&gate, context(&control)).await, vec![1, 2, 3]);
        let record = control.gates()[0].partitions[0];
        assert_eq!(
            record,
            GatePartition {
                consumed: 3,
                cut: false
            }
        );
        assert!(
            control.cut_of(PipelineId(0)).is_none(),
            "nothing ended early"
        );
    }

    #[tokio::test]
    async fn a_cut_ends_the_gate_before_its_next_morsel() {
        let control = control(CutKind::Union, usize::MAX);
        control.cut_after_morsels(1);
        let gate: Arc<dyn ExecutionPlan> = Arc::new(
            MorselGateExec::new(input(&[&[1, 2], &[3, 4], &[5]]), vec![])
                .with_slot(PipelineId(0), 0),
        );
        assert_eq!(run(&gate, context(&control)).await, vec![1, 2]);
        let cut = control.cut_of(PipelineId(0)).expect("the pipeline was cut");
        assert_eq!(cut.kind, CutKind::Union);
        assert_eq!(cut.consumed, vec![(0, vec![2])]);
        // The rest of the pipeline skips exactly what was consumed.
        let rest: Arc<dyn ExecutionPlan> = Arc::new(MorselGateExec::new(
            input(&[&[1, 2], &[3, 4], &[5]]),
            vec![2],
        ));
        assert_eq!(
            run(&rest, Arc::new(TaskContext::default())).await,
            vec![3, 4, 5]
        );
    }

    #[tokio::test]
    async fn a_tap_keeps_what_it_passes_and_withholds_after_a_cut() {
        let control = control(CutKind::Aggregate, usize::MAX);
        let tap: Arc<dyn ExecutionPlan> =
            Arc::new(SinkTapExec::new(input(&[&[1], &[2, 3]]), PipelineId(0), 0));
        assert_eq!(run(&tap, context(&control)).await, vec![1, 2, 3]);
        assert_eq!(values(&control.taps()[0].partitions[0]), vec![1, 2, 3]);
        // Asked to cut: rows are still kept, no longer passed on.
        control.request();
        assert_eq!(run(&tap, context(&control)).await, Vec::<i64>::new());
        assert_eq!(
            values(&control.taps()[0].partitions[0]),
            vec![1, 2, 3, 1, 2, 3]
        );
        let cut = control
            .cut_of(PipelineId(0))
            .expect("withheld rows make a cut");
        let (_, tapped) = cut.tapped.expect("an aggregation hands over its tap");
        assert_eq!(values(&tapped[0]), vec![1, 2, 3, 1, 2, 3]);
    }

    #[tokio::test]
    async fn an_overflowing_tap_passes_everything_and_loses_the_cut() {
        let control = control(CutKind::Aggregate, 1);
        let tap: Arc<dyn ExecutionPlan> =
            Arc::new(SinkTapExec::new(input(&[&[1], &[2]]), PipelineId(0), 0));
        control.request();
        assert_eq!(run(&tap, context(&control)).await, vec![1, 2]);
        assert!(
            control.taps()[0].partitions[0].is_empty(),
            "kept rows dropped"
        );
        assert!(control.cut_of(PipelineId(0)).is_none());
    }
}
