//! The console's limits, in one place.

use std::time::Duration;

/// How often the console's live pages hear the cluster's state.
pub const CONSOLE_TICK: Duration = Duration::from_millis(500);

/// How long a console login lasts without logging in again.
pub const CONSOLE_LOGIN_TTL: Duration = Duration::from_secs(8 * 3600);

/// Console logins kept at once; the oldest goes when a new one comes.
pub const CONSOLE_LOGINS_MAX: usize = 1024;

/// The pause before the console answers a wrong password: guessing is slow.
pub const CONSOLE_REFUSAL_DELAY: Duration = Duration::from_millis(300);

/// Largest request body the console reads (logins and actions are small).
pub const CONSOLE_BODY_MAX: usize = 16 * 1024;

/// How long a console action (one SQL function call) may take.
pub const CONSOLE_ACTION_TIMEOUT: Duration = Duration::from_secs(30);

/// Live streams (`/api/events`) open at once, for all logins together: each
/// reads the cluster every tick, so a visitor may not open them without end.
pub const CONSOLE_FEEDS_MAX: usize = 64;

/// Readings of each pod the console keeps (one a `CONSOLE_TICK` while it
/// runs): a minute of throughput for the pod page's chart.
pub const CONSOLE_POD_HISTORY: usize = 120;

/// The pod page's rates are over the last this long.
pub const CONSOLE_POD_RATE_WINDOW: Duration = Duration::from_secs(1);

/// Pod files one console watches (`--pod`).
pub const CONSOLE_PODS_MAX: usize = 16;
