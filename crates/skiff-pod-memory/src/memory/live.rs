//! A host's live figures: running totals of what its workers did, per
//! transaction type, in the host's slot of the coherent region, so that a
//! watcher (the console) sees throughput, aborts and CXL misses while the
//! run goes on. The run report says what a run measured (after the
//! warm-up); these count from the start and only grow, for rates.
//!
//! Each worker tallies in its own memory and adds what it counted since
//! its last publication every `LIVE_PUBLISH_MS` (`run::live::Tally`): a
//! few atomic adds per worker and interval, none per transaction.

use std::sync::atomic::Ordering::Relaxed;

use crate::memory::PodMemory;

/// Transaction types, in the order of `run::host::Kind` (and of the
/// reported commits, `lease::REPORTED_KINDS`).
pub const LIVE_KINDS: usize = 5;

/// What is counted per transaction type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Figures {
    /// Business transactions committed.
    pub committed: u64,
    /// Attempts aborted by a conflict (and retried, or abandoned).
    pub aborted: u64,
    /// Modeled CXL misses of every attempt (`CxlCounters::misses`).
    pub misses: u64,
}

impl Figures {
    const WORDS: u64 = 3;

    fn words(self) -> [u64; Self::WORDS as usize] {
        [self.committed, self.aborted, self.misses]
    }

    pub fn add(&mut self, o: Figures) {
        self.committed += o.committed;
        self.aborted += o.aborted;
        self.misses += o.misses;
    }

    pub fn is_zero(self) -> bool {
        self == Figures::default()
    }
}

/// One host's slot: every kind's figures, with room to grow.
pub const HOST_LIVE_BYTES: u64 = 128;
const _: () = assert!(LIVE_KINDS as u64 * Figures::WORDS * 8 <= HOST_LIVE_BYTES);

/// One host's live figures in pod memory.
pub struct HostLive<'m> {
    mem: &'m PodMemory,
    off: u64,
}

impl<'m> HostLive<'m> {
    pub fn of(mem: &'m PodMemory, host: u16) -> HostLive<'m> {
        HostLive {
            mem,
            off: mem.layout.host_live(host),
        }
    }

    fn word(&self, at: u64) -> &'m std::sync::atomic::AtomicU64 {
        self.mem.pod.atomic_u64(self.off + at)
    }

    /// Adds `f` to `kind`'s totals.
    pub fn add(&self, kind: usize, f: Figures) {
        assert!(kind < LIVE_KINDS);
        let base = kind as u64 * Figures::WORDS * 8;
        for (i, v) in f.words().into_iter().enumerate() {
            if v > 0 {
                self.word(base + 8 * i as u64).fetch_add(v, Relaxed);
            }
        }
    }

    /// Every kind's totals.
    pub fn read(&self) -> [Figures; LIVE_KINDS] {
        std::array::from_fn(|k| {
            let base = k as u64 * Figures::WORDS * 8;
            let w = |i: u64| self.word(base + 8 * i).load(Relaxed);
            Figures {
                committed: w(0),
                aborted: w(1),
                misses: w(2),
            }
        })
    }
}
