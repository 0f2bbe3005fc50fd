//! `skiff ctl`: look at and steer a running cluster from a terminal. It is
//! a Flight SQL client of the coordinator and shows the same system tables
//! SQL clients see.

use arrow::array::Array;
use clap::{Args, Subcommand};
use datafusion::error::{DataFusionError, Result};

use skiff_bench::client::{Credentials, FlightConn};

use crate::args::Format;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  skiff ctl workers
  skiff ctl --coordinator 10.0.0.5:50051 queries --format json
  skiff ctl cancel 42
  skiff ctl migrate 42 --to 127.0.0.1:40067 --abort
  skiff ctl suspend 42 && skiff ctl resume 42
  skiff ctl drain 2 && skiff ctl drain 3 --abort
  skiff ctl undrain 2
  skiff ctl spot-notice 127.0.0.1:40067 --seconds 30
  skiff ctl add-workers 2 && skiff ctl remove-worker 3
  skiff ctl load-to-memory lineitem l_orderkey l_quantity && skiff ctl memory-tables

Credentials come from SKIFF_USER and SKIFF_PASSWORD when the server requires them.")]
pub struct CtlArgs {
    /// The coordinator's Flight SQL address.
    #[arg(long, default_value = "127.0.0.1:50051")]
    pub coordinator: String,
    /// Output format of the tables.
    #[arg(long, value_enum, global = true)]
    pub format: Option<Format>,
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
    /// Move a running query to another worker at its next pipeline boundary
    /// (its state goes through the memory node; the client notices nothing).
    Migrate {
        id: u64,
        /// The target worker's id or address; any other worker by default.
        #[arg(long)]
        to: Option<String>,
        /// Abort the running pipelines instead of letting them finish.
        #[arg(long, alias = "immediate")]
        abort: bool,
    },
    /// Stop a running query at its next pipeline boundary, keeping its state
    /// until `resume`; its client waits.
    Suspend {
        id: u64,
        /// Abort the running pipelines instead of letting them finish.
        #[arg(long, alias = "immediate")]
        abort: bool,
    },
    /// Continue a suspended query on any worker.
    Resume { id: u64 },
    /// Vacate a worker: it takes no new query and its queries move away;
    /// waits until it is empty and prints how long that took.
    Drain {
        /// The worker's id or address (see `skiff ctl workers`).
        worker: String,
        /// Abort running pipelines instead of letting them finish: the worker
        /// empties sooner, and the targets redo the aborted work.
        #[arg(long, alias = "immediate")]
        abort: bool,
    },
    /// Let a drained worker take queries again (queries suspended because
    /// no worker was left resume on it).
    Undrain {
        /// The worker's id or address.
        worker: String,
    },
    /// A spot notice: vacate a worker that goes away in SECONDS; migrations
    /// abort running pipelines once half the notice has passed.
    SpotNotice {
        worker: String,
        #[arg(long)]
        seconds: f64,
    },
    /// Start N more local workers (under `skiff serve`); waits until they
    /// have joined. Partitions move to them (a new epoch of skiff.partitions).
    AddWorkers { n: usize },
    /// Remove a worker: its queries move away, distributed queries using it
    /// end, its partitions move to the others, and it leaves; waits until
    /// it has.
    RemoveWorker {
        /// The worker's id or address.
        worker: String,
    },
    /// Hold a table's columns in the memory nodes, split over them; the
    /// workers' scans read them from there instead of storage.
    LoadToMemory {
        table: String,
        /// Columns to hold; every column when none is named.
        columns: Vec<String>,
    },
    /// Drop a table from the memory nodes (its scans read storage again).
    UnloadFromMemory { table: String },
    /// What the memory nodes hold, per table and column, and what they sent.
    MemoryTables,
}

