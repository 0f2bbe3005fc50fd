//! The pod memory one process sees: the pod file, the partition files it may
//! touch, and the layout that says where everything is.
//!
//! The group owns everything about pod memory below the transactions:
//! the mapped files (`region`, named in `files`), where each row and lock
//! word lives (`layout`, from the run's `params`), the headers and run
//! control (`header`), waiting on its words (`futex`) and the emulated CXL
//! accounting (`cxl`).

pub mod cxl;
pub mod files;
pub mod futex;
pub mod header;
pub mod layout;
pub mod live;
pub mod params;
pub mod region;

use std::path::Path;

use crate::arch::Place;
use crate::error::{PodError, Result};
use crate::lockword;
use header::Control;
use layout::{Array, Layout, Loc};
use params::Params;
use region::Mapping;
use std::sync::atomic::Ordering;

/// Which partition files to map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parts {
    /// A host maps its own partition only: the others are other hosts'
    /// private memory.
    Own(u16),
    /// The coordinator (loading) and `check` map them all.
    All,
    /// A watcher (`run::live`) reads the pod file only.
    PodFileOnly,
}

pub struct PodMemory {
    pub pod: Mapping,
    /// Indexed by host; `None` where not mapped.
    pub parts: Vec<Option<Mapping>>,
    pub layout: Layout,
}

impl PodMemory {
    /// Creates the pod file and every partition file for `params`, replacing
    /// any left by an earlier run at the same path, with state LOADING.
    pub fn create(path: &Path, params: Params) -> Result<PodMemory> {
        let layout = Layout::compute(params)?;
        files::remove_files(path)?;
        let pod = Mapping::create(path, layout.pod_bytes)?;
        header::write_pod_header(&pod, &layout);
        let mut parts = Vec::new();
        if layout.has_partitions() {
            for h in 0..params.hosts {
                let part = Mapping::create(&files::part_path(path, h), layout.part_bytes)?;
                header::write_part_header(&part, &layout, h);
                parts.push(Some(part));
            }
        }
        Ok(PodMemory { pod, parts, layout })
    }

    /// Maps an existing pod and validates every header.
    pub fn open(path: &Path, writable: bool, which: Parts) -> Result<PodMemory> {
        let pod = Mapping::open(path, writable)?;
        let layout = header::read_pod_header(&pod)?;
        let hosts = layout.params.hosts;
        let mut parts: Vec<Option<Mapping>> = (0..hosts).map(|_| None).collect();
        if layout.has_partitions() {
            for h in 0..hosts {
                if which == Parts::All || which == Parts::Own(h) {
                    let part = Mapping::open(&files::part_path(path, h), writable)?;
                    header::check_part_header(&part, &layout, h)?;
                    parts[h as usize] = Some(part);
                }
            }
        }
        if let Parts::Own(h) = which
            && h >= hosts
        {
            return Err(PodError::Config(format!("host {h} of a {hosts}-host pod")));
        }
        Ok(PodMemory { pod, parts, layout })
    }

    /// Maps the pod for host `host` restarting after a crash: its old
    /// partition was its private memory and is gone, so the file is
    /// replaced by a zeroed one (`host::rebuild_partition` fills it
    /// from the checkpoint and the logs).
    pub fn open_restarting(path: &Path, host: u16) -> Result<PodMemory> {
        let pod = Mapping::open(path, true)?;
        let layout = header::read_pod_header(&pod)?;
        let hosts = layout.params.hosts;
        if host >= hosts {
            return Err(PodError::Config(format!(
                "host {host} of a {hosts}-host pod"
            )));
        }
        let mut parts: Vec<Option<Mapping>> = (0..hosts).map(|_| None).collect();
        if layout.has_partitions() {
            let part = Mapping::create(&files::part_path(path, host), layout.part_bytes)?;
            header::write_part_header(&part, &layout, host);
            parts[host as usize] = Some(part);
        }
        Ok(PodMemory { pod, parts, layout })
    }

    pub fn control(&self) -> Control<'_> {
        Control::of(&self.pod)
    }

    pub fn params(&self) -> &Params {
        &self.layout.params
    }

    /// The partition file of `host`; asserts it is mapped (a host reaching
    /// into another host's private memory is a placement bug).
    pub fn part(&self, host: u16) -> &Mapping {
        match self.parts.get(host as usize) {
            Some(Some(m)) => m,
            _ => panic!("partition of host {host} is not mapped in this process"),
        }
    }

    /// Where row `idx` of `array` (warehouse `w`) is now, for offline readers
    /// (`check`, tests): in Pasha dynamic a moved tuple's rows are in the
    /// slot its directory word names. A forward outside the pool is data,
    /// not a reason to panic: `None`.
    pub fn resolve_row(&self, array: Array, w: u32, idx: u64) -> Option<Loc> {
        let l = &self.layout;
        let Some(table) = l.movable_lock_table(array) else {
            return Some(l.row(array, w, idx));
        };
        let dir = self
            .pod
            .atomic_u64(l.directory(table, w, idx))
            .load(Ordering::Acquire);
        match lockword::forwarded(dir) {
            None => Some(l.row(array, w, idx)),
            Some(s) if s < l.dynamic_slots() => Some(l.slot_row(array, l.host_of(w), s)),
            Some(_) => None,
        }
    }

    /// The mapping that holds `loc`, for offline readers and the loader; a
    /// replicated row resolves to `replica_host`'s copy.
    pub fn mapping_of(&self, loc: Loc, replica_host: u16) -> &Mapping {
        match loc.place {
            Place::Pod => &self.pod,
            Place::Partition => self.part(loc.host),
            Place::Replicated => self.part(replica_host),
        }
    }
}
