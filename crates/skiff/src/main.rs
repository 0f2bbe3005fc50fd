//! The `skiff` binary: the SQL shell, one-shot statements, data generation
//! and benchmarks on the embedded engine, and `skiff pod` for the
//! transaction engine of the emulated CXL pod.

mod args;
mod calibrate;
mod cli;
mod ctl;
mod output;
mod pod;
mod run;
mod server;
mod session;
mod shell;

use std::path::Path;
use std::process::ExitCode;

use clap::Parser;
use datafusion::error::{DataFusionError, Result};
use skiff_bench::args::{BenchmarkName, EngineFlags, GenArgs};
use skiff_bench::generate;
use skiff_engine::statement::split_statements;

use args::SessionArgs;
use cli::{Cli, Command};

/// Stack of each runtime thread.
const THREAD_STACK_BYTES: usize = 8 << 20;

/// Scale factor of the demo data set.
const DEMO_SF: f64 = 0.1;

fn main() -> ExitCode {
    // A panic is a bug; the user still gets one line, not a backtrace, and
    // a server's log says which of its threads it ended (the process goes
    // on unless it was the main one).
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("unnamed");
        eprintln!("internal error (a bug in skiff) in thread {name}: {info}");
    }));
    let cli = Cli::parse();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    // Plans are trees walked by recursion (DataFusion's and ours); a deeper
    // stack than tokio's 2 MiB is margin beyond the statement checks
    // (`statement::MAX_OPERATOR_CHAIN`, measured on 2 MiB). Untouched
    // stack pages cost no memory.
    builder.thread_stack_size(THREAD_STACK_BYTES);
    // A worker given --partitions N computes on N threads: plans are
    // re-partitioned for N, but scans keep the file groups the coordinator
    // planned, and would otherwise still run on every core.
    if let Some(Command::Worker(args)) = &cli.subcommand {
        let partitions = cli
            .session
            .with(None, Some(&args.partitions), None)
            .partitions();
        if let Some(n) = partitions {
            builder.worker_threads(n.max(1));
        }
    }
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(main_async(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", output::error_line(&e));
            ExitCode::FAILURE
        }
    }
}

async fn main_async(cli: Cli) -> Result<()> {
    let session = &cli.session;
    match &cli.subcommand {
        Some(Command::Ctl(args)) => ctl::run(args, args.format.unwrap_or(session.format)).await,
        Some(Command::Serve(args)) => {
            let own = session.with(Some(&args.data), Some(&args.partitions), Some(&args.memory));
            server::serve(&own, args).await
        }
        Some(Command::Coordinator(args)) => {
            let own = session.with(Some(&args.data), Some(&args.partitions), None);
            server::coordinator(&own, args).await
        }
        Some(Command::Worker(args)) => {
            let own = session.with(None, Some(&args.partitions), Some(&args.memory));
            server::worker(&own, args).await
        }
        Some(Command::Memnode(args)) => server::memnode(args).await,
        Some(Command::Pod(command)) => pod::run(command).map_err(external),
        Some(Command::Gen(args)) => generate::run(args).map(|_| ()).map_err(external),
        Some(Command::Demo(data)) => {
            let own = session.with(Some(data), None, None);
            let dir = session::data_dir(&own);
            if skiff_tables::location::names_object_store(dir.as_os_str()) {
                return Err(DataFusionError::External(
                    "skiff demo generates its data into a local directory, not an s3:// one".into(),
                ));
            }
            ensure_demo_data(&dir)?;
            shell(&own).await
        }
        Some(Command::Bench(args)) => {
            let mut args = args.clone();
            args.engine = engine_flags(session, &args.engine);
            skiff_bench::run(&args).await.map_err(external)
        }
        Some(Command::BenchChild(args)) => skiff_bench::child::run(args).await,
        None => match (&cli.command, &cli.file) {
            (Some(sql), _) => run_script(&cli.session, sql).await,
            (None, Some(file)) => {
                let script = std::fs::read_to_string(file).map_err(|e| {
                    DataFusionError::External(format!("cannot read {}: {e}", file.display()).into())
                })?;
                run_script(&cli.session, &script).await
            }
            (None, None) => shell(&cli.session).await,
        },
    }
}

async fn shell(args: &SessionArgs) -> Result<()> {
    let (engine, dir) = session::open(args).await?;
    let history = session::default_data_dir()
        .parent()
        .map(|home| home.join("history"));
    shell::Shell::new(engine, args.format, history)
        .run(&dir)
        .await
}

/// Run every statement of `script`; the first error stops it.
async fn run_script(args: &SessionArgs, script: &str) -> Result<()> {
    let (engine, _) = session::open(args).await?;
    let mut out = std::io::stdout();
    for statement in split_statements(script) {
        run::run_statement(&engine, statement, args.format, args.streaming, &mut out).await?;
    }
    Ok(())
}

/// Generate the demo data set into `dir` unless it is already there.
fn ensure_demo_data(dir: &Path) -> Result<()> {
    if dir.join("lineitem").is_dir() {
        return Ok(());
    }
    eprintln!(
        "generating TPC-H SF {DEMO_SF} into {} (first use only)",
        dir.display()
    );
    let args = GenArgs {
        benchmark: BenchmarkName::Tpch,
        sf: DEMO_SF,
        out: dir.to_path_buf(),
        force: false,
        partitions: None,
    };
    generate::run(&args).map(|_| ()).map_err(external)
}

/// The benches' engine flags, with the shell's given before `bench` where
/// the bench's own are missing.
fn engine_flags(session: &SessionArgs, own: &EngineFlags) -> EngineFlags {
    EngineFlags {
        data: own.data.clone().or_else(|| session.data()),
        memory_limit: own.memory_limit.or(session.memory_limit()),
        partitions: own.partitions.or(session.partitions()),
    }
}

fn external(e: impl std::error::Error + Send + Sync + 'static) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}
