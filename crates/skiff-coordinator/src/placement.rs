//! Where a distributed query's scan tasks run (issue 16): a scan of a
//! hash-partitioned table becomes one task per owner of its class's
//! partitions, each reading its owner's partitions and routed to that
//! owner, under the partition map the query was planned with. That is the
//! locality a worker's cache of its own partitions depends on.
//!
//! Three hooks of datafusion-distributed, registered on the coordinator's
//! planning session (`shared/notes/datafusion-distributed.md` §2b):
//! [`desired`] asks for one task per owner, [`scale_up`] gives task `i` the
//! files of the `i`-th owner (by worker id), [`route`] sends task `i` to
//! that owner. A stage whose task count ends up different copes: fewer
//! tasks than owners take several owners' files each (task `i` those of
//! owners `i`, `i + T`, ...; its route is owner `i`), more tasks leave the
//! extra ones empty. Files whose owner takes no queries (draining, or not
//! in the map yet) go to the task with the fewest bytes: any worker can
//! read any partition, since all of them are in the data directory.
//!
//! [`route`] places every other stage too, its tasks round the workers
//! (each stage starting one further on), and records each stage's workers
//! ([`Routes`]) for `skiff.queries`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use datafusion::catalog::memory::DataSourceExec;
use datafusion::common::Result as DfResult;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfig};
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use datafusion_distributed::{
    DesiredTaskCountEvent, DesiredTaskCountEventResponse, DistributedLeafExec, NetworkBoundaryExt,
    RouteTasksEvent, RouteTasksEventResponse, ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse,
};
use skiff_cluster::{PartitionManager, WorkerId};

use skiff_node::checkpoints::marked;
use skiff_node::sync::lock;
use skiff_tables::partition::{FilePartition, PARTITION_COLUMN};
use skiff_tables::{deal_files, file_scan, group_by_partition, is_declared};
use url::Url;

/// The partition map a distributed query is planned under and the
/// addresses of the workers that take queries; a `SessionConfig` extension
/// of its planning session.
#[derive(Clone, Debug)]
pub(crate) struct Placement {
    pub(crate) manager: Arc<PartitionManager>,
    pub(crate) urls: BTreeMap<WorkerId, Url>,
    /// Where the stages' tasks went, as the query starts them.
    pub(crate) routes: Arc<Routes>,
    /// For each stage in routing order, whether its URLs are marked apart
    /// (`skiff_node::checkpoints::marked`): the query commits its output,
    /// and no read of it may be answered in-process, past the store
    /// (`stage_commits::marks`). A stage beyond the list is not marked.
    pub(crate) marks: Vec<bool>,
}

/// The workers of each task of a distributed query's stages, in the order
/// they were routed (the library routes them when the query starts).
#[derive(Debug, Default)]
pub(crate) struct Routes(Mutex<Vec<Vec<WorkerId>>>);

impl Routes {
    fn record(&self, workers: Vec<WorkerId>) {
        lock(&self.0).push(workers);
    }

    /// The worker of each task of each stage routed so far, in routing
    /// order (the console draws them).
    pub(crate) fn stages(&self) -> Vec<Vec<WorkerId>> {
        lock(&self.0).clone()
    }

    /// `skiff.queries.tasks`: `3 stages; worker 1: 3 tasks, worker 2: 2
    /// tasks`; `None` before any stage was routed.
    pub(crate) fn describe(&self) -> Option<String> {
        let stages = lock(&self.0);
        if stages.is_empty() {
            return None;
        }
        let mut per_worker: BTreeMap<WorkerId, usize> = BTreeMap::new();
        for worker in stages.iter().flatten() {
            *per_worker.entry(*worker).or_default() += 1;
        }
        let workers: Vec<String> = per_worker
            .iter()
            .map(|(w, n)| format!("worker {w}: {n} task{}", if *n == 1 { "" } else { "s" }))
            .collect();
        Some(format!(
            "{} stage{}; {}",
            stages.len(),
            if stages.len() == 1 { "" } else { "s" },
            workers.join(", ")
        ))
    }
}

impl Placement {
    /// The owners of class `partitions` that take queries, by id: task `i`
    /// of a scan of the class is `owners[i]`'s.
    fn owners(&self, partitions: u32) -> Vec<WorkerId> {
        let Some(mapping) = self.manager.mapping(partitions) else {
            return Vec::new();
        };
        let mut owners: Vec<WorkerId> = mapping
            .owners()
            .iter()
            .copied()
            .filter(|w| self.urls.contains_key(w))
            .collect();
        owners.sort_unstable();
        owners.dedup();
        owners
    }

