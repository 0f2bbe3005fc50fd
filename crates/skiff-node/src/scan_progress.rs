//! How far a distributed query's scans have got, for `skiff.queries`.
//!
//! The stages of a distributed query run inside datafusion-distributed,
//! whose task metrics reach the coordinator only when the query ends (its
//! observability service lists tasks from the start, with rows that stay 0
//! until an operator ends: measured, docs/server.md). What does move while
//! a query runs is each file scan's `files_processed` (DataFusion's file
//! stream counts every file or file range it finished, pruned or skipped).
//! So before the library cuts stages the coordinator wraps every file scan
//! in a [`CountedScanExec`] naming the query ([`CountScans`]); the wrapper
//! travels to the workers through [`ScanCountCodec`], and wherever a task
//! runs it, it enters its scan in that process's [`ScanTally`]. Workers
//! send their tally's sums with their heartbeats; the coordinator adds its
//! own (tasks it runs itself) and divides by the files of the plan's scans,
//! counted once the library has split them ([`files_in`]).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Instant;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;

use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, Statistics, internal_datafusion_err, internal_err, not_impl_err};
use datafusion::config::ConfigOptions;
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::metrics::{Metric, MetricsSet};
use datafusion::physical_plan::{
    ChildStats, ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan,
    PlanProperties, ReplaceChildrenOptions, StatisticsArgs,
};
use datafusion_distributed::{DistributedLeafExec, NetworkBoundaryExt};
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use futures::{Stream, StreamExt};
use prost::Message;
use skiff_flight::protocol::ScanFiles;

use skiff_engine::buffer::{self, Tiers};
use skiff_tables::file_scan;

use crate::limits::{SCAN_TALLY_FORGET_AFTER, SCAN_TALLY_RETIRED_MAX};
use crate::sync::lock;

/// A distributed query, as the nodes name its scans: Skiff's query id and
/// the coordinator run that gave it (ids start again at 1 when the
/// coordinator restarts; a worker's count of an earlier run's query must
/// not land on a new one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ScanKey {
    pub run: u64,
    pub query: u64,
}

/// The file scans a process runs for distributed queries: the
/// `files_processed` counters their file streams register (they outlive
/// the plan node, so a scan's last count is never lost), each counter
/// once, however many copies of a scan's metrics name it.
#[derive(Debug, Default)]
pub struct ScanTally {
    queries: Mutex<Queries>,
}

#[derive(Debug, Default)]
struct Queries {
    counting: HashMap<ScanKey, QueryScans>,
    /// The counters of queries forgotten while idle, newest last: a scan
    /// of theirs that starts later goes on from them.
    retired: VecDeque<(ScanKey, Vec<Arc<Metric>>)>,
}

#[derive(Debug)]
struct QueryScans {
    counters: Vec<Arc<Metric>>,
    reported: u64,
    moved: Instant,
}

const FILES_PROCESSED: &str = "files_processed";

impl ScanTally {
    fn lock(&self) -> MutexGuard<'_, Queries> {
        lock(&self.queries)
    }

    /// Count the scan of `key` whose metrics are `metrics`.
    fn enter(&self, key: ScanKey, metrics: &MetricsSet) {
        let mut queries = self.lock();
        let Queries { counting, retired } = &mut *queries;
        let entry = counting.entry(key).or_insert_with(|| {
            let counters = retired
                .iter()
                .position(|(k, _)| *k == key)
                .and_then(|i| retired.remove(i))
                .map_or_else(Vec::new, |(_, counters)| counters);
            QueryScans {
                counters,
                reported: 0,
                moved: Instant::now(),
            }
        });
        for metric in metrics.iter() {
            if metric.value().name() == FILES_PROCESSED
                && !entry.counters.iter().any(|c| Arc::ptr_eq(c, metric))
            {
                entry.counters.push(Arc::clone(metric));
            }
        }
    }

    /// Files the scans of `key` in this process have finished.
    pub fn files_done(&self, key: ScanKey) -> u64 {
        self.lock().counting.get(&key).map_or(0, QueryScans::files)
    }

    /// The files of `key` done here, and forget it (the query ended).
    pub fn finish(&self, key: ScanKey) -> u64 {
        self.lock()
            .counting
            .remove(&key)
            .map_or(0, |entry| entry.files())
    }

    /// Every query's sum, for a heartbeat. A query whose count has not
    /// moved for [`SCAN_TALLY_FORGET_AFTER`] is reported this once more and
    /// then forgotten, its count kept among the last
    /// [`SCAN_TALLY_RETIRED_MAX`] forgotten ones.
    pub fn report(&self) -> Vec<ScanFiles> {
        self.report_at(Instant::now())
    }

    fn report_at(&self, now: Instant) -> Vec<ScanFiles> {
        let mut queries = self.lock();
        let Queries { counting, retired } = &mut *queries;
        let mut report = Vec::with_capacity(counting.len());
        counting.retain(|&key, entry| {
            let files = entry.files();
            if files != entry.reported {
                entry.reported = files;
                entry.moved = now;
            }
            report.push(ScanFiles {
                query_id: key.query,
                files_done: files,
                run: key.run,
            });
            let keep = now.saturating_duration_since(entry.moved) < SCAN_TALLY_FORGET_AFTER;
            if !keep {
                retired.push_back((key, std::mem::take(&mut entry.counters)));
            }
            keep
        });
        while retired.len() > SCAN_TALLY_RETIRED_MAX {
            retired.pop_front();
        }
        report
    }
}

