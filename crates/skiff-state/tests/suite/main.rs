//! Skiff state-separation tests, in one binary to link DataFusion once.

mod sweep;
