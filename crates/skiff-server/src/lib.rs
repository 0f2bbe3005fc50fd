//! The front doors of a Skiff cluster and the process behind them: clients
//! connect through the PostgreSQL wire protocol ([`pg`], which also streams
//! `COPY ... FROM STDIN`) and Arrow Flight SQL ([`flight_sql`]);
//! [`serve_coordinator`] binds every port and serves the coordinator
//! (`skiff-coordinator`) behind them, with the web console
//! (`skiff-console`) and `/metrics`.
//!
//! The other roles are crates of their own: the worker (`skiff-worker`),
//! the memory node (`skiff-memnode`) and its offload decisions
//! (`skiff-offload`). What every role shares is `skiff-node`; their
//! internal traffic is `skiff-flight`'s.

pub mod flight_sql;
pub mod pg;
pub mod server;

#[cfg(test)]
mod console_tests;

pub use server::serve_coordinator;
