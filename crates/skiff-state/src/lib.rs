//! On-demand state separation (paper: "On-demand state separation"): take a
//! running query's state and the plan that continues from it, so the query
//! can go on elsewhere — another worker, later, or after a crash.
//!
//! Owns: choosing the state ([`select`], Algorithm 1), rewriting the plan to
//! read it ([`rewrite`], Algorithm 2), turning its tuples into checksummed
//! Arrow IPC frames and back ([`extract`]), the three as one call
//! ([`separate()`]), continuing from them ([`resume()`]), and the model
//! that decides whether moving a query beats starting it over
//! ([`decision`], paper §5.3). It reads an
//! execution's records (`skiff-engine`'s pipeline graph and intermediate
//! store) and never changes them: extraction is non-destructive, so the
//! query can continue locally. It knows nothing of networks, caches or
//! workers; shipping the frames and the plan is the server's business.

pub mod decision;
pub mod extract;
pub mod resume;
pub mod rewrite;
pub mod select;
pub mod separate;

pub use extract::{
    Compression, ExtractedOutput, ExtractedState, Frame, LoadError, extract, extract_batches,
    extract_carried, extract_cuts, load,
};
pub use resume::{resume, resume_context};
pub use rewrite::{RemainingPlan, remaining_plan, remaining_plan_after_cut, with_partitions};
pub use select::{Selection, dependencies, select, select_state};
pub use separate::{Separated, separate};
