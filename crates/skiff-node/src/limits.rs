//! Limits that more than one role reads, in one place; each role's own
//! are in its crate.

use std::time::Duration;

/// How long a partition's old owner tries to hand its blocks to the new
/// owner (buffer matching); blocks not taken by then are read from storage.
pub const MATCHING_DEADLINE: Duration = Duration::from_secs(30);

/// How long a node keeps reporting the scan counts of a distributed query
/// whose scans there have not moved (`scan_progress`): the query has
/// ended there, or its scans are done and only the coordinator's last
/// figure matters.
pub const SCAN_TALLY_FORGET_AFTER: Duration = Duration::from_secs(60);

/// How many forgotten queries' scan counters a node keeps, for a scan of
/// theirs that starts after they were forgotten.
pub const SCAN_TALLY_RETIRED_MAX: usize = 1024;

/// Fragments a memory node remembers for `skiff.memory_fragments`.
pub const FRAGMENT_HISTORY: usize = 256;

/// How long a read waits for the store to say whether it holds a
/// committed output (`checkpoints`) before it asks the producer instead.
pub const CHECKPOINT_LOOKUP_DEADLINE: Duration = Duration::from_secs(2);

/// How long a read waits for its output's commit before it goes on
/// without one (`checkpoints`): a checkpoint is an aid, and a store that
/// hangs must not hold the query.
pub const CHECKPOINT_COMMIT_DEADLINE: Duration = Duration::from_secs(30);

/// How long a committed stage output stays in the memory node's store
/// (`checkpoints`): longer than a query that would want it again runs.
pub const CHECKPOINT_TTL: Duration = Duration::from_secs(600);
