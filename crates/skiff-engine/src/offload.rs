//! Query fragments run where their data is held (opportunistic offload,
//! `../shared/papers/opportunistic-query-execution-smartnics.txt`).
//!
//! The coordinator puts an [`OffloadExec`] above each scan, filter and
//! projection of a table that memory nodes hold (and above the partial half
//! of an aggregation over them), carrying that fragment as a Substrait
//! plan; its input is the same fragment planned to run here.
//! When it runs, each partition offers its files to the node holding them
//! (the session's [`OffloadTier`]): the node either runs the fragment over
//! its chunks and streams the rows back (*offload*), or declines (*push
//! back*) and the partition runs its input, whose scan fetches the raw
//! chunks as any scan does. The answer is the same either way.
//!
//! An offloaded answer marks the end of each row group's rows; rows reach
//! the parent only once their row group is marked. A node lost in the
//! middle costs only the unmarked row groups, which the input then reads
//! from storage (the marked ones skipped by a Parquet access plan).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, Statistics, internal_err};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::ParquetAccessPlan;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfig};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, Time,
};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::statistics::{ChildStats, StatisticsArgs};
use datafusion::physical_plan::stream::RecordBatchReceiverStream;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tokio::sync::mpsc::Sender;
use tracing::{debug, warn};

use crate::buffer::FileVersion;
use crate::options::{Offload, SkiffOptions};

/// A fragment as the coordinator cut it: what a memory node needs to run it.
#[derive(Debug, PartialEq, Eq)]
pub struct Fragment {
    /// A Substrait `Plan` (protobuf bytes): one table's scan, its filter
    /// and its projection, perhaps aggregated (the node then sends the
    /// aggregation's partial states, as the input's partial half gives).
    pub plan: Vec<u8>,
    /// The columns the scan reads, with their types: what the node serves
    /// from its chunks under the table's name.
    pub input_schema: SchemaRef,
}

/// One file of a partition offered to a node: its version and, when the
/// partition reads only part of it, the byte range whose row groups it
/// reads (DataFusion's rule: a row group belongs to the range holding its
/// first byte).
#[derive(Clone, Debug)]
pub struct OfferedFile {
    pub version: FileVersion,
    pub range: Option<(i64, i64)>,
}

/// What a partition offers the node holding its files.
#[derive(Debug)]
pub struct Offer {
    pub fragment: Arc<Fragment>,
    pub files: Vec<OfferedFile>,
    /// `auto`: the node chooses; otherwise it runs what it can.
    pub auto: bool,
    pub query_id: u64,
}

/// The times of a fragment's paths, predicted by the node deciding or
/// measured by the node that ran it. Offloaded: the node runs the
/// fragment (`execution`), encodes (`serialization`) and sends
/// (`network`) the rows kept. Pushed back: the raw columns cross the
/// network (`push_back_network`) and a worker thread runs the fragment
/// (`push_back_execution`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Costs {
    pub execution: Duration,
    pub serialization: Duration,
    pub network: Duration,
    pub push_back_network: Duration,
    pub push_back_execution: Duration,
}

impl Costs {
    pub fn offload(&self) -> Duration {
        self.execution + self.serialization + self.network
    }

    pub fn push_back(&self) -> Duration {
        self.push_back_network + self.push_back_execution
    }
}

/// What an offloaded answer carries.
#[derive(Debug)]
pub enum FragmentEvent {
    Rows(RecordBatch),
    /// Every row of row group `row_group` of file `file` (an index into the
    /// offer's files) came before this.
    Done {
        file: usize,
        row_group: usize,
    },
    /// Every row group was sent; the node ran the fragment this long.
    End {
        /// The node's measured parts (`push_back_*` zero).
        measured: Costs,
    },
}

