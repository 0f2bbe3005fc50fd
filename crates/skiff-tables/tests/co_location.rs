//! Joins of hash-partitioned tables in a session with Skiff's co-location
//! rules: co-located joins and aggregations run without a repartition, and
//! every join that mixes a declared scan with DataFusion's hash, another
//! class or another key order still gives the answer computed here from
//! the rows inserted (not by another query).

use std::path::Path;
use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::{ExecutionPlan, displayable};
use datafusion::prelude::{SessionConfig, SessionContext};
use skiff_tables::TableStore;
use skiff_tables::co_location::with_rules;
use skiff_tables::partition;

/// Partitioned joins even over tiny tables (no build side collected), and
/// scans that filter rows by pushed-down predicates (a join's dynamic
/// filter among them), not only row groups by their statistics.
async fn session(dir: &Path) -> (SessionContext, TableStore) {
    let config = SessionConfig::new()
        .with_target_partitions(4)
        .set_bool("datafusion.execution.parquet.pushdown_filters", true)
        .set_usize(
            "datafusion.optimizer.hash_join_single_partition_threshold",
            0,
        )
        .set_usize(
            "datafusion.optimizer.hash_join_single_partition_threshold_rows",
            0,
        );
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_default_features()
        .with_physical_optimizer_rules(with_rules(PhysicalOptimizer::new().rules))
        .build();
    let ctx = SessionContext::new_with_state(state);
    (ctx, TableStore::open(dir).unwrap())
}

async fn ddl(ctx: &SessionContext, store: &TableStore, sql: &str) {
    let (sql, partitioning) = match partition::split_clause(sql).unwrap() {
        Some((rest, p)) => (rest, Some(p)),
        None => (sql.to_string(), None),
    };
    let plan = ctx.state().create_logical_plan(&sql).await.unwrap();
    if !store
        .execute_ddl(ctx, &plan, partitioning.as_ref())
        .await
        .unwrap()
    {
        ctx.execute_logical_plan(plan)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
    }
}

/// The query's single row of integers, and its physical plan.
async fn answer(ctx: &SessionContext, sql: &str) -> (Vec<i64>, Arc<dyn ExecutionPlan>) {
    let frame = ctx.sql(sql).await.unwrap();
    let plan = frame.clone().create_physical_plan().await.unwrap();
    let batches = frame.collect().await.unwrap();
    let batch = batches
        .iter()
        .find(|b| b.num_rows() > 0)
        .unwrap_or_else(|| panic!("{sql}: no rows"));
    assert_eq!(batch.num_rows(), 1, "{sql}");
    let row = batch
        .columns()
        .iter()
        .map(|c| {
            use arrow::array::{Array, AsArray};
            let c = arrow::compute::cast(c, &arrow::datatypes::DataType::Int64).unwrap();
            let c = c.as_primitive::<arrow::datatypes::Int64Type>();
            if c.is_null(0) { 0 } else { c.value(0) }
        })
        .collect();
    (row, plan)
}

fn text(plan: &Arc<dyn ExecutionPlan>) -> String {
    displayable(plan.as_ref()).indent(true).to_string()
}

