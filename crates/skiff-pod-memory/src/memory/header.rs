//! The first page of the pod file and of each partition file: magic,
//! version, the resolved run parameters and the layout fingerprint, then the
//! run-control words (futex words on their own cache lines).
//!
//! Protocol, asserted on both sides: the coordinator writes the header with
//! state LOADING, loads, then sets LOADED. Hosts map the file, validate the
//! header (an error, never a panic, on mismatch), recompute the layout from
//! the parameters and compare fingerprints, then count themselves in
//! `hosts_ready` and sleep until RUNNING. The coordinator sets STOPPING (or a
//! host does, when it runs out of room); hosts finish, publish their stats
//! and count themselves in `hosts_done`.

use std::sync::atomic::{AtomicU32, Ordering};

use bytemuck::{Pod, Zeroable};

use crate::arch::{Arch, CcProtocol};
use crate::constants::{
    DURATION_MS_MAX, DYNAMIC_SLOTS_MAX, DYNAMIC_SLOTS_MIN, HEADER_BYTES, HOSTS_MAX,
    REGION_BYTES_MAX, STOP_REASON_BYTES_MAX, WAREHOUSES_MAX,
};
use crate::error::{PodError, Result};
use crate::memory::cxl::CxlModel;
use crate::memory::futex;
use crate::memory::layout::Layout;
use crate::memory::params::Params;
use crate::memory::region::Mapping;
use crate::tpcc::random::NurandConstants;

pub const POD_MAGIC: u64 = u64::from_le_bytes(*b"SKIFFPOD");
pub const PART_MAGIC: u64 = u64::from_le_bytes(*b"SKIFFPRT");
/// Bump on any change of header, layout or row format.
pub const FORMAT_VERSION: u64 = 5;

/// Run states in `run_state`.
pub mod state {
    pub const LOADING: u32 = 1;
    pub const LOADED: u32 = 2;
    pub const RUNNING: u32 = 3;
    pub const STOPPING: u32 = 4;
    pub const DONE: u32 = 5;
    pub const FAILED: u32 = 6;

    pub fn name(s: u32) -> &'static str {
        match s {
            LOADING => "loading",
            LOADED => "loaded",
            RUNNING => "running",
            STOPPING => "stopping",
            DONE => "done",
            FAILED => "failed",
            _ => "unknown",
        }
    }
}

const RUN_STATE_OFF: u64 = 1024;
const HOSTS_READY_OFF: u64 = 1088;
const HOSTS_DONE_OFF: u64 = 1152;
const STOP_REASON_LEN_OFF: u64 = 1216;
const STOP_REASON_OFF: u64 = 1224;

/// WAIT_DIE release epochs: futex words a waiting transaction sleeps on and
/// a releaser bumps, one per cache line, chosen by a hash of the lock word's
/// offset (a collision only wakes a waiter early).
const RELEASE_EPOCHS_OFF: u64 = 2048;
pub const RELEASE_EPOCHS: u64 = 16;
/// The measurement epoch: the coordinator bumps it when the warm-up ends,
/// and every thread that keeps figures restarts them when it sees it change
/// (`stats::Window`), so a run reports steady state only.
const MEASURE_EPOCH_OFF: u64 = RELEASE_EPOCHS_OFF + RELEASE_EPOCHS * 64;

