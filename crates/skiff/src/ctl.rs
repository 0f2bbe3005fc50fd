//! `skiff ctl`: look at and steer a running cluster from a terminal. It is
//! a Flight SQL client of the coordinator and shows the same system tables
//! SQL clients see.

use clap::{Args, Subcommand};
use datafusion::error::{DataFusionError, Result};

use crate::cli::Format;
use crate::remote::{Credentials, FlightConn};

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  skiff ctl workers
  skiff ctl --coordinator 10.0.0.5:50051 queries --format json
  skiff ctl cancel 42

Credentials come from SKIFF_USER and SKIFF_PASSWORD when the server requires them.")]
pub struct CtlArgs {
    /// The coordinator's Flight SQL address.
    #[arg(long, default_value = "127.0.0.1:50051")]
    pub coordinator: String,
    #[command(subcommand)]
    pub command: CtlCommand,
}

#[derive(Subcommand, Debug)]
pub enum CtlCommand {
    /// Workers and memory nodes: address, state, cores, memory, running queries.
    Workers,
    /// Running and recent queries with their progress.
    Queries,
    /// Cancel a running query.
    Cancel {
        /// The query's id (see `skiff ctl queries`).
        id: u64,
    },
}

pub async fn run(args: &CtlArgs, format: Format) -> Result<()> {
    let fail = |e: String| DataFusionError::External(e.into());
    let mut conn = FlightConn::connect(&args.coordinator, &Credentials::from_env())
        .await
        .map_err(fail)?;
    let sql = match &args.command {
        CtlCommand::Workers => "SELECT * FROM skiff.workers ORDER BY id".to_string(),
        CtlCommand::Queries => "SELECT id, user, state, worker, progress, pipelines_done, \
                                pipelines_total, rows_sent, started, elapsed_ms, error, sql \
                                FROM skiff.queries ORDER BY id"
            .to_string(),
        CtlCommand::Cancel { id } => format!("SELECT skiff.cancel({id}) AS canceled"),
    };
    let (schema, batches) = conn.query(&sql).await.map_err(fail)?;
    if let CtlCommand::Cancel { id } = &args.command {
        let canceled = batches.first().filter(|b| b.num_rows() == 1).and_then(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<arrow::array::BooleanArray>()
                .map(|a| a.value(0))
        });
        return match canceled {
            Some(true) => {
                println!("query {id} canceled");
                Ok(())
            }
            _ => Err(fail(format!("query {id} is not running"))),
        };
    }
    let mut out = std::io::stdout();
    crate::output::write_batches(&mut out, format, &schema, &batches)
}
