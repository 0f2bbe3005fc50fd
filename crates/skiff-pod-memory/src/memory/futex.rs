//! Waiting on a 32-bit word in pod memory with the Linux futex system call.
//!
//! The word lives in a `MAP_SHARED` file mapping, so the futex is keyed by
//! the file page, not the address space: `FUTEX_PRIVATE_FLAG` is never set,
//! which is what lets one host process wake another. Nothing in the pod ever
//! spins waiting for a word to change; it sleeps here.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Sleeps while `*word == expected`, at most `timeout`. Returns early on a
/// wake, a signal, a spurious wake-up or if the value already differs, so
/// callers re-check their condition in a loop (see [`wait_until`]).
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call; the
    // kernel only reads it. FUTEX_WAIT with a relative timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every waiter on `word`, in this process or any other that maps it.
pub fn wake_all(word: &AtomicU32) {
    // SAFETY: as in `wait`; FUTEX_WAKE does not dereference user memory
    // beyond the key lookup.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Sleeps until `done(value)` holds for the word's value or `deadline` passes.
/// Returns the value that satisfied `done`, or `None` on timeout. `slice_max`
/// bounds each sleep so a caller can also watch something a futex cannot
/// signal (a child process exiting).
pub fn wait_until(
    word: &AtomicU32,
    deadline: Instant,
    slice_max: Duration,
    mut done: impl FnMut(u32) -> bool,
) -> Option<u32> {
    loop {
        let value = word.load(Ordering::Acquire);
        if done(value) {
            return Some(value);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        wait(word, value, (deadline - now).min(slice_max));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn wait_returns_at_once_when_value_differs() {
        let word = AtomicU32::new(7);
        let start = Instant::now();
        wait(&word, 8, Duration::from_secs(5));
        assert!(start.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn wait_times_out() {
        let word = AtomicU32::new(1);
        let start = Instant::now();
        let got = wait_until(
            &word,
            Instant::now() + Duration::from_millis(50),
            Duration::from_secs(1),
            |v| v == 2,
        );
        assert_eq!(got, None);
        assert!(start.elapsed() >= Duration::from_millis(50));
    }

    #[test]
    fn wake_releases_a_waiter_in_another_thread() {
        let word = Arc::new(AtomicU32::new(0));
        let waiter = {
            let word = Arc::clone(&word);
            std::thread::spawn(move || {
                wait_until(
                    &word,
                    Instant::now() + Duration::from_secs(10),
                    Duration::from_secs(10),
                    |v| v == 1,
                )
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        let start = Instant::now();
        word.store(1, Ordering::Release);
        wake_all(&word);
        assert_eq!(waiter.join().unwrap(), Some(1));
        // The waiter was woken, not released by its 10 s timeout.
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
