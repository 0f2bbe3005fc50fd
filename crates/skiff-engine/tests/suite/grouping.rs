//! The pipeline grouper over real plans: pipelines of a batch that read
//! the same columns of held tables are grouped greedily by overlap, never
//! a pipeline with its own input, and never past the memory budget.

use std::sync::Arc;

use futures::future::BoxFuture;
use skiff_engine::buffer::{ChunkFetch, ChunkSource, Fetched};
use skiff_engine::grouping::{Grouping, group};
use skiff_engine::{Engine, EngineConfig, PipelineGraph};

/// Holds every table; never asked for chunks here.
#[derive(Debug)]
struct HoldsAll;

impl ChunkSource for HoldsAll {
    fn holds(&self, _table: &str) -> bool {
        true
    }

    fn fetch(&self, _fetch: ChunkFetch) -> Option<BoxFuture<'static, Fetched>> {
        None
    }
}

async fn graphs(engine: &Engine, queries: &[&str]) -> Vec<PipelineGraph> {
    let mut graphs = Vec::new();
    for sql in queries {
        let plan = engine.physical_plan(sql).await.expect(sql);
        graphs.push(skiff_engine::split(plan).expect(sql));
    }
    graphs
}

fn grouped(graphs: &[PipelineGraph], budget: usize) -> Grouping {
    let source: Arc<dyn ChunkSource> = Arc::new(HoldsAll);
    let refs: Vec<&PipelineGraph> = graphs.iter().collect();
    group(7, &refs, &source, budget)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelines_sharing_columns_are_grouped_within_the_budget() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::new(&EngineConfig {
        target_partitions: Some(2),
        ..EngineConfig::default()
    })
    .expect("engine");
    engine
        .register_data_dir(dir.path())
        .await
        .expect("data dir");
    for sql in [
        "CREATE TABLE t (a BIGINT, b BIGINT, c BIGINT)",
        "INSERT INTO t SELECT value, value * 2, value * 3 FROM generate_series(1, 20000)",
    ] {
        let output = engine.execute(sql).await.expect(sql);
        let _: Vec<_> = futures::TryStreamExt::try_collect(output.stream)
            .await
            .expect(sql);
    }
    let batch = graphs(
        &engine,
        &[
            "SELECT sum(a) FROM t",
            "SELECT sum(c) FROM t",
            "SELECT sum(a + b) FROM t",
        ],
    )
    .await;
    let all = grouped(&batch, usize::MAX);
    assert_eq!(all.groups.len(), 1, "{:?}", all.groups);
    let group = &all.groups[0];
    let members: Vec<usize> = group.members.iter().map(|(q, _)| *q).collect();
    assert_eq!(members, vec![0, 2], "the sum of c shares nothing");
    assert_eq!(group.shared_names(), "t.a");
    assert_eq!(group.label, "7.0");
    assert!(all.assignments[1].0.is_empty());
    assert_eq!(all.assignments[0].0.len(), 1);
    // The budget counts the members' columns, by the scans' statistics.
    assert!(group.bytes > 0, "{group:?}");
    assert!(grouped(&batch, group.bytes).groups.len() == 1);
    assert!(grouped(&batch, group.bytes - 1).groups.is_empty());

    // A join of t with itself on a: its probe side's pipeline reads the
    // build side's output, so the two never share a group, though both
    // read t.a; another query's scan of t.a joins one of them.
    let batch = graphs(
        &engine,
        &[
            "SELECT count(*) FROM t x JOIN t y ON x.a = y.a",
            "SELECT max(a) FROM t",
        ],
    )
    .await;
    let joined = &batch[0];
    let scans: Vec<usize> = joined
        .pipelines()
        .iter()
        .filter(|p| !skiff_engine::buffer::parquet_scans(&p.plan).is_empty())
        .map(|p| p.id.0)
        .collect();
    assert_eq!(scans.len(), 2, "build and probe each scan t");
    let all = grouped(&batch, usize::MAX);
    assert_eq!(all.groups.len(), 1, "{:?}", all.groups);
    let members = &all.groups[0].members;
    assert_eq!(members.len(), 2, "{members:?}");
    assert_eq!(
        members.iter().filter(|(q, _)| *q == 0).count(),
        1,
        "one side of the join: {members:?}"
    );

    // A full batch of queries over the same columns is one group however
    // many: the budget counts the union of their columns, two columns; a
    // budget below those groups none.
    let same: Vec<&str> = vec!["SELECT sum(a) + max(b) FROM t"; 64];
    let batch = graphs(&engine, &same).await;
    let all = grouped(&batch, usize::MAX);
    assert_eq!(all.groups.len(), 1);
    assert_eq!(all.groups[0].members.len(), 64);
    let tight = grouped(&batch, all.groups[0].bytes);
    assert_eq!(tight.groups.len(), 1);
    assert_eq!(tight.groups[0].members.len(), 64);
    let few = grouped(&batch, all.groups[0].bytes - 1);
    assert!(few.groups.is_empty(), "two columns do not fit");
}