/// A node's answer to an [`Offer`].
pub struct Answer {
    /// True: the rows follow in `events`. False: pushed back.
    pub offloaded: bool,
    pub reason: String,
    /// Each offered file's row groups (as many as the file has).
    pub row_groups: Vec<usize>,
    /// The rows the node estimated the fragment keeps (from its sketches).
    pub estimated_rows: f64,
    /// The node's predicted costs of both paths, when it decided by them.
    pub predicted: Option<Costs>,
    pub events: BoxStream<'static, Result<FragmentEvent, String>>,
}

impl fmt::Debug for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Answer")
            .field("offloaded", &self.offloaded)
            .field("reason", &self.reason)
            .field("row_groups", &self.row_groups)
            .finish_non_exhaustive()
    }
}

/// Where fragments can be offered: the nodes holding tables.
pub trait FragmentTarget: Send + Sync + fmt::Debug {
    /// Offer `offer` to the node holding all of its files; `None` when no
    /// one node does (the partition runs its input).
    fn offer(&self, offer: Offer) -> Option<BoxFuture<'static, Result<Answer, String>>>;
}

/// The target a session's [`OffloadExec`]s offer fragments to (a session
/// extension, set by workers), and the query they belong to (the node's
/// records name it).
#[derive(Clone, Debug)]
pub struct OffloadTier {
    pub target: Arc<dyn FragmentTarget>,
    pub query_id: u64,
}

impl OffloadTier {
    pub fn new(target: Arc<dyn FragmentTarget>) -> Self {
        Self {
            target,
            query_id: 0,
        }
    }

    /// The same target, for query `query_id`'s fragments.
    pub fn for_query(&self, query_id: u64) -> Self {
        Self {
            target: Arc::clone(&self.target),
            query_id,
        }
    }
}

/// A fragment that may run in the memory node holding its data; see the
/// module's documentation.
#[derive(Debug)]
pub struct OffloadExec {
    fragment: Arc<Fragment>,
    input: Arc<dyn ExecutionPlan>,
    metrics: ExecutionPlanMetricsSet,
}

impl OffloadExec {
    pub fn new(fragment: Arc<Fragment>, input: Arc<dyn ExecutionPlan>) -> Self {
        Self {
            fragment,
            input,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    pub fn fragment(&self) -> &Arc<Fragment> {
        &self.fragment
    }

    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }
}

impl DisplayAs for OffloadExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let columns: Vec<&str> = self
            .fragment
            .input_schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        write!(f, "OffloadExec: reads=[{}]", columns.join(", "))?;
        if self.input.downcast_ref::<AggregateExec>().is_some() {
            write!(f, ", partial aggregation")?;
        }
        Ok(())
    }
}

/// The counters an [`OffloadExec`] keeps, per partition.
struct Counters {
    /// Partitions a node ran.
    offloaded: Count,
    /// Partitions a node declined.
    pushed_back: Count,
    /// Partitions never offered: no node holds all their files, the plan
    /// below is not a plain scan, or `skiff.offload` is `never`.
    not_offered: Count,
    /// Partitions whose node was lost or failed after it accepted: the
    /// row groups it had not finished were read here.
    fell_back: Count,
    /// Rows received from nodes.
    rows_received: Count,
    /// Rows the nodes estimated the fragments keep (rounded).
    rows_estimated: Count,
    /// The nodes' predictions of both paths (`auto`), summed over the
    /// partitions they decided.
    predicted_offload: Time,
    predicted_push_back: Time,
    /// What the nodes measured of the fragments they ran.
    node_execution: Time,
    node_serialization: Time,
    node_network: Time,
}

impl Counters {
    fn new(metrics: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        let count = |name: &'static str| MetricBuilder::new(metrics).counter(name, partition);
        let time = |name: &'static str| MetricBuilder::new(metrics).subset_time(name, partition);
        Self {
            offloaded: count("fragments_offloaded"),
            pushed_back: count("fragments_pushed_back"),
            not_offered: count("fragments_not_offered"),
            fell_back: count("fragments_fell_back"),
            rows_received: count("fragment_rows_received"),
            rows_estimated: count("fragment_rows_estimated"),
            predicted_offload: time("fragment_predicted_offload"),
            predicted_push_back: time("fragment_predicted_push_back"),
            node_execution: time("fragment_node_execution"),
            node_serialization: time("fragment_node_serialization"),
            node_network: time("fragment_node_network"),
        }
    }
}