    /// Where each of `task_count` tasks of a stage scanning class
    /// `partitions` runs: task `i` on owner `i`, the tasks beyond the
    /// owners round the workers. `None` when no owner takes queries.
    fn task_workers(&self, partitions: u32, task_count: usize) -> Option<Vec<(WorkerId, Url)>> {
        let owners = self.owners(partitions);
        let all: Vec<(&WorkerId, &Url)> = self.urls.iter().collect();
        if owners.is_empty() || all.is_empty() {
            return None;
        }
        let workers = (0..task_count)
            .map(|i| match owners.get(i) {
                Some(owner) => (*owner, self.urls[owner].clone()),
                None => (*all[i % all.len()].0, all[i % all.len()].1.clone()),
            })
            .collect();
        Some(workers)
    }
}

/// The files of `plan` when it is a Parquet scan of one hash-partitioned
/// table (every file tagged with its partition), with the class.
fn partitioned_scan(plan: &Arc<dyn ExecutionPlan>) -> Option<(&FileScanConfig, u32)> {
    let scan = file_scan(plan.as_ref())?;
    let mut class = None;
    for file in scan.file_groups.iter().flat_map(|g| g.iter()) {
        let tag = file.extension::<FilePartition>()?;
        if *class.get_or_insert(tag.partitions) != tag.partitions {
            return None;
        }
    }
    Some((scan, class?))
}

/// One task per owner of the scanned table's class.
pub(crate) fn desired(
    ev: DesiredTaskCountEvent,
) -> Option<DfResult<DesiredTaskCountEventResponse>> {
    let placement = ev.session_config.get_extension::<Placement>()?;
    let (_, class) = partitioned_scan(ev.plan)?;
    let owners = placement.owners(class);
    if owners.is_empty() {
        return None;
    }
    Some(Ok(DesiredTaskCountEventResponse::desired(owners.len())))
}

/// The scan as one variant per task, task `i` reading the partitions of
/// owner `i` (see the module's doc for other task counts).
pub(crate) fn scale_up(ev: ScaleUpLeafNodeEvent) -> Option<DfResult<ScaleUpLeafNodeEventResponse>> {
    let placement = ev.session_config.get_extension::<Placement>()?;
    let (scan, class) = partitioned_scan(ev.plan)?;
    let owners = placement.owners(class);
    let declared = is_declared(scan);
    // A declared scan is always placed here: the library's own split
    // would deal its files without regard to their partitions.
    if (owners.is_empty() && !declared) || ev.task_count == 0 {
        return None;
    }
    // Every variant has the scan's partition count (the library requires
    // one count), some of them empty.
    let width = ev.plan.output_partitioning().partition_count().max(1);
    let groups: Vec<Vec<FileGroup>> = if declared {
        let split = DeclaredSplit::new(&placement.manager, class, &owners, ev.task_count);
        split.groups(scan, width)
    } else {
        let tasks = assign(&placement.manager, class, &owners, scan, ev.task_count);
        tasks
            .into_iter()
            .map(|files| deal_files(files, width))
            .collect()
    };
    let variants = groups.into_iter().map(|file_groups| {
        let mut variant = scan.clone();
        variant.file_groups = file_groups;
        DataSourceExec::from_data_source(variant) as Arc<dyn ExecutionPlan>
    });
    Some(
        DistributedLeafExec::try_new(Arc::clone(ev.plan), variants)
            .map(|leaf| ScaleUpLeafNodeEventResponse::new(Arc::new(leaf))),
    )
}

/// Where each partition of a class goes in a stage of `task_count` tasks
/// when its scans declare their partitioning: the task of its owner, or
/// (an owner without a task) task `partition mod task_count`; within the
/// task, group `rank mod width`, its rank among the task's partitions. It
/// depends on the class, the map and the stage only, never on a table's
/// files, so every scan of the class in the stage groups alike and a join
/// of them reads matching groups.
struct DeclaredSplit {
    /// Per partition: its task and its rank there.
    slots: Vec<(usize, usize)>,
    task_count: usize,
}

