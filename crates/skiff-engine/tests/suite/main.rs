//! Skiff engine integration tests, in one binary to link DataFusion once.

mod buffer;
mod golden;
mod grouping;
mod invariants;
mod slt;
mod splitting;
mod support;