impl ExecutionPlan for OffloadExec {
    fn name(&self) -> &str {
        "OffloadExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        // Rows arrive by row group, in the node's order.
        vec![false]
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
            return internal_err!("OffloadExec has one child");
        }
        Ok(Arc::new(Self::new(
            Arc::clone(&self.fragment),
            children.swap_remove(0),
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
        let counters = Counters::new(&self.metrics, partition);
        let config = context.session_config();
        let mode = config
            .options()
            .extensions
            .get::<SkiffOptions>()
            .map_or(Offload::Never, |o| o.offload);
        let target = config.get_extension::<OffloadTier>();
        let files = partition_files(&self.input, partition);
        let offered = match (mode, target, files) {
            (Offload::Always | Offload::Auto, Some(target), Some(files)) => {
                let offer = Offer {
                    fragment: Arc::clone(&self.fragment),
                    files: files.iter().map(offered_file).collect(),
                    auto: mode == Offload::Auto,
                    query_id: target.query_id,
                };
                target.target.offer(offer).map(|answer| (answer, files))
            }
            _ => None,
        };
        let context = own_files_only(&context);
        let Some((answer, files)) = offered else {
            counters.not_offered.add(1);
            return self.input.execute(partition, context);
        };
        let mut builder = RecordBatchReceiverStream::builder(self.schema(), 2);
        let tx = builder.tx();
        let run = Run {
            input: Arc::clone(&self.input),
            partition,
            context,
            files,
            counters,
            tx,
        };
        builder.spawn(async move { run.answered(answer.await).await });
        Ok(builder.build())
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
        match input_stats {
            [one] => Ok(Arc::clone(one)),
            _ => internal_err!("OffloadExec has one child"),
        }
    }
}

/// `context` with file-stream work stealing off. A partition the node
/// runs never executes its input, so its files would stay in the scan's
/// shared queue for a sibling running its own input (pushed back, not
/// offered, fallen back) to take and read again: each partition reads its
/// own files only. (The queue is made at the scan's first execution, from
/// that context; every execution of the input passes through here.)
fn own_files_only(context: &Arc<TaskContext>) -> Arc<TaskContext> {
    let mut config = context.session_config().clone();
    config
        .options_mut()
        .execution
        .enable_file_stream_work_stealing = false;
    crate::executor::with_config(context, config)
}

/// One partition's offered run.
struct Run {
    input: Arc<dyn ExecutionPlan>,
    partition: usize,
    context: Arc<TaskContext>,
    files: Vec<PartitionedFile>,
    counters: Counters,
    tx: Sender<Result<RecordBatch>>,
}

impl Run {
    async fn answered(self, answer: Result<Answer, String>) -> Result<()> {
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) => {
                warn!(error = %e, "fragment offer failed; running it here");
                self.counters.fell_back.add(1);
                return self.here(None).await;
            }
        };
        if let Some(predicted) = &answer.predicted {
            self.counters
                .predicted_offload
                .add_duration(predicted.offload());
            self.counters
                .predicted_push_back
                .add_duration(predicted.push_back());
        }
        if !answer.offloaded {
            debug!(reason = %answer.reason, "fragment pushed back");
            self.counters.pushed_back.add(1);
            return self.here(None).await;
        }
        self.counters.offloaded.add(1);
        self.counters
            .rows_estimated
            .add(answer.estimated_rows.max(0.0).round() as usize);
        if answer.row_groups.len() != self.files.len() {
            warn!("fragment answer names another number of files; running it here");
            self.counters.fell_back.add(1);
            return self.here(None).await;
        }
        let mut done: Vec<Vec<bool>> = answer.row_groups.iter().map(|&n| vec![false; n]).collect();
        let mut pending: Vec<RecordBatch> = Vec::new();
        let mut events = answer.events;
        let failure = loop {
            match events.next().await {
                Some(Ok(FragmentEvent::Rows(batch))) => {
                    // The node's rows, as this plan's: the same types in
                    // the same places, or the answer is not used.
                    let schema = self.input.schema();
                    let rows = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
                    let columns = batch.columns().to_vec();
                    match RecordBatch::try_new_with_options(schema, columns, &rows) {
                        Ok(batch) => {
                            self.counters.rows_received.add(batch.num_rows());
                            pending.push(batch);
                        }
                        Err(e) => break format!("rows unlike the fragment's: {e}"),
                    }
                }
                Some(Ok(FragmentEvent::Done { file, row_group })) => {
                    let Some(slot) = done.get_mut(file).and_then(|f| f.get_mut(row_group)) else {
                        break format!("a mark of file {file} row group {row_group}, not offered");
                    };
                    if *slot {
                        break format!("file {file} row group {row_group} marked twice");
                    }
                    *slot = true;
                    for batch in pending.drain(..) {
                        if self.tx.send(Ok(batch)).await.is_err() {
                            // The reader is gone: nothing more to do.
                            return Ok(());
                        }
                    }
                }
                Some(Ok(FragmentEvent::End { measured })) if pending.is_empty() => {
                    self.counters
                        .node_execution
                        .add_duration(measured.execution);
                    self.counters
                        .node_serialization
                        .add_duration(measured.serialization);
                    self.counters.node_network.add_duration(measured.network);
                    return Ok(());
                }
                Some(Ok(FragmentEvent::End { .. })) => break "rows after the last mark".into(),
                Some(Err(e)) => break e,
                None => break "the answer ended before its end".into(),
            }
        };
        warn!(error = %failure, "offloaded fragment lost; reading its unfinished row groups here");
        self.counters.fell_back.add(1);
        self.here(Some(&done)).await
    }