impl QueryScans {
    fn files(&self) -> u64 {
        self.counters.iter().fold(0u64, |sum, c| {
            sum.saturating_add(c.value().as_usize() as u64)
        })
    }
}

/// A file scan of distributed query `key`, entered in `tally` when it
/// runs; otherwise its input, unchanged.
#[derive(Debug)]
pub struct CountedScanExec {
    input: Arc<dyn ExecutionPlan>,
    key: ScanKey,
    tally: Arc<ScanTally>,
}

impl CountedScanExec {
    fn new(input: Arc<dyn ExecutionPlan>, key: ScanKey, tally: Arc<ScanTally>) -> Self {
        Self { input, key, tally }
    }
}

impl DisplayAs for CountedScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "CountedScanExec: query={}", self.key.query)
    }
}

impl ExecutionPlan for CountedScanExec {
    fn name(&self) -> &str {
        "CountedScanExec"
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

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
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
            return internal_err!("CountedScanExec has one child");
        }
        Ok(Arc::new(Self::new(
            children.swap_remove(0),
            self.key,
            Arc::clone(&self.tally),
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
        let stream = self.input.execute(partition, context)?;
        let entry = Entry {
            input: Arc::clone(&self.input),
            key: self.key,
            tally: Arc::clone(&self.tally),
        };
        entry.enter();
        Ok(Box::pin(CountedStream {
            stream,
            entry,
            polled: false,
        }))
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
            [stats] => Ok(Arc::clone(stats)),
            _ => internal_err!("CountedScanExec has one child"),
        }
    }
}

/// Enters a scan's counters in its tally. A file stream may register its
/// counters only once polled, so the stream enters them when it starts,
/// on its first batch and at its end.
struct Entry {
    input: Arc<dyn ExecutionPlan>,
    key: ScanKey,
    tally: Arc<ScanTally>,
}

impl Entry {
    fn enter(&self) {
        if let Some(metrics) = self.input.metrics() {
            self.tally.enter(self.key, &metrics);
        }
    }
}

struct CountedStream {
    stream: SendableRecordBatchStream,
    entry: Entry,
    polled: bool,
}

impl Stream for CountedStream {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = self.stream.poll_next_unpin(cx);
        match &next {
            Poll::Ready(None) => self.entry.enter(),
            Poll::Ready(Some(_)) if !self.polled => {
                self.polled = true;
                self.entry.enter();
            }
            _ => {}
        }
        next
    }
}

impl RecordBatchStream for CountedStream {
    fn schema(&self) -> SchemaRef {
        self.stream.schema()
    }
}

/// Wraps every file scan in a [`CountedScanExec`] of `key`: the last
/// rule before datafusion-distributed cuts the plan into stages.
#[derive(Debug)]
pub struct CountScans {
    key: ScanKey,
    tally: Arc<ScanTally>,
}

impl CountScans {
    pub fn new(key: ScanKey, tally: Arc<ScanTally>) -> Self {
        Self { key, tally }
    }
}

