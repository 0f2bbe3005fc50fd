//! Checkpoints during a run, so a restarted host replays only the tail of
//! its log, and the log does not grow for the whole run.
//!
//! A host keeps two checkpoint images of its partition (`PATH.hostN.ckpt0`,
//! `.ckpt1`); its log's header names the current one and where the log
//! after it starts. Every `checkpoint_every` a host's checkpointer closes
//! the host's [`Gate`]: every thread that writes its partition (workers,
//! auditor, mover, participants) enters the gate at the start of a
//! transaction and leaves it at the end, so once nobody is inside, the
//! partition holds exactly the transactions whose records are before the
//! log's end, and no lock. It brings the other image up to date with the
//! pages written since that image's checkpoint (the partition's mapping
//! tracks them, `region`), reopens the gate, syncs the image, and only then
//! names it and the log's end in the log's header, one write
//! ([`Wal::advance`], which also punches the log before it out). A crash
//! while an image is written leaves the header naming the other, untouched
//! one. The pause is the dirty pages' copy, not the partition's.
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

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Acquire;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::durability::lease::HostRecord;
use crate::durability::wal::{self, Wal};
use skiff_pod_memory::error::{PodError, Result};
use skiff_pod_memory::memory::PodMemory;
use skiff_pod_memory::memory::files::checkpoint_path;
use skiff_pod_memory::memory::futex;
use skiff_pod_memory::memory::header::{self, state};
use skiff_pod_memory::memory::region::{Mapping, PAGE_BYTES};

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
    // A restarted host rebuilt its partition from the current image.
    let restarted = HostRecord::of(mem, host).incarnation() > 1;
    let control = mem.control();
    let mut stats = CheckpointStats::default();
    let mut current = crate::durability::wal::checkpoint_image(
        &skiff_pod_memory::memory::files::wal_path(mem.pod.path(), host),
    )?;
    // What the image that is not current lacks: the pages written between
    // its checkpoint and the current one. Unknown after a restart (a
    // checkpoint may have died writing it); both are the load at first.
    let mut behind: Option<Vec<(u64, u64)>> = (!restarted).then(Vec::new);
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
        let part = mem.parts.get(host as usize).and_then(|p| p.as_ref());
        let target = 1 - current;
        let path = checkpoint_path(mem.pod.path(), host, target);
        if let (Some(part), None) = (part, &behind) {
            // While transactions run: the current image, to catch up from.
            let from = checkpoint_path(mem.pod.path(), host, current);
            write_image(&from, part.bytes(), &path)?;
            behind = Some(Vec::new());
        }
        let closed = Instant::now();
        let copied = gate.quiesced(QUIESCE_MAX, || {
            let upto = wal.end();
            let Some(part) = part else {
                return Ok((upto, Vec::new()));
            };
            let runs = part.take_dirty();
            let older = behind.as_deref().unwrap_or_default();
            copy_pages(part, &runs, older, &path).map(|()| (upto, runs))
        });
        let Some(copied) = copied else {
            stats.skipped += 1;
            continue;
        };
        stats.pause_max_us = stats.pause_max_us.max(closed.elapsed().as_micros() as u64);
        let (upto, runs) = copied?;
        if part.is_some() {
            sync(&path)?;
            // The image that was current lacks what was just copied.
            behind = Some(runs);
            current = target;
        }
        // A participant in doubt about one of this host's transactions may
        // need its decision from the log: keep the log, switch the image
        // (replaying from an older start over a newer image is exact).
        let start = if HostRecord::of(mem, host).in_doubt() > 0 {
            wal.start()
        } else {
            upto
        };
        wal.advance(start, current).map_err(PodError::Corrupt)?;
        stats.taken += 1;
    }
    Ok(stats)
}

/// Brings the image at `path` up to the partition: the pages written since
/// the last checkpoint (`runs`) and those it lacked already (`older`). Run
/// with the gate closed.
fn copy_pages(
    part: &Mapping,
    runs: &[(u64, u64)],
    older: &[(u64, u64)],
    path: &Path,
) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let to = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| PodError::io(path, e))?;
    let mut buf = vec![0u8; 1 << 20];
    for &(first, pages) in runs.iter().chain(older) {
        let (mut off, end) = (
            first * PAGE_BYTES,
            ((first + pages) * PAGE_BYTES).min(part.bytes()),
        );
        while off < end {
            let n = ((end - off) as usize).min(buf.len());
            part.read_bytes(off, &mut buf[..n]);
            to.write_all_at(&buf[..n], off)
                .map_err(|e| PodError::io(path, e))?;
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

/// Makes the image at `path` durable before the log names it.
fn sync(path: &Path) -> Result<()> {
    let f = std::fs::File::open(path).map_err(|e| PodError::io(path, e))?;
    f.sync_all().map_err(|e| PodError::io(path, e))
}

/// Saves every partition as loaded (the coordinator, after the load): the
/// first checkpoint, which log replay starts from until a host takes its
/// own (`checkpoint`). Partition files are sparse and mostly holes (order
/// slots for the whole run), so only their data is copied, and the copy
/// stays sparse.
pub(crate) fn write_checkpoints(mem: &PodMemory) -> Result<()> {
    for h in 0..mem.params().hosts {
        if let Some(Some(part)) = mem.parts.get(h as usize) {
            for image in 0..2 {
                let dst = checkpoint_path(mem.pod.path(), h, image);
                write_image(part.path(), part.bytes(), &dst)?;
            }
        }
    }
    Ok(())
}

/// Calls `put(offset, bytes)` for each data extent of `src` (holes
/// skipped, found with SEEK_DATA / SEEK_HOLE). Returns the file's length.
pub(crate) fn copy_sparse(
    src: &Path,
    mut put: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<u64> {
    use std::os::fd::AsRawFd;
    let from = std::fs::File::open(src).map_err(|e| PodError::io(src, e))?;
    let len = from.metadata().map_err(|e| PodError::io(src, e))?.len();
    let fd = from.as_raw_fd();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < len {
        // SAFETY: lseek on a file descriptor this function owns.
        let data = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
        if data < 0 {
            break; // ENXIO: only a hole remains
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        let (mut off, end) = (data as u64, (hole.max(data) as u64).min(len));
        while off < end {
            let n = ((end - off) as usize).min(buf.len());
            from.read_exact_at(&mut buf[..n], off)
                .map_err(|e| PodError::io(src, e))?;
            put(off, &buf[..n])?;
            off += n as u64;
        }
        at = end.max(at + 1);
    }
    Ok(len)
}

/// Copies host `host`'s checkpoint (the image its log follows) into its
/// (zeroed) partition.
pub(crate) fn restore_checkpoint(mem: &PodMemory, host: u16) -> Result<()> {
    let part = mem.part(host);
    let image = wal::checkpoint_image(&skiff_pod_memory::memory::files::wal_path(
        mem.pod.path(),
        host,
    ))?;
    let ckpt = checkpoint_path(mem.pod.path(), host, image);
    let bad = |what: String| PodError::BadPodFile {
        path: ckpt.clone(),
        reason: what,
    };
    let len = std::fs::metadata(&ckpt)
        .map_err(|e| PodError::io(&ckpt, e))?
        .len();
    if len != part.bytes() {
        return Err(bad(format!(
            "{len} bytes, the partition has {}",
            part.bytes()
        )));
    }
    copy_sparse(&ckpt, |off, bytes| {
        part.write_bytes(off, bytes);
        Ok(())
    })?;
    header::check_part_header(part, &mem.layout, host)
}
