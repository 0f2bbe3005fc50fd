//! `EXPLAIN [ANALYZE] PIPELINES`: the pipeline graph as a table, one row per
//! pipeline, dependencies first.

use std::sync::Arc;
use std::time::Duration;

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

use crate::buffer::BufferedSource;
use crate::materialized::{MaterializedExec, Source, estimate};
use crate::pipeline::{Breaker, PipelineGraph};
use crate::store::{OutputSize, PipelineStatus, QueryState};

/// Schema of `EXPLAIN PIPELINES`; `analyze` adds the measured columns.
/// One row per operator: the first row of a pipeline names it, the rest
/// continue its operator tree.
pub fn schema(analyze: bool) -> SchemaRef {
    let mut fields = vec![
        Field::new("pipeline", DataType::Utf8, false),
        Field::new("breaker", DataType::Utf8, false),
        Field::new("reads", DataType::Utf8, false),
        Field::new("est_rows", DataType::Utf8, false),
        Field::new("operator", DataType::Utf8, false),
    ];
    if analyze {
        fields.push(Field::new("rows", DataType::UInt64, true));
        fields.push(Field::new("bytes", DataType::UInt64, true));
        fields.push(Field::new("stored_in", DataType::Utf8, true));
        fields.push(Field::new("time_ms", DataType::Float64, true));
    }
    Arc::new(Schema::new(fields))
}

/// The graph as a table; with `state` (after a run), actual figures too.
pub fn render(graph: &PipelineGraph, state: Option<&QueryState>) -> Result<RecordBatch> {
    let mut text: [Vec<String>; 5] = Default::default();
    let mut measured: Vec<Option<(Duration, OutputSize, &str)>> = Vec::new();
    for pipeline in graph.pipelines() {
        let finished = state.and_then(|s| match s.status.get(pipeline.id.0) {
            Some(PipelineStatus::Finished { elapsed, output }) => {
                let stored_in = match pipeline.breaker {
                    Breaker::Result => "streamed",
                    _ => output.location().as_str(),
                };
                Some((*elapsed, *output, stored_in))
            }
            _ => None,
        });
        let mut head = Some([
            pipeline.id.to_string(),
            pipeline.breaker.to_string(),
            reads(&pipeline.inputs),
            estimated_rows(&pipeline.plan),
        ]);
        for operator in operator_lines(&pipeline.plan) {
            let first = head.is_some();
            let values = head.take().unwrap_or_default();
            for (column, value) in text.iter_mut().zip(values) {
                column.push(value);
            }
            text[4].push(operator);
            measured.push(if first { finished } else { None });
        }
    }
    let mut columns: Vec<ArrayRef> = text
        .into_iter()
        .map(|c| Arc::new(StringArray::from(c)) as ArrayRef)
        .collect();
    if state.is_some() {
        columns.push(Arc::new(UInt64Array::from_iter(
            measured.iter().map(|m| m.map(|(_, o, _)| o.rows)),
        )));
        columns.push(Arc::new(UInt64Array::from_iter(
            measured.iter().map(|m| m.map(|(_, o, _)| o.bytes())),
        )));
        columns.push(Arc::new(StringArray::from_iter(
            measured
                .iter()
                .map(|m| m.map(|(_, _, stored_in)| stored_in)),
        )));
        columns.push(Arc::new(Float64Array::from_iter(
            measured
                .iter()
                .map(|m| m.map(|(e, _, _)| (e.as_secs_f64() * 1e6).round() / 1e3)),
        )));
    }
    Ok(RecordBatch::try_new(schema(state.is_some()), columns)?)
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

/// The pipeline's operators as a tree drawn with box characters, one line
/// per operator.
pub fn operator_lines(plan: &Arc<dyn ExecutionPlan>) -> Vec<String> {
    let mut lines = vec![describe(plan)];
    draw_children(plan, "", &mut lines);
    lines
}

fn draw_children(plan: &Arc<dyn ExecutionPlan>, prefix: &str, lines: &mut Vec<String>) {
    let children = plan.children();
    for (index, child) in children.iter().enumerate() {
        let last = index + 1 == children.len();
        let (branch, continuation) = if last {
            ("└─ ", "   ")
        } else {
            ("├─ ", "│  ")
        };
        lines.push(format!("{prefix}{branch}{}", describe(child)));
        draw_children(child, &format!("{prefix}{continuation}"), lines);
    }
}

/// One operator, with the detail that tells pipelines apart.
fn describe(plan: &Arc<dyn ExecutionPlan>) -> String {
    let name = plan.name();
    if let Some(leaf) = plan.downcast_ref::<MaterializedExec>() {
        return match leaf.source() {
            Source::Store => format!("{name}: {}", leaf.pipeline()),
            Source::Migrated => format!("{name}: migrated {}", leaf.pipeline()),
        };
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
    let files = match files.count() {
        0 => tail,
        more => format!("{tail} (+{more} files)"),
    };
    let group = config
        .file_source()
        .downcast_ref::<BufferedSource>()
        .and_then(BufferedSource::group);
    Some(match group {
        Some(group) => format!("{files}, in pipeline group {group}"),
        None => files,
    })
}