const _: () = {
    assert!(STOP_REASON_OFF + (STOP_REASON_BYTES_MAX as u64) <= RELEASE_EPOCHS_OFF);
    assert!(RELEASE_EPOCHS_OFF + RELEASE_EPOCHS * 64 <= MEASURE_EPOCH_OFF);
    assert!(MEASURE_EPOCH_OFF + 64 <= HEADER_BYTES);
    assert!(size_of::<PodHeaderFixed>() as u64 <= RUN_STATE_OFF);
    assert!(STOP_REASON_OFF + STOP_REASON_BYTES_MAX as u64 <= HEADER_BYTES);
};

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct PodHeaderFixed {
    magic: u64,
    version: u64,
    pod_bytes: u64,
    part_bytes: u64,
    layout_hash: u64,
    hosts: u64,
    warehouses: u64,
    arch: u64,
    cc: u64,
    workers_per_host: u64,
    new_order_pct: u64,
    multi_warehouse_pct: u64,
    orders_per_district: u64,
    duration_ms: u64,
    seed: u64,
    auditor: u64,
    latency_ratio: u64,
    dram_latency_ns: u64,
    c_last_load: u64,
    c_last_run: u64,
    c_id: u64,
    ol_i_id: u64,
    coherent_bytes: u64,
    shared_bytes: u64,
    dynamic_slots: u64,
    mix: u64,
    checkpoint_ms: u64,
}

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct PartHeaderFixed {
    magic: u64,
    version: u64,
    host: u64,
    part_bytes: u64,
    layout_hash: u64,
}

/// Writes a fresh pod header with state LOADING.
pub fn write_pod_header(pod: &Mapping, layout: &Layout) {
    let p = &layout.params;
    let fixed = PodHeaderFixed {
        magic: POD_MAGIC,
        version: FORMAT_VERSION,
        pod_bytes: layout.pod_bytes,
        part_bytes: layout.part_bytes,
        layout_hash: layout.hash,
        hosts: p.hosts as u64,
        warehouses: p.warehouses as u64,
        arch: p.arch.code() as u64,
        cc: match p.cc {
            CcProtocol::NoWait => 1,
            CcProtocol::WaitDie => 2,
        },
        workers_per_host: p.workers_per_host as u64,
        new_order_pct: p.new_order_pct as u64,
        multi_warehouse_pct: p.multi_warehouse_pct.to_bits(),
        orders_per_district: p.orders_per_district as u64,
        duration_ms: p.duration_ms,
        seed: p.seed,
        auditor: p.auditor as u64,
        latency_ratio: p.cxl.latency_ratio.to_bits(),
        dram_latency_ns: p.cxl.dram_latency_ns.to_bits(),
        c_last_load: p.nurand.c_last_load as u64,
        c_last_run: p.nurand.c_last_run as u64,
        c_id: p.nurand.c_id as u64,
        ol_i_id: p.nurand.ol_i_id as u64,
        coherent_bytes: p.coherent_bytes,
        shared_bytes: layout.shared.end - layout.shared.start,
        dynamic_slots: p.dynamic_slots as u64,
        mix: p.mix.code(),
        checkpoint_ms: p.checkpoint_ms,
    };
    pod.write(0, &fixed);
    let c = Control::of(pod);
    c.run_state.store(state::LOADING, Ordering::Release);
    c.hosts_ready.store(0, Ordering::Release);
    c.hosts_done.store(0, Ordering::Release);
}

/// Reads and validates a pod header; recomputes the layout from it and
/// checks the fingerprint. Every failure is an error naming the file.
pub fn read_pod_header(pod: &Mapping) -> Result<Layout> {
    let bad = |reason: String| PodError::BadPodFile {
        path: pod.path().to_path_buf(),
        reason,
    };
    let h: PodHeaderFixed = pod.read(0);
    if h.magic != POD_MAGIC {
        return Err(bad(format!("magic {:#018x}, expected SKIFFPOD", h.magic)));
    }
    if h.version != FORMAT_VERSION {
        return Err(bad(format!(
            "format version {} but this build reads {FORMAT_VERSION}",
            h.version
        )));
    }
    let params = params_from(&h).map_err(bad)?;
    let layout =
        Layout::compute(params).map_err(|e| bad(format!("its parameters do not lay out: {e}")))?;
    if layout.hash != h.layout_hash
        || layout.pod_bytes != h.pod_bytes
        || layout.part_bytes != h.part_bytes
    {
        return Err(bad("layout fingerprint differs from this build's".into()));
    }
    if pod.bytes() != layout.pod_bytes {
        return Err(bad(format!(
            "{} bytes, layout says {}",
            pod.bytes(),
            layout.pod_bytes
        )));
    }
    Ok(layout)
}

