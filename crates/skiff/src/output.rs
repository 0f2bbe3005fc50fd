//! Printing query results as a table, CSV (with a header row) or JSON.

use std::io::Write;

use arrow::record_batch::RecordBatch;
use arrow::util::pretty::pretty_format_batches;
use datafusion::error::{DataFusionError, Result};

use crate::cli::Format;

/// Write `batches` (one statement's result) to `out` in `format`.
pub fn write_batches(out: &mut dyn Write, format: Format, batches: &[RecordBatch]) -> Result<()> {
    match format {
        Format::Table => {
            if batches.iter().all(|b| b.num_rows() == 0) && !batches.is_empty() {
                let header = batches[0].schema();
                let names: Vec<&str> = header.fields().iter().map(|f| f.name().as_str()).collect();
                writeln!(out, "({}) 0 rows", names.join(", "))?;
                return Ok(());
            }
            writeln!(out, "{}", pretty_format_batches(batches)?)?;
        }
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
            let refs: Vec<&RecordBatch> = batches.iter().collect();
            writer.write_batches(&refs)?;
            writer.finish()?;
            writeln!(out)?;
        }
    }
    out.flush().map_err(DataFusionError::from)
}
