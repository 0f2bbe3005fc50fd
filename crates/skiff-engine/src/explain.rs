//! `EXPLAIN [ANALYZE] PIPELINES`: the pipeline graph as a table, one row per
//! pipeline, dependencies first.

use std::fmt::Write;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion::common::stats::Precision;
use datafusion::common::{JoinType, Result};
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::joins::{HashJoinExec, NestedLoopJoinExec, SortMergeJoinExec};
use datafusion::physical_plan::sorts::sort::SortExec;

use crate::pipeline::PipelineGraph;
use crate::scan::{IntermediateScanExec, estimate};
use crate::store::{PipelineStatus, QueryState};

/// Schema of `EXPLAIN PIPELINES`; `analyze` adds the measured columns.
pub fn schema(analyze: bool) -> SchemaRef {
    let mut fields = vec![
        Field::new("pipeline", DataType::Utf8, false),
        Field::new("breaker", DataType::Utf8, false),
        Field::new("reads", DataType::Utf8, false),
        Field::new("est_rows", DataType::Utf8, false),
        Field::new("operators", DataType::Utf8, false),
    ];
    if analyze {
        fields.push(Field::new("rows", DataType::UInt64, true));
        fields.push(Field::new("bytes", DataType::UInt64, true));
        fields.push(Field::new("time_ms", DataType::Float64, true));
    }
    Arc::new(Schema::new(fields))
}

/// The graph as a table; with `state` (after a run), actual figures too.
pub fn render(graph: &PipelineGraph, state: Option<&QueryState>) -> Result<RecordBatch> {
    let pipelines = graph.pipelines();
    let mut columns: Vec<ArrayRef> = vec![
        strings(pipelines.iter().map(|p| p.id.to_string())),
        strings(pipelines.iter().map(|p| p.breaker.to_string())),
        strings(pipelines.iter().map(|p| reads(&p.inputs))),
        strings(pipelines.iter().map(|p| estimated_rows(&p.plan))),
        strings(pipelines.iter().map(|p| operators(&p.plan))),
    ];
    if let Some(state) = state {
        let finished = |i: usize| match state.status.get(i) {
            Some(PipelineStatus::Finished { elapsed, output }) => Some((*elapsed, *output)),
            _ => None,
        };
        let ids = 0..pipelines.len();
        columns.push(Arc::new(UInt64Array::from_iter(
            ids.clone().map(|i| finished(i).map(|(_, o)| o.rows)),
        )));
        columns.push(Arc::new(UInt64Array::from_iter(
            ids.clone().map(|i| finished(i).map(|(_, o)| o.bytes())),
        )));
        columns.push(Arc::new(Float64Array::from_iter(ids.map(|i| {
            finished(i).map(|(e, _)| (e.as_secs_f64() * 1e6).round() / 1e3)
        }))));
    }
    Ok(RecordBatch::try_new(schema(state.is_some()), columns)?)
}

fn strings(values: impl Iterator<Item = String>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(values))
}

fn reads(inputs: &[crate::pipeline::PipelineId]) -> String {
    if inputs.is_empty() {
        return "-".to_string();
    }
    let names: Vec<String> = inputs.iter().map(ToString::to_string).collect();
    names.join(", ")
}

/// Rows the pipeline is estimated to emit: exact, `~` inexact, `?` unknown.
fn estimated_rows(plan: &Arc<dyn ExecutionPlan>) -> String {
    match estimate(plan).map(|s| s.num_rows) {
        Ok(Precision::Exact(n)) => n.to_string(),
        Ok(Precision::Inexact(n)) => format!("~{n}"),
        _ => "?".to_string(),
    }
}

/// The pipeline's operators as an indented tree, one per line.
pub fn operators(plan: &Arc<dyn ExecutionPlan>) -> String {
    let mut out = String::new();
    write_operator(plan, 0, &mut out);
    out.truncate(out.trim_end().len());
    out
}

fn write_operator(plan: &Arc<dyn ExecutionPlan>, depth: usize, out: &mut String) {
    let _ = writeln!(out, "{:indent$}{}", "", describe(plan), indent = depth * 2);
    for child in plan.children() {
        write_operator(child, depth + 1, out);
    }
}

/// One operator, with the detail that tells pipelines apart.
fn describe(plan: &Arc<dyn ExecutionPlan>) -> String {
    let name = plan.name();
    if let Some(scan) = plan.downcast_ref::<IntermediateScanExec>() {
        return format!("{name}: {}", scan.pipeline());
    }
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        return format!("{name}: {}", join_type(join.join_type()));
    }
    if let Some(join) = plan.downcast_ref::<NestedLoopJoinExec>() {
        return format!("{name}: {}", join_type(join.join_type()));
    }
    if let Some(join) = plan.downcast_ref::<SortMergeJoinExec>() {
        return format!("{name}: {}", join_type(&join.join_type()));
    }
    if let Some(agg) = plan.downcast_ref::<AggregateExec>() {
        return format!("{name}: {:?}", agg.mode());
    }
    if let Some(sort) = plan.downcast_ref::<SortExec>() {
        if let Some(fetch) = sort.fetch() {
            return format!("{name}: TopK({fetch})");
        }
    }
    if let Some(table) = scanned_table(plan) {
        return format!("{name}: {table}");
    }
    name.to_string()
}

fn join_type(join_type: &JoinType) -> String {
    format!("{join_type:?}")
}

/// What a file scan reads: the last two components of its first file's path
/// (the table directory and file), and how many more files there are.
fn scanned_table(plan: &Arc<dyn ExecutionPlan>) -> Option<String> {
    let source = plan.downcast_ref::<DataSourceExec>()?;
    let config = source.data_source().downcast_ref::<FileScanConfig>()?;
    let mut files = config.file_groups.iter().flat_map(|g| g.iter());
    let first = files.next()?.path().as_ref();
    let tail = match first.rsplitn(3, '/').collect::<Vec<_>>().as_slice() {
        [file, dir, ..] => format!("{dir}/{file}"),
        _ => first.to_string(),
    };
    Some(match files.count() {
        0 => tail,
        more => format!("{tail} (+{more} files)"),
    })
}
