//! Cutting query fragments for memory nodes (opportunistic offload): the
//! coordinator's query planner finds, in the optimized logical plan, each
//! scan of one table with its filter and projection, and when the memory
//! nodes hold every file the scan reads, plans it as an [`OffloadExec`]
//! over the same fragment planned as usual. The fragment travels as a
//! Substrait plan whose scan reads only the columns it needs (the node
//! serves those from its chunks under the table's name).
//!
//! Only in plans that run on one worker (a distributed plan's scans are
//! cut into tasks after planning) and when `skiff.offload` is not `never`.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use arrow::datatypes::Schema;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, internal_err};
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::logical_plan::builder::LogicalTableSource;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    Expr, Extension, LogicalPlan, TableScan, TableScanBuilder, UserDefinedLogicalNode,
    UserDefinedLogicalNodeCore,
};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};
use prost::Message;
use skiff_engine::SkiffOptions;
use skiff_engine::offload::{Fragment, OffloadExec};
use skiff_engine::options::Offload;
use tracing::debug;

use super::Inner;
use super::placement::Placement;

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
        let wanted = session
            .config_options()
            .extensions
            .get::<SkiffOptions>()
            .is_some_and(|o| {
                o.offload != Offload::Never && !o.mid_pipeline_cuts && o.batch_window_ms == 0
            });
        let distributed = session.config().get_extension::<Placement>().is_some();
        let plan = if wanted && !distributed {
            cut(logical_plan.clone())?
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

/// `plan` with every fragment wrapped in a [`FragmentNode`].
fn cut(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_down(|node| {
        if !is_fragment(&node) {
            return Ok(Transformed::no(node));
        }
        let wrapped = LogicalPlan::Extension(Extension {
            node: Arc::new(FragmentNode { input: node }),
        });
        Ok(Transformed::new(wrapped, true, TreeNodeRecursion::Jump))
    })
    .map(|t| t.data)
}

/// Whether `plan` is a scan of a table under at most a projection and a
/// filter, with a filter somewhere (without one, running it on the node
/// sends what the chunks would), and no subquery (whose tables the node
/// does not hold) in any of its expressions.
fn is_fragment(plan: &LogicalPlan) -> bool {
    let mut node = plan;
    let mut filtered = false;
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
    let self_contained = exprs.iter().all(|e| {
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
    });
    (filtered || !scan.filters.is_empty()) && scan.fetch.is_none() && self_contained
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
        if !self.held(input) {
            return Ok(Some(Arc::clone(input)));
        }
        let Some(state) = session.as_any().downcast_ref::<SessionState>() else {
            return Ok(Some(Arc::clone(input)));
        };
        match fragment(&cut.input, state) {
            Ok(cut) => Ok(Some(Arc::new(OffloadExec::new(
                Arc::new(cut),
                Arc::clone(input),
            )))),
            Err(e) => {
                // Substrait cannot say everything DataFusion can: such a
                // fragment runs on the worker.
                debug!(error = %e, "fragment not offered");
                Ok(Some(Arc::clone(input)))
            }
        }
    }
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

/// The fragment `plan` as the node gets it: its scan narrowed to the
/// columns the fragment reads (projected or filtered on).
pub(crate) fn fragment(plan: &LogicalPlan, state: &SessionState) -> Result<Fragment> {
    let mut input_schema = None;
    let narrowed = plan
        .clone()
        .transform_up(|node| {
            let LogicalPlan::TableScan(scan) = node else {
                return Ok(Transformed::no(node));
            };
            let (narrow, schema) = narrow(&scan)?;
            input_schema = Some(schema);
            Ok(Transformed::yes(LogicalPlan::TableScan(narrow)))
        })?
        .data;
    let Some(input_schema) = input_schema else {
        return internal_err!("a fragment without a scan");
    };
    let substrait =
        datafusion_substrait::logical_plan::producer::to_substrait_plan(&narrowed, state)?;
    Ok(Fragment {
        plan: substrait.encode_to_vec(),
        input_schema: Arc::new(input_schema),
    })
}

/// `scan` over a source of only the columns it projects or filters on (in
/// the table's order), and that source's schema.
fn narrow(scan: &TableScan) -> Result<(TableScan, Schema)> {
    let table = scan.source.schema();
    let projected: Vec<usize> = match &scan.projection {
        Some(p) => p.clone(),
        None => (0..table.fields().len()).collect(),
    };
    let mut used: HashSet<usize> = projected.iter().copied().collect();
    for filter in &scan.filters {
        for column in filter.column_refs() {
            used.insert(table.index_of(&column.name)?);
        }
    }
    let mut kept: Vec<usize> = used.into_iter().collect();
    kept.sort_unstable();
    let schema = Schema::new_with_metadata(
        kept.iter()
            .map(|&i| Arc::clone(&table.fields()[i]))
            .collect::<Vec<_>>(),
        table.metadata().clone(),
    );
    let projection = projected
        .iter()
        .map(|i| kept.iter().position(|k| k == i))
        .collect::<Option<Vec<_>>>();
    let Some(projection) = projection else {
        return internal_err!("a projected column left out of the narrowed scan");
    };
    let source = Arc::new(LogicalTableSource::new(Arc::new(schema.clone())));
    let narrow = TableScanBuilder::new(scan.table_name.clone(), source)
        .with_projection(Some(projection))
        .with_filters(scan.filters.clone())
        .build()?;
    debug_assert_eq!(
        narrow.projected_schema.fields(),
        scan.projected_schema.fields(),
        "a narrowed scan gives the rows the scan gave"
    );
    Ok((narrow, schema))
}
