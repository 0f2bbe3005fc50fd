//! Starting Skiff's server roles as child processes and reading where they
//! listen: the one launcher of the benches and the server tests.
//!
//! A coordinator (`skiff serve` or `skiff coordinator`) prints one line
//! when it is ready, `skiff: PostgreSQL on A, Flight SQL on B, cluster on
//! C, console on http://D/` (`skiff serve` adds `, N workers (B MiB buffer
//! pool each), M memory node` once its nodes have registered);
//! [`Coordinator::start`] waits for that line and parses it.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a coordinator may take to announce itself (`skiff serve`
/// includes starting its workers and memory node).
pub const START_TIMEOUT: Duration = Duration::from_secs(120);

/// What every announcement starts with.
const ANNOUNCEMENT: &str = "skiff: PostgreSQL on ";

/// Where a started coordinator listens; a front door that is off is `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announcement {
    pub pg: Option<SocketAddr>,
    pub flight: Option<SocketAddr>,
    pub cluster: SocketAddr,
    /// The web console (`console on http://A/`).
    pub console: Option<SocketAddr>,
}

impl Announcement {
    /// The addresses of an announcement line; `None` for any other line.
    pub fn parse(line: &str) -> Option<Self> {
        if !line.starts_with(ANNOUNCEMENT) {
            return None;
        }
        let field = |after: &str| -> Option<&str> {
            let rest = &line[line.find(after)? + after.len()..];
            Some(&rest[..rest.find([',', ' ']).unwrap_or(rest.len())])
        };
        let door = |after: &str| -> Option<Option<SocketAddr>> {
            match field(after)? {
                "off" => Some(None),
                addr => addr.parse().ok().map(Some),
            }
        };
        Some(Self {
            pg: door("PostgreSQL on ")?,
            flight: door("Flight SQL on ")?,
            cluster: field("cluster on ")?.parse().ok()?,
            console: match field("console on ") {
                None | Some("off") => None,
                Some(url) => {
                    let addr = url.strip_prefix("http://")?;
                    Some(addr.strip_suffix('/').unwrap_or(addr).parse().ok()?)
                }
            },
        })
    }
}

/// A running coordinator process; killed on drop. Its workers and memory
/// node die with it (they are started with `PR_SET_PDEATHSIG`).
pub struct Coordinator {
    child: Child,
    pub at: Announcement,
}

/// A coordinator process that has not announced itself yet.
pub struct Starting {
    child: Child,
    announced: mpsc::Receiver<Announcement>,
}

impl Starting {
    /// Wait, at most `timeout`, for the announcement. Blocks: from async
    /// code, call it on a blocking thread (the process was spawned, and its
    /// `PR_SET_PDEATHSIG` tied, to the caller's thread). On failure the
    /// process is killed and reaped.
    pub fn ready(mut self, timeout: Duration) -> Result<Coordinator, String> {
        match self.announced.recv_timeout(timeout) {
            Ok(at) => Ok(Coordinator {
                child: self.child,
                at,
            }),
            Err(_) => {
                let exited = self.child.try_wait().ok().flatten();
                kill(&mut self.child);
                Err(match exited {
                    Some(status) => {
                        format!("the coordinator exited ({status}) before it was ready")
                    }
                    None => format!("the coordinator did not announce itself within {timeout:?}"),
                })
            }
        }
    }
}

impl Coordinator {
    /// Spawn `command` (a `skiff serve` or `skiff coordinator` command line)
    /// with its stdout piped and wait, at most `timeout`, for its
    /// announcement.
    pub fn start(command: &mut Command, timeout: Duration) -> Result<Self, String> {
        Self::spawn(command)?.ready(timeout)
    }

    /// Spawn `command` with its stdout piped; [`Starting::ready`] waits for
    /// the announcement.
    pub fn spawn(command: &mut Command) -> Result<Starting, String> {
        let mut child = command
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", command.get_program()))?;
        let Some(stdout) = child.stdout.take() else {
            kill(&mut child);
            return Err("the coordinator has no stdout".to_string());
        };
        let (tx, announced) = mpsc::channel();
        // The reader keeps draining stdout after the announcement, so the
        // coordinator never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(announcement) = Announcement::parse(&line) {
                    let _ = tx.send(announcement);
                }
            }
        });
        Ok(Starting { child, announced })
    }

    /// The PostgreSQL front door; an error when it was started without one.
    pub fn pg(&self) -> Result<SocketAddr, String> {
        self.at
            .pg
            .ok_or_else(|| "the coordinator has no PostgreSQL front door".to_string())
    }

    /// The Flight SQL front door; an error when it was started without one.
    pub fn flight(&self) -> Result<SocketAddr, String> {
        self.at
            .flight
            .ok_or_else(|| "the coordinator has no Flight SQL front door".to_string())
    }

    /// The process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        kill(&mut self.child);
    }
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A `skiff ROLE` command line of the executable `exe` that dies with the
/// thread that spawns it (`PR_SET_PDEATHSIG`), so a killed benchmark leaves
/// no cluster behind; spawn it from a thread that lives as long as the
/// process is wanted. Logs go to this process's stderr, nothing is read
/// from stdin, and credentials of the caller's environment are not passed.
pub fn role(exe: &Path, role: &str) -> Command {
    let mut command = Command::new(exe);
    command
        .arg(role)
        .env_remove("SKIFF_USER")
        .env_remove("SKIFF_PASSWORD")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
}

/// `skiff serve` of the executable `exe` over `data` with `workers`
/// workers, `--partitions` (the parallelism of each) `partitions`, its
/// front doors on free local ports and its logs at warn: the server of the
/// benches (see [`role`]).
pub fn serve(exe: &Path, data: &Path, workers: usize, partitions: usize) -> Command {
    let mut command = role(exe, "serve");
    command
        .arg("--data")
        .arg(data)
        .args(["--workers", &workers.to_string()])
        .args(["--pg-addr", "127.0.0.1:0", "--flight-addr", "127.0.0.1:0"])
        .args(["--http-addr", "127.0.0.1:0"])
        .args(["--partitions", &partitions.to_string()])
        .env("SKIFF_LOG", "warn");
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_announcement_parses() {
        let line = "skiff: PostgreSQL on 127.0.0.1:5433, Flight SQL on 127.0.0.1:4000, \
                    cluster on 127.0.0.1:4100, console on http://127.0.0.1:8080/, \
                    2 workers (512 MiB buffer pool each), 1 memory node";
        let at = Announcement::parse(line).expect("an announcement");
        assert_eq!(at.pg, Some("127.0.0.1:5433".parse().expect("addr")));
        assert_eq!(at.flight, Some("127.0.0.1:4000".parse().expect("addr")));
        assert_eq!(at.cluster, "127.0.0.1:4100".parse().expect("addr"));
        assert_eq!(at.console, Some("127.0.0.1:8080".parse().expect("addr")));
    }

    #[test]
    fn closed_front_doors_are_none() {
        let line = "skiff: PostgreSQL on off, Flight SQL on [::1]:4000, cluster on [::1]:4100, \
                    console on off";
        let at = Announcement::parse(line).expect("an announcement");
        assert_eq!(at.pg, None);
        assert_eq!(at.console, None);
        assert_eq!(at.flight, Some("[::1]:4000".parse().expect("addr")));
    }

    #[test]
    fn other_lines_are_not_announcements() {
        assert_eq!(Announcement::parse("skiff: starting"), None);
        assert_eq!(Announcement::parse(""), None);
        assert_eq!(
            Announcement::parse("skiff: PostgreSQL on nowhere, Flight SQL on off, cluster on x"),
            None
        );
    }
}
