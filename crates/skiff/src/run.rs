//! Running statements: results printed in the chosen format, a progress bar
//! on stderr for any query that runs longer than a second.

use std::io::Write;
use std::time::{Duration, Instant};

use datafusion::error::Result;
use futures::StreamExt;
use indicatif::ProgressBar;
use skiff_bench::stderr_bar;
use skiff_engine::{Engine, Progress, QueryExecution};

use crate::args::Format;
use crate::output::write_batches;

/// A query shows progress once it has run this long.
const PROGRESS_DELAY: Duration = Duration::from_secs(1);
const PROGRESS_TICK: Duration = Duration::from_millis(100);

/// What one statement returned.
pub struct StatementRun {
    pub rows: usize,
    pub elapsed: Duration,
}

/// Run one statement and print its result to `out`.
pub async fn run_statement(
    engine: &Engine,
    statement: &str,
    format: Format,
    streaming: bool,
    out: &mut dyn Write,
) -> Result<StatementRun> {
    let started = Instant::now();
    let output = if streaming {
        skiff_engine::QueryOutput {
            stream: engine.execute_streaming(statement).await?,
            execution: None,
            load: None,
        }
    } else {
        engine.execute(statement).await?
    };
    let mut stream = output.stream;
    let schema = stream.schema();
    let mut batches = Vec::new();
    let mut bar = None;
    let mut ticker = tokio::time::interval(PROGRESS_TICK);
    loop {
        tokio::select! {
            batch = stream.next() => match batch {
                Some(batch) => batches.push(batch?),
                None => break,
            },
            _ = ticker.tick() => {
                let elapsed = started.elapsed();
                if elapsed < PROGRESS_DELAY {
                    continue;
                }
                if let Some(execution) = &output.execution {
                    let bar = bar.get_or_insert_with(|| progress_bar().with_elapsed(elapsed));
                    show_progress(bar, execution);
                } else if let Some(load) = &output.load {
                    let bar = bar.get_or_insert_with(|| load_bar().with_elapsed(elapsed));
                    let (read, total) = load.bytes();
                    bar.set_length(total);
                    bar.set_position(read.min(total));
                }
            }
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let rows = batches.iter().map(|b| b.num_rows()).sum();
    write_batches(out, format, &schema, &batches)?;
    Ok(StatementRun {
        rows,
        elapsed: started.elapsed(),
    })
}

/// A `COPY ... FROM` file: bytes read of the files' total.
fn load_bar() -> ProgressBar {
    stderr_bar("{spinner} [{elapsed_precise}] [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec})")
}

fn progress_bar() -> ProgressBar {
    stderr_bar("{spinner} [{elapsed_precise}] [{bar:30}] pipelines {pos}/{len}  {msg}")
}

fn show_progress(bar: &ProgressBar, execution: &QueryExecution) {
    let Progress {
        pipelines_finished,
        pipelines_total,
        rows_running,
    } = execution.progress();
    bar.set_length(pipelines_total as u64);
    bar.set_position(pipelines_finished as u64);
    bar.set_message(format!(
        "{} rows in running pipelines",
        human_count(rows_running)
    ));
}

/// 1234567 -> "1.2M".
pub fn human_count(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1}K", n as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1}M", n as f64 / 1e6),
        _ => format!("{:.1}G", n as f64 / 1e9),
    }
}
