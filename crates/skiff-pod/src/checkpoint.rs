//! Checkpoints during a run, so a restarted host replays only the tail of
//! its log, and the log does not grow for the whole run.
//!
//! Every `checkpoint_every` a host's checkpointer copies its latest
//! checkpoint to `PATH.hostN.ckpt.tmp` (sparse) while transactions run,
//! then closes the host's [`Gate`]: every thread that writes its partition
//! (workers, auditor, mover, participants) enters the gate at the start of
//! a transaction and leaves it at the end, so once nobody is inside, the
//! partition holds exactly the transactions whose records are before the
//! log's end, and no lock. It copies the pages written since the last
//! checkpoint (the partition's mapping tracks them, `region`) over the
//! copy, reopens the gate, syncs the copy and renames it over
//! `PATH.hostN.ckpt`: a crash while writing leaves the previous checkpoint
//! whole. The pause is the dirty pages' copy, not the partition's. Then the
//! log before that end is dropped (`Wal::truncate_before`). Replaying the
//! log from its start over the newest checkpoint is exact, since a crash
//! between the rename and the truncation only replays, in order, records
//! the checkpoint already holds.
//!
//! A gate that does not empty within `QUIESCE_MAX` (a thread inside waits
//! for another host whose own gate is closed) is reopened and the
//! checkpoint skipped: checkpoints never deadlock the pod. Hosts'
//! checkpoints are spread over the interval so that this is rare.
//!
//! In (c) there is no partition: a checkpoint only drops the log before
//! the quiet point (nothing before it can be committing). In (a) and (b)
//! the log also holds this host's decisions on distributed transactions,
//! which a participant in doubt reads: while any participant, on any host,
//! holds a prepared part of one of this host's transactions that is not
//! resolved (a count in this host's record in pod memory), the log is not
//! truncated.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Acquire;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{PodError, Result};
use crate::futex;
use crate::header::state;
use crate::lease::HostRecord;
use crate::memory::PodMemory;
use crate::recovery::{checkpoint_path, copy_sparse};
use crate::region::{Dirty, PAGE_BYTES};
use crate::wal::Wal;

/// How long a checkpointer waits for its host's threads to leave their
/// transactions before it gives this checkpoint up. Transactions take
/// microseconds; one that takes longer waits on another host whose gate is
/// closed too, and waiting longer would only keep this host's transactions
/// out longer.
const QUIESCE_MAX: Duration = Duration::from_millis(100);

#[derive(Default)]
struct GateState {
    closed: bool,
    inside: u32,
}

