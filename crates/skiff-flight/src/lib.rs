//! Skiff's internal wire: what the coordinator, workers and memory nodes say
//! to each other over Arrow Flight (gRPC).
//!
//! Owns: the message types ([`protocol`]), how physical plans travel
//! ([`codec`]: datafusion-proto bytes plus an extension codec for Skiff's own
//! plan nodes), thin client helpers ([`client`]), the state cache's wire
//! encoding and client calls ([`state_cache`]) and buffered blocks moving
//! to a partition's new owner ([`blocks`]), tables' chunks between memory
//! nodes and workers ([`chunks`]), query fragments a worker offers a
//! memory node and their answers ([`fragments`]). It runs no queries and
//! keeps no cluster state; the roles in `skiff-server` do.

pub mod blocks;
pub mod chunks;
pub mod client;
pub mod codec;
pub mod fragments;
pub mod protocol;

pub use client::{
    Clients, buffer_stats, clear_buffer, connect, do_action, pipeline_groups, server_builder,
};
pub use codec::{SkiffCodec, decode_plan, encode_plan};
pub mod service;
pub mod state_cache;

pub use service::{FlightStream, Handler, flight_server};
pub use state_cache::{
    CacheStats, PutOptions, Stored, cache_stats, delete_state, delete_states_under, get_state,
    put_state,
};
