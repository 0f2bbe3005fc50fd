//! The child-process protocol of `skiff bench`.
//!
//! Each (engine, query) pair runs in a fresh process so that its peak RSS
//! (VmHWM) belongs to that query and engine alone and no engine warms another
//! one's caches. The child prints exactly one JSON line, a [`ChildReport`], on
//! stdout; everything else it says goes to stderr. The Rust engines run in
//! `skiff bench-child` ([`run`]); DuckDB runs in a python3 script that prints
//! the same line (see `duckdb.rs`).

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use datafusion::error::{DataFusionError, Result};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use skiff_engine::statement::split_statements;
use skiff_engine::{Engine, EngineConfig};
use skiff_tables::DataLocation;

use crate::args::{BenchChildArgs, BenchEngine, EngineFlags};

/// What a child measured. Sizes are bytes, times milliseconds.
#[derive(Serialize, Deserialize, Debug, Default, Clone, PartialEq)]
pub struct ChildReport {
    /// Wall time of each completed run of the whole query file.
    #[serde(default)]
    pub runs_ms: Vec<f64>,
    /// Rows returned by one run (summed over the file's statements).
    #[serde(default)]
    pub rows: Option<u64>,
    /// RSS after the tables were registered, before the first query: the
    /// fixed overhead included in `peak_rss_bytes`.
    #[serde(default)]
    pub baseline_rss_bytes: Option<u64>,
    /// VmHWM of the child when it finished.
    #[serde(default)]
    pub peak_rss_bytes: Option<u64>,
    /// The first error, on one line; the runs after it were not attempted.
    #[serde(default)]
    pub error: Option<String>,
}

