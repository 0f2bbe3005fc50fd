//! The resolved parameters every process of a run agrees on ([`Params`]),
//! stored in the pod header so host processes need only the pod file's path,
//! and the transaction mix they name.

use serde::Serialize;

use crate::arch::{Arch, CcProtocol};
use crate::constants::{ORDERS_PER_DISTRICT_DEFAULT_MAX, ORDERS_PER_DISTRICT_MIN};
use crate::error::{PodError, Result};
use crate::memory::cxl::CxlModel;
use crate::tpcc::random::NurandConstants;

/// The transaction mix of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Mix {
    /// NewOrder and Payment only, `new_order_pct` NewOrders (the Pasha
    /// paper's workload; nothing is delivered).
    NewOrderPayment,
    /// The full TPC-C mix of clause 5.2.3 at its minimum shares: 45%
    /// NewOrder, 43% Payment, 4% each OrderStatus, Delivery, StockLevel.
    Standard,
}

impl Mix {
    pub fn name(self) -> &'static str {
        match self {
            Mix::NewOrderPayment => "new-order-payment",
            Mix::Standard => "standard",
        }
    }

    pub fn code(self) -> u64 {
        match self {
            Mix::NewOrderPayment => 1,
            Mix::Standard => 2,
        }
    }

    pub fn from_code(code: u64) -> Option<Mix> {
        match code {
            1 => Some(Mix::NewOrderPayment),
            2 => Some(Mix::Standard),
            _ => None,
        }
    }
}

impl std::fmt::Display for Mix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mix {
    type Err = PodError;

    fn from_str(s: &str) -> Result<Mix> {
        match s {
            "new-order-payment" | "np" => Ok(Mix::NewOrderPayment),
            "standard" => Ok(Mix::Standard),
            _ => Err(PodError::Config(format!(
                "unknown mix {s:?}: new-order-payment (np) or standard"
            ))),
        }
    }
}

/// Everything the processes of one run agree on: the configuration resolved
/// to concrete numbers. Written to the pod header by the coordinator, read
/// back (and validated) by hosts and by `check`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Params {
    pub hosts: u16,
    pub warehouses: u32,
    #[serde(skip)]
    pub arch: Arch,
    #[serde(skip)]
    pub cc: CcProtocol,
    pub workers_per_host: u16,
    #[serde(skip)]
    pub mix: Mix,
    pub new_order_pct: u8,
    pub multi_warehouse_pct: f64,
    pub orders_per_district: u32,
    /// The whole run, warm-up included: hosts size their order capacity
    /// and their own stop deadline by it.
    pub duration_ms: u64,
    pub seed: u64,
    pub auditor: bool,
    pub cxl: CxlModel,
    #[serde(skip)]
    pub nurand: NurandConstants,
    pub coherent_bytes: u64,
    /// 0 = size the shared region to fit.
    pub shared_bytes: u64,
    /// Slots per host and movable table in (e); 0 in other architectures.
    pub dynamic_slots: u32,
    /// Milliseconds between a host's checkpoints; 0: none during the run.
    pub checkpoint_ms: u64,
}

impl Params {
    pub fn line_remote_probability(&self) -> f64 {
        (0.01 * self.multi_warehouse_pct / 10.0).clamp(0.0, 1.0)
    }

    pub fn payment_remote_probability(&self) -> f64 {
        (0.15 * self.multi_warehouse_pct / 10.0).clamp(0.0, 1.0)
    }

    /// Order slots per district wanted for the run when not configured:
    /// 3,000 loaded plus 20,000 per second, far above what a district takes.
    pub fn default_orders_per_district(&self) -> u32 {
        let secs = self.duration_ms.div_ceil(1000).max(1);
        (3_000 + secs.saturating_mul(20_000)).clamp(
            ORDERS_PER_DISTRICT_MIN as u64,
            ORDERS_PER_DISTRICT_DEFAULT_MAX as u64,
        ) as u32
    }
}
