//! Skiff engine integration tests, in one binary to link DataFusion once.

mod golden;
mod invariants;
mod slt;
mod splitting;
mod support;