fn params_from(h: &PodHeaderFixed) -> std::result::Result<Params, String> {
    let in_range = |name: &str, v: u64, lo: u64, hi: u64| {
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(format!("{name} = {v} outside {lo}..={hi}"))
        }
    };
    let arch = Arch::from_code(h.arch as u32)
        .filter(|_| h.arch <= 5)
        .ok_or(format!("arch code {}", h.arch))?;
    let cc = match h.cc {
        1 => CcProtocol::NoWait,
        2 => CcProtocol::WaitDie,
        c => return Err(format!("concurrency control code {c}")),
    };
    let nurand = NurandConstants {
        c_last_load: in_range("c_last_load", h.c_last_load, 0, 255)? as u32,
        c_last_run: in_range("c_last_run", h.c_last_run, 0, 255)? as u32,
        c_id: in_range("c_id", h.c_id, 0, 1023)? as u32,
        ol_i_id: in_range("ol_i_id", h.ol_i_id, 0, 8191)? as u32,
    };
    if !nurand.is_valid() {
        return Err(format!("NURand constants {nurand:?} break clause 2.1.6.1"));
    }
    let hosts = in_range("hosts", h.hosts, 1, HOSTS_MAX as u64)? as u16;
    let mwp = f64::from_bits(h.multi_warehouse_pct);
    let ratio = f64::from_bits(h.latency_ratio);
    let dram = f64::from_bits(h.dram_latency_ns);
    let in_model = (0.0..=1000.0).contains(&mwp)
        && (1.0..f64::INFINITY).contains(&ratio)
        && dram > 0.0
        && dram.is_finite();
    if !in_model {
        return Err(format!(
            "model values out of range: multi-warehouse {mwp}, ratio {ratio}, dram {dram}"
        ));
    }
    Ok(Params {
        hosts,
        warehouses: in_range(
            "warehouses",
            h.warehouses,
            hosts as u64,
            WAREHOUSES_MAX as u64,
        )? as u32,
        arch,
        cc,
        workers_per_host: in_range(
            "workers_per_host",
            h.workers_per_host,
            1,
            crate::constants::WORKERS_PER_HOST_MAX as u64,
        )? as u16,
        mix: crate::memory::params::Mix::from_code(h.mix)
            .ok_or_else(|| format!("mix {} unknown", h.mix))?,
        new_order_pct: in_range("new_order_pct", h.new_order_pct, 0, 100)? as u8,
        multi_warehouse_pct: mwp,
        orders_per_district: in_range(
            "orders_per_district",
            h.orders_per_district,
            1,
            u32::MAX as u64,
        )? as u32,
        duration_ms: in_range("duration_ms", h.duration_ms, 1, DURATION_MS_MAX)?,
        checkpoint_ms: in_range("checkpoint_ms", h.checkpoint_ms, 0, DURATION_MS_MAX)?,
        seed: h.seed,
        auditor: in_range("auditor", h.auditor, 0, 1)? == 1,
        cxl: CxlModel {
            latency_ratio: ratio,
            dram_latency_ns: dram,
        },
        nurand,
        coherent_bytes: in_range("coherent_bytes", h.coherent_bytes, 1, REGION_BYTES_MAX)?,
        shared_bytes: in_range("shared_bytes", h.shared_bytes, 0, REGION_BYTES_MAX)?,
        dynamic_slots: match arch {
            Arch::PashaDynamic => in_range(
                "dynamic_slots",
                h.dynamic_slots,
                DYNAMIC_SLOTS_MIN as u64,
                DYNAMIC_SLOTS_MAX as u64,
            )? as u32,
            _ => in_range("dynamic_slots", h.dynamic_slots, 0, 0)? as u32,
        },
    })
}

