//! For tests, here and in `skiff-pod` (feature `testing`): pod files that
//! remove themselves, and lock words on `shuttle`'s atomics for randomized
//! schedules of the protocols built on them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use shuttle::sync::atomic::AtomicU64 as ShuttleU64;

use crate::lockword::AtomicWord;

/// A unique path in /dev/shm (or the temp dir) removed on drop, with the
/// partition files `check` and `run` create beside it.
pub struct TempShm(pub PathBuf);

impl TempShm {
    pub fn new(tag: &str) -> TempShm {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        TempShm(dir.join(format!("skiff-pod-test-{tag}-{}-{n}", std::process::id())))
    }
}

impl Drop for TempShm {
    fn drop(&mut self) {
        let _ = crate::memory::files::remove_files(&self.0);
    }
}

impl AtomicWord for ShuttleU64 {
    fn load(&self, order: Ordering) -> u64 {
        ShuttleU64::load(self, order)
    }
    fn swap(&self, value: u64, order: Ordering) -> u64 {
        ShuttleU64::swap(self, value, order)
    }
    fn compare_exchange_weak(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        ShuttleU64::compare_exchange_weak(self, current, new, success, failure)
    }
    fn fetch_and(&self, value: u64, order: Ordering) -> u64 {
        ShuttleU64::fetch_and(self, value, order)
    }
    fn fetch_or(&self, value: u64, order: Ordering) -> u64 {
        ShuttleU64::fetch_or(self, value, order)
    }
}