impl DeclaredSplit {
    fn new(
        manager: &PartitionManager,
        class: u32,
        owners: &[WorkerId],
        task_count: usize,
    ) -> DeclaredSplit {
        assert!(task_count > 0, "a stage has at least one task");
        let task_of: BTreeMap<WorkerId, usize> = owners
            .iter()
            .enumerate()
            .map(|(i, &w)| (w, i % task_count))
            .collect();
        let mut ranks = vec![0usize; task_count];
        let slots = (0..class)
            .map(|partition| {
                let task = manager
                    .owner(class, partition)
                    .and_then(|owner| task_of.get(&owner).copied())
                    .unwrap_or(partition as usize % task_count);
                let rank = ranks[task];
                ranks[task] += 1;
                (task, rank)
            })
            .collect();
        DeclaredSplit { slots, task_count }
    }

    /// Each task's `width` file groups.
    fn groups(&self, scan: &FileScanConfig, width: usize) -> Vec<Vec<FileGroup>> {
        let mut files: Vec<Vec<PartitionedFile>> = vec![Vec::new(); self.task_count];
        for file in scan.file_groups.iter().flat_map(|g| g.iter()) {
            let partition = file
                .extension::<FilePartition>()
                .map(|t| t.partition as usize);
            let task = partition.and_then(|p| self.slots.get(p)).map_or(0, |s| s.0);
            files[task].push(file.clone());
        }
        files
            .into_iter()
            .map(|files| {
                group_by_partition(files, width, |p| {
                    self.slots.get(p as usize).map_or(0, |s| s.1)
                })
            })
            .collect()
    }
}

/// The files of each of `task_count` tasks.
fn assign(
    manager: &PartitionManager,
    class: u32,
    owners: &[WorkerId],
    scan: &FileScanConfig,
    task_count: usize,
) -> Vec<Vec<PartitionedFile>> {
    let task_of: BTreeMap<WorkerId, usize> = owners
        .iter()
        .enumerate()
        .map(|(i, &w)| (w, i % task_count))
        .collect();
    let mut tasks: Vec<(u64, Vec<PartitionedFile>)> = vec![(0, Vec::new()); task_count];
    let mut homeless = Vec::new();
    for file in scan.file_groups.iter().flat_map(|g| g.iter()) {
        let task = file
            .extension::<FilePartition>()
            .and_then(|tag| manager.owner(class, tag.partition))
            .and_then(|owner| task_of.get(&owner).copied());
        match task {
            Some(t) => {
                tasks[t].0 += file.object_meta.size;
                tasks[t].1.push(file.clone());
            }
            None => homeless.push(file.clone()),
        }
    }
    for file in homeless {
        if let Some(lightest) = tasks.iter_mut().min_by_key(|(bytes, _)| *bytes) {
            lightest.0 += file.object_meta.size;
            lightest.1.push(file);
        }
    }
    tasks.into_iter().map(|(_, files)| files).collect()
}

/// Task `i` of a stage that scans a partitioned table goes to owner `i` of
/// its class; tasks beyond the owners go round the other workers. The
/// first partitioned scan of the stage decides (a stage that scans tables
/// of two classes is placed for the first). The tasks of any other stage
/// go round the workers, each stage starting one worker further on, so
/// that single-task stages do not all land on one worker.
pub(crate) fn route(ev: RouteTasksEvent) -> Option<DfResult<RouteTasksEventResponse>> {
    let config = ev.task_ctx.session_config();
    let placement = config.get_extension::<Placement>()?;
    // The stages are routed one at a time: the count so far is this one's.
    let stage = lock(&placement.routes.0).len();
    let workers = match placement.stage_workers(&placement.routes, ev.plan, ev.task_count)? {
        Ok(workers) => workers,
        Err(e) => return Some(Err(e)),
    };
    let mark = placement.marks.get(stage).copied().unwrap_or(false);
    let urls = workers.into_iter().map(|(_, url)| match mark {
        true => marked(&url, stage),
        false => url,
    });
    Some(Ok(RouteTasksEventResponse::new(urls.collect())))
}

