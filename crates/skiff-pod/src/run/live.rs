//! Live figures, both ends: a worker's [`Tally`], which publishes what it
//! counted into its host's slot every `LIVE_PUBLISH_MS`, and [`live`],
//! which reads a pod's slots from outside any run (the console) without
//! writing a byte.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::durability::lease::{HostRecord, life, mono_ms};
use skiff_pod_memory::constants::LIVE_PUBLISH_MS;
use skiff_pod_memory::error::{PodError, Result};
use skiff_pod_memory::memory::header::state;
use skiff_pod_memory::memory::live::{Figures, HostLive, LIVE_KINDS};
use skiff_pod_memory::memory::{Parts, PodMemory};

/// The transaction types' names, in the order of `run::host::Kind`.
pub(crate) const KIND_NAMES: [&str; LIVE_KINDS] = [
    "new_order",
    "payment",
    "delivery",
    "order_status",
    "stock_level",
];

/// What one worker counted since it last published.
pub(crate) struct Tally {
    counted: [Figures; LIVE_KINDS],
    published: Instant,
}

impl Tally {
    pub(crate) fn new() -> Tally {
        Tally {
            counted: [Figures::default(); LIVE_KINDS],
            published: Instant::now(),
        }
    }

    pub(crate) fn count(&mut self, kind: usize, f: Figures) {
        self.counted[kind].add(f);
    }

    /// Publishes when the last publication is `LIVE_PUBLISH_MS` old.
    pub(crate) fn publish_due(&mut self, slot: &HostLive<'_>, now: Instant) {
        if now.duration_since(self.published) >= Duration::from_millis(LIVE_PUBLISH_MS) {
            self.publish(slot, now);
        }
    }

    /// Adds what was counted to the host's totals (a worker's last call,
    /// so that the totals end equal to the workers' own counts).
    pub(crate) fn publish(&mut self, slot: &HostLive<'_>, now: Instant) {
        for (kind, f) in self.counted.iter_mut().enumerate() {
            if !f.is_zero() {
                slot.add(kind, *f);
                *f = Figures::default();
            }
        }
        self.published = now;
    }
}

/// One transaction type's running totals on one host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LiveKind {
    /// `new_order`, `payment`, `delivery`, `order_status`, `stock_level`.
    pub name: &'static str,
    pub committed: u64,
    /// Attempts aborted by a lock conflict.
    pub aborted: u64,
    /// Modeled CXL misses (data and coherent lines) of all its attempts.
    pub misses: u64,
}

/// One host, as its slot and record say now.
#[derive(Clone, Debug, Serialize)]
pub struct LiveHost {
    pub host: u16,
    /// `starting` (not announced yet), `alive`, `reclaiming` (a survivor
    /// is undoing its writes) or `dead`.
    pub life: &'static str,
    /// Incarnations: 1, or more after a restart with recovery.
    pub incarnation: u32,
    /// Milliseconds since its last heartbeat; `None` before the first.
    pub heartbeat_age_ms: Option<u64>,
    pub kinds: Vec<LiveKind>,
}

/// A pod as a watcher sees it: its run's state and parameters, and every
/// host's running totals (counted from the run's start, warm-up included).
#[derive(Clone, Debug, Serialize)]
pub struct LivePod {
    /// `loading`, `loaded`, `running`, `stopping`, `done` or `failed`.
    pub state: &'static str,
    pub stop_reason: Option<String>,
    pub arch: &'static str,
    pub cc: &'static str,
    pub mix: &'static str,
    pub warehouses: u32,
    pub workers_per_host: u16,
    pub multi_warehouse_pct: f64,
    /// The whole run, warm-up included.
    pub duration_ms: u64,
    pub hosts: Vec<LiveHost>,
}

/// Reads the live figures of the pod at `path`: maps the pod file
/// read-only (no partition), validates its header like every reader, and
/// copies the coherent region's words. A file that is not a pod, or one
/// written by another build, is an error; so is a pod still being created.
/// Point it only at pod files you run: it maps the file, and a file cut
/// short in place while mapped (which a pod run never does: it replaces
/// files) would fault the reader.
pub fn live(path: &Path) -> Result<LivePod> {
    // A watcher is pointed at a path that may not hold a pod yet: nothing
    // but a regular file is opened (a FIFO would block the open).
    let meta = std::fs::metadata(path).map_err(|e| PodError::io(path, e))?;
    if !meta.is_file() {
        return Err(PodError::BadPodFile {
            path: path.to_path_buf(),
            reason: "not a regular file".into(),
        });
    }
    let mem = PodMemory::open(path, false, Parts::PodFileOnly)?;
    let params = mem.params();
    let now_ms = mono_ms();
    let hosts = (0..params.hosts)
        .map(|h| {
            let record = HostRecord::of(&mem, h);
            let figures = HostLive::of(&mem, h).read();
            LiveHost {
                host: h,
                life: match record.life() {
                    life::ALIVE => "alive",
                    life::RECLAIMING => "reclaiming",
                    life::DEAD => "dead",
                    _ => "starting",
                },
                incarnation: record.incarnation(),
                heartbeat_age_ms: match record.heartbeat_ms() {
                    0 => None,
                    beat => Some(now_ms.saturating_sub(beat)),
                },
                kinds: KIND_NAMES
                    .iter()
                    .zip(figures)
                    .map(|(name, f)| LiveKind {
                        name,
                        committed: f.committed,
                        aborted: f.aborted,
                        misses: f.misses,
                    })
                    .collect(),
            }
        })
        .collect();
    let control = mem.control();
    Ok(LivePod {
        state: state::name(control.state()),
        stop_reason: control.stop_reason(),
        arch: params.arch.name(),
        cc: params.cc.name(),
        mix: params.mix.name(),
        warehouses: params.warehouses,
        workers_per_host: params.workers_per_host,
        multi_warehouse_pct: params.multi_warehouse_pct,
        duration_ms: params.duration_ms,
        hosts,
    })
}
