//! The pod page's figures. The pod runs on its own (`skiff pod run`); its
//! hosts publish running totals into the pod file's coherent region
//! (`skiff_pod::live`). The console reads the files `--pod` names every
//! `CONSOLE_TICK`, read-only, keeps the last `CONSOLE_POD_HISTORY` samples
//! of each, and turns them into rates per transaction type and host:
//! commits and aborts per second, CXL misses per commit, and a minute of
//! throughput per host for the chart.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;
use skiff_pod::{LiveHost, LivePod};
use tokio_util::sync::CancellationToken;

use crate::limits::{CONSOLE_POD_HISTORY, CONSOLE_POD_RATE_WINDOW, CONSOLE_TICK};

/// One reading of one pod file.
struct Sample {
    at: Instant,
    pod: LivePod,
}

/// What is known of one pod file.
struct Watched {
    path: PathBuf,
    /// The file read last (device, inode): a new run replaces the files.
    file: Option<(u64, u64)>,
    /// Oldest first; only readings of the run now at `path`.
    samples: VecDeque<Sample>,
    /// Why the last reading failed (no file yet, not a pod, ...).
    error: Option<String>,
}

/// One reading of a pod file: which file, and what it said.
type Reading = Result<((u64, u64), LivePod), String>;

/// Reads the pod at `path` (file I/O: off the async threads).
fn read(path: &std::path::Path) -> Reading {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let pod = skiff_pod::live(path).map_err(|e| e.to_string())?;
    Ok(((meta.dev(), meta.ino()), pod))
}

/// The pods the console watches (`--pod`), and their recent readings.
pub(crate) struct PodWatch {
    started: Instant,
    watched: Mutex<Vec<Watched>>,
}

/// A host's commits over every type.
fn committed(host: &LiveHost) -> u64 {
    host.kinds.iter().map(|k| k.committed).sum()
}

/// Whether anything a page shows of the hosts differs.
fn hosts_differ(a: &LivePod, b: &LivePod) -> bool {
    fn shown(h: &LiveHost) -> (&str, u32, &[skiff_pod::LiveKind]) {
        (h.life, h.incarnation, &h.kinds)
    }
    a.hosts.iter().map(shown).ne(b.hosts.iter().map(shown))
}

/// Whether `later` can be a later reading of the same run as `earlier`:
/// same shape and no total went down (a new run at the path starts at 0).
fn same_run(earlier: &LivePod, later: &LivePod) -> bool {
    earlier.hosts.len() == later.hosts.len()
        && earlier.arch == later.arch
        && earlier.hosts.iter().zip(&later.hosts).all(|(a, b)| {
            a.incarnation <= b.incarnation
                && a.kinds.iter().zip(&b.kinds).all(|(x, y)| {
                    x.committed <= y.committed && x.aborted <= y.aborted && x.misses <= y.misses
                })
        })
}

fn running(pod: &LivePod) -> bool {
    matches!(pod.state, "running" | "stopping")
}

impl PodWatch {
    pub(crate) fn new(paths: Vec<PathBuf>) -> PodWatch {
        PodWatch {
            started: Instant::now(),
            watched: Mutex::new(
                paths
                    .into_iter()
                    .map(|path| Watched {
                        path,
                        file: None,
                        samples: VecDeque::new(),
                        error: None,
                    })
                    .collect(),
            ),
        }
    }

    fn watched(&self) -> std::sync::MutexGuard<'_, Vec<Watched>> {
        // A panic while holding it leaves readings, never a broken
        // invariant: keep going with them.
        self.watched.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads every pod file once, off the async threads, then records the
    /// readings (the lock is never held across file I/O).
    pub(crate) async fn sample(&self) {
        let paths: Vec<PathBuf> = self.watched().iter().map(|w| w.path.clone()).collect();
        let readings = match tokio::task::spawn_blocking(move || {
            paths.iter().map(|p| read(p)).collect::<Vec<Reading>>()
        })
        .await
        {
            Ok(readings) => readings,
            Err(e) => {
                tracing::warn!(error = %e, "reading the watched pods failed");
                return;
            }
        };
        self.record(Instant::now(), readings);
    }

    /// Keeps `readings` (one per watched pod, in order). A running pod gets
    /// a sample every call (its rates are the last second's); an idle one
    /// only when something changed, so a finished run's page stays as it
    /// ended. A new run (another file, totals that went down, or the start
    /// of running) starts the history anew, so no rate spans two runs or
    /// the wait before the start.
    fn record(&self, now: Instant, readings: Vec<Reading>) {
        for (w, reading) in self.watched().iter_mut().zip(readings) {
            let (file, pod) = match reading {
                Ok(read) => read,
                Err(e) => {
                    w.file = None;
                    w.samples.clear();
                    w.error = Some(e);
                    continue;
                }
            };
            w.error = None;
            let anew = w.file != Some(file)
                || w.samples.back().is_some_and(|last| {
                    !same_run(&last.pod, &pod) || (!running(&last.pod) && running(&pod))
                });
            if anew {
                w.samples.clear();
            }
            w.file = Some(file);
            let changed = w.samples.back().is_none_or(|last| {
                running(&pod) || last.pod.state != pod.state || hosts_differ(&last.pod, &pod)
            });
            if changed {
                w.samples.push_back(Sample { at: now, pod });
                while w.samples.len() > CONSOLE_POD_HISTORY {
                    w.samples.pop_front();
                }
            }
        }
    }