/// How much of a child's stderr is kept to explain a crash.
const STDERR_TAIL_BYTES_MAX: usize = 4096;
/// How often the parent checks whether a child has exited.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// `skiff bench-child`: run the query file and print one [`ChildReport`] line.
pub async fn run(args: &BenchChildArgs) -> Result<()> {
    let report = measure(args).await;
    let line = serde_json::to_string(&report)
        .map_err(|e| DataFusionError::Execution(format!("cannot encode the report: {e}")))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

async fn measure(args: &BenchChildArgs) -> ChildReport {
    let mut report = ChildReport::default();
    if let Err(e) = measure_into(args, &mut report).await {
        report.error = Some(one_line(&e.to_string()));
    }
    report.peak_rss_bytes = proc_status_bytes("VmHWM");
    report
}

async fn measure_into(args: &BenchChildArgs, report: &mut ChildReport) -> Result<()> {
    let script = std::fs::read_to_string(&args.query)
        .map_err(|e| DataFusionError::Plan(format!("cannot read {}: {e}", args.query.display())))?;
    let statements = split_statements(&script);
    let engine = open_engine(&args.session, args.engine).await?;
    report.baseline_rss_bytes = proc_status_bytes("VmRSS");
    for _ in 0..args.runs {
        let started = Instant::now();
        let rows = run_file(&engine, args.engine, &statements).await?;
        report.runs_ms.push(started.elapsed().as_secs_f64() * 1e3);
        match report.rows {
            Some(before) if before != rows => {
                return Err(DataFusionError::Execution(format!(
                    "row count changed between runs: {before} then {rows}"
                )));
            }
            _ => report.rows = Some(rows),
        }
    }
    Ok(())
}

/// An engine over the tables of `--data`, configured as the parent asked;
/// a buffer pool only for `skiff` (DataFusion's path never reads one).
async fn open_engine(session: &EngineFlags, which: BenchEngine) -> Result<Engine> {
    let Some(data) = &session.data else {
        return Err(DataFusionError::Plan(
            "skiff bench-child needs --data".to_string(),
        ));
    };
    let engine = Engine::new(&EngineConfig {
        target_partitions: session.partitions,
        memory_limit: session.memory_limit,
        spill_dir: None,
        cache_memory: match which {
            BenchEngine::Skiff => None,
            _ => Some(0),
        },
    })?;
    engine
        .register_data(&DataLocation::parse(data.as_os_str())?)
        .await?;
    Ok(engine)
}

/// Run every statement of the file on `engine`; rows are counted, not kept.
async fn run_file(engine: &Engine, which: BenchEngine, statements: &[&str]) -> Result<u64> {
    let mut rows = 0u64;
    for statement in statements {
        let mut stream = match which {
            BenchEngine::Skiff | BenchEngine::SkiffCold => engine.execute(statement).await?.stream,
            BenchEngine::Datafusion => engine.execute_streaming(statement).await?,
            BenchEngine::Duckdb | BenchEngine::DuckdbNative => {
                return Err(DataFusionError::Plan(
                    "duckdb runs in python3, not in skiff bench-child".to_string(),
                ));
            }
        };
        while let Some(batch) = stream.try_next().await? {
            rows += batch.num_rows() as u64;
        }
    }
    Ok(rows)
}

/// A `VmRSS:`/`VmHWM:`-style line of /proc/self/status, in bytes; `None`
/// where /proc is missing (not Linux).
fn proc_status_bytes(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_status_kib(&status, key).map(|kib| kib * 1024)
}

fn parse_status_kib(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Messages become one line so that the table and the CSV stay readable.
pub fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The report in a child's stdout: the last line that parses as one.
pub fn parse_report(stdout: &str) -> Option<ChildReport> {
    stdout
        .lines()
        .rev()
        .filter(|line| line.trim_start().starts_with('{'))
        .find_map(|line| serde_json::from_str(line).ok())
}

/// Run `command` to completion (killing it after `timeout`), feeding it
/// `stdin`, and return its report. Any failure to get a report — it could
/// not start, crashed, was killed or printed none — is an error line.
pub fn collect(mut command: Command, stdin: Option<String>, timeout: Duration) -> ChildOutcome {
    let program = command.get_program().to_string_lossy().into_owned();
    command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    // Readers and the writer run on threads so that a child blocked on a
    // full pipe can never deadlock against the parent.
    let writer = child.stdin.take().zip(stdin).map(|(mut pipe, text)| {
        thread::spawn(move || {
            // A child that exits without reading its input is reported by
            // its own exit status, so a broken pipe here is not an error.
            let _ = pipe.write_all(text.as_bytes());
        })
    });
    let stdout = child
        .stdout
        .take()
        .map(|pipe| thread::spawn(|| read_all(pipe)));
    let stderr = child
        .stderr
        .take()
        .map(|pipe| thread::spawn(|| read_tail(pipe)));
    let status = wait_with_timeout(&mut child, timeout);
    if let Some(writer) = writer {
        let _ = writer.join();
    }
    let stdout = stdout.and_then(|h| h.join().ok()).unwrap_or_default();
    let stderr = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
    let status = status?;
    match parse_report(&stdout) {
        Some(report) => Ok(report),
        None => Err(crash_message(status, &stderr)),
    }
}

/// A child's report, or why there is none.
pub type ChildOutcome = std::result::Result<ChildReport, String>;

fn wait_with_timeout(
    child: &mut std::process::Child,
    timeout: Duration,
) -> std::result::Result<ExitStatus, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("timed out after {} s", timeout.as_secs()));
            }
            Ok(None) => thread::sleep(POLL_INTERVAL),
            Err(e) => return Err(format!("cannot wait for the child: {e}")),
        }
    }
}

fn read_all(mut pipe: impl Read) -> String {
    let mut text = String::new();
    let _ = pipe.read_to_string(&mut text);
    text
}

/// The end of a stream, bounded: a chatty child must not fill our memory.
fn read_tail(mut pipe: impl Read) -> String {
    let mut tail: Vec<u8> = Vec::new();
    let mut buffer = [0u8; 8192];
    while let Ok(n) = pipe.read(&mut buffer) {
        if n == 0 {
            break;
        }
        tail.extend_from_slice(&buffer[..n]);
        if tail.len() > 2 * STDERR_TAIL_BYTES_MAX {
            tail.drain(..tail.len() - STDERR_TAIL_BYTES_MAX);
        }
    }
    String::from_utf8_lossy(&tail).into_owned()
}