pub fn write_part_header(part: &Mapping, layout: &Layout, host: u16) {
    part.write(
        0,
        &PartHeaderFixed {
            magic: PART_MAGIC,
            version: FORMAT_VERSION,
            host: host as u64,
            part_bytes: layout.part_bytes,
            layout_hash: layout.hash,
        },
    );
}

pub fn check_part_header(part: &Mapping, layout: &Layout, host: u16) -> Result<()> {
    let h: PartHeaderFixed = part.read(0);
    let reason = if h.magic != PART_MAGIC {
        format!("magic {:#018x}, expected SKIFFPRT", h.magic)
    } else if h.version != FORMAT_VERSION {
        format!("format version {}", h.version)
    } else if h.host != host as u64 {
        format!("partition of host {}, expected {host}", h.host)
    } else if h.layout_hash != layout.hash
        || h.part_bytes != layout.part_bytes
        || part.bytes() != layout.part_bytes
    {
        "layout differs from the pod file's".into()
    } else {
        return Ok(());
    };
    Err(PodError::BadPodFile {
        path: part.path().to_path_buf(),
        reason,
    })
}

/// The run-control words of a mapped pod file.
pub struct Control<'m> {
    pub run_state: &'m AtomicU32,
    pub hosts_ready: &'m AtomicU32,
    pub hosts_done: &'m AtomicU32,
    pub measure_epoch: &'m AtomicU32,
    pod: &'m Mapping,
}

impl<'m> Control<'m> {
    pub fn of(pod: &'m Mapping) -> Control<'m> {
        Control {
            run_state: pod.atomic_u32(RUN_STATE_OFF),
            hosts_ready: pod.atomic_u32(HOSTS_READY_OFF),
            hosts_done: pod.atomic_u32(HOSTS_DONE_OFF),
            measure_epoch: pod.atomic_u32(MEASURE_EPOCH_OFF),
            pod,
        }
    }

    pub fn state(&self) -> u32 {
        self.run_state.load(Ordering::Acquire)
    }

    /// Sets the state and wakes every sleeper on it.
    pub fn set_state(&self, s: u32) {
        self.run_state.store(s, Ordering::Release);
        futex::wake_all(self.run_state);
    }

    /// Moves RUNNING to STOPPING, recording why, unless someone already did.
    /// Returns whether this call stopped the run.
    pub fn request_stop(&self, reason: &str) -> bool {
        let won = self
            .run_state
            .compare_exchange(
                state::RUNNING,
                state::STOPPING,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if won {
            let bytes = reason.as_bytes();
            let n = bytes.len().min(STOP_REASON_BYTES_MAX);
            self.pod.write_bytes(STOP_REASON_OFF, &bytes[..n]);
            self.pod
                .atomic_u64(STOP_REASON_LEN_OFF)
                .store(n as u64, Ordering::Release);
            futex::wake_all(self.run_state);
        }
        won
    }

    /// Ends the warm-up: every thread restarts its figures (`stats::Window`).
    pub fn begin_measuring(&self) {
        self.measure_epoch.fetch_add(1, Ordering::AcqRel);
        futex::wake_all(self.measure_epoch);
    }

    /// Where a thread's figures start: from now, until the warm-up ends.
    pub fn window(&self) -> crate::stats::Window<'m> {
        crate::stats::Window::on(self.measure_epoch)
    }

    /// Why a host stopped the run early, if one did.
    pub fn stop_reason(&self) -> Option<String> {
        let n = (self
            .pod
            .atomic_u64(STOP_REASON_LEN_OFF)
            .load(Ordering::Acquire) as usize)
            .min(STOP_REASON_BYTES_MAX);
        if n == 0 {
            return None;
        }
        let mut buf = vec![0u8; n];
        self.pod.read_bytes(STOP_REASON_OFF, &mut buf);
        Some(String::from_utf8_lossy(&buf).into_owned())
    }

    /// The release epoch that waiters on the lock word at `word_off` use.
    pub fn release_epoch(&self, word_off: u64) -> &'m AtomicU32 {
        let i = (word_off / 8).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60;
        debug_assert!(i < RELEASE_EPOCHS);
        self.pod.atomic_u32(RELEASE_EPOCHS_OFF + i * 64)
    }

