//! The pipeline executor: runs a [`PipelineGraph`] in dependency order.
//!
//! Every pipeline whose inputs have finished starts at once, so independent
//! pipelines (the build sides of a join chain, say) run concurrently, and
//! each runs all its output partitions in parallel as DataFusion would. A
//! pipeline's partitions are written to its output in the
//! [`IntermediateStore`]; the result pipeline instead streams to the caller,
//! starting when every other pipeline has finished.
//!
//! Dropping the result stream cancels everything still running.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::utils::memory::get_record_batch_memory_size;
use datafusion::common::{Result, ScalarValue, exec_err, internal_err};
use datafusion::error::DataFusionError;
use datafusion::execution::{RecordBatchStream, TaskContext};
use datafusion::functions_aggregate::min_max::{MaxAccumulator, MinAccumulator};
use datafusion::logical_expr::{Accumulator, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, DynamicFilterPhysicalExpr, lit};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ExecutionPlan, ExecutionPlanProperties, SendableRecordBatchStream, execute_stream,
};
use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt, TryStreamExt};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinSet};

use crate::grouping::GroupAssignment;
use crate::migrated::MigratedState;
use crate::morsel::{Cut, CutControl, add_cut_points, has_gates};
use crate::options::SkiffOptions;
use crate::pipeline::{FilterFeed, PipelineGraph, PipelineId};
use crate::store::{IntermediateStore, OutputSize, PipelineOutput, PipelineStatus, QueryState};

/// Pipelines finished / total, plus the rows read so far by the running ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    pub pipelines_finished: usize,
    pub pipelines_total: usize,
    pub rows_running: u64,
}

impl Progress {
    /// Finished fraction of pipelines, in 0..=1.
    pub fn fraction(&self) -> f64 {
        if self.pipelines_total == 0 {
            return 1.0;
        }
        self.pipelines_finished as f64 / self.pipelines_total as f64
    }
}

/// Where the driver stands with respect to a pause point
/// ([`QueryExecution::pause_after`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pause {
    /// Pipelines run (or the driver has not started).
    Running,
    /// Stopped at the pause point: `finished` pipelines done, none running.
    Paused { finished: usize },
    /// The driver ended: every pipeline but the result ran, or it failed or
    /// was cancelled.
    Ended,
}

/// How an on-demand pause treats the pipelines running when it is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseMode {
    /// Let them finish (lossless; the pause waits for the longest).
    Finish,
    /// Abort them: their partial output is dropped and they run again from
    /// the start on whichever engine continues the query from its state
    /// (not here: see [`QueryExecution::aborted`]). The pause comes at once.
    Abort,
}

/// When the driver stops scheduling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PausePoint {
    Free,
    /// Once this many pipelines have finished (at most this many start).
    After(usize),
    /// As soon as nothing runs; no pipeline starts meanwhile.
    Now(PauseMode),
}

/// Marks the driver ended however it stops.
struct EndOnDrop<'a>(&'a watch::Sender<Pause>);

impl Drop for EndOnDrop<'_> {
    fn drop(&mut self) {
        self.0.send_replace(Pause::Ended);
    }
}

/// One execution of one query's pipeline graph.
pub struct QueryExecution {
    graph: Arc<PipelineGraph>,
    store: Arc<IntermediateStore>,
    task_ctx: Arc<TaskContext>,
    pause_point: watch::Sender<PausePoint>,
    pause_state: watch::Sender<Pause>,
    /// An immediate pause aborted running pipelines. Their plans' operators
    /// (exchanges, shared join builds) cannot run twice, so the query can
    /// only go on from its extracted state, through a fresh plan.
    aborted: AtomicBool,
    /// The cut points, when `skiff.mid_pipeline_cuts` put them in.
    cuts: Option<Arc<CutControl>>,
    /// Pipelines a cut ended in the middle, with their partial output.
    cut: Mutex<BTreeMap<PipelineId, (Cut, Arc<PipelineOutput>)>>,
    /// Pipelines a cut ended whose partial work was lost.
    lost: Mutex<Vec<PipelineId>>,
    /// Running pipelines a cut aborted (they had no cut points).
    aborted_at_cut: Mutex<Vec<PipelineId>>,
    /// Cut right after this many pipelines were started (a trigger).
    cut_after_starts: AtomicUsize,
}

