//! Pipeline splitting on representative plans: each test names the breakers
//! it expects, checks the graph invariants, and runs the graph against
//! DataFusion's own streaming execution of the same SQL.

use std::sync::Arc;

use futures::TryStreamExt;
use skiff_engine::{Breaker, Engine, QueryExecution};

use crate::invariants;
use skiff_testkit::render_rows;

use crate::support::engine;

async fn tables() -> Engine {
    let engine = engine(None, 3).await;
    for ddl in [
        "CREATE TABLE a (x INT, y INT, s VARCHAR) AS VALUES \
         (1, 10, 'p'), (2, 20, 'q'), (3, 30, 'r'), (4, NULL, 's'), (NULL, 50, 't'), (2, 20, 'u')",
        "CREATE TABLE b (x INT, z INT) AS VALUES (1, 100), (2, 200), (2, 201), (5, 500), (NULL, 0)",
        "CREATE TABLE c (z INT, w VARCHAR) AS VALUES (100, 'c100'), (201, 'c201'), (999, 'c999')",
    ] {
        engine
            .execute(ddl)
            .await
            .expect(ddl)
            .stream
            .try_collect::<Vec<_>>()
            .await
            .expect(ddl);
    }
    engine
}

/// Cut `sql`, check invariants and results; returns the breakers in order.
async fn breakers(sql: &str) -> Vec<Breaker> {
    let engine = tables().await;
    let plan = engine.physical_plan(sql).await.expect(sql);
    let execution = engine.start(plan.clone()).expect("cut");
    invariants::check(execution.graph(), &plan);
    let breakers = execution
        .graph()
        .pipelines()
        .iter()
        .map(|p| p.breaker)
        .collect();

    assert_answers_match(&engine, &execution, sql).await;
    breakers
}

/// Run the graph and DataFusion's streaming execution of `sql`: same rows
/// (in any order), and some rows.
async fn assert_answers_match(engine: &Engine, execution: &Arc<QueryExecution>, sql: &str) {
    let ours: Vec<_> = execution
        .execute()
        .expect("run")
        .try_collect()
        .await
        .expect(sql);
    let stream = engine.execute_streaming(sql).await.expect(sql);
    let theirs: Vec<_> = stream.try_collect().await.expect(sql);
    let (mut ours, mut theirs) = (render_rows(&ours), render_rows(&theirs));
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs, "{sql}");
    assert!(!ours.is_empty(), "{sql} returned nothing");
}

fn count(breakers: &[Breaker], wanted: impl Fn(&Breaker) -> bool) -> usize {
    breakers.iter().filter(|b| wanted(b)).count()
}

fn is_build(b: &Breaker) -> bool {
    matches!(
        b,
        Breaker::HashJoinBuild { .. } | Breaker::NestedLoopJoinBuild | Breaker::CrossJoinBuild
    )
}

#[tokio::test]
async fn join_chain_cuts_every_build_side() {
    let b = breakers("SELECT a.s, c.w FROM a JOIN b ON a.x = b.x JOIN c ON b.z = c.z").await;
    assert_eq!(count(&b, is_build), 2, "{b:?}");
    assert_eq!(b.last(), Some(&Breaker::Result));
}

#[tokio::test]
async fn outer_semi_and_anti_joins_cut_their_build_sides() {
    for join in ["LEFT", "RIGHT", "FULL"] {
        let sql = format!("SELECT a.s, b.z FROM a {join} JOIN b ON a.x = b.x");
        let b = breakers(&sql).await;
        assert_eq!(count(&b, is_build), 1, "{sql}: {b:?}");
    }
    let b = breakers("SELECT s FROM a WHERE x IN (SELECT x FROM b)").await;
    assert_eq!(count(&b, is_build), 1, "semi: {b:?}");
    let b = breakers("SELECT s FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.x = a.x)").await;
    assert_eq!(count(&b, is_build), 1, "anti: {b:?}");
}

#[tokio::test]
async fn aggregate_then_sort_are_two_breakers() {
    let b = breakers("SELECT y, count(*) AS n FROM a GROUP BY y ORDER BY y").await;
    assert_eq!(b, vec![Breaker::Aggregate, Breaker::Sort, Breaker::Result]);
}