    /// Run the input here: every row group of the partition's files, or
    /// those `done` does not mark.
    async fn here(self, done: Option<&Vec<Vec<bool>>>) -> Result<()> {
        let input = match done {
            None => Arc::clone(&self.input),
            Some(done) => unfinished(&self.input, self.partition, &self.files, done)?,
        };
        let mut stream = input.execute(self.partition, self.context)?;
        while let Some(batch) = stream.next().await {
            let failed = batch.is_err();
            if self.tx.send(batch).await.is_err() || failed {
                break;
            }
        }
        Ok(())
    }
}

/// What a partition offers of `file`.
fn offered_file(file: &PartitionedFile) -> OfferedFile {
    OfferedFile {
        version: FileVersion::of(&file.object_meta),
        range: file.range.as_ref().map(|r| (r.start, r.end)),
    }
}

/// The files partition `partition` of `input` reads, when `input` is a
/// Parquet scan under filters, projections and at most an aggregation's
/// partial half only (so that its partition `p` is the scan's file group
/// `p`, and nothing picks row groups but the files' ranges); `None`
/// otherwise.
pub fn partition_files(
    input: &Arc<dyn ExecutionPlan>,
    partition: usize,
) -> Option<Vec<PartitionedFile>> {
    let mut node = input;
    if is_partial_half(node) {
        node = node.children().into_iter().next()?;
    }
    loop {
        let passes = node.downcast_ref::<FilterExec>().is_some()
            || node.downcast_ref::<ProjectionExec>().is_some()
            || node.downcast_ref::<CooperativeExec>().is_some();
        if !passes {
            break;
        }
        match node.children().as_slice() {
            [child] => node = child,
            _ => return None,
        }
    }
    let config = file_scan(node)?;
    if config.file_source().file_type() != "parquet" {
        return None;
    }
    let group = config.file_groups.get(partition)?;
    let plain = group.iter().all(|f| f.extensions.is_empty());
    plain.then(|| group.iter().cloned().collect())
}