impl PhysicalOptimizerRule for CountScans {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            if file_scan(node.as_ref()).is_none() {
                return Ok(Transformed::no(node));
            }
            let counted = CountedScanExec::new(node, self.key, Arc::clone(&self.tally));
            Ok(Transformed::yes(Arc::new(counted) as Arc<dyn ExecutionPlan>))
        })
        .data()
    }

    fn name(&self) -> &str {
        "skiff_count_scans"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Files (or file ranges) the counted scans of a distributed `plan` read,
/// its stages' plans included.
pub fn files_in(plan: &Arc<dyn ExecutionPlan>) -> u64 {
    let mut files = 0;
    let mut pending = vec![Arc::clone(plan)];
    while let Some(node) = pending.pop() {
        if let Some(counted) = node.downcast_ref::<CountedScanExec>() {
            files += files_of(&counted.input);
        }
        // A boundary's child is its stage's plan, while the stage is local.
        match node.as_network_boundary() {
            Some(boundary) => pending.extend(boundary.input_stage().local_plan().cloned()),
            None => pending.extend(node.children().into_iter().cloned()),
        }
    }
    files
}

/// Files of one scan: of each task's variant when the library split it.
fn files_of(scan: &Arc<dyn ExecutionPlan>) -> u64 {
    let count = |node: &Arc<dyn ExecutionPlan>| {
        file_scan(node.as_ref()).map_or(0, |s| {
            s.file_groups.iter().map(|g| g.len() as u64).sum::<u64>()
        })
    };
    match scan.downcast_ref::<DistributedLeafExec>() {
        Some(leaf) if !leaf.variants().is_empty() => leaf.variants().iter().map(count).sum(),
        Some(leaf) => count(leaf.original()),
        None => count(scan),
    }
}

/// A [`CountedScanExec`] on the wire: its query (its input travels as the
/// node's input). Registered with datafusion-distributed on the coordinator
/// and on every worker, in the same place of its codec list.
#[derive(Debug)]
pub struct ScanCountCodec {
    tally: Arc<ScanTally>,
    /// The receiving process's buffer pool and memory nodes: the scans it
    /// decodes read through them (plans name plain Parquet scans on the
    /// wire).
    tiers: Tiers,
}

impl ScanCountCodec {
    pub fn new(tally: Arc<ScanTally>) -> Self {
        Self {
            tally,
            tiers: Tiers::default(),
        }
    }

    pub fn with_tiers(mut self, tiers: Tiers) -> Self {
        self.tiers = tiers;
        self
    }
}

#[derive(Clone, PartialEq, Message)]
struct CountedScanNode {
    #[prost(uint64, tag = "1")]
    query: u64,
    #[prost(uint64, tag = "2")]
    run: u64,
}

impl PhysicalExtensionCodec for ScanCountCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [input] = inputs else {
            return internal_err!("CountedScanExec with {} inputs", inputs.len());
        };
        let mut tiers = self.tiers.clone();
        if !buffer::enabled(ctx.session_config().options()) {
            tiers.pool = None;
        }
        tiers.prefetch = buffer::prefetch_depth(ctx.session_config().options());
        tiers.prune_chunks = buffer::prune_chunks(ctx.session_config().options());
        let input = buffer::wrap_scans(Arc::clone(input), &tiers, ctx)?;
        let node = CountedScanNode::decode(buf)
            .map_err(|e| internal_datafusion_err!("bad CountedScanExec node: {e}"))?;
        let key = ScanKey {
            run: node.run,
            query: node.query,
        };
        Ok(Arc::new(CountedScanExec::new(
            input,
            key,
            Arc::clone(&self.tally),
        )))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let Some(counted) = node.downcast_ref::<CountedScanExec>() else {
            return not_impl_err!("plan node {} cannot be shipped to a worker", node.name());
        };
        CountedScanNode {
            query: counted.key.query,
            run: counted.key.run,
        }
        .encode(buf)
        .map_err(|e| internal_datafusion_err!("encoding a CountedScanExec: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::physical_plan::collect;
    use datafusion::physical_plan::empty::EmptyExec;
    use datafusion::prelude::{ParquetReadOptions, SessionContext};
    use datafusion_proto::physical_plan::DeduplicatingProtoConverter;

    /// A session over table `t`, three one-row Parquet files in `dir`.
    async fn three_files(dir: &std::path::Path) -> Result<SessionContext> {
        let ctx = SessionContext::new();
        for i in 0..3 {
            let file = dir.join(format!("f{i}.parquet"));
            ctx.sql(&format!("COPY (SELECT {i} AS v) TO '{}'", file.display()))
                .await?
                .collect()
                .await?;
        }
        let path = format!("{}/", dir.display());
        ctx.register_parquet("t", &path, ParquetReadOptions::default())
            .await?;
        Ok(ctx)
    }

    fn find_counted(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
        let mut found = None;
        let _ = plan.apply(|node| {
            if node.downcast_ref::<CountedScanExec>().is_some() {
                found = Some(Arc::clone(node));
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        });
        found
    }

    fn counted(plan: &Arc<dyn ExecutionPlan>) -> usize {
        let mut n = 0;
        let _ = plan.apply(|node| {
            n += usize::from(node.downcast_ref::<CountedScanExec>().is_some());
            Ok(TreeNodeRecursion::Continue)
        });
        n
    }

    #[tokio::test]
    async fn a_counted_scan_counts_every_file_it_reads() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let ctx = three_files(dir.path()).await?;
        let plan = ctx
            .sql("SELECT sum(v) FROM t")
            .await?
            .create_physical_plan()
            .await?;
        let tally = Arc::new(ScanTally::default());
        let key = ScanKey { run: 5, query: 7 };
        let plan =
            CountScans::new(key, Arc::clone(&tally)).optimize(plan, &ConfigOptions::new())?;
        assert_eq!(counted(&plan), 1, "one wrapper per scan");
        assert_eq!(files_in(&plan), 3);
        assert_eq!(tally.files_done(key), 0);
        let batches = collect(plan, ctx.task_ctx()).await?;
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
        assert_eq!(tally.files_done(key), 3);
        assert_eq!(tally.files_done(ScanKey { run: 6, query: 7 }), 0);
        let three = vec![ScanFiles {
            query_id: 7,
            files_done: 3,
            run: 5,
        }];
        assert_eq!(tally.report(), three);

        // Idle past the limit: reported once more, then forgotten; a scan
        // that starts after goes on from the forgotten counters, never
        // counting them twice.
        let later = Instant::now() + SCAN_TALLY_FORGET_AFTER * 2;
        assert_eq!(tally.report_at(later), three);
        assert_eq!(tally.files_done(key), 0);
        assert!(tally.report().is_empty());
        let again = ctx
            .sql("SELECT sum(v) FROM t")
            .await?
            .create_physical_plan()
            .await?;
        let again =
            CountScans::new(key, Arc::clone(&tally)).optimize(again, &ConfigOptions::new())?;
        let scan = find_counted(&again).ok_or_else(|| internal_datafusion_err!("no scan"))?;
        collect(again, ctx.task_ctx()).await?;
        assert_eq!(tally.files_done(key), 6);
        // Entering a scan's counters again counts them once.
        let metrics = scan
            .downcast_ref::<CountedScanExec>()
            .and_then(|c| c.input.metrics())
            .ok_or_else(|| internal_datafusion_err!("no scan metrics"))?;
        tally.enter(key, &metrics);
        assert_eq!(tally.files_done(key), 6);

        // The coordinator's own count, taken when its query ends.
        assert_eq!(tally.finish(key), 6);
        assert!(tally.report().is_empty());
        Ok(())
    }

    #[tokio::test]
    async fn a_plan_without_file_scans_is_left_alone() -> Result<()> {
        let ctx = SessionContext::new();
        let plan = ctx
            .sql("SELECT 1 AS one")
            .await?
            .create_physical_plan()
            .await?;
        let tally = Arc::new(ScanTally::default());
        let key = ScanKey { run: 1, query: 1 };
        let plan = CountScans::new(key, tally).optimize(plan, &ConfigOptions::new())?;
        assert_eq!(counted(&plan), 0);
        assert_eq!(files_in(&plan), 0);
        Ok(())
    }

    #[test]
    fn the_codec_carries_the_query_to_the_receivers_tally() -> Result<()> {
        let input: Arc<dyn ExecutionPlan> =
            Arc::new(EmptyExec::new(Arc::new(arrow::datatypes::Schema::empty())));
        let sender = ScanCountCodec::new(Arc::default());
        let key = ScanKey { run: 9, query: 42 };
        let node = CountedScanExec::new(Arc::clone(&input), key, Arc::default());
        let mut buf = Vec::new();
        sender.try_encode(Arc::new(node), &mut buf, &DeduplicatingProtoConverter {})?;

        let tally = Arc::new(ScanTally::default());
        let receiver = ScanCountCodec::new(Arc::clone(&tally));
        let decoded = receiver.try_decode(
            &buf,
            &[input],
            &TaskContext::default(),
            &DeduplicatingProtoConverter {},
        )?;
        let decoded = decoded
            .downcast_ref::<CountedScanExec>()
            .ok_or_else(|| internal_datafusion_err!("not a CountedScanExec"))?;
        assert_eq!(decoded.key, key);
        assert!(Arc::ptr_eq(&decoded.tally, &tally));
        // Another node is not this codec's.
        let other: Arc<dyn ExecutionPlan> =
            Arc::new(EmptyExec::new(Arc::new(arrow::datatypes::Schema::empty())));
        assert!(
            receiver
                .try_encode(other, &mut Vec::new(), &DeduplicatingProtoConverter {})
                .is_err()
        );
        Ok(())
    }
}