    /// Samples every `CONSOLE_TICK` until `shutdown`, when pods are watched.
    pub(crate) async fn sample_until(&self, shutdown: CancellationToken) {
        if self.watched().is_empty() {
            return;
        }
        loop {
            self.sample().await;
            tokio::select! {
                () = tokio::time::sleep(CONSOLE_TICK) => {}
                () = shutdown.cancelled() => return,
            }
        }
    }

    /// The pod page: each watched pod's state, its hosts' totals and rates
    /// per transaction type, and a minute of throughput per host.
    pub(crate) fn view(&self) -> Value {
        let watched = self.watched();
        let pods: Vec<PodView> = watched.iter().map(|w| self.pod_view(w)).collect();
        serde_json::json!({ "pods": pods })
    }

    fn pod_view(&self, w: &Watched) -> PodView {
        let path = w.path.display().to_string();
        let Some(last) = w.samples.back() else {
            return PodView {
                path,
                error: Some(
                    w.error
                        .clone()
                        .unwrap_or_else(|| "not read yet".to_string()),
                ),
                pod: None,
                hosts: Vec::new(),
                series: Vec::new(),
            };
        };
        // The rates: from the newest reading at least a rate window older
        // than the last one (or the oldest there is).
        let base = w
            .samples
            .iter()
            .rev()
            .find(|s| last.at.duration_since(s.at) >= CONSOLE_POD_RATE_WINDOW)
            .or(w.samples.front())
            .filter(|base| running(&last.pod) && base.at < last.at);
        let hosts = last
            .pod
            .hosts
            .iter()
            .enumerate()
            .map(|(i, host)| {
                let before = base.and_then(|b| b.pod.hosts.get(i));
                let seconds = base.map_or(0.0, |b| last.at.duration_since(b.at).as_secs_f64());
                let per_s = |now: u64, then: Option<u64>| match then {
                    Some(then) if seconds > 0.0 => Some(now.saturating_sub(then) as f64 / seconds),
                    _ => None,
                };
                let kinds: Vec<KindView> = host
                    .kinds
                    .iter()
                    .enumerate()
                    .map(|(k, kind)| {
                        let then = before.and_then(|b| b.kinds.get(k));
                        KindView {
                            name: kind.name,
                            committed: kind.committed,
                            aborted: kind.aborted,
                            misses: kind.misses,
                            commits_per_s: per_s(kind.committed, then.map(|t| t.committed)),
                            aborts_per_s: per_s(kind.aborted, then.map(|t| t.aborted)),
                            misses_per_commit: (kind.committed > 0)
                                .then(|| kind.misses as f64 / kind.committed as f64),
                        }
                    })
                    .collect();
                HostView {
                    host: host.host,
                    life: host.life,
                    incarnation: host.incarnation,
                    heartbeat_age_ms: host.heartbeat_age_ms.filter(|_| running(&last.pod)),
                    commits_per_s: per_s(committed(host), before.map(committed)),
                    kinds,
                }
            })
            .collect();
        // Throughput per host between consecutive readings while it ran.
        let series = w
            .samples
            .iter()
            .zip(w.samples.iter().skip(1))
            .filter(|(_, b)| running(&b.pod))
            .map(|(a, b)| {
                let dt = b.at.duration_since(a.at).as_secs_f64().max(1e-3);
                let t = b.at.duration_since(self.started).as_secs_f64();
                let rates = b
                    .pod
                    .hosts
                    .iter()
                    .zip(&a.pod.hosts)
                    .map(|(now, then)| committed(now).saturating_sub(committed(then)) as f64 / dt)
                    .map(|r| (r * 10.0).round() / 10.0)
                    .collect();
                ((t * 10.0).round() / 10.0, rates)
            })
            .collect();
        let mut pod = last.pod.clone();
        pod.hosts.clear();
        PodView {
            path,
            error: None,
            pod: Some(pod),
            hosts,
            series,
        }
    }
}

/// One watched pod on the page.
#[derive(Serialize)]
struct PodView {
    path: String,
    /// Why there is nothing to show (no such file yet, not a pod).
    error: Option<String>,
    /// Its run's state and parameters (`hosts` is in `hosts` below).
    pod: Option<LivePod>,
    hosts: Vec<HostView>,
    /// `(seconds since the console started, [commits/s of each host])`.
    series: Vec<(f64, Vec<f64>)>,
}

