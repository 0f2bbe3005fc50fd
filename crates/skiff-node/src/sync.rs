//! Locking shared state.

use std::sync::{Mutex, MutexGuard};

/// Lock a mutex, ignoring poisoning: every critical section in the server
/// roles leaves the data consistent even if a holder panicked.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