/// Keeps a host's partition writers out while a checkpoint copies it.
#[derive(Default)]
pub(crate) struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, GateState> {
        // Every change is a single field store: a panic cannot leave it
        // half-done.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A transaction starts: waits while a checkpoint copies.
    pub(crate) fn enter(&self) {
        let mut g = self.lock();
        while g.closed {
            g = self.changed.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        g.inside += 1;
    }

    /// The transaction is over (committed or undone, locks released).
    pub(crate) fn leave(&self) {
        let mut g = self.lock();
        assert!(g.inside > 0, "leaving a gate nobody entered");
        g.inside -= 1;
        if g.closed && g.inside == 0 {
            self.changed.notify_all();
        }
    }

    /// Runs `f` with nobody inside, or returns `None` if that did not
    /// happen within `max`.
    fn quiesced<T>(&self, max: Duration, f: impl FnOnce() -> T) -> Option<T> {
        let until = Instant::now() + max;
        let mut g = self.lock();
        g.closed = true;
        while g.inside > 0 {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            g = self
                .changed
                .wait_timeout(g, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let out = (g.inside == 0).then(f);
        g.closed = false;
        self.changed.notify_all();
        out
    }
}

/// What a host's checkpointer did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CheckpointStats {
    pub taken: u64,
    /// Gates that did not empty in time.
    pub skipped: u64,
    /// Longest time the gate was closed.
    pub pause_max_us: u64,
}

/// Takes a checkpoint every `every` until `stop` or the run leaves
/// RUNNING.
pub(crate) fn checkpointer(
    mem: &PodMemory,
    host: u16,
    wal: &Wal,
    gate: &Gate,
    every: Duration,
    stop: &AtomicBool,
) -> Result<CheckpointStats> {
    let control = mem.control();
    let mut stats = CheckpointStats::default();
    // Hosts that checkpoint at the same moment wait on each other's gates
    // in (a), (b) and (e): spread them over the interval.
    let hosts = mem.params().hosts as u32;
    let mut next = Instant::now() + every + every * host as u32 / hosts;
    while !stop.load(Acquire) && control.state() == state::RUNNING {
        let now = Instant::now();
        if now < next {
            // Wakes early when the run stops.
            let slice = (next - now).min(Duration::from_millis(100));
            futex::wait(control.run_state, state::RUNNING, slice);
            continue;
        }
        next = now + every;
        let tmp = previous_image(mem, host)?;
        let closed = Instant::now();
        let copied = gate.quiesced(QUIESCE_MAX, || {
            let upto = wal.end();
            copy_dirty_pages(mem, host, tmp.as_deref()).map(|()| (upto, tmp))
        });
        let Some(copied) = copied else {
            stats.skipped += 1;
            continue;
        };
        let pause = closed.elapsed().as_micros() as u64;
        stats.pause_max_us = stats.pause_max_us.max(pause);
        let (upto, tmp) = copied?;
        if let Some(tmp) = tmp {
            install(&tmp, &checkpoint_path(mem.pod.path(), host))?;
        }
        stats.taken += 1;
        // A participant in doubt about one of this host's transactions
        // may need its decision from the log.
        if HostRecord::of(mem, host).in_doubt() > 0 {
            continue;
        }
        wal.truncate_before(upto).map_err(PodError::Corrupt)?;
    }
    Ok(stats)
}

/// Copies the host's latest checkpoint to a temporary file beside it, to
/// be brought up to date; `None` when there is no partition ((c)).
fn previous_image(mem: &PodMemory, host: u16) -> Result<Option<PathBuf>> {
    let Some(Some(part)) = mem.parts.get(host as usize) else {
        return Ok(None);
    };
    let ckpt = checkpoint_path(mem.pod.path(), host);
    let mut tmp = ckpt.clone().into_os_string();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    write_image(&ckpt, part.len(), &tmp)?;
    Ok(Some(tmp))
}

/// Copies the partition's pages written since the last checkpoint into
/// the image at `tmp`. Run with the gate closed.
fn copy_dirty_pages(mem: &PodMemory, host: u16, tmp: Option<&Path>) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let (Some(tmp), Some(Some(part))) = (tmp, mem.parts.get(host as usize)) else {
        return Ok(());
    };
    let to = std::fs::OpenOptions::new()
        .write(true)
        .open(tmp)
        .map_err(|e| PodError::io(tmp, e))?;
    let runs = match part.take_dirty() {
        Dirty::Pages(runs) => runs,
        // Not tracked: its data extents, holes skipped.
        Dirty::All => {
            return copy_sparse(part.path(), |off, bytes| {
                to.write_all_at(bytes, off)
                    .map_err(|e| PodError::io(tmp, e))
            })
            .map(|_| ());
        }
    };
    let mut buf = vec![0u8; 1 << 20];
    for (first, pages) in runs {
        let (mut off, end) = (
            first * PAGE_BYTES,
            ((first + pages) * PAGE_BYTES).min(part.len()),
        );
        while off < end {
            let n = ((end - off) as usize).min(buf.len());
            part.read_bytes(off, &mut buf[..n]);
            to.write_all_at(&buf[..n], off)
                .map_err(|e| PodError::io(tmp, e))?;
            off += n as u64;
        }
    }
    Ok(())
}

/// Writes a sparse copy of the file at `src` (`len` bytes) to `dst`.
pub(crate) fn write_image(src: &Path, len: u64, dst: &Path) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let to = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(dst)
        .map_err(|e| PodError::io(dst, e))?;
    to.set_len(len).map_err(|e| PodError::io(dst, e))?;
    copy_sparse(src, |off, bytes| {
        to.write_all_at(bytes, off)
            .map_err(|e| PodError::io(dst, e))
    })?;
    Ok(())
}

/// Makes the copy at `tmp` durable, then the checkpoint (an atomic rename).
fn install(tmp: &Path, ckpt: &Path) -> Result<()> {
    let f = std::fs::File::open(tmp).map_err(|e| PodError::io(tmp, e))?;
    f.sync_all().map_err(|e| PodError::io(tmp, e))?;
    std::fs::rename(tmp, ckpt).map_err(|e| PodError::io(ckpt, e))?;
    if let Some(dir) = ckpt.parent() {
        let d = std::fs::File::open(dir).map_err(|e| PodError::io(dir, e))?;
        d.sync_all().map_err(|e| PodError::io(dir, e))?;
    }
    Ok(())
}
