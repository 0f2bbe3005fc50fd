//! Cutting query fragments for memory nodes (opportunistic offload): the
//! coordinator's query planner finds, in the optimized logical plan, each
//! scan of one table with its filter and projection, and when the memory
//! nodes hold every file the scan reads, plans it as an [`OffloadExec`]
//! over the same fragment planned as usual. The fragment travels as a
//! Substrait plan whose scan reads only the columns it needs (the node
//! serves those from its chunks under the table's name).
//!
//! An aggregation over such a scan (plain `GROUP BY`, aggregates whose
//! partial states merge: `sum`, `count`, `min`, `max`, `avg`) is cut with
//! it: the [`OffloadExec`] sits between the aggregation's partial and final
//! halves, and the node runs the partial half (per row group), so what it
//! sends are partial states the worker's final half merges.
//!
//! Only in plans that run on one worker (a distributed plan's scans are
//! cut into tasks after planning) and when `skiff.offload` is not `never`.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, internal_err};
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    Expr, Extension, LogicalPlan, UserDefinedLogicalNode, UserDefinedLogicalNodeCore,
};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};
use skiff_engine::SkiffOptions;
use skiff_engine::offload::{OffloadExec, is_partial_half};
use skiff_engine::options::Offload;
use skiff_offload::fragment::fragment;
use tracing::debug;

use super::placement::Placement;
use crate::inner::Inner;

/// A fragment in the logical plan, before physical planning: its input is
/// the fragment itself.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd)]
struct FragmentNode {
    input: LogicalPlan,
}

impl UserDefinedLogicalNodeCore for FragmentNode {
    fn name(&self) -> &str {
        "Fragment"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &datafusion::common::DFSchemaRef {
        self.input.schema()
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "Fragment")
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> Result<Self> {
        if inputs.len() != 1 {
            return internal_err!("a fragment has one input");
        }
        Ok(Self {
            input: inputs.swap_remove(0),
        })
    }
}

/// The coordinator's query planner: DataFusion's, with fragments cut.
pub(crate) struct FragmentPlanner {
    inner: Arc<Inner>,
}

impl fmt::Debug for FragmentPlanner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FragmentPlanner")
    }
}

impl FragmentPlanner {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        Self { inner }
    }
}

#[async_trait]
impl QueryPlanner for FragmentPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let options = session.config_options().extensions.get::<SkiffOptions>();
        let wanted = options.is_some_and(|o| {
            o.offload != Offload::Never && !o.mid_pipeline_cuts && o.batch_window_ms == 0
        });
        let aggregations = options.is_some_and(|o| o.offload_aggregations);
        let distributed = session.config().get_extension::<Placement>().is_some();
        let plan = if wanted && !distributed {
            cut(logical_plan.clone(), aggregations)?
        } else {
            logical_plan.clone()
        };
        let planners: Vec<Arc<dyn ExtensionPlanner + Send + Sync>> =
            vec![Arc::new(FragmentExtension {
                inner: Arc::clone(&self.inner),
            })];
        DefaultPhysicalPlanner::with_extension_planners(planners)
            .create_physical_plan(&plan, session)
            .await
    }
}

/// `plan` with every fragment wrapped in a [`FragmentNode`] (aggregated
/// ones too when `aggregations`).
fn cut(plan: LogicalPlan, aggregations: bool) -> Result<LogicalPlan> {
    plan.transform_down(|node| {
        let fragment = match &node {
            LogicalPlan::Aggregate(_) if !aggregations => false,
            node => is_fragment(node),
        };
        if !fragment {
            return Ok(Transformed::no(node));
        }
        let wrapped = LogicalPlan::Extension(Extension {
            node: Arc::new(FragmentNode { input: node }),
        });
        Ok(Transformed::new(wrapped, true, TreeNodeRecursion::Jump))
    })
    .map(|t| t.data)
}

/// Aggregate functions whose partial states the node computes as the
/// worker would (plain, deterministic, merged by the final half).
const PARTIAL_AGGREGATES: [&str; 5] = ["sum", "count", "min", "max", "avg"];

/// Whether `plan` is a fragment: a scan of a table under at most a
/// projection and a filter, with a filter somewhere (without one, running
/// it on the node sends what the chunks would), or an aggregation of such
/// a scan (filtered or not: the partial states are what it sends); and no
/// subquery (whose tables the node does not hold) in any expression.
fn is_fragment(plan: &LogicalPlan) -> bool {
    let LogicalPlan::Aggregate(aggregate) = plan else {
        return scan_fragment(plan, false);
    };
    let plain_groups = aggregate
        .group_expr
        .iter()
        .all(|e| !matches!(e, Expr::GroupingSet(_)) && self_contained([e]));
    let partial = aggregate.aggr_expr.iter().all(|e| match e {
        Expr::AggregateFunction(f) => {
            PARTIAL_AGGREGATES.contains(&f.func.name())
                && !f.params.distinct
                && f.params.order_by.is_empty()
                && self_contained(f.params.args.iter().chain(f.params.filter.as_deref()))
        }
        _ => false,
    });
    plain_groups && partial && scan_fragment(&aggregate.input, true)
}