impl Placement {
    /// Where the `task_count` tasks of the stage whose plan is `stage` run
    /// ([`route`]'s rule), recorded in `routes`; `None` without workers.
    fn stage_workers(
        &self,
        routes: &Routes,
        stage: &Arc<dyn ExecutionPlan>,
        task_count: usize,
    ) -> Option<DfResult<Vec<(WorkerId, Url)>>> {
        let mut class = None;
        let walked = stage.apply(|node| {
            // The stages below are not this one's (when the query starts
            // they are remote already, without children).
            if node.is_network_boundary() {
                return Ok(TreeNodeRecursion::Jump);
            }
            if let Some(leaf) = node.downcast_ref::<DistributedLeafExec>()
                && let Some((_, c)) = partitioned_scan(leaf.original())
            {
                class = Some(c);
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        });
        if let Err(e) = walked {
            return Some(Err(e));
        }
        let workers = match class.and_then(|c| self.task_workers(c, task_count)) {
            Some(workers) => workers,
            None => self.round(routes, task_count)?,
        };
        routes.record(workers.iter().map(|(id, _)| *id).collect());
        Some(Ok(workers))
    }

    /// `task_count` tasks round the workers, from the one after the last
    /// stage's start; `None` without workers.
    fn round(&self, routes: &Routes, task_count: usize) -> Option<Vec<(WorkerId, Url)>> {
        let all: Vec<(&WorkerId, &Url)> = self.urls.iter().collect();
        if all.is_empty() {
            return None;
        }
        let start = lock(&routes.0).len();
        Some(
            (0..task_count)
                .map(|i| {
                    let (id, url) = all[(start + i) % all.len()];
                    (*id, url.clone())
                })
                .collect(),
        )
    }
}

/// The stages of `plan` (a distributed plan) in the order the library
/// routes them when the query starts: children before parents, as its
/// `transform_up` visits them. Each is its number, plan and task count.
fn stages_in_routing_order(
    plan: &Arc<dyn ExecutionPlan>,
) -> Vec<(usize, Arc<dyn ExecutionPlan>, usize)> {
    fn visit(node: &Arc<dyn ExecutionPlan>, out: &mut Vec<(usize, Arc<dyn ExecutionPlan>, usize)>) {
        for child in node.children() {
            visit(child, out);
        }
        if let Some(boundary) = node.as_network_boundary() {
            let stage = boundary.input_stage();
            if let Some(local) = stage.local_plan() {
                out.push((stage.num(), Arc::clone(local), stage.task_count()));
            }
        }
    }
    let mut out = Vec::new();
    visit(plan, &mut out);
    out
}

/// `EXPLAIN`'s account of placement: each stage's workers as [`route`]
/// will place them (the same rule over the stages in the library's
/// routing order, into routes of its own), and for each scan of a
/// partitioned table in `plan` (a distributed plan), the worker each task
/// goes to and the partitions it reads, under the query's epoch. Each scan is shown by its
/// own class; a stage holding scans of two classes is routed by its first
/// ([`route`]), so there the second scan's workers are not the ones shown.
pub(crate) fn explain(plan: &Arc<dyn ExecutionPlan>, placement: &Placement) -> String {
    let mut text = format!("epoch {}\n", placement.manager.epoch());
    // Every stage's workers, routed as the query would be when it starts.
    let routes = Routes::default();
    for (num, stage, tasks) in stages_in_routing_order(plan) {
        if let Some(Ok(workers)) = placement.stage_workers(&routes, &stage, tasks) {
            let ids: Vec<String> = workers.iter().map(|(id, _)| id.to_string()).collect();
            text.push_str(&format!("stage {num}: workers {}\n", ids.join(",")));
        }
    }
    if let Some(summary) = routes.describe() {
        text.push_str(&format!("tasks: {summary}\n"));
    }
    let _ = plan.apply(|node| {
        let Some(leaf) = node.downcast_ref::<DistributedLeafExec>() else {
            return Ok(TreeNodeRecursion::Continue);
        };
        let Some((scan, class)) = partitioned_scan(leaf.original()) else {
            return Ok(TreeNodeRecursion::Continue);
        };
        let table = scan
            .file_groups
            .iter()
            .flat_map(|g| g.iter())
            .find_map(table_of)
            .unwrap_or_else(|| "?".to_string());
        text.push_str(&format!("scan of {table} ({class} partitions)\n"));
        let workers = placement
            .task_workers(class, leaf.variants().len())
            .unwrap_or_default();
        for (i, variant) in leaf.variants().iter().enumerate() {
            let mut read: Vec<u32> = file_scan(variant.as_ref())
                .map(|s| {
                    s.file_groups
                        .iter()
                        .flat_map(|g| g.iter())
                        .filter_map(|f| f.extension::<FilePartition>().map(|t| t.partition))
                        .collect()
                })
                .unwrap_or_default();
            read.sort_unstable();
            read.dedup();
            let list = read
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",");
            match workers.get(i) {
                Some((id, url)) => text.push_str(&format!(
                    "  task {i}: worker {id} ({}) partitions {list}\n",
                    url.authority()
                )),
                None => text.push_str(&format!("  task {i}: any worker, partitions {list}\n")),
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    text
}

/// The table a file of a partitioned table belongs to: the directory above
/// its partition directory.
fn table_of(file: &PartitionedFile) -> Option<String> {
    let parts: Vec<_> = file.object_meta.location.parts().collect();
    let at = parts
        .iter()
        .position(|p| p.as_ref().starts_with(PARTITION_COLUMN))?;
    Some(parts.get(at.checked_sub(1)?)?.as_ref().to_string())
}

#[cfg(test)]
mod tests {
    use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder, ParquetSource};
    use datafusion::execution::TaskContext;
    use datafusion::execution::object_store::ObjectStoreUrl;
    use datafusion::prelude::SessionConfig;

    use super::*;

    fn file(partition: u32, size: u64) -> PartitionedFile {
        PartitionedFile::new(format!("t/p={partition}/f"), size).with_extension(FilePartition {
            partitions: 8,
            partition,
        })
    }

    fn scan_of(files: Vec<PartitionedFile>) -> FileScanConfig {
        let schema = Arc::new(arrow::datatypes::Schema::empty());
        let source = Arc::new(ParquetSource::new(
            datafusion::datasource::table_schema::TableSchema::from(schema),
        ));
        FileScanConfigBuilder::new(ObjectStoreUrl::local_filesystem(), source)
            .with_file_groups(vec![FileGroup::new(files)])
            .build()
    }

    fn manager() -> PartitionManager {
        let mut manager = PartitionManager::new([1, 2, 3]);
        manager.ensure_class(8).unwrap();
        manager
    }

    fn partitions_of(files: &[PartitionedFile]) -> Vec<u32> {
        let mut read: Vec<u32> = files
            .iter()
            .map(|f| f.extension::<FilePartition>().unwrap().partition)
            .collect();
        read.sort_unstable();
        read
    }

    #[test]
    fn each_task_reads_its_owners_partitions() {
        let manager = manager();
        let files: Vec<PartitionedFile> = (0..8).map(|p| file(p, 100)).collect();
        let owners = [1, 2, 3];
        let owner_of = |f: &PartitionedFile| {
            let tag = f.extension::<FilePartition>().unwrap();
            manager.owner(8, tag.partition).unwrap()
        };
        let every: Vec<u32> = (0..8).collect();
        // One task per owner: each task holds exactly its owner's files.
        let tasks = assign(&manager, 8, &owners, &scan_of(files.clone()), 3);
        for (i, task) in tasks.iter().enumerate() {
            assert!(!task.is_empty());
            assert!(task.iter().all(|f| owner_of(f) == owners[i]), "task {i}");
        }
        assert_eq!(partitions_of(&tasks.concat()), every);
        // Two tasks for three owners: owner 3's files join task 0.
        let tasks = assign(&manager, 8, &owners, &scan_of(files.clone()), 2);
        assert!(tasks[1].iter().all(|f| owner_of(f) == 2));
        assert_eq!(partitions_of(&tasks.concat()), every);
        // Owner 3 takes no queries: its files go to the lighter task.
        let tasks = assign(&manager, 8, &[1, 2], &scan_of(files), 2);
        assert_eq!(partitions_of(&tasks.concat()), every);
        assert!(tasks[0].iter().any(|f| owner_of(f) == 1));
        assert!(tasks[1].iter().any(|f| owner_of(f) == 2));
        // Groups within a task: exactly the width asked, none lost.
        let groups = deal_files(vec![file(0, 5)], 4);
        assert_eq!(groups.len(), 4);
        assert_eq!(groups.iter().map(|g| g.len()).sum::<usize>(), 1);
    }

    /// Two declared scans of one class put each partition in the same
    /// task and group, whatever files each table has: what lets a join
    /// read group `g` of task `t` of both. Every partition is read once.
    #[test]
    fn declared_scans_of_a_class_split_alike() {
        let manager = manager();
        let place = |split: &DeclaredSplit, files: Vec<PartitionedFile>| {
            let mut at = BTreeMap::new();
            for (t, groups) in split.groups(&scan_of(files), 2).iter().enumerate() {
                assert_eq!(groups.len(), 2, "every task has the scan's width");
                for (g, group) in groups.iter().enumerate() {
                    for p in partitions_of(group.files()) {
                        assert!(at.insert(p, (t, g)).is_none(), "partition {p} twice");
                    }
                }
            }
            at
        };
        for (owners, tasks) in [
            (&[1, 2, 3][..], 3),
            (&[1, 2, 3][..], 2),
            (&[1, 2][..], 2),
            (&[][..], 3),
        ] {
            let split = DeclaredSplit::new(&manager, 8, owners, tasks);
            let whole = place(&split, (0..8).map(|p| file(p, 100)).collect());
            assert_eq!(whole.len(), 8);
            // A table without rows in some partitions, files of other sizes.
            let sparse = place(
                &split,
                [1, 4, 6].map(|p| file(p, 7 * u64::from(p) + 1)).to_vec(),
            );
            for (p, slot) in &sparse {
                assert_eq!(whole.get(p), Some(slot), "partition {p}, owners {owners:?}");
            }
            // Each owner's partitions in its own task.
            for (i, owner) in owners.iter().enumerate() {
                for p in 0..8 {
                    if manager.owner(8, p) == Some(*owner) {
                        assert_eq!(whole[&p].0, i % tasks, "partition {p}");
                    }
                }
            }
        }
    }

    /// The three hooks together, as the library calls them: the scan
    /// asks for one task per owner, is split into variants, and each
    /// variant is routed to the owner of every partition it reads.
    #[test]
    fn hooks_route_each_variant_to_its_owner() {
        let manager = Arc::new(manager());
        let urls: BTreeMap<WorkerId, Url> = [1, 2, 3]
            .into_iter()
            .map(|w| (w, Url::parse(&format!("http://w{w}:1")).unwrap()))
            .collect();
        let routes = Arc::new(Routes::default());
        let mut config = SessionConfig::new();
        config.set_extension(Arc::new(Placement {
            routes: Arc::clone(&routes),
            manager: Arc::clone(&manager),
            urls: urls.clone(),
            marks: Vec::new(),
        }));
        let scan: Arc<dyn ExecutionPlan> =
            DataSourceExec::from_data_source(scan_of((0..8).map(|p| file(p, 100)).collect()));
        let wanted = desired(DesiredTaskCountEvent {
            plan: &scan,
            session_config: &config,
        })
        .unwrap()
        .unwrap();
        assert_eq!(wanted.task_count.as_usize(), 3);
        let leaf = scale_up(ScaleUpLeafNodeEvent {
            plan: &scan,
            task_count: 3,
            session_config: &config,
        })
        .unwrap()
        .unwrap()
        .plan;
        let ctx = Arc::new(TaskContext::default().with_session_config(config));
        let routed = route(RouteTasksEvent {
            task_ctx: Arc::clone(&ctx),
            plan: &leaf,
            task_count: 3,
        })
        .unwrap()
        .unwrap()
        .urls;
        // A stage without a partitioned scan goes round the workers, from
        // the one after the last stage's start; both are recorded.
        let other: Arc<dyn ExecutionPlan> =
            Arc::new(datafusion::physical_plan::empty::EmptyExec::new(Arc::new(
                arrow::datatypes::Schema::empty(),
            )));
        let round = route(RouteTasksEvent {
            task_ctx: ctx,
            plan: &other,
            task_count: 2,
        })
        .unwrap()
        .unwrap()
        .urls;
        assert_eq!(round, vec![urls[&2].clone(), urls[&3].clone()]);
        assert_eq!(
            routes.describe().as_deref(),
            Some("2 stages; worker 1: 1 task, worker 2: 2 tasks, worker 3: 2 tasks")
        );
        let leaf = leaf.downcast_ref::<DistributedLeafExec>().unwrap();
        let mut read = Vec::new();
        for (variant, url) in leaf.variants().iter().zip(&routed) {
            let files: Vec<PartitionedFile> = partitioned_scan(variant)
                .unwrap()
                .0
                .file_groups
                .iter()
                .flat_map(|g| g.iter().cloned())
                .collect();
            for p in partitions_of(&files) {
                assert_eq!(&urls[&manager.owner(8, p).unwrap()], url, "partition {p}");
                read.push(p);
            }
        }
        read.sort_unstable();
        assert_eq!(read, (0..8).collect::<Vec<_>>());
    }
}