/// Every partitioned hash join of `plan` without a dynamic filter of its
/// own (its routing assumes DataFusion's hash).
fn partitioned_joins_without_filters(plan: &Arc<dyn ExecutionPlan>) -> usize {
    let mut joins = 0;
    plan.apply(|node| {
        if let Some(join) = node.downcast_ref::<HashJoinExec>()
            && *join.partition_mode() == PartitionMode::Partitioned
        {
            assert!(
                node.dynamic_expressions_produced().is_empty(),
                "a co-located join keeps its dynamic filter:\n{}",
                text(plan)
            );
            joins += 1;
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    joins
}

#[tokio::test]
async fn co_located_joins_skip_the_shuffle_and_mixed_ones_stay_right() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, store) = session(dir.path()).await;
    for sql in [
        "CREATE TABLE a (k BIGINT, v BIGINT) PARTITION BY HASH (k) INTO 8 PARTITIONS",
        "CREATE TABLE b (k BIGINT, w BIGINT) PARTITION BY HASH (k) INTO 8 PARTITIONS",
        "CREATE TABLE c (k BIGINT, x BIGINT) PARTITION BY HASH (k) INTO 4 PARTITIONS",
        "CREATE TABLE u (k BIGINT, y BIGINT)",
        "CREATE TABLE e (k BIGINT, v BIGINT) PARTITION BY HASH (k, v) INTO 8 PARTITIONS",
        "CREATE TABLE f (k BIGINT, v BIGINT) PARTITION BY HASH (k, v) INTO 8 PARTITIONS",
        "INSERT INTO a SELECT value, value % 97 FROM generate_series(1, 3000)",
        "INSERT INTO b SELECT value * 2, value % 13 FROM generate_series(1, 2000)",
        "INSERT INTO c SELECT value * 3, 1 FROM generate_series(1, 1500)",
        "INSERT INTO u SELECT value * 5, value % 7 FROM generate_series(1, 1000)",
        "INSERT INTO e SELECT value, value % 97 FROM generate_series(1, 3000)",
        "INSERT INTO f SELECT value % 97, value FROM generate_series(1, 3000)",
    ] {
        ddl(&ctx, &store, sql).await;
    }
    // The rows, as inserted.
    let a: Vec<(i64, i64)> = (1..=3000).map(|n| (n, n % 97)).collect();
    let b: Vec<(i64, i64)> = (1..=2000).map(|n| (n * 2, n % 13)).collect();
    let c: Vec<i64> = (1..=1500).map(|n| n * 3).collect();
    let u: Vec<(i64, i64)> = (1..=1000).map(|n| (n * 5, n % 7)).collect();
    let w_of = |k: i64| b.iter().find(|(bk, _)| *bk == k).map(|(_, w)| *w);
    let y_of = |k: i64| u.iter().find(|(uk, _)| *uk == k).map(|(_, y)| *y);

    // Co-located: a and b are one class keyed on k.
    let (row, plan) = answer(
        &ctx,
        "SELECT count(*), sum(a.v + b.w) FROM a JOIN b ON a.k = b.k",
    )
    .await;
    let matched: Vec<(i64, i64)> = a
        .iter()
        .filter_map(|(k, v)| w_of(*k).map(|w| (*v, w)))
        .collect();
    let expected = vec![
        matched.len() as i64,
        matched.iter().map(|(v, w)| v + w).sum(),
    ];
    assert_eq!(row, expected);
    let shown = text(&plan);
    assert!(shown.contains("output_partitioning=Hash"), "{shown}");
    assert!(
        !shown.contains("RepartitionExec"),
        "a co-located join shuffles:\n{shown}"
    );
    assert_eq!(partitioned_joins_without_filters(&plan), 1, "{shown}");

    // Co-located through an aggregation on the key.
    let (row, plan) = answer(
        &ctx,
        "SELECT count(*), sum(g.s) FROM a JOIN \
         (SELECT k, sum(w) AS s FROM b GROUP BY k) g ON a.k = g.k",
    )
    .await;
    assert_eq!(row, expected_sums(&matched));
    let shown = text(&plan);
    assert!(!shown.contains("RepartitionExec"), "{shown}");
    partitioned_joins_without_filters(&plan);

    // Against an unpartitioned table, another class, a non-key column:
    // the declared side is repartitioned like the other.
    let with_u: Vec<i64> = a
        .iter()
        .filter_map(|(k, v)| y_of(*k).map(|y| v + y))
        .collect();
    let (row, plan) = answer(
        &ctx,
        "SELECT count(*), sum(a.v + u.y) FROM a JOIN u ON a.k = u.k",
    )
    .await;
    assert_eq!(row, vec![with_u.len() as i64, with_u.iter().sum()]);
    assert!(text(&plan).contains("RepartitionExec"), "{}", text(&plan));
    let with_c = a.iter().filter(|(k, _)| c.contains(k)).count() as i64;
    let (row, _) = answer(&ctx, "SELECT count(*) FROM a JOIN c ON a.k = c.k").await;
    assert_eq!(row, vec![with_c]);
    let on_v: Vec<i64> = a.iter().filter_map(|(_, v)| w_of(*v)).collect();
    let (row, _) = answer(&ctx, "SELECT count(*), sum(b.w) FROM a JOIN b ON a.v = b.k").await;
    assert_eq!(row, vec![on_v.len() as i64, on_v.iter().sum()]);

    // Three tables: the co-located pair, then the unpartitioned one.
    let three: Vec<i64> = a
        .iter()
        .filter_map(|(k, v)| Some(v + w_of(*k)? + y_of(*k)?))
        .collect();
    let (row, _) = answer(
        &ctx,
        "SELECT count(*), sum(a.v + b.w + u.y) FROM a JOIN b ON a.k = b.k JOIN u ON b.k = u.k",
    )
    .await;
    assert_eq!(row, vec![three.len() as i64, three.iter().sum()]);

    // Outer joins keep every row of their preserved side.
    let (row, _) = answer(
        &ctx,
        "SELECT count(*), count(b.k) FROM a LEFT JOIN b ON a.k = b.k",
    )
    .await;
    assert_eq!(row, vec![a.len() as i64, matched.len() as i64]);
    let (row, _) = answer(
        &ctx,
        "SELECT count(*), count(a.k) FROM a RIGHT JOIN u ON a.k = u.k",
    )
    .await;
    assert_eq!(row, vec![u.len() as i64, with_u.len() as i64]);

    // A union of a declared scan and a repartitioned one, grouped by key:
    // each key one group.
    let mut keys: Vec<i64> = a
        .iter()
        .map(|(k, _)| *k)
        .chain(u.iter().map(|(k, _)| *k))
        .collect();
    let rows = keys.len() as i64;
    keys.sort_unstable();
    keys.dedup();
    let (row, _) = answer(
        &ctx,
        "SELECT count(*), sum(n) FROM (SELECT k, count(*) AS n FROM \
         (SELECT k FROM a UNION ALL SELECT k FROM u) GROUP BY k)",
    )
    .await;
    assert_eq!(row, vec![keys.len() as i64, rows]);

    // Two keys: co-located in the tables' key order, repartitioned when
    // the join pairs them the other way round, or on one key only.
    let (row, plan) = answer(
        &ctx,
        "SELECT count(*) FROM e JOIN e AS e2 ON e.k = e2.k AND e.v = e2.v",
    )
    .await;
    assert_eq!(row, vec![3000]);
    assert!(!text(&plan).contains("RepartitionExec"), "{}", text(&plan));
    let (row, _) = answer(
        &ctx,
        "SELECT count(*) FROM e JOIN f ON e.k = f.v AND e.v = f.k",
    )
    .await;
    assert_eq!(row, vec![3000]);
    let (row, _) = answer(
        &ctx,
        "SELECT count(*) FROM a JOIN e ON a.k = e.k AND a.v = e.v",
    )
    .await;
    assert_eq!(row, vec![3000]);

    // Sort-merge joins too: co-located without a repartition, and a
    // declared side repartitioned keeping its order for the merge.
    ctx.sql("SET datafusion.optimizer.prefer_hash_join = false")
        .await
        .unwrap();
    let (row, plan) = answer(
        &ctx,
        "SELECT count(*), sum(a.v + b.w) FROM a JOIN b ON a.k = b.k",
    )
    .await;
    assert_eq!(row, expected);
    let shown = text(&plan);
    assert!(shown.contains("SortMergeJoin"), "{shown}");
    assert!(!shown.contains("RepartitionExec"), "{shown}");
    let (row, plan) = answer(
        &ctx,
        "SELECT count(*), sum(a.v + u.y) FROM a JOIN u ON a.k = u.k",
    )
    .await;
    assert_eq!(row, vec![with_u.len() as i64, with_u.iter().sum()]);
    assert!(text(&plan).contains("SortMergeJoin"), "{}", text(&plan));
    let (row, _) = answer(&ctx, "SELECT count(*) FROM a JOIN c ON a.k = c.k").await;
    assert_eq!(row, vec![with_c]);
}

/// `count(*)` and the sum of the second values of matched pairs.
fn expected_sums(matched: &[(i64, i64)]) -> Vec<i64> {
    vec![matched.len() as i64, matched.iter().map(|(_, w)| w).sum()]
}