impl std::fmt::Debug for QueryExecution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryExecution")
            .field("pipelines", &self.graph.len())
            .finish_non_exhaustive()
    }
}

impl QueryExecution {
    /// Prepare `graph` to run with the session of `task_ctx`. The graph's
    /// plans must never have been executed.
    pub fn new(graph: PipelineGraph, task_ctx: &TaskContext) -> Result<Arc<Self>> {
        Self::grouped(graph, task_ctx, None)
    }

    /// [`QueryExecution::new`], with the pipelines `groups` names reading
    /// through their pipeline group's cache.
    pub fn grouped(
        graph: PipelineGraph,
        task_ctx: &TaskContext,
        groups: Option<&GroupAssignment>,
    ) -> Result<Arc<Self>> {
        let options = task_ctx.session_config().options();
        let skiff = options.extensions.get::<SkiffOptions>();
        let memory_max = skiff.and_then(|o| o.store_memory_max);
        // Scans read through this process's buffer pool, wherever the plan
        // was made (a plan on the wire names plain Parquet scans); a
        // grouped pipeline's, through its group's cache too.
        let tiers = crate::buffer::Tiers::of(task_ctx);
        let pipelines = graph
            .pipelines()
            .iter()
            .map(|p| {
                let mut p = p.clone();
                let tiers = crate::buffer::Tiers {
                    group: groups.and_then(|g| g.0.get(&p.id).cloned()),
                    ..tiers.clone()
                };
                p.plan = crate::buffer::wrap_scans(p.plan, &tiers, task_ctx)?;
                Ok(p)
            })
            .collect::<Result<Vec<_>>>()?;
        let graph = graph.with_pipelines(pipelines);
        let (graph, cuts) = if let Some(o) = skiff.filter(|o| o.mid_pipeline_cuts) {
            let (graph, control) = add_cut_points(graph, o.cut_tap_max_bytes)?;
            (graph, Some(control))
        } else {
            (graph, None)
        };
        let graph = Arc::new(graph);
        let store = Arc::new(IntermediateStore::new(
            &graph,
            task_ctx.runtime_env(),
            memory_max,
        ));
        store.register_for_pressure();
        let mut config = task_ctx.session_config().clone();
        config.set_extension(Arc::clone(&store));
        if let Some(control) = &cuts {
            config.set_extension(Arc::clone(control));
        }
        if has_gates(&graph) {
            config
                .options_mut()
                .execution
                .enable_file_stream_work_stealing = false;
        }
        let task_ctx = with_config(task_ctx, config);
        Ok(Arc::new(Self {
            graph,
            store,
            task_ctx,
            pause_point: watch::channel(PausePoint::Free).0,
            pause_state: watch::channel(Pause::Running).0,
            aborted: AtomicBool::new(false),
            cuts,
            cut: Mutex::new(BTreeMap::new()),
            lost: Mutex::new(Vec::new()),
            aborted_at_cut: Mutex::new(Vec::new()),
            cut_after_starts: AtomicUsize::new(usize::MAX),
        }))
    }

    /// The state an earlier execution handed over, that this one's
    /// migrated `MaterializedExec` leaves read.
    pub fn migrated_state(&self) -> Option<Arc<MigratedState>> {
        self.task_ctx
            .session_config()
            .get_extension::<MigratedState>()
    }

    pub fn graph(&self) -> &Arc<PipelineGraph> {
        &self.graph
    }

    pub fn store(&self) -> &Arc<IntermediateStore> {
        &self.store
    }

    /// The query state: finished pipelines and the outputs still owed.
    pub fn state(&self) -> QueryState {
        self.store.state()
    }

    pub fn progress(&self) -> Progress {
        let status = self.store.status();
        let mut progress = Progress {
            pipelines_total: self.graph.len(),
            ..Progress::default()
        };
        for (pipeline, status) in self.graph.pipelines().iter().zip(&status) {
            match status {
                PipelineStatus::Finished { .. } => progress.pipelines_finished += 1,
                PipelineStatus::Running { .. } => {
                    progress.rows_running += rows_read(&pipeline.plan);
                }
                PipelineStatus::Waiting => {}
            }
        }
        progress
    }

