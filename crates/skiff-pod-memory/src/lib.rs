//! The emulated CXL pod's memory and the words that describe it: a run's
//! configuration and the architectures' placements, the pod and partition
//! files and their layout, the header and run control, lock words, host
//! statistics, the CXL accounting, and the TPC-C records and inputs laid
//! out in them. `skiff-pod` runs transactions over it; nothing here starts
//! a host, logs a commit or runs a transaction.
//!
//! The modules are the two lowest layers of the pod (`docs/pod.md`,
//! Modules): the vocabulary (`constants`, `error`, `arch`, `config`,
//! `tpcc`) and the memory (`memory`, `lockword`, `stats`). The host stats
//! record lives in the coherent region, so the layout sizes it (`stats`);
//! lock words are words of pod memory.

pub mod arch;
pub mod config;
pub mod constants;
pub mod error;
pub mod lockword;
pub mod memory;
pub mod stats;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

/// TPC-C's records as laid out in pod memory, its random numbers, and the
/// inputs of its transactions.
pub mod tpcc {
    pub mod input;
    pub mod random;
    pub mod schema;
}