#[derive(Serialize)]
struct HostView {
    host: u16,
    life: &'static str,
    incarnation: u32,
    heartbeat_age_ms: Option<u64>,
    /// Over every type; `None` unless the pod runs.
    commits_per_s: Option<f64>,
    kinds: Vec<KindView>,
}

#[derive(Serialize)]
struct KindView {
    name: &'static str,
    committed: u64,
    aborted: u64,
    misses: u64,
    commits_per_s: Option<f64>,
    aborts_per_s: Option<f64>,
    /// Over the run so far (aborted attempts' misses included).
    misses_per_commit: Option<f64>,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use skiff_pod::{LiveHost, LiveKind, LivePod};

    use super::*;

    /// A one-host pod in `state` that committed `committed` NewOrders.
    fn pod(state: &'static str, committed: u64) -> LivePod {
        LivePod {
            state,
            stop_reason: None,
            arch: "pasha-static",
            cc: "no-wait",
            mix: "new-order-payment",
            warehouses: 1,
            workers_per_host: 1,
            multi_warehouse_pct: 10.0,
            duration_ms: 1000,
            hosts: vec![LiveHost {
                host: 0,
                life: "alive",
                incarnation: 1,
                heartbeat_age_ms: Some(5),
                kinds: vec![LiveKind {
                    name: "new_order",
                    committed,
                    aborted: committed / 10,
                    misses: committed * 3,
                }],
            }],
        }
    }

    fn host_rate(view: &PodView) -> Option<f64> {
        view.hosts[0].commits_per_s
    }

    #[test]
    fn rates_span_one_run_from_its_start() {
        let watch = PodWatch::new(vec![PathBuf::from("/nowhere")]);
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let file = (1, 1);
        // Loaded long before it runs: the wait is no part of any rate.
        watch.record(at(0), vec![Ok((file, pod("loaded", 0)))]);
        watch.record(at(5_000), vec![Ok((file, pod("running", 100)))]);
        let view = watch.pod_view(&watch.watched()[0]);
        assert_eq!(
            host_rate(&view),
            None,
            "one reading of the run: no rate yet"
        );
        assert!(view.series.is_empty());
        watch.record(at(5_500), vec![Ok((file, pod("running", 600)))]);
        watch.record(at(6_000), vec![Ok((file, pod("running", 1_100)))]);
        let view = watch.pod_view(&watch.watched()[0]);
        // 1,000 commits in the last second.
        assert_eq!(host_rate(&view), Some(1_000.0));
        assert_eq!(view.hosts[0].kinds[0].aborts_per_s, Some(100.0));
        assert_eq!(view.hosts[0].kinds[0].misses_per_commit, Some(3.0));
        assert_eq!(view.series.len(), 2);
        assert!(view.series.iter().all(|(_, r)| r == &vec![1_000.0]));
        // Done: no rate, and readings stop piling up while nothing changes.
        watch.record(at(6_500), vec![Ok((file, pod("done", 1_200)))]);
        watch.record(at(7_000), vec![Ok((file, pod("done", 1_200)))]);
        watch.record(at(7_500), vec![Ok((file, pod("done", 1_200)))]);
        let view = watch.pod_view(&watch.watched()[0]);
        assert_eq!(host_rate(&view), None);
        assert_eq!(watch.watched()[0].samples.len(), 4);
        // A new run in new files at the same path: its history alone.
        watch.record(at(8_000), vec![Ok(((1, 2), pod("running", 5)))]);
        assert_eq!(watch.watched()[0].samples.len(), 1);
        // Totals that went down: another run too.
        watch.record(at(8_500), vec![Ok(((1, 2), pod("running", 2)))]);
        assert_eq!(watch.watched()[0].samples.len(), 1);
        // The file gone: its reason, nothing kept.
        watch.record(at(9_000), vec![Err("no such file".into())]);
        let view = watch.pod_view(&watch.watched()[0]);
        assert!(view.pod.is_none() && view.hosts.is_empty());
        assert_eq!(view.error.as_deref(), Some("no such file"));
    }

    #[test]
    fn the_history_is_bounded() {
        let watch = PodWatch::new(vec![PathBuf::from("/nowhere")]);
        let t0 = Instant::now();
        for i in 0..(CONSOLE_POD_HISTORY as u64 + 50) {
            let at = t0 + Duration::from_millis(500 * i);
            watch.record(at, vec![Ok(((1, 1), pod("running", 10 * i)))]);
        }
        assert_eq!(watch.watched()[0].samples.len(), CONSOLE_POD_HISTORY);
        let view = watch.pod_view(&watch.watched()[0]);
        assert_eq!(view.series.len(), CONSOLE_POD_HISTORY - 1);
        assert_eq!(host_rate(&view), Some(20.0));
    }
}
