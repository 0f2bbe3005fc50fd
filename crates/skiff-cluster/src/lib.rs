//! The elastic cluster's bookkeeping (VectorH, `papers/elastic-scaling-vectorh.txt`
//! §5): which worker owns each partition of the hash-partitioned tables, and
//! how that changes when workers join and leave.
//!
//! Owns the partition manager ([`PartitionManager`]): one partition mapping
//! per equivalence class (tables with the same number of partitions P, which
//! are therefore co-located partition by partition), versioned by an epoch.
//! A resize moves the fewest partitions that leave every worker within one
//! partition of every other ([`minimal_moves`] is that lower bound). Pure
//! data: no I/O, no clock; the coordinator persists it with the catalog and
//! hands each query the manager of the epoch it started under.

mod partitions;

pub use partitions::{
    ClusterError, Move, PARTITIONS_MAX, PartitionManager, PartitionMapping, WorkerId, minimal_moves,
};