fn crash_message(status: ExitStatus, stderr: &str) -> String {
    use std::os::unix::process::ExitStatusExt;
    let how = match (status.code(), status.signal()) {
        (_, Some(9)) => "killed by SIGKILL (out of memory?)".to_string(),
        (_, Some(signal)) => format!("killed by signal {signal}"),
        (Some(code), _) => format!("exited with code {code} without a report"),
        (None, None) => format!("ended without a report ({status})"),
    };
    match stderr.lines().rev().find(|l| !l.trim().is_empty()) {
        Some(last) => format!("{how}: {}", one_line(last)),
        None => how,
    }
}

/// The command line of a Rust-engine child for `query`.
pub fn command(
    session: &EngineFlags,
    data: &Path,
    engine: BenchEngine,
    query: &Path,
    runs: u32,
) -> std::result::Result<Command, String> {
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the skiff executable: {e}"))?;
    let mut command = Command::new(exe);
    command.arg("bench-child").arg("--data").arg(data);
    if let Some(partitions) = session.partitions {
        command.arg("--partitions").arg(partitions.to_string());
    }
    if let Some(limit) = session.memory_limit {
        command.arg("--memory-limit").arg(limit.to_string());
    }
    let engine = match engine {
        BenchEngine::Skiff => "skiff",
        BenchEngine::SkiffCold => "skiff-cold",
        BenchEngine::Datafusion => "datafusion",
        BenchEngine::Duckdb | BenchEngine::DuckdbNative => {
            return Err("duckdb has no skiff child".to_string());
        }
    };
    command
        .arg("--engine")
        .arg(engine)
        .arg("--query")
        .arg(query)
        .arg("--runs")
        .arg(runs.to_string());
    Ok(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_is_the_last_json_line() {
        let stdout = "noise\n{\"runs_ms\":[1.5,2.0],\"rows\":4,\"baseline_rss_bytes\":10,\
                      \"peak_rss_bytes\":20,\"error\":null}\n";
        let report = parse_report(stdout).expect("a report");
        assert_eq!(report.runs_ms, vec![1.5, 2.0]);
        assert_eq!(report.rows, Some(4));
        assert_eq!(report.baseline_rss_bytes, Some(10));
        assert_eq!(report.peak_rss_bytes, Some(20));
        assert_eq!(report.error, None);
    }

    #[test]
    fn report_round_trips_and_tolerates_missing_fields() {
        let report = ChildReport {
            runs_ms: vec![3.0],
            rows: None,
            baseline_rss_bytes: Some(1),
            peak_rss_bytes: Some(2),
            error: Some("boom".to_string()),
        };
        let line = serde_json::to_string(&report).expect("encodes");
        assert_eq!(parse_report(&format!("{line}\n")), Some(report));
        let sparse = parse_report("{\"error\":\"x\"}").expect("a report");
        assert_eq!(sparse.error.as_deref(), Some("x"));
        assert!(sparse.runs_ms.is_empty());
    }

    #[test]
    fn no_report_in_garbage() {
        assert_eq!(parse_report(""), None);
        assert_eq!(parse_report("panic\n{not json\n"), None);
    }

    #[test]
    fn status_lines_parse_in_kib() {
        let status = "Name:\tskiff\nVmHWM:\t  123456 kB\nVmRSS:\t   42 kB\n";
        assert_eq!(parse_status_kib(status, "VmHWM"), Some(123456));
        assert_eq!(parse_status_kib(status, "VmRSS"), Some(42));
        assert_eq!(parse_status_kib(status, "VmSwap"), None);
    }

    #[test]
    fn messages_become_one_line() {
        assert_eq!(one_line("a\n  b\tc "), "a b c");
    }
}
