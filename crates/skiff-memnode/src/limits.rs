//! The memory node's limits, in one place.

use std::time::Duration;

/// Rows a memory node keeps one min/max for, at most (each chunk is cut
/// into zones of this many rows): a narrow column's 4 MiB chunk holds half
/// a million rows, too many for its bounds to rule any out.
pub const ZONE_ROWS: usize = 1024;

/// Threads a memory node runs offloaded fragments on, when
/// `--offload-threads` does not say: the paper's embedded cores are few.
pub const DEFAULT_OFFLOAD_THREADS: usize = 2;

/// Each of calibration's timed transfers must end within twice its time
/// on the emulated link plus this.
pub const CALIBRATION_TRANSFER_SLACK: Duration = Duration::from_secs(10);
