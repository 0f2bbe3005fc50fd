//! What a caller configures ([`PodConfig`], [`CheckConfig`]), and how a
//! configuration resolves to the [`Params`] every process of a run agrees on.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::arch::{Arch, CcProtocol};
use crate::constants::{
    DURATION_MS_MAX, DYNAMIC_SLOTS_DEFAULT, DYNAMIC_SLOTS_MAX, DYNAMIC_SLOTS_MIN, HOSTS_MAX,
    REGION_BYTES_MAX, WAREHOUSES_MAX, WORKERS_PER_HOST_MAX,
};
use crate::error::{PodError, Result};
use crate::memory::cxl::CxlModel;
use crate::memory::params::{Mix, Params};
use crate::tpcc::random::{NurandConstants, Rng};

/// How `skiff_pod::run` starts host processes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Launch {
    /// Every host as a group of threads in the calling process, each with its
    /// own mapping of the pod file. For tests and debugging; the hosts share
    /// nothing but pod memory all the same.
    Threads,
    /// Every host as its own process: `program args... --shm PATH --host N`,
    /// which must call `skiff_pod::host_main`.
    Processes(HostCommand),
}

/// The command line of a host process, before `--shm PATH --host N`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

impl HostCommand {
    /// `<this executable> pod host`: what the `skiff` binary offers.
    pub fn current_exe_pod_host() -> Result<HostCommand> {
        let program = std::env::current_exe().map_err(|e| PodError::io("current executable", e))?;
        Ok(HostCommand {
            program,
            args: vec!["pod".into(), "host".into()],
        })
    }
}

/// Configuration of `skiff_pod::run` and `skiff_pod::load`.
#[derive(Clone, Debug)]
pub struct PodConfig {
    /// The pod file, normally in /dev/shm. Host partitions go beside it as
    /// `PATH.host0`, `PATH.host1`, ...; `skiff_pod::remove_pod` deletes them all.
    pub shm_path: PathBuf,
    pub hosts: u16,
    /// At least `hosts`; host h owns a contiguous block of warehouses.
    pub warehouses: u32,
    pub arch: Arch,
    pub cc: CcProtocol,
    /// How long transactions run and are measured, after load, host
    /// start-up and `warmup`.
    pub duration: Duration,
    /// How long transactions run before measurement starts (TPC-C's
    /// ramp-up): every figure of the report covers only `duration` after
    /// it, in every architecture alike. Not with `fault`.
    pub warmup: Duration,
    pub workers_per_host: u16,
    pub mix: Mix,
    /// With [`Mix::NewOrderPayment`]: percentage of transactions that are
    /// NewOrder; the rest are Payment.
    pub new_order_pct: u8,
    /// "Multi-warehouse %": the nominal share of NewOrders that touch a remote
    /// warehouse. 10 is the TPC-C default (each order line's supplier is
    /// remote with 1%, a Payment's customer with 15%); both probabilities
    /// scale with it, so 60 means 6% per line and 90% of Payments.
    pub multi_warehouse_pct: f64,
    /// Bytes of the hardware-coherent region (lock words, host stats).
    pub coherent_bytes: u64,
    /// Bytes of the shared data region; `None` sizes it to fit.
    pub shared_bytes: Option<u64>,
    /// ORDER/NEW_ORDER/HISTORY slots per district; `None` picks enough for
    /// `duration` that also fits the coherent region.
    pub orders_per_district_max: Option<u32>,
    pub cxl: CxlModel,
    /// Pasha dynamic: slots in the shared region per host and movable table
    /// (CUSTOMER, STOCK); `None` = `DYNAMIC_SLOTS_DEFAULT`. When a host's
    /// slots are all taken, the clock moves unreferenced tuples back.
    pub dynamic_slots_per_host: Option<u32>,
    /// Run a read-only auditor thread per host (W_YTD = sum of D_YTD).
    pub auditor: bool,
    pub seed: u64,
    pub launch: Launch,
    /// Kill a host mid-run and restart it (partial failure, durability).
    pub fault: Option<HostFault>,
    /// How often each host checkpoints its partition and drops the log
    /// before it (`Duration::ZERO`: never; a restart then replays the log
    /// from the load).
    pub checkpoint_every: Duration,
}