#[tokio::test]
async fn topk_is_a_breaker() {
    let b = breakers("SELECT s FROM a ORDER BY x DESC NULLS LAST LIMIT 2").await;
    assert_eq!(
        count(&b, |b| matches!(b, Breaker::TopK { fetch: 2 })),
        1,
        "{b:?}"
    );
}

#[tokio::test]
async fn scalar_subquery_runs_as_its_own_pipeline() {
    // The subquery's pipeline is named by its own sink when it has one...
    let b = breakers("SELECT s FROM a WHERE x > (SELECT avg(x) FROM b)").await;
    assert_eq!(b, vec![Breaker::Aggregate, Breaker::Result]);
    // ...and by the scalar subquery it feeds when it has none.
    let b = breakers("SELECT s FROM a WHERE x < (SELECT x FROM b WHERE z = 500)").await;
    assert_eq!(b, vec![Breaker::ScalarSubquery, Breaker::Result]);
}

#[tokio::test]
async fn union_is_one_pipeline_with_two_sources() {
    let b = breakers("SELECT x FROM a UNION ALL SELECT x FROM b").await;
    assert_eq!(b, vec![Breaker::Result]);
}

#[tokio::test]
async fn window_functions_break_at_their_sort_or_window() {
    let b = breakers("SELECT s, row_number() OVER (PARTITION BY y ORDER BY x) FROM a").await;
    assert!(b.contains(&Breaker::Sort), "{b:?}");
    let b = breakers("SELECT s, sum(x) OVER (PARTITION BY y) FROM a").await;
    assert!(
        b.contains(&Breaker::Window) || b.contains(&Breaker::Sort),
        "{b:?}"
    );
}

#[tokio::test]
async fn cross_and_nested_loop_joins_cut_their_left_side() {
    let b = breakers("SELECT a.s, c.w FROM a CROSS JOIN c").await;
    assert_eq!(count(&b, is_build), 1, "{b:?}");
    let b = breakers("SELECT a.s, b.z FROM a JOIN b ON a.x < b.x").await;
    assert_eq!(count(&b, is_build), 1, "{b:?}");
}

/// A join whose probe side is cut (a join build below it) feeds its dynamic
/// filter from its build pipeline: the pipeline below waits for it, and the
/// answer is DataFusion's.
#[tokio::test]
async fn join_dynamic_filter_is_fed_to_pipelines_below_the_probe_side() {
    // Dynamic filters reach Parquet scans, not memory tables.
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = engine(None, 2).await;
    let path = dir.path().display();
    for sql in [
        format!(
            "COPY (SELECT v AS k, v % 10 AS g FROM generate_series(1, 20000) t(v)) \
             TO '{path}/big.parquet' STORED AS PARQUET"
        ),
        format!(
            "COPY (SELECT v AS k, v % 10 AS g FROM generate_series(1, 1000) t(v)) \
             TO '{path}/mid.parquet' STORED AS PARQUET"
        ),
        format!(
            "COPY (SELECT * FROM (VALUES (1, 'one'), (3, 'three')) v(k, w)) \
             TO '{path}/dim.parquet' STORED AS PARQUET"
        ),
    ] {
        engine
            .execute(&sql)
            .await
            .expect(&sql)
            .stream
            .try_collect::<Vec<_>>()
            .await
            .expect(&sql);
    }
    engine
        .register_data_dir(dir.path())
        .await
        .expect("register");
    let sql = "SELECT dim.w, count(*) FROM dim \
               JOIN (SELECT mid.k FROM big JOIN mid ON big.g = mid.g) x ON dim.k = x.k \
               GROUP BY dim.w";
    let plan = engine.physical_plan(sql).await.expect(sql);
    let execution = engine.start(plan.clone()).expect("cut");
    let graph = execution.graph();
    invariants::check(graph, &plan);
    let feed = graph.feeds().first().expect("a fed filter");
    // The build side of the lower join (mid) is below the upper join's
    // probe side: it waits for the upper join's build pipeline.
    let waiting = graph
        .pipelines()
        .iter()
        .filter(|p| p.breaker.is_join_build() && p.inputs.contains(&feed.source));
    assert_eq!(waiting.count(), 1, "{:?}", graph.pipelines());
    assert_answers_match(&engine, &execution, sql).await;
}
