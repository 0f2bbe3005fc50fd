//! The worker's limits, in one place.

use std::time::Duration;

/// How long a worker waits for a memory node's chunks of one row group
/// before it reads them from storage.
pub const CHUNK_FETCH_DEADLINE: Duration = Duration::from_secs(30);

/// How long a worker waits for a memory node's decision on a fragment it
/// offered, before it runs the fragment itself.
pub const FRAGMENT_DECISION_DEADLINE: Duration = Duration::from_secs(10);

/// How long a worker waits for the next message of an offloaded fragment
/// (a node marks every row group it finishes) before it reads the row
/// groups not yet marked from storage.
pub const FRAGMENT_IDLE_DEADLINE: Duration = Duration::from_secs(30);

/// How long a worker leaves a memory node alone after a fetch from it
/// failed (its scans read storage meanwhile).
pub const MEMORY_NODE_BACKOFF: Duration = Duration::from_secs(5);

/// How long a worker waits for the rest of a batch's queries (sent at the
/// same moment by the coordinator's batcher) before it groups the ones
/// that came; a late one runs outside the groups.
pub const BATCH_ASSEMBLY_WAIT: Duration = Duration::from_secs(1);

/// Batches a worker remembers having closed short, so that their late
/// queries run at once instead of waiting for a batch of their own.
pub const CLOSED_BATCHES_KEPT: usize = 1024;

/// Groups whose reports a worker keeps for `skiff.pipeline_groups`.
pub const GROUP_REPORTS_KEPT: usize = 64;

/// The most of a query's running time adaptive snapshots may cost
/// (`skiff.adaptive_snapshots`, `snapshot_pace`).
pub const ADAPTIVE_SNAPSHOT_SHARE: f64 = 0.02;

/// No adaptive snapshot before a query ran this long, or this long since
/// its last one: a snapshot's fixed cost alone is about 20 ms, 2% of 1 s.
pub const ADAPTIVE_SNAPSHOT_FIRST: Duration = Duration::from_secs(1);

/// A snapshot's cost besides its bytes, as adaptive snapshots estimate it:
/// the pause, the put's round trip and the coordinator's bookkeeping.
pub const ADAPTIVE_SNAPSHOT_FIXED: Duration = Duration::from_millis(20);

/// Bytes per second a snapshot's extraction and put achieve one after the
/// other, until a snapshot of the query measured its own (docs/state.md
/// measured the put at about 0.8 GB/s, extraction faster).
pub const SNAPSHOT_BANDWIDTH_GUESS: f64 = 400e6;