/// How long `drain`, `spot-notice`, `add-workers` and `remove-worker` wait.
const VACATE_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

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
        CtlCommand::Migrate { id, to, abort } => format!(
            "SELECT skiff.migrate({id}, {}, '{}')",
            to.as_deref().map_or("NULL".to_string(), quote),
            mode(*abort)
        ),
        CtlCommand::Suspend { id, abort } => {
            format!("SELECT skiff.suspend({id}, '{}')", mode(*abort))
        }
        CtlCommand::Resume { id } => format!("SELECT skiff.resume({id})"),
        CtlCommand::Drain { worker, abort } => {
            format!("SELECT skiff.drain({}, '{}')", quote(worker), mode(*abort))
        }
        CtlCommand::Undrain { worker } => format!("SELECT skiff.undrain({})", quote(worker)),
        CtlCommand::SpotNotice { worker, seconds } => {
            format!("SELECT skiff.spot_notice({}, '{seconds}')", quote(worker))
        }
        CtlCommand::AddWorkers { n } => format!("SELECT skiff.add_workers({n})"),
        CtlCommand::RemoveWorker { worker } => {
            format!("SELECT skiff.remove_worker({})", quote(worker))
        }
        CtlCommand::LoadToMemory { table, columns } => {
            let mut args = vec![quote(table)];
            args.extend(columns.iter().map(|c| quote(c)));
            format!("SELECT skiff.load_to_memory({}) AS bytes", args.join(", "))
        }
        CtlCommand::UnloadFromMemory { table } => {
            format!("SELECT skiff.unload_from_memory({}) AS bytes", quote(table))
        }
        CtlCommand::MemoryTables => "SELECT * FROM skiff.memory_tables \
                                     ORDER BY \"table\", \"column\", node"
            .to_string(),
    };
    let live_before = match &args.command {
        CtlCommand::AddWorkers { .. } => live_workers(&mut conn).await.map_err(fail)?,
        _ => 0,
    };
    let started = std::time::Instant::now();
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
    match &args.command {
        CtlCommand::Migrate { id, .. } => {
            println!("query {id}: migration asked; `skiff ctl queries` shows where it runs");
        }
        CtlCommand::Suspend { id, .. } => {
            println!("query {id}: suspension asked; it stops at its next pipeline boundary");
        }
        CtlCommand::LoadToMemory { table, .. } => println!(
            "{table}: {} bytes in the memory nodes, loaded in {} ms; \
             `skiff ctl memory-tables` lists them",
            first_i64(&batches).unwrap_or(0),
            started.elapsed().as_millis()
        ),
        CtlCommand::UnloadFromMemory { table } => println!(
            "{table}: {} bytes freed in the memory nodes",
            first_i64(&batches).unwrap_or(0)
        ),
        CtlCommand::Undrain { worker } => match first_bool(&batches) {
            Some(true) => println!("worker {worker} takes queries again"),
            _ => return Err(fail(format!("worker {worker} is not draining"))),
        },
        CtlCommand::Resume { id } => match first_bool(&batches) {
            Some(true) => println!("query {id} resumed"),
            _ => return Err(fail(format!("query {id} is not suspended"))),
        },
        CtlCommand::Drain { worker, .. } | CtlCommand::SpotNotice { worker, .. } => {
            let ms = wait_vacated(&mut conn, worker).await.map_err(fail)?;
            println!("worker {worker} vacated in {ms} ms");
        }
        CtlCommand::AddWorkers { n } => {
            let want = live_before + *n as i64;
            let joined = format!(
                "SELECT count(*) >= {want} FROM skiff.workers \
                 WHERE role = 'worker' AND state = 'alive'"
            );
            wait_until(&mut conn, &joined, &format!("{n} workers to join"))
                .await
                .map_err(fail)?;
            println!(
                "{n} workers joined in {} ms; `skiff ctl workers` lists them",
                started.elapsed().as_millis()
            );
        }
        CtlCommand::RemoveWorker { worker } => {
            // By id: the worker's row; by address: a worker that died and
            // registered again on it would be alive under a new id.
            let gone = format!(
                "SELECT count(*) = 0 FROM skiff.workers WHERE role = 'worker' AND \
                 state = 'alive' AND (address = {name} OR CAST(id AS VARCHAR) = {name})",
                name = quote(worker)
            );
            wait_until(&mut conn, &gone, &format!("worker {worker} to leave"))
                .await
                .map_err(fail)?;
            println!(
                "worker {worker} left in {} ms; `skiff ctl workers` shows whether it was \
                 removed or died first",
                started.elapsed().as_millis()
            );
        }
        _ => {
            let mut out = std::io::stdout();
            crate::output::write_batches(&mut out, format, &schema, &batches)?;
        }
    }
    Ok(())
}

fn mode(abort: bool) -> &'static str {
    if abort { "abort" } else { "finish" }
}

/// `text` as a SQL string literal.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

fn first_bool(batches: &[arrow::array::RecordBatch]) -> Option<bool> {
    batches.first().filter(|b| b.num_rows() == 1).and_then(|b| {
        b.column(0)
            .as_any()
            .downcast_ref::<arrow::array::BooleanArray>()
            .map(|a| a.value(0))
    })
}

fn first_i64(batches: &[arrow::array::RecordBatch]) -> Option<i64> {
    batches.iter().find(|b| b.num_rows() > 0).and_then(|b| {
        b.column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .map(|a| a.value(0))
    })
}

async fn live_workers(conn: &mut FlightConn) -> Result<i64, String> {
    let sql = "SELECT count(*) FROM skiff.workers WHERE role = 'worker' AND state = 'alive'";
    let (_, batches) = conn.query(sql).await?;
    first_i64(&batches).ok_or_else(|| "skiff.workers returned no count".to_string())
}

/// Poll `sql` (one boolean) until it is true, for up to [`VACATE_WAIT`].
async fn wait_until(conn: &mut FlightConn, sql: &str, what: &str) -> Result<(), String> {
    let deadline = std::time::Instant::now() + VACATE_WAIT;
    let mut reported = std::time::Instant::now();
    while std::time::Instant::now() < deadline {
        let (_, batches) = conn.query(sql).await?;
        if first_bool(&batches) == Some(true) {
            return Ok(());
        }
        if reported.elapsed() > std::time::Duration::from_secs(5) {
            eprintln!("waiting for {what}...");
            reported = std::time::Instant::now();
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Err(format!("still waiting for {what} after {VACATE_WAIT:?}"))
}

/// Poll `skiff.workers` until the drained worker reports its vacate time.
async fn wait_vacated(conn: &mut FlightConn, worker: &str) -> Result<i64, String> {
    let sql = format!(
        "SELECT vacate_ms FROM skiff.workers WHERE role = 'worker' AND \
         (address = {name} OR CAST(id AS VARCHAR) = {name})",
        name = quote(worker)
    );
    let deadline = std::time::Instant::now() + VACATE_WAIT;
    let mut reported = std::time::Instant::now();
    while std::time::Instant::now() < deadline {
        let (_, batches) = conn.query(&sql).await?;
        let value = batches.iter().find(|b| b.num_rows() > 0).and_then(|b| {
            let column = b
                .column(0)
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>()?;
            (!column.is_null(0)).then(|| column.value(0))
        });
        if let Some(ms) = value {
            return Ok(ms);
        }
        if reported.elapsed() > std::time::Duration::from_secs(5) {
            eprintln!("waiting for worker {worker} to empty...");
            reported = std::time::Instant::now();
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Err(format!(
        "worker {worker} still holds queries after {VACATE_WAIT:?}"
    ))
}
