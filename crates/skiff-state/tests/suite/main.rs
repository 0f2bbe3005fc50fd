//! Skiff state-separation tests, in one binary to link DataFusion once.

mod cut;
mod sweep;
