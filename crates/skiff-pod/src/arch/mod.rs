//! The mechanisms of the architectures whose placements
//! `skiff_pod_memory::arch` names: (e)'s tuples that move between a
//! partition and the shared region (`dynamic`), and (a) and (b)'s remote
//! parts and two-phase commit (`remote`).

pub(crate) mod dynamic;
pub(crate) mod remote;