    /// Start the query; the stream yields the result pipeline's batches.
    pub fn execute(self: &Arc<Self>) -> Result<SendableRecordBatchStream> {
        let schema = self.graph.result().plan.schema();
        let driver = SpawnedTask::spawn(Arc::clone(self).run_to_result());
        let this = Arc::clone(self);
        let result = futures::stream::once(async move {
            driver.join_unwind().await.map_err(join_error)??;
            this.start_result()
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, result)))
    }

    /// Run every pipeline but the result pipeline.
    async fn run_to_result(self: Arc<Self>) -> Result<()> {
        // Also when the driver fails or is cancelled with the stream.
        let _ended = EndOnDrop(&self.pause_state);
        let result = self.graph.result().id;
        let mut waiting: Vec<usize> = self
            .graph
            .pipelines()
            .iter()
            .map(|p| p.inputs.len())
            .collect();
        // Ready pipelines in id order, so that a pause point is reproducible.
        let mut ready: VecDeque<PipelineId> = self
            .graph
            .pipelines()
            .iter()
            .filter(|p| p.id != result && p.inputs.is_empty())
            .map(|p| p.id)
            .collect();
        let mut running = JoinSet::new();
        // The running pipelines' tasks, to abort those a cut cannot end.
        let mut tasks: BTreeMap<PipelineId, AbortHandle> = BTreeMap::new();
        let mut doomed: BTreeSet<PipelineId> = BTreeSet::new();
        let mut finished = 0;
        let mut started = 0;
        let mut point = self.pause_point.subscribe();
        let mut cut_signal = self.cuts.as_ref().map(|c| c.subscribe());
        loop {
            while let Some(&next) = ready.front() {
                if !self.may_start(finished + running.len()) {
                    break;
                }
                ready.pop_front();
                let this = Arc::clone(&self);
                let task =
                    running.spawn(async move { this.run_pipeline(next).await.map(|o| (next, o)) });
                tasks.insert(next, task);
                started += 1;
                if started == self.cut_after_starts.load(Ordering::SeqCst)
                    && let Some(control) = &self.cuts
                {
                    control.request();
                }
            }
            let next = tokio::select! {
                next = running.join_next_with_id() => next,
                Some(()) = cut_signaled(&mut cut_signal) => {
                    // A cut ends the cuttable pipelines at their next
                    // morsel; the others are aborted, as by an immediate
                    // pause, rather than waited for.
                    if let Some(control) = self.cuts.as_ref().filter(|c| c.requested()) {
                        for (id, task) in tasks.iter().filter(|(id, _)| !control.cuttable(**id)) {
                            task.abort();
                            doomed.insert(*id);
                        }
                    }
                    continue;
                }
                // The sender lives in `self`, so this only ends by a change.
                _ = point.changed() => {
                    if *point.borrow_and_update() == PausePoint::Now(PauseMode::Abort)
                        && !running.is_empty()
                    {
                        // Wait until the tasks are gone, so that none still
                        // writes to the store once it is reset.
                        running.abort_all();
                        while running.join_next().await.is_some() {}
                        doomed.clear();
                        self.aborted.store(true, Ordering::Relaxed);
                        while let Some((id, _)) = tasks.pop_last() {
                            self.store.abort(id)?;
                            reset_dynamic_filters(&self.graph.get(id).plan)?;
                            ready.push_front(id);
                        }
                    }
                    continue;
                }
            };
            if let Some(Err(e)) = &next
                && e.is_cancelled()
                && let Some(id) = doomed
                    .iter()
                    .copied()
                    .find(|id| tasks.get(id).is_some_and(|t| t.id() == e.id()))
            {
                // Gone, so it no longer writes to the store.
                lock(&self.aborted_at_cut).push(id);
                doomed.remove(&id);
                tasks.remove(&id);
                self.aborted.store(true, Ordering::Relaxed);
                self.store.abort(id)?;
                reset_dynamic_filters(&self.graph.get(id).plan)?;
                ready.push_front(id);
                continue;
            }
            let Some(done) = next.map(|done| done.map(|(_, output)| output)) else {
                if self.pause_reached(finished) {
                    self.wait_resumed(finished).await?;
                    continue;
                }
                if self.aborted() {
                    // Resumed before the pause took hold.
                    return exec_err!(
                        "the query's running pipelines were cut or aborted; \
                         it can only continue from its extracted state"
                    );
                }
                // Nothing runs and nothing may start: all but the result ran.
                debug_assert!(ready.is_empty());
                return Ok(());
            };
            let (id, output) = done.map_err(join_error)??;
            tasks.remove(&id);
            doomed.remove(&id);
            if self.keep_cut(id, output)? {
                continue;
            }
            finished += 1;
            self.store.finish(id, OutputSize::default())?;
            self.bind_subqueries(id).await?;
            self.feed_filters(id).await?;
            for reader in self.graph.readers(id) {
                waiting[reader.0] -= 1;
                if waiting[reader.0] == 0 && reader != result {
                    ready.push_back(reader);
                }
            }
        }
    }

    /// Stop scheduling once `finished` pipelines have finished: pipelines
    /// already running go on, no new one starts (also not the result
    /// pipeline) until [`resume`](Self::resume). Call before
    /// [`execute`](Self::execute) for an exact pause point;
    /// [`paused`](Self::paused) awaits it. While a pause point is set, at most
    /// `finished` pipelines are ever started, so the state at the pause is
    /// exactly that of `finished` pipelines done and none running.
    pub fn pause_after(&self, finished: usize) {
        self.pause_point.send_replace(PausePoint::After(finished));
    }

    /// Pause at the next moment nothing runs: no pipeline starts from now
    /// on, and the running ones finish or are aborted as `mode` says.
    /// [`paused`](Self::paused) awaits it; once the result pipeline has
    /// started there is no pause point left and it reports
    /// [`Pause::Ended`].
    pub fn pause_now(&self, mode: PauseMode) {
        self.pause_point.send_replace(PausePoint::Now(mode));
    }

    /// Clear the pause point; a paused driver goes on. A cut that cut
    /// nothing is withdrawn; after a real one the driver fails (the query
    /// can only go on from its state).
    pub fn resume(&self) {
        if let Some(control) = &self.cuts
            && !self.aborted()
        {
            control.withdraw();
        }
        self.pause_point.send_replace(PausePoint::Free);
    }

    /// Wait until the driver is paused (nothing running) or has ended.
    pub async fn paused(&self) -> Pause {
        let mut state = self.pause_state.subscribe();
        match state.wait_for(|s| *s != Pause::Running).await {
            Ok(state) => *state,
            // The sender lives in `self`.
            Err(_) => Pause::Ended,
        }
    }

    /// A cut was asked for (it may still be draining).
    pub fn cut_requested(&self) -> bool {
        self.cuts.as_ref().is_some_and(|c| c.requested())
    }

    /// The execution has cut points (`skiff.mid_pipeline_cuts`).
    pub fn can_cut(&self) -> bool {
        self.cuts.is_some()
    }

    fn may_start(&self, started: usize) -> bool {
        // After a cut or an abort the query can only go on from its state.
        if self.cut_requested() || self.aborted() {
            return false;
        }
        match *self.pause_point.borrow() {
            PausePoint::Free => true,
            PausePoint::After(k) => started < k,
            PausePoint::Now(_) => false,
        }
    }

    fn pause_reached(&self, finished: usize) -> bool {
        if self.cut_requested() {
            return true;
        }
        match *self.pause_point.borrow() {
            PausePoint::Free => false,
            PausePoint::After(k) => finished >= k,
            PausePoint::Now(_) => true,
        }
    }

    async fn wait_resumed(&self, finished: usize) -> Result<()> {
        if self.cut_requested() {
            // A cut (perhaps by a gate's trigger, with no pause point set)
            // holds until the caller resumes.
            self.pause_point.send_if_modified(|p| {
                let hold = !matches!(p, PausePoint::Now(_));
                if hold {
                    *p = PausePoint::Now(PauseMode::Finish);
                }
                hold
            });
        }
        let mut point = self.pause_point.subscribe();
        self.pause_state.send_replace(Pause::Paused { finished });
        // The sender lives in `self`, so this only ends by a change.
        let _ = point
            .wait_for(|p| match *p {
                PausePoint::Free => true,
                PausePoint::After(k) => k > finished,
                PausePoint::Now(_) => false,
            })
            .await;
        if self.aborted() {
            return exec_err!(
                "the query was paused with its running pipelines aborted; \
                 it can only continue from its extracted state"
            );
        }
        self.pause_state.send_replace(Pause::Running);
        Ok(())
    }

    /// Whether an immediate pause aborted running pipelines, so that the
    /// query cannot go on here (see [`PauseMode::Abort`]).
    pub fn aborted(&self) -> bool {
        self.aborted.load(Ordering::Relaxed)
    }

    /// Store the values of the scalar subqueries pipeline `id` computes, so
    /// that the pipelines reading them find them set when they start.
    async fn bind_subqueries(&self, id: PipelineId) -> Result<()> {
        for binding in self.graph.bindings().iter().filter(|b| b.source == id) {
            let output = self.store.output(id)?;
            let value = scalar_value(&output).await?;
            binding.results.set(binding.index, value)?;
        }
        Ok(())
    }

    /// Set the dynamic filters pipeline `id` feeds to its key bounds (see
    /// `FilterFeed`), before the pipelines whose scans read them start.
    async fn feed_filters(&self, id: PipelineId) -> Result<()> {
        for feed in self.graph.feeds().iter().filter(|f| f.source == id) {
            let Some(filter) = feed.filter.downcast_ref::<DynamicFilterPhysicalExpr>() else {
                return internal_err!("{id} feeds a filter that is not dynamic");
            };
            let output = self.store.output(id)?;
            if let Some(bounds) = key_bounds(&output, feed).await? {
                filter.update(bounds)?;
            }
        }
        Ok(())
    }

    /// Run all partitions of `id` into its output.
    async fn run_pipeline(&self, id: PipelineId) -> Result<Arc<PipelineOutput>> {
        let Some(output) = self.store.start(id)? else {
            return internal_err!("{id} has no output to write");
        };
        let plan = &self.graph.get(id).plan;
        let partitions = plan.output_partitioning().partition_count();
        let mut tasks = Vec::with_capacity(partitions);
        for partition in 0..partitions {
            let mut stream = plan.execute(partition, Arc::clone(&self.task_ctx))?;
            let output = Arc::clone(&output);
            tasks.push(
                SpawnedTask::spawn(async move {
                    while let Some(batch) = stream.next().await {
                        output.push(partition, batch?)?;
                    }
                    output.finish_partition(partition)
                })
                .join_unwind(),
            );
        }
        let mut tasks: FuturesUnordered<_> = tasks.into_iter().collect();
        while let Some(done) = tasks.next().await {
            done.map_err(join_error)??;
        }
        Ok(output)
    }

    /// Pipeline `id` ran to its end: when a cut ended it early, keep its
    /// partial output for the hand-off (or, when the partial work was lost,
    /// drop it so that it starts over) instead of finishing it. True when
    /// it did not finish.
    fn keep_cut(&self, id: PipelineId, output: Arc<PipelineOutput>) -> Result<bool> {
        let Some(control) = &self.cuts else {
            return Ok(false);
        };
        if control.lost(id) {
            lock(&self.lost).push(id);
            self.aborted.store(true, Ordering::Relaxed);
            self.store.abort(id)?;
            reset_dynamic_filters(&self.graph.get(id).plan)?;
            return Ok(true);
        }
        let Some(cut) = control.cut_of(id) else {
            return Ok(false);
        };
        // The pipeline's operators ran to their end over part of their
        // input: the query can only go on from its state.
        self.aborted.store(true, Ordering::Relaxed);
        reset_dynamic_filters(&self.graph.get(id).plan)?;
        lock(&self.cut).insert(id, (cut, output));
        Ok(true)
    }

    /// Cut the running pipelines at their next morsel and pause: those that
    /// can be cut hand over their partial work ([`cuts`](Self::cuts)), the
    /// others are aborted (see [`aborted_at_cut`](Self::aborted_at_cut)).
    /// Needs `skiff.mid_pipeline_cuts`; without it this is a draining pause.
    pub fn cut_now(&self) {
        if let Some(control) = &self.cuts {
            control.request();
        }
        self.pause_now(PauseMode::Finish);
    }

    /// Cut (as [`cut_now`](Self::cut_now)) once the gates have let `morsels`
    /// morsels through; false without cut points.
    pub fn cut_after_morsels(&self, morsels: u64) -> bool {
        let control = self.cuts.as_ref();
        control.inspect(|c| c.cut_after_morsels(morsels)).is_some()
    }

    /// Cut (as [`cut_now`](Self::cut_now)) right after the driver started
    /// its `starts`-th pipeline, so that a pipeline without cut points may
    /// be running (it is aborted); false without cut points. Call before
    /// [`execute`](Self::execute).
    pub fn cut_after_starts(&self, starts: usize) -> bool {
        self.cut_after_starts.store(starts, Ordering::SeqCst);
        if starts == 0
            && let Some(control) = &self.cuts
        {
            control.request();
        }
        self.cuts.is_some()
    }

    /// Cut (as [`cut_now`](Self::cut_now)) once `ends` gate partitions have
    /// read their input whole; false without cut points.
    pub fn cut_after_gate_ends(&self, ends: u64) -> bool {
        let control = self.cuts.as_ref();
        control.inspect(|c| c.cut_after_gate_ends(ends)).is_some()
    }

    /// The pipelines a cut ended in the middle, with their partial outputs
    /// (the store's output of a join build or a sort; the tapped partial
    /// rows of an aggregation are in the [`Cut`]).
    pub fn cuts(&self) -> BTreeMap<PipelineId, (Cut, Arc<PipelineOutput>)> {
        lock(&self.cut).clone()
    }

    /// The pipelines a cut ended whose partial work was lost (their tap
    /// overflowed): they start over wherever the query goes on.
    pub fn lost(&self) -> Vec<PipelineId> {
        lock(&self.lost).clone()
    }

    /// The running pipelines a cut aborted because they had no cut points:
    /// they start over wherever the query goes on.
    pub fn aborted_at_cut(&self) -> Vec<PipelineId> {
        lock(&self.aborted_at_cut).clone()
    }

    fn start_result(self: Arc<Self>) -> Result<SendableRecordBatchStream> {
        let pipeline = self.graph.result();
        self.store.start(pipeline.id)?;
        let input = execute_stream(Arc::clone(&pipeline.plan), Arc::clone(&self.task_ctx))?;
        Ok(Box::pin(ResultStream {
            input,
            store: Arc::clone(&self.store),
            pipeline: pipeline.id,
            streamed: OutputSize::default(),
            done: false,
        }))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the map consistent.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

fn join_error(e: tokio::task::JoinError) -> DataFusionError {
    DataFusionError::ExecutionJoin(Box::new(e))
}

/// Resolves when the cut signal changes; never without cut points (or once
/// the control is gone).
async fn cut_signaled(signal: &mut Option<watch::Receiver<bool>>) -> Option<()> {
    match signal {
        Some(rx) => rx.changed().await.ok(),
        None => std::future::pending().await,
    }
}

/// Set the dynamic filters that the joins of an aborted pipeline produce
/// back to `true`: a join may have published its build side's keys before
/// the abort, and that half-done filter would travel with the remaining
/// plan. `true` is always correct; the join sets the filter again when it
/// runs on the target.
fn reset_dynamic_filters(plan: &Arc<dyn ExecutionPlan>) -> Result<()> {
    let mut filters = Vec::new();
    plan.apply(|node| {
        filters.extend(node.dynamic_expressions_produced());
        Ok(TreeNodeRecursion::Continue)
    })?;
    for filter in filters {
        if let Some(filter) = filter.downcast_ref::<DynamicFilterPhysicalExpr>() {
            filter.update(lit(true))?;
        }
    }
    Ok(())
}

/// `min <= key <= max` over the probe keys for the build keys' bounds in
/// `output`; `None` when a key has no non-null value (nothing to bound).
async fn key_bounds(
    output: &Arc<PipelineOutput>,
    feed: &FilterFeed,
) -> Result<Option<Arc<dyn PhysicalExpr>>> {
    let schema = output.schema();
    let mut bounds = feed
        .build_keys
        .iter()
        .map(|key| {
            let data_type = key.data_type(schema)?;
            Ok((
                MinAccumulator::try_new(&data_type)?,
                MaxAccumulator::try_new(&data_type)?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    for partition in 0..output.partition_count() {
        let mut stream = output.read(partition)?;
        while let Some(batch) = stream.try_next().await? {
            for (key, (min, max)) in feed.build_keys.iter().zip(&mut bounds) {
                let values = key.evaluate(&batch)?.into_array(batch.num_rows())?;
                min.update_batch(std::slice::from_ref(&values))?;
                max.update_batch(&[values])?;
            }
        }
    }
    let mut predicate: Option<Arc<dyn PhysicalExpr>> = None;
    for (probe, (mut min, mut max)) in feed.probe_keys.iter().zip(bounds) {
        let (min, max) = (min.evaluate()?, max.evaluate()?);
        if min.is_null() || max.is_null() {
            return Ok(None);
        }
        let at_least = binary(Arc::clone(probe), Operator::GtEq, lit(min));
        let at_most = binary(Arc::clone(probe), Operator::LtEq, lit(max));
        let range = binary(at_least, Operator::And, at_most);
        predicate = Some(match predicate {
            None => range,
            Some(previous) => binary(previous, Operator::And, range),
        });
    }
    Ok(predicate)
}

fn binary(
    left: Arc<dyn PhysicalExpr>,
    op: Operator,
    right: Arc<dyn PhysicalExpr>,
) -> Arc<dyn PhysicalExpr> {
    Arc::new(BinaryExpr::new(left, op, right))
}

/// The value of a scalar subquery: NULL for no row, an error for several.
async fn scalar_value(output: &Arc<PipelineOutput>) -> Result<ScalarValue> {
    if output.schema().fields().len() != 1 {
        return internal_err!(
            "scalar subquery with {} columns",
            output.schema().fields().len()
        );
    }
    let mut value = None;
    for partition in 0..output.partition_count() {
        let mut stream = output.read(partition)?;
        while let Some(batch) = stream.try_next().await? {
            if batch.num_rows() == 0 {
                continue;
            }
            if value.is_some() || batch.num_rows() > 1 {
                return exec_err!("Scalar subquery returned more than one row");
            }
            value = Some(ScalarValue::try_from_array(batch.column(0), 0)?);
        }
    }
    match value {
        Some(value) => Ok(value),
        None => ScalarValue::try_from(output.schema().field(0).data_type()),
    }
}

/// Rows produced so far by the leaves (sources) of `plan`.
fn rows_read(plan: &Arc<dyn ExecutionPlan>) -> u64 {
    let mut rows = 0;
    let _ = plan.apply(|node| {
        if node.children().is_empty() {
            rows += node
                .metrics()
                .and_then(|m| m.output_rows())
                .unwrap_or_default() as u64;
        }
        Ok(TreeNodeRecursion::Continue)
    });
    rows
}

/// The result pipeline's stream; marks the pipeline finished at its end.
struct ResultStream {
    input: SendableRecordBatchStream,
    store: Arc<IntermediateStore>,
    pipeline: PipelineId,
    streamed: OutputSize,
    done: bool,
}

impl Stream for ResultStream {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        let polled = self.input.poll_next_unpin(cx);
        match &polled {
            Poll::Ready(Some(Ok(batch))) => {
                self.streamed.rows += batch.num_rows() as u64;
                self.streamed.memory_bytes += get_record_batch_memory_size(batch) as u64;
            }
            Poll::Ready(None) => {
                self.done = true;
                if let Err(e) = self.store.finish(self.pipeline, self.streamed) {
                    return Poll::Ready(Some(Err(e)));
                }
            }
            _ => {}
        }
        polled
    }
}

impl RecordBatchStream for ResultStream {
    fn schema(&self) -> SchemaRef {
        self.input.schema()
    }
}

/// `task_ctx` with `config` in place of its session's.
pub fn with_config(
    task_ctx: &TaskContext,
    config: datafusion::prelude::SessionConfig,
) -> Arc<TaskContext> {
    Arc::new(TaskContext::new(
        task_ctx.task_id(),
        task_ctx.session_id(),
        config,
        task_ctx.scalar_functions().clone(),
        task_ctx.higher_order_functions().clone(),
        task_ctx.aggregate_functions().clone(),
        task_ctx.window_functions().clone(),
        task_ctx.runtime_env(),
    ))
}
