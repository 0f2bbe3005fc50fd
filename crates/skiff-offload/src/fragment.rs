//! A fragment as a memory node gets it: the logical plan of a scan of one
//! table (with its filter and projection, and perhaps an aggregation's
//! partial half), with the scan narrowed to the columns the fragment reads
//! and encoded as Substrait. The coordinator's query planner cuts these
//! out of queries; calibration makes them from its corpus.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::datatypes::Schema;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, internal_err};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::logical_plan::builder::LogicalTableSource;
use datafusion::logical_expr::{LogicalPlan, TableScan, TableScanBuilder};
use prost::Message;
use skiff_engine::offload::Fragment;

/// The fragment `plan` as the node gets it: its scan narrowed to the
/// columns the fragment reads (projected or filtered on).
pub fn fragment(plan: &LogicalPlan, state: &SessionState) -> Result<Fragment> {
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
