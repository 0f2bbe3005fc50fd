//! Skiff engine integration tests, in one binary to link DataFusion once.

mod cutting;
mod invariants;
mod slt;
mod support;