/// Whether `plan` is a scan under at most a projection and a filter, with
/// a filter somewhere unless `aggregated`, and self-contained.
fn scan_fragment(plan: &LogicalPlan, aggregated: bool) -> bool {
    let mut node = plan;
    let mut filtered = aggregated;
    let mut exprs: Vec<&Expr> = Vec::new();
    if let LogicalPlan::Projection(projection) = node {
        exprs.extend(&projection.expr);
        node = projection.input.as_ref();
    }
    if let LogicalPlan::Filter(filter) = node {
        filtered = true;
        exprs.push(&filter.predicate);
        node = filter.input.as_ref();
    }
    let LogicalPlan::TableScan(scan) = node else {
        return false;
    };
    exprs.extend(&scan.filters);
    (filtered || !scan.filters.is_empty()) && scan.fetch.is_none() && self_contained(exprs)
}

/// Whether no expression of `exprs` reads a subquery, an outer query or a
/// parameter (none of which the node has).
fn self_contained<'a>(exprs: impl IntoIterator<Item = &'a Expr>) -> bool {
    exprs.into_iter().all(|e| {
        !e.exists(|e| {
            Ok(matches!(
                e,
                Expr::ScalarSubquery(_)
                    | Expr::InSubquery(_)
                    | Expr::Exists(_)
                    | Expr::OuterReferenceColumn(..)
                    | Expr::Placeholder(_)
            ))
        })
        .unwrap_or(true)
    })
}

struct FragmentExtension {
    inner: Arc<Inner>,
}

#[async_trait]
impl ExtensionPlanner for FragmentExtension {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        session: &dyn Session,
        _planning_ctx: &PhysicalPlanningContext,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(cut) = node.as_any().downcast_ref::<FragmentNode>() else {
            return Ok(None);
        };
        let [input] = physical_inputs else {
            return internal_err!("a fragment has one input");
        };
        // An aggregation's fragment ends at its partial half.
        let (offered, final_half) = match halves(input) {
            Some((partial, final_half)) => (partial, Some(final_half)),
            None if matches!(cut.input, LogicalPlan::Aggregate(_)) => {
                debug!("an aggregation planned in one piece: fragment not offered");
                return Ok(Some(Arc::clone(input)));
            }
            None => (Arc::clone(input), None),
        };
        if !self.held(&offered) {
            return Ok(Some(Arc::clone(input)));
        }
        let Some(state) = session.as_any().downcast_ref::<SessionState>() else {
            return Ok(Some(Arc::clone(input)));
        };
        let cut = match fragment(&cut.input, state) {
            Ok(cut) => cut,
            Err(e) => {
                // Substrait cannot say everything DataFusion can: such a
                // fragment runs on the worker.
                debug!(error = %e, "fragment not offered");
                return Ok(Some(Arc::clone(input)));
            }
        };
        let offload: Arc<dyn ExecutionPlan> = Arc::new(OffloadExec::new(Arc::new(cut), offered));
        match final_half {
            Some(final_half) => Ok(Some(final_half.replace_children(
                vec![offload],
                ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
            )?)),
            None => Ok(Some(offload)),
        }
    }
}

/// `plan`'s partial half and `plan` itself, when `plan` is an
/// aggregation's final half over its partial half (as DataFusion plans a
/// logical aggregation).
fn halves(
    plan: &Arc<dyn ExecutionPlan>,
) -> Option<(Arc<dyn ExecutionPlan>, Arc<dyn ExecutionPlan>)> {
    let last = plan.downcast_ref::<AggregateExec>()?;
    if !matches!(
        last.mode(),
        AggregateMode::Final | AggregateMode::FinalPartitioned
    ) {
        return None;
    }
    let partial = Arc::clone(last.input());
    is_partial_half(&partial).then(|| (partial, Arc::clone(plan)))
}

impl FragmentExtension {
    /// Whether the memory nodes hold every file `input` scans.
    fn held(&self, input: &Arc<dyn ExecutionPlan>) -> bool {
        let mut paths = Vec::new();
        let mut scans = 0;
        let _ = input.apply(|node| {
            if let Some(config) = node
                .downcast_ref::<DataSourceExec>()
                .and_then(|d| d.data_source().downcast_ref::<FileScanConfig>())
            {
                scans += 1;
                paths.extend(
                    config
                        .file_groups
                        .iter()
                        .flat_map(|g| g.iter())
                        .map(|f| f.object_meta.location.to_string()),
                );
            }
            Ok(TreeNodeRecursion::Continue)
        });
        scans == 1 && !paths.is_empty() && self.inner.memory_tables.holds_all(&paths)
    }
}