/// A host `skiff_pod::run` kills with SIGKILL `kill_after` into the run and
/// restarts (`--recover`) `restart_after` later. Needs host processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostFault {
    pub host: u16,
    pub kill_after: Duration,
    pub restart_after: Duration,
}

impl PodConfig {
    /// TPC-C defaults: 50/50 NewOrder/Payment, spec remote probabilities,
    /// shared-everything, one worker per host, a 256 MiB coherent region.
    pub fn new(shm_path: impl Into<PathBuf>, hosts: u16, warehouses: u32) -> PodConfig {
        PodConfig {
            shm_path: shm_path.into(),
            hosts,
            warehouses,
            arch: Arch::SharedEverything,
            cc: CcProtocol::NoWait,
            duration: Duration::from_secs(10),
            warmup: Duration::ZERO,
            workers_per_host: 1,
            mix: Mix::NewOrderPayment,
            new_order_pct: 50,
            multi_warehouse_pct: 10.0,
            coherent_bytes: 256 << 20,
            shared_bytes: None,
            orders_per_district_max: None,
            dynamic_slots_per_host: None,
            cxl: CxlModel::default(),
            auditor: false,
            seed: 0x5eed,
            launch: Launch::Threads,
            fault: None,
            checkpoint_every: Duration::from_secs(10),
        }
    }

    /// Probability that one NewOrder line's supplying warehouse is remote.
    pub fn line_remote_probability(&self) -> f64 {
        (0.01 * self.multi_warehouse_pct / 10.0).clamp(0.0, 1.0)
    }

    /// Probability that a Payment's customer is in a remote warehouse.
    pub fn payment_remote_probability(&self) -> f64 {
        (0.15 * self.multi_warehouse_pct / 10.0).clamp(0.0, 1.0)
    }

    pub fn validate(&self) -> Result<()> {
        self.arch.require_implemented()?;
        self.cc.require_implemented()?;
        let bad = |m: String| Err(PodError::Config(m));
        if self.hosts == 0 || self.hosts as usize > HOSTS_MAX {
            return bad(format!("hosts must be 1..={HOSTS_MAX}, not {}", self.hosts));
        }
        if self.warehouses < self.hosts as u32 || self.warehouses > WAREHOUSES_MAX {
            return bad(format!(
                "warehouses must be at least hosts ({}) and at most {WAREHOUSES_MAX}, not {}",
                self.hosts, self.warehouses
            ));
        }
        if self.workers_per_host == 0 || self.workers_per_host as usize > WORKERS_PER_HOST_MAX {
            return bad(format!(
                "workers per host must be 1..={WORKERS_PER_HOST_MAX}, not {}",
                self.workers_per_host
            ));
        }
        if self.new_order_pct > 100 {
            return bad(format!(
                "NewOrder share must be 0..=100%, not {}",
                self.new_order_pct
            ));
        }
        if !(0.0..=1000.0).contains(&self.multi_warehouse_pct) {
            return bad(format!(
                "multi-warehouse % must be within 0..=1000, not {}",
                self.multi_warehouse_pct
            ));
        }
        if !(self.cxl.latency_ratio >= 1.0 && self.cxl.dram_latency_ns > 0.0) {
            return bad(format!(
                "CXL latency ratio must be >= 1 and DRAM latency > 0: {:?}",
                self.cxl
            ));
        }
        if self.duration.as_millis() == 0 || self.duration.as_millis() > DURATION_MS_MAX as u128 {
            return bad(format!(
                "duration must be within [1 ms, 24 h], not {:?}",
                self.duration
            ));
        }
        if (self.duration + self.warmup).as_millis() > DURATION_MS_MAX as u128 {
            return bad(format!(
                "warm-up plus duration must be at most 24 h, not {:?} + {:?}",
                self.warmup, self.duration
            ));
        }
        if self.fault.is_some() && !self.warmup.is_zero() {
            // The fault's times and its timeline count from the start.
            return bad("a run that kills a host has no warm-up".into());
        }
        let region_ok = |b: u64| (4096..=REGION_BYTES_MAX).contains(&b);
        if !region_ok(self.coherent_bytes) || !self.shared_bytes.is_none_or(region_ok) {
            return bad(format!(
                "region sizes must be within 4 KiB..=1 TiB: coherent {}, shared {:?}",
                self.coherent_bytes, self.shared_bytes
            ));
        }
        if let Some(n) = self.dynamic_slots_per_host
            && !(DYNAMIC_SLOTS_MIN..=DYNAMIC_SLOTS_MAX).contains(&n)
        {
            return bad(format!(
                "dynamic slots per host must be {DYNAMIC_SLOTS_MIN}..={DYNAMIC_SLOTS_MAX}, not {n}"
            ));
        }
        if self.checkpoint_every.as_millis() > DURATION_MS_MAX as u128 {
            return bad(format!(
                "checkpoint interval must be at most 24 h, not {:?}",
                self.checkpoint_every
            ));
        }
        if let Some(f) = &self.fault {
            self.validate_fault(f)?;
        }
        Ok(())
    }

