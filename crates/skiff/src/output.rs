//! Printing query results as a table, CSV (with a header row) or JSON.

use std::io::Write;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow::util::pretty::pretty_format_batches;
use datafusion::error::{DataFusionError, Result};

use crate::args::Format;

/// Write `batches` (one statement's result, with `schema`) to `out` in
/// `format`. An empty result still prints its header.
pub fn write_batches(
    out: &mut dyn Write,
    format: Format,
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> Result<()> {
    if schema.fields().is_empty() {
        // DDL and SET: nothing to show.
        return Ok(());
    }
    let empty = [RecordBatch::new_empty(SchemaRef::clone(schema))];
    let batches = if batches.iter().all(|b| b.num_rows() == 0) {
        &empty[..]
    } else {
        batches
    };
    match format {
        Format::Table => writeln!(out, "{}", pretty_format_batches(batches)?)?,
        Format::Csv => {
            let mut writer = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(&mut *out);
            for batch in batches {
                writer.write(batch)?;
            }
        }
        Format::Json => {
            let mut writer = arrow::json::ArrayWriter::new(&mut *out);
            let refs: Vec<&RecordBatch> = batches.iter().filter(|b| b.num_rows() > 0).collect();
            writer.write_batches(&refs)?;
            writer.finish()?;
            writeln!(out)?;
        }
    }
    out.flush().map_err(DataFusionError::from)
}

/// One line for the user: the message without DataFusion's wrapping noise.
pub fn error_line(e: &DataFusionError) -> String {
    let message = match e {
        // Errors raised outside DataFusion already say what went wrong.
        DataFusionError::External(inner) => inner.to_string(),
        DataFusionError::SQL(inner, _) => format!("syntax error: {inner}"),
        other => other.to_string(),
    };
    let message = message.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("error: {message}")
}
