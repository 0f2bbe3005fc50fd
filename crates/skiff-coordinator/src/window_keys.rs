//! The sort under a window names every partition key the window needs,
//! constants included, before a query is cut into stages.
//!
//! DataFusion leaves a key out of the sort below a window when the key is
//! constant in the sort's input (`WHERE d_year = 1999` below a
//! `PARTITION BY ..., d_year`): the equivalence properties say the key is
//! ordered anyway. datafusion-distributed rebuilds a stage boundary on the
//! worker with empty equivalence properties (`EquivalenceProperties::new`
//! in its codec), so the constant is forgotten there, and the window, rebuilt
//! over the sort, fails DataFusion's check "All partition by columns should
//! have an ordering" (TPC-DS q47 and q57). Sorting by the constant too
//! changes no row's place and keeps the window valid wherever it is rebuilt.
//! It goes right after the sort's leading partition keys, so a window
//! above on fewer keys (DataFusion nests them) still finds its keys first.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::physical_expr::{AcrossPartitions, LexOrdering, PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec};
use datafusion::physical_plan::{ExecutionPlan, replace_children_if_necessary};

/// Puts the constant partition keys a window's sort leaves out into that
/// sort, after its leading partition keys (module docs).
#[derive(Debug, Default)]
pub(crate) struct WindowSortKeys;

impl PhysicalOptimizerRule for WindowSortKeys {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            // Not `partition_keys()`: it is empty for a window that may
            // not repartition, whose sort still needs the keys.
            let exprs = if let Some(window) = node.downcast_ref::<WindowAggExec>() {
                window.window_expr()
            } else if let Some(window) = node.downcast_ref::<BoundedWindowAggExec>() {
                window.window_expr()
            } else {
                return Ok(Transformed::no(node));
            };
            let Some(keys) = exprs.first().map(|e| e.partition_by().to_vec()) else {
                return Ok(Transformed::no(node));
            };
            let Some(sort) = node
                .children()
                .first()
                .and_then(|child| child.downcast_ref::<SortExec>())
            else {
                return Ok(Transformed::no(node));
            };
            let Some(sort) = with_constant_keys(sort, &keys) else {
                return Ok(Transformed::no(node));
            };
            Ok(Transformed::yes(replace_children_if_necessary(
                node,
                vec![sort],
            )?))
        })
        .data()
    }

    fn name(&self) -> &str {
        "skiff_window_sort_keys"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `sort` with the keys it leaves out that are constant in its input
/// added after its leading keys; `None` when it leaves none out.
fn with_constant_keys(
    sort: &SortExec,
    keys: &[Arc<dyn PhysicalExpr>],
) -> Option<Arc<dyn ExecutionPlan>> {
    let input = sort.input();
    let equivalences = input.properties().equivalence_properties();
    // A constant that differs between partitions orders nothing once a
    // sort merges them.
    let merged =
        !sort.preserve_partitioning() && input.properties().partitioning.partition_count() > 1;
    let constant = |key: &Arc<dyn PhysicalExpr>| match equivalences.is_expr_constant(key) {
        Some(AcrossPartitions::Uniform(_)) => true,
        Some(AcrossPartitions::Heterogeneous) => !merged,
        None => false,
    };
    let missing: Vec<PhysicalSortExpr> = keys
        .iter()
        .filter(|key| !sort.expr().iter().any(|s| s.expr.eq(*key)))
        .filter(|key| constant(key))
        .map(|key| PhysicalSortExpr::new_default(Arc::clone(key)))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let leading = sort
        .expr()
        .iter()
        .take_while(|s| keys.iter().any(|k| s.expr.eq(k)))
        .count();
    let (head, tail) = sort.expr().split_at(leading);
    let ordering = LexOrdering::new(
        head.iter()
            .cloned()
            .chain(missing)
            .chain(tail.iter().cloned()),
    )?;
    let spelled = SortExec::new(ordering, Arc::clone(input))
        .with_fetch(sort.fetch())
        .with_preserve_partitioning(sort.preserve_partitioning());
    Some(Arc::new(spelled))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::physical_plan::displayable;
    use datafusion::prelude::SessionContext;

    /// Every sort line of `plan`, as EXPLAIN writes it.
    fn sorts(plan: &Arc<dyn ExecutionPlan>) -> Vec<String> {
        displayable(plan.as_ref())
            .indent(false)
            .to_string()
            .lines()
            .filter(|l| l.trim_start().starts_with("SortExec"))
            .map(|l| l.trim().to_string())
            .collect()
    }

    #[tokio::test]
    async fn a_constant_partition_key_follows_the_leading_keys() -> Result<()> {
        let ctx = SessionContext::new();
        ctx.sql(
            "CREATE TABLE t (a INT, y INT, x INT) AS \
             VALUES (1, 1999, 10), (2, 1999, 20), (1, 2000, 30)",
        )
        .await?;
        let plan = ctx
            .sql(
                "SELECT a, y, avg(x) OVER (PARTITION BY a, y) AS w, \
                 rank() OVER (PARTITION BY a ORDER BY y) AS r \
                 FROM t WHERE y = 1999",
            )
            .await?
            .create_physical_plan()
            .await?;
        let before = sorts(&plan);
        // DataFusion leaves the constant `y` out of the sort of the first
        // window: the case this rule exists for.
        assert!(
            before.iter().any(|s| s.contains("expr=[a@0 ASC")),
            "{before:?}"
        );
        let after = sorts(&WindowSortKeys.optimize(plan, &ConfigOptions::default())?);
        assert!(
            after
                .iter()
                .any(|s| s.contains("expr=[a@0 ASC NULLS LAST, y@1 ASC")),
            "the constant key follows the leading key: {after:?}"
        );
        assert_eq!(before.len(), after.len());
        // A key that is not constant is never added.
        assert!(after.iter().all(|s| !s.contains("x@2")), "{after:?}");
        Ok(())
    }

    #[tokio::test]
    async fn a_sort_that_names_every_key_is_left_alone() -> Result<()> {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (a INT, y INT, x INT) AS VALUES (1, 1999, 10)")
            .await?;
        let plan = ctx
            .sql("SELECT a, y, avg(x) OVER (PARTITION BY a, y) AS w FROM t")
            .await?
            .create_physical_plan()
            .await?;
        let before = sorts(&plan);
        let after = sorts(&WindowSortKeys.optimize(plan, &ConfigOptions::default())?);
        assert_eq!(before, after);
        Ok(())
    }
}