/// Whether `plan` is an aggregation's partial half: what an aggregated
/// fragment's node runs, and what its `OffloadExec` sits above.
pub fn is_partial_half(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.downcast_ref::<AggregateExec>()
        .is_some_and(|a| *a.mode() == AggregateMode::Partial)
}

fn file_scan(node: &Arc<dyn ExecutionPlan>) -> Option<&FileScanConfig> {
    node.downcast_ref::<DataSourceExec>()?
        .data_source()
        .downcast_ref::<FileScanConfig>()
}

/// `input` reading, in partition `partition`, only the row groups of
/// `files` that `done` does not mark (a file wholly marked is left out).
fn unfinished(
    input: &Arc<dyn ExecutionPlan>,
    partition: usize,
    files: &[PartitionedFile],
    done: &[Vec<bool>],
) -> Result<Arc<dyn ExecutionPlan>> {
    let mut rest = Vec::with_capacity(files.len());
    for (file, done) in files.iter().zip(done) {
        if done.iter().all(|&d| d) {
            continue;
        }
        let mut plan = ParquetAccessPlan::new_all(done.len());
        for (row_group, _) in done.iter().enumerate().filter(|(_, d)| **d) {
            plan.skip(row_group);
        }
        rest.push(file.clone().with_extension(plan));
    }
    let mut replaced = false;
    let plan = Arc::clone(input)
        .transform_up(|node| {
            let Some(config) = file_scan(&node) else {
                return Ok(Transformed::no(node));
            };
            let mut config = config.clone();
            let Some(group) = config.file_groups.get_mut(partition) else {
                return internal_err!("the scan has no partition {partition}");
            };
            *group = FileGroup::new(rest.clone());
            replaced = true;
            let scan: Arc<dyn ExecutionPlan> = DataSourceExec::from_data_source(config);
            Ok(Transformed::yes(scan))
        })?
        .data;
    if !replaced {
        return internal_err!("an offloaded fragment's input has no file scan");
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use datafusion::physical_plan::collect;
    use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
    use futures::FutureExt;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;

    use super::*;
    use crate::test_rows::{batch, values};

    const GROUPS: usize = 4;
    const GROUP_ROWS: i64 = 100;

    /// How the fake node answers.
    #[derive(Clone, Copy, Debug)]
    enum Node {
        /// Every row group, then the end.
        Whole,
        /// Row groups 0 and 2, then the stream breaks.
        Breaks,
        /// Declines.
        PushesBack,
        /// The offer itself fails.
        Fails,
        /// The first offer is run whole, the others pushed back.
        FirstOnly,
    }

    /// A node that answers from the file itself: the even values of each
    /// row group, as the fragment `v % 2 = 0` keeps them.
    #[derive(Debug)]
    struct Fake {
        node: Node,
        offered: Mutex<Vec<usize>>,
    }

    fn kept(row_group: usize) -> RecordBatch {
        let first = row_group as i64 * GROUP_ROWS;
        let even: Vec<i64> = (first..first + GROUP_ROWS).filter(|v| v % 2 == 0).collect();
        batch(&even)
    }

    impl FragmentTarget for Fake {
        fn offer(&self, offer: Offer) -> Option<BoxFuture<'static, Result<Answer, String>>> {
            let node = {
                let mut offered = self.offered.lock().unwrap();
                offered.push(offer.files.len());
                match self.node {
                    Node::FirstOnly if offered.len() == 1 => Node::Whole,
                    Node::FirstOnly => Node::PushesBack,
                    node => node,
                }
            };
            Some(
                async move {
                    let events: Vec<Result<FragmentEvent, String>> = match node {
                        Node::Fails => return Err("the node is gone".to_string()),
                        Node::PushesBack | Node::FirstOnly => Vec::new(),
                        Node::Whole => (0..GROUPS)
                            .flat_map(|g| {
                                [
                                    Ok(FragmentEvent::Rows(kept(g))),
                                    Ok(FragmentEvent::Done {
                                        file: 0,
                                        row_group: g,
                                    }),
                                ]
                            })
                            .chain([Ok(FragmentEvent::End {
                                measured: Costs::default(),
                            })])
                            .collect(),
                        // Row group 1's rows arrive but not its mark.
                        Node::Breaks => vec![
                            Ok(FragmentEvent::Rows(kept(0))),
                            Ok(FragmentEvent::Done {
                                file: 0,
                                row_group: 0,
                            }),
                            Ok(FragmentEvent::Rows(kept(2))),
                            Ok(FragmentEvent::Done {
                                file: 0,
                                row_group: 2,
                            }),
                            Ok(FragmentEvent::Rows(kept(1))),
                            Err("connection reset".to_string()),
                        ],
                    };
                    Ok(Answer {
                        offloaded: !matches!(node, Node::PushesBack),
                        reason: format!("{node:?}"),
                        row_groups: vec![GROUPS],
                        estimated_rows: 0.0,
                        predicted: None,
                        events: futures::stream::iter(events).boxed(),
                    })
                }
                .boxed(),
            )
        }
    }

    /// One file of `GROUPS` row groups of `GROUP_ROWS` values each.
    fn write(path: &std::path::Path) {
        let all: Vec<i64> = (0..GROUPS as i64 * GROUP_ROWS).collect();
        let rows = batch(&all);
        let properties = WriterProperties::builder()
            .set_max_row_group_row_count(Some(GROUP_ROWS as usize))
            .build();
        let file = std::fs::File::create(path).unwrap();
        let mut writer = ArrowWriter::try_new(file, rows.schema(), Some(properties)).unwrap();
        writer.write(&rows).unwrap();
        writer.close().unwrap();
    }

    async fn run(node: Node) -> (Vec<i64>, MetricsSet, Vec<usize>) {
        run_over(node, 1).await
    }

    /// `run` over `files` copies of the file, a partition each.
    async fn run_over(node: Node, files: usize) -> (Vec<i64>, MetricsSet, Vec<usize>) {
        let dir = tempfile::tempdir().unwrap();
        for n in 0..files {
            write(&dir.path().join(format!("t{n}.parquet")));
        }
        let fake = Arc::new(Fake {
            node,
            offered: Mutex::default(),
        });
        let options = SkiffOptions {
            offload: Offload::Always,
            ..SkiffOptions::default()
        };
        let config = SessionConfig::new()
            .with_target_partitions(files)
            .with_option_extension(options)
            .with_extension(Arc::new(OffloadTier::new(Arc::clone(&fake) as _)));
        let ctx = SessionContext::new_with_config(config);
        let input = planned(&ctx, dir.path(), "SELECT v FROM t WHERE v % 2 = 0").await;
        assert!(partition_files(&input, 0).is_some(), "a plain scan");
        let fragment = Fragment {
            plan: Vec::new(),
            input_schema: input.schema(),
        };
        let offload = Arc::new(OffloadExec::new(Arc::new(fragment), input));
        let rows = collect(Arc::clone(&offload) as _, ctx.task_ctx())
            .await
            .unwrap();
        let mut got = values(&rows);
        got.sort_unstable();
        let metrics = offload.metrics().unwrap();
        let offered = fake.offered.lock().unwrap().clone();
        (got, metrics, offered)
    }

    /// `sql` planned in `ctx` over table `t`, the files of `dir`.
    async fn planned(
        ctx: &SessionContext,
        dir: &std::path::Path,
        sql: &str,
    ) -> Arc<dyn ExecutionPlan> {
        ctx.register_parquet("t", dir.to_str().unwrap(), ParquetReadOptions::default())
            .await
            .unwrap();
        ctx.sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap()
    }

    fn count(metrics: &MetricsSet, name: &str) -> usize {
        metrics.sum_by_name(name).map_or(0, |v| v.as_usize())
    }

    #[tokio::test]
    async fn every_answer_is_the_whole_answer_once() {
        let even: Vec<i64> = (0..GROUPS as i64 * GROUP_ROWS)
            .filter(|v| v % 2 == 0)
            .collect();
        for node in [Node::Whole, Node::Breaks, Node::PushesBack, Node::Fails] {
            let (got, metrics, offered) = run(node).await;
            assert_eq!(got, even, "{node:?}");
            assert_eq!(offered, [1], "one file offered once: {node:?}");
            let (offloaded, pushed, fell) = (
                count(&metrics, "fragments_offloaded"),
                count(&metrics, "fragments_pushed_back"),
                count(&metrics, "fragments_fell_back"),
            );
            match node {
                Node::Whole => assert_eq!((offloaded, pushed, fell), (1, 0, 0)),
                Node::Breaks => assert_eq!((offloaded, pushed, fell), (1, 0, 1)),
                Node::PushesBack => assert_eq!((offloaded, pushed, fell), (0, 1, 0)),
                Node::Fails => assert_eq!((offloaded, pushed, fell), (0, 0, 1)),
                Node::FirstOnly => unreachable!("two partitions"),
            }
            let received = count(&metrics, "fragment_rows_received");
            let expected = match node {
                Node::Whole => even.len(),
                // Three row groups' rows arrived, one of them unmarked.
                Node::Breaks => 3 * GROUP_ROWS as usize / 2,
                _ => 0,
            };
            assert_eq!(received, expected, "{node:?}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_partition_pushed_back_reads_its_own_files_only() {
        // Two files, a partition each: the node runs the first partition,
        // the second runs its scan here; the first's file, never opened
        // here, must not be read by the second's scan as well.
        let even: Vec<i64> = (0..GROUPS as i64 * GROUP_ROWS)
            .filter(|v| v % 2 == 0)
            .collect();
        let mut twice: Vec<i64> = even.iter().chain(&even).copied().collect();
        twice.sort_unstable();
        let (got, metrics, offered) = run_over(Node::FirstOnly, 2).await;
        assert_eq!(offered, [1, 1]);
        assert_eq!(count(&metrics, "fragments_offloaded"), 1);
        assert_eq!(count(&metrics, "fragments_pushed_back"), 1);
        assert_eq!(got.len(), twice.len(), "every row exactly once");
        assert_eq!(got, twice);
    }

    #[test]
    fn a_plan_that_is_not_a_plain_scan_has_no_partition_files() {
        let scan = crate::test_rows::scan(&[&[&[1, 2]]]);
        assert!(partition_files(&scan, 0).is_none());
    }

    #[tokio::test]
    async fn an_aggregations_partial_half_reads_its_scans_files() {
        let dir = tempfile::tempdir().unwrap();
        for n in 0..2 {
            write(&dir.path().join(format!("t{n}.parquet")));
        }
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
        let plan = planned(
            &ctx,
            dir.path(),
            "SELECT v % 3, count(*) FROM t WHERE v > 5 GROUP BY v % 3",
        )
        .await;
        let mut halves = Vec::new();
        let _ = plan.apply(|node| {
            if let Some(a) = node.downcast_ref::<AggregateExec>() {
                halves.push((*a.mode(), Arc::clone(node)));
            }
            Ok(TreeNodeRecursion::Continue)
        });
        let [
            (AggregateMode::FinalPartitioned, last),
            (AggregateMode::Partial, first),
        ] = halves.as_slice()
        else {
            panic!("two halves: {halves:?}");
        };
        // The partial half's partition p reads file group p; the final
        // half, after an exchange, reads no files of its own.
        for p in 0..2 {
            let files = partition_files(first, p).unwrap();
            assert_eq!(files.len(), 1);
        }
        assert!(partition_files(last, 0).is_none());
    }
}
