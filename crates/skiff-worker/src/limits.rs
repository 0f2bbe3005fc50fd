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
