//! Command-line definitions.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use skiff_bench::args::{BenchArgs, BenchChildArgs, GenArgs};

use crate::args::{DataArg, SessionArgs};

#[derive(Parser, Debug)]
#[command(
    name = "skiff",
    version,
    about = "Skiff: an elastic SQL database. Without a subcommand, opens a SQL shell.",
    after_help = "Examples:
  skiff demo                 generate TPC-H SF 0.1 once and open the shell
  skiff --data DIR -c \"SELECT count(*) FROM lineitem\"
  skiff --data DIR -f queries.sql --format csv
  skiff gen tpch --sf 1 --out DIR
  skiff bench tpch --sf 1"
)]
pub struct Cli {
    #[command(flatten)]
    pub session: SessionArgs,

    /// Run this SQL (one or more statements) and exit.
    #[arg(short = 'c', long = "command", conflicts_with = "file")]
    pub command: Option<String>,

    /// Run the statements in this file and exit.
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,

    #[command(subcommand)]
    pub subcommand: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Generate TPC-H SF 0.1 into the default data directory (first use only) and open the shell.
    Demo(DataArg),
    /// Generate benchmark data as Parquet, one subdirectory per table.
    Gen(GenArgs),
    /// Measure Skiff against baselines on a benchmark.
    Bench(BenchArgs),
    /// Serve a whole cluster on loopback: coordinator (PostgreSQL and Flight
    /// SQL front doors), worker processes and a memory node.
    Serve(crate::server::ServeArgs),
    /// Run only the coordinator role (workers join with `skiff worker`).
    Coordinator(crate::server::CoordinatorArgs),
    /// Run a worker that joins a coordinator.
    Worker(crate::server::WorkerArgs),
    /// Run a memory node that joins a coordinator.
    Memnode(crate::server::MemnodeArgs),
    /// Look at and steer a running cluster: workers, queries, cancel.
    Ctl(crate::ctl::CtlArgs),
    /// Transactions on an emulated CXL pod (TPC-C NewOrder/Payment).
    #[command(subcommand)]
    Pod(crate::pod::PodCommand),
    /// Internal: one engine runs one query file in a fresh process for
    /// `skiff bench`, printing its timings and peak memory as a JSON line.
    #[command(name = "bench-child", hide = true)]
    BenchChild(BenchChildArgs),
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// The long options of `skiff PATH...`, e.g. `["pod", "check"]`.
    fn options(path: &[&str]) -> Vec<String> {
        let mut command = Cli::command();
        command.build();
        let mut sub = &command;
        for name in path {
            sub = sub
                .find_subcommand(name)
                .unwrap_or_else(|| panic!("no subcommand {name}"));
        }
        sub.get_arguments()
            .filter_map(|a| a.get_long().map(str::to_string))
            .collect()
    }

    #[test]
    fn each_subcommand_lists_only_its_own_options() {
        let shell = ["data", "format", "memory-limit", "partitions"];
        let pod_check = options(&["pod", "check"]);
        for option in shell {
            assert!(
                !pod_check.iter().any(|o| o == option),
                "pod check: {option}"
            );
            assert!(
                options(&[]).iter().any(|o| o == option),
                "the shell: {option}"
            );
        }
        let serve = options(&["serve"]);
        for option in ["data", "partitions", "memory-limit"] {
            assert!(serve.iter().any(|o| o == option), "serve: {option}");
        }
        assert!(!serve.iter().any(|o| o == "format"), "serve: format");
        let worker = options(&["worker"]);
        assert!(!worker.iter().any(|o| o == "data"), "worker: data");
        assert!(
            worker.iter().any(|o| o == "partitions"),
            "worker: partitions"
        );
        // gen's own --partitions is the number of hash partitions of the
        // tables it writes, not the shell's parallelism.
        let gen_options = options(&["gen"]);
        for option in shell.iter().filter(|o| **o != "partitions") {
            assert!(!gen_options.iter().any(|o| o == option), "gen: {option}");
        }
        let gen_command = Cli::command();
        let gen_partitions = gen_command
            .find_subcommand("gen")
            .and_then(|g| {
                g.get_arguments()
                    .find(|a| a.get_long() == Some("partitions"))
            })
            .and_then(|a| a.get_help().map(|h| h.to_string()))
            .unwrap_or_default();
        assert!(
            gen_partitions.contains("hash-partitioned"),
            "{gen_partitions}"
        );
        let bench = options(&["bench"]);
        assert!(bench.iter().any(|o| o == "data"), "bench: data");
        assert!(!bench.iter().any(|o| o == "format"), "bench: format");
    }

    #[test]
    fn flags_before_a_subcommand_still_apply_and_its_own_win() {
        let cli = Cli::try_parse_from(["skiff", "--data", "/a", "--partitions", "3", "serve"])
            .expect("command line");
        let Some(Command::Serve(args)) = &cli.subcommand else {
            panic!("not serve");
        };
        let own = cli
            .session
            .with(Some(&args.data), Some(&args.partitions), Some(&args.memory));
        assert_eq!(own.data.data, Some(PathBuf::from("/a")));
        assert_eq!(own.partitions(), Some(3));
        let cli = Cli::try_parse_from(["skiff", "--data", "/a", "serve", "--data", "/b"])
            .expect("command line");
        let Some(Command::Serve(args)) = &cli.subcommand else {
            panic!("not serve");
        };
        let own = cli.session.with(Some(&args.data), None, None);
        assert_eq!(own.data.data, Some(PathBuf::from("/b")));
    }
}
