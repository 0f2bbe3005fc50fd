//! Skiff engine integration tests, in one binary to link DataFusion once.

mod cutting;
mod golden;
mod invariants;
mod slt;
mod support;
