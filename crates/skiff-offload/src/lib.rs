//! The offload decision engine of memory nodes (the SmartNIC paper):
//! sketches of the data a node holds, the estimator of a fragment's output
//! from them, the cost models that decide whether the node runs a
//! fragment or pushes its raw data back, their calibration's corpus and
//! fitting, and the cut of a fragment as a node gets it. Pure logic: no
//! networking and no node state; the memory node (`skiff-memnode`) decides
//! with it, and the coordinator's planner cuts fragments with it.

pub mod calibration;
pub mod costs;
pub mod estimate;
pub mod fragment;
pub mod limits;
pub mod sketches;