    fn validate_fault(&self, f: &HostFault) -> Result<()> {
        if self.launch == Launch::Threads {
            return Err(PodError::Config(
                "killing a host needs host processes, not threads".into(),
            ));
        }
        if f.host >= self.hosts || f.kill_after + f.restart_after >= self.duration {
            return Err(PodError::Config(format!(
                "kill host {} after {:?} and restart it {:?} later: needs a host below {} \
                 and both within the run's {:?}",
                f.host, f.kill_after, f.restart_after, self.hosts, self.duration
            )));
        }
        Ok(())
    }

    /// Resolves the configuration (already validated); the order capacity
    /// is settled by the layout, which knows what fits.
    pub fn params(&self) -> Params {
        let mut rng = Rng::derive(self.seed, 0x4E55, 0);
        Params {
            hosts: self.hosts,
            warehouses: self.warehouses,
            arch: self.arch,
            cc: self.cc,
            workers_per_host: self.workers_per_host,
            mix: self.mix,
            new_order_pct: self.new_order_pct,
            multi_warehouse_pct: self.multi_warehouse_pct,
            orders_per_district: self.orders_per_district_max.unwrap_or(0),
            duration_ms: (self.warmup + self.duration)
                .as_millis()
                .min(u64::MAX as u128) as u64,
            seed: self.seed,
            auditor: self.auditor,
            cxl: self.cxl,
            nurand: NurandConstants::generate(&mut rng),
            coherent_bytes: self.coherent_bytes,
            shared_bytes: self.shared_bytes.unwrap_or(0),
            checkpoint_ms: self.checkpoint_every.as_millis().min(u64::MAX as u128) as u64,
            dynamic_slots: if self.arch == Arch::PashaDynamic {
                self.dynamic_slots_per_host.unwrap_or(DYNAMIC_SLOTS_DEFAULT)
            } else {
                0
            },
        }
    }
}

/// Configuration of `skiff_pod::check`.
#[derive(Clone, Debug)]
pub struct CheckConfig {
    pub shm_path: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_probabilities_scale_together() {
        let mut c = PodConfig::new("/dev/shm/x", 2, 2);
        assert!((c.line_remote_probability() - 0.01).abs() < 1e-12);
        assert!((c.payment_remote_probability() - 0.15).abs() < 1e-12);
        c.multi_warehouse_pct = 60.0;
        assert!((c.line_remote_probability() - 0.06).abs() < 1e-12);
        assert!((c.payment_remote_probability() - 0.90).abs() < 1e-12);
        c.multi_warehouse_pct = 0.0;
        assert_eq!(c.payment_remote_probability(), 0.0);
    }

    #[test]
    fn validation_names_the_problem() {
        let mut c = PodConfig::new("/dev/shm/x", 3, 2);
        assert!(c.validate().unwrap_err().to_string().contains("warehouses"));
        c.warehouses = 3;
        c.validate().unwrap();
        c.arch = Arch::PashaDynamic;
        c.dynamic_slots_per_host = Some(1);
        assert!(c.validate().unwrap_err().to_string().contains("slots"));
        c.dynamic_slots_per_host = None;
        c.arch = Arch::PashaStatic;
        c.workers_per_host = 0;
        assert!(c.validate().unwrap_err().to_string().contains("workers"));
    }
}