    /// Increments a counter word and wakes its sleepers.
    pub fn count_in(word: &AtomicU32) {
        word.fetch_add(1, Ordering::AcqRel);
        futex::wake_all(word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    use crate::arch::Arch;
    use crate::config::PodConfig;
    use crate::memory::files::part_path;
    use crate::memory::{Parts, PodMemory};
    use crate::testing::TempShm;

    fn damaged(path: &Path, f: impl Fn(&mut PodHeaderFixed)) -> String {
        let pod = Mapping::open(path, true).unwrap();
        let good: PodHeaderFixed = pod.read(0);
        let mut bad = good;
        f(&mut bad);
        pod.write(0, &bad);
        let err = PodMemory::open(path, false, Parts::All)
            .err()
            .expect("damage must be refused");
        pod.write(0, &good);
        assert!(matches!(err, PodError::BadPodFile { .. }), "{err}");
        err.to_string()
    }

    #[test]
    fn headers_are_validated_not_trusted() {
        let shm = TempShm::new("header");
        let mut cfg = PodConfig::new(&shm.0, 2, 2);
        cfg.arch = Arch::PashaStatic;
        cfg.duration = std::time::Duration::from_secs(1);
        let created = PodMemory::create(&shm.0, cfg.params()).unwrap();
        let reopened = PodMemory::open(&shm.0, false, Parts::All).unwrap();
        assert_eq!(reopened.layout.hash, created.layout.hash);
        assert_eq!(reopened.params().nurand, created.params().nurand);
        assert_eq!(Control::of(&reopened.pod).state(), state::LOADING);

        assert!(damaged(&shm.0, |h| h.magic ^= 1).contains("magic"));
        assert!(damaged(&shm.0, |h| h.version = 99).contains("version"));
        assert!(damaged(&shm.0, |h| h.hosts = 99).contains("hosts"));
        assert!(damaged(&shm.0, |h| h.warehouses = 1).contains("warehouses"));
        assert!(damaged(&shm.0, |h| h.duration_ms = u64::MAX).contains("duration"));
        assert!(damaged(&shm.0, |h| h.coherent_bytes = u64::MAX).contains("coherent"));
        assert!(damaged(&shm.0, |h| h.latency_ratio = f64::NAN.to_bits()).contains("ratio"));
        assert!(damaged(&shm.0, |h| h.c_last_run = h.c_last_load).contains("NURand"));
        assert!(damaged(&shm.0, |h| h.layout_hash ^= 1).contains("fingerprint"));
        assert!(damaged(&shm.0, |h| h.orders_per_district = 5).contains("lay out"));

        // A partition file swapped for another host's is refused too.
        std::fs::copy(part_path(&shm.0, 0), part_path(&shm.0, 1)).unwrap();
        let err = PodMemory::open(&shm.0, false, Parts::All).err().unwrap();
        assert!(err.to_string().contains("partition of host 0"), "{err}");
        // A host maps only its own partition and does not notice.
        PodMemory::open(&shm.0, false, Parts::Own(0)).unwrap();
    }

    #[test]
    fn stop_is_requested_once_with_its_reason() {
        let shm = TempShm::new("stop");
        let pod = Mapping::create(&shm.0, HEADER_BYTES).unwrap();
        let c = Control::of(&pod);
        c.set_state(state::RUNNING);
        assert!(c.request_stop("district 1/1 is full"));
        assert!(!c.request_stop("second"));
        assert_eq!(c.state(), state::STOPPING);
        assert_eq!(c.stop_reason().as_deref(), Some("district 1/1 is full"));
    }
}
