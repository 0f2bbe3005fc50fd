//! Tests against a real `skiff serve`: the binary is started as a process
//! (coordinator plus worker and memory-node child processes) and reached
//! only through its ports, as clients reach it.

mod clients;
mod cluster;
mod console;
mod golden;
mod matching;
mod memory;
mod migration_bench;
mod privileges;
mod resize;
mod s3;
mod slt;
mod state;
mod support;
mod tables;
