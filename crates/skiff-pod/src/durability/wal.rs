//! A host's write-ahead log: `PATH.hostN.wal`, redo only, with group commit.
//!
//! A record is every row a transaction wrote, as full after-images addressed
//! logically — (array, warehouse, row index), never a pod offset — with a
//! sequence number taken while the transaction still holds every lock:
//!
//! - a transaction that wrote a row in pod memory (which other hosts may
//!   write too), or any transaction in (e) (whose private rows other hosts
//!   write while moved), takes the next global sequence number (GSN), a
//!   counter in the coherent region;
//! - one that wrote only its host's private rows, which no other host
//!   writes, takes the highest GSN its host has used, with no coherent
//!   access; among equal numbers, log order (one host's log) decides.
//!
//! Two transactions that wrote the same row thus carry numbers in their
//! commit order, so replaying logs is "for each row, the image with the
//! highest number, the later one in its log on a tie", in any order of
//! logs, any number of times (`recovery`).
//!
//! ```text
//! file    = [magic u64][start u64][checkpoint u64][zeros to 4 KiB] hole?
//!           record*
//! record  = [payload_len u32][magic u32][checksum u64][payload]
//! payload = [txn_id u64][gsn u64][entries u32][kind u32][peer_inc u32]
//!           [peer u64] entry*
//! entry   = [array u8][0 u8; 3][w u32][idx u64][len u32] bytes[len]
//! ```
//!
//! `kind` says how the record counts ([`Tag`]); most are `LOCAL` commits.
//! Shared nothing's two-phase commit adds the others: a participant's
//! `PREPARED` record (its writes, redone only if the coordinator's
//! transaction `peer`, of its incarnation `peer_inc`, committed), its
//! `RESOLVED_*` markers, and the coordinator's `DECIDED_*` records, whose
//! `txn_id` is the distributed transaction's (a `DECIDED_COMMIT` record
//! carries the coordinator's own writes: it is the commit point).
//!
//! Group commit is leader/follower: a committer appends its record to the
//! in-memory tail under the log mutex; the first committer that finds no
//! flush in progress writes the whole tail and syncs it, for everyone who
//! appended meanwhile; the others sleep on a condition variable until the
//! durable offset passes their record. No extra thread: with one worker per
//! host a dedicated flusher would add two thread hops per commit on a
//! 2-core machine; with several workers, records pile up behind a flush in
//! progress and go out in one write and one `fdatasync`.
//!
//! A transaction releases its locks only after its record is durable, so no
//! host ever reads a write that a crash could still take back.
//!
//! A checkpoint (`checkpoint`) makes the log before it useless to its host:
//! [`Wal::advance`] names the checkpoint image to restart from, moves
//! `start` past the log it holds, and punches those bytes out of the file
//! (a hole costs no memory). Offsets never change, so a transaction slot's
//! record offsets stay valid.
//!
//! The tail holds at most one record per thread of the host (a committer
//! appends one record, then waits), so it needs no bound of its own beyond
//! `WAL_RECORD_BYTES_MAX` per record.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::AcqRel;
use std::sync::{Condvar, Mutex, MutexGuard};

use skiff_pod_memory::constants::WAL_RECORD_BYTES_MAX;
use skiff_pod_memory::error::{PodError, Result};
use skiff_pod_memory::memory::layout::{ARRAYS, Array};
use skiff_pod_memory::memory::region::Mapping;

const RECORD_MAGIC: u32 = 0x5741_4C31; // "WAL1"
const LOG_MAGIC: u64 = 0x4C41_5746_4649_4B53; // "SKIFFWAL"
/// The log file's header page: magic, and where its records start.
const LOG_HEADER_BYTES: u64 = 4096;
const RECORD_HEAD_BYTES: usize = 16;
const PAYLOAD_HEAD_BYTES: usize = 36;
const ENTRY_HEAD_BYTES: usize = 20;

/// FNV-1a over bytes: detects a torn tail, not an adversary.
fn checksum(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// How a record counts (`kind` in the record).
pub(crate) mod kind {
    /// A transaction's commit: redo it.
    pub const LOCAL: u32 = 0;
    /// A participant voted yes: redo it iff `peer` committed.
    pub const PREPARED: u32 = 1;
    /// A participant learned `peer`'s outcome (no entries).
    pub const RESOLVED_COMMIT: u32 = 2;
    pub const RESOLVED_ABORT: u32 = 3;
    /// A coordinator's decision on its distributed transaction `txn_id`;
    /// the commit carries the coordinator's own writes.
    pub const DECIDED_COMMIT: u32 = 4;
    pub const DECIDED_ABORT: u32 = 5;
}

/// A record's kind and the distributed transaction it refers to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tag {
    pub kind: u32,
    /// The coordinator's transaction id (`PREPARED`, `RESOLVED_*`).
    pub peer: u64,
    /// The coordinator's incarnation when it prepared.
    pub peer_inc: u32,
}

/// A transaction's redo entries while it runs (encoded as it writes).
#[derive(Default)]
pub(crate) struct Redo {
    bytes: Vec<u8>,
    entries: u32,
}

impl Redo {
    pub(crate) fn push(&mut self, array: Array, w: u32, idx: u64, image: &[u8]) {
        self.bytes.push(array as u8);
        self.bytes.extend_from_slice(&[0; 3]);
        self.bytes.extend_from_slice(&w.to_le_bytes());
        self.bytes.extend_from_slice(&idx.to_le_bytes());
        self.bytes
            .extend_from_slice(&(image.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(image);
        self.entries += 1;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries == 0
    }

    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.entries = 0;
    }

    /// The whole record for transaction `txn_id` with sequence `gsn`.
    fn encode(&self, txn_id: u64, gsn: u64, tag: Tag, out: &mut Vec<u8>) {
        let payload_len = PAYLOAD_HEAD_BYTES + self.bytes.len();
        let start = out.len();
        out.extend_from_slice(&(payload_len as u32).to_le_bytes());
        out.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&txn_id.to_le_bytes());
        out.extend_from_slice(&gsn.to_le_bytes());
        out.extend_from_slice(&self.entries.to_le_bytes());
        out.extend_from_slice(&tag.kind.to_le_bytes());
        out.extend_from_slice(&tag.peer_inc.to_le_bytes());
        out.extend_from_slice(&tag.peer.to_le_bytes());
        out.extend_from_slice(&self.bytes);
        let sum = checksum(&out[start + RECORD_HEAD_BYTES..]);
        out[start + 8..start + 16].copy_from_slice(&sum.to_le_bytes());
    }

    pub(crate) fn record_bytes(&self) -> usize {
        RECORD_HEAD_BYTES + PAYLOAD_HEAD_BYTES + self.bytes.len()
    }
}

/// One row image of a record.
pub(crate) struct Entry<'a> {
    pub array: Array,
    pub w: u32,
    pub idx: u64,
    pub image: &'a [u8],
}

/// A decoded record.
pub(crate) struct Record<'a> {
    pub txn_id: u64,
    pub gsn: u64,
    pub tag: Tag,
    payload: &'a [u8],
    entries: u32,
}

impl<'a> Record<'a> {
    /// The entries; `Err` names the first malformed one (log bytes are data).
    pub(crate) fn entries(&self) -> std::result::Result<Vec<Entry<'a>>, String> {
        let mut out = Vec::with_capacity(self.entries as usize);
        let mut at = PAYLOAD_HEAD_BYTES;
        let p = self.payload;
        for i in 0..self.entries {
            let head = p
                .get(at..at + ENTRY_HEAD_BYTES)
                .ok_or_else(|| format!("entry {i} past the record"))?;
            let array = ARRAYS
                .get(head[0] as usize)
                .copied()
                .ok_or_else(|| format!("entry {i}: no array {}", head[0]))?;
            let w = u32::from_le_bytes(head[4..8].try_into().unwrap_or_default());
            let idx = u64::from_le_bytes(head[8..16].try_into().unwrap_or_default());
            let len = u32::from_le_bytes(head[16..20].try_into().unwrap_or_default()) as usize;
            at += ENTRY_HEAD_BYTES;
            let image = p
                .get(at..at + len)
                .ok_or_else(|| format!("entry {i}: image past the record"))?;
            if len as u64 != array.row_bytes() {
                return Err(format!("entry {i}: {len} bytes for a {array:?} row"));
            }
            at += len;
            out.push(Entry {
                array,
                w,
                idx,
                image,
            });
        }
        Ok(out)
    }
}

/// Decodes the record at the start of `bytes`: `None` if it is incomplete or
/// its checksum fails (a torn tail), else the record and its length.
fn decode(bytes: &[u8]) -> Option<(Record<'_>, usize)> {
    let head = bytes.get(..RECORD_HEAD_BYTES)?;
    let len = u32::from_le_bytes(head[0..4].try_into().ok()?) as usize;
    let magic = u32::from_le_bytes(head[4..8].try_into().ok()?);
    let sum = u64::from_le_bytes(head[8..16].try_into().ok()?);
    if magic != RECORD_MAGIC || !(PAYLOAD_HEAD_BYTES..=WAL_RECORD_BYTES_MAX).contains(&len) {
        return None;
    }
    let payload = bytes.get(RECORD_HEAD_BYTES..RECORD_HEAD_BYTES + len)?;
    if checksum(payload) != sum {
        return None;
    }
    let record = Record {
        txn_id: u64::from_le_bytes(payload[0..8].try_into().ok()?),
        gsn: u64::from_le_bytes(payload[8..16].try_into().ok()?),
        entries: u32::from_le_bytes(payload[16..20].try_into().ok()?),
        tag: Tag {
            kind: u32::from_le_bytes(payload[20..24].try_into().ok()?),
            peer_inc: u32::from_le_bytes(payload[24..28].try_into().ok()?),
            peer: u64::from_le_bytes(payload[28..36].try_into().ok()?),
        },
        payload,
    };
    Some((record, RECORD_HEAD_BYTES + len))
}

/// Where the records of the log in `file` start, and which checkpoint
/// image (0 or 1) they follow; `None` for a file without a header yet (an
/// empty log). The header is data: checked.
fn log_anchor(file: &File, path: &Path) -> Result<Option<(u64, u8)>> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata().map_err(|e| PodError::io(path, e))?.len();
    if len < LOG_HEADER_BYTES {
        return Ok(None);
    }
    let mut head = [0u8; 24];
    file.read_exact_at(&mut head, 0)
        .map_err(|e| PodError::io(path, e))?;
    let word = |i: usize| {
        let bytes = head[8 * i..8 * i + 8].try_into().unwrap_or_default();
        u64::from_le_bytes(bytes)
    };
    let (magic, start, image) = (word(0), word(1), word(2));
    if magic != LOG_MAGIC || start < LOG_HEADER_BYTES || start > len || image > 1 {
        return Err(PodError::BadPodFile {
            path: path.to_path_buf(),
            reason: format!(
                "log header: magic {magic:#x}, records from {start} of {len}, image {image}"
            ),
        });
    }
    Ok(Some((start, image as u8)))
}

/// The checkpoint image (0 or 1) the log at `path` follows: the one a
/// restart starts from. A missing or empty log follows image 0.
pub(crate) fn checkpoint_image(path: &Path) -> Result<u8> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(PodError::io(path, e)),
    };
    Ok(log_anchor(&file, path)?.map_or(0, |(_, image)| image))
}

/// Reads the log at `path` from its start (after its last truncation),
/// calling `f` on each valid record with its end offset, and returns where
/// the valid prefix ends (a torn or garbled tail ends it). A missing file
/// is an empty log.
pub(crate) fn read_log(
    path: &Path,
    mut f: impl FnMut(&Record<'_>, u64) -> Result<()>,
) -> Result<u64> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(LOG_HEADER_BYTES),
        Err(e) => return Err(PodError::io(path, e)),
    };
    let Some((start, _)) = log_anchor(&file, path)? else {
        return Ok(LOG_HEADER_BYTES);
    };
    let mut r = BufReader::with_capacity(1 << 20, file);
    r.seek(SeekFrom::Start(start))
        .map_err(|e| PodError::io(path, e))?;
    let mut buf = Vec::with_capacity(WAL_RECORD_BYTES_MAX + RECORD_HEAD_BYTES);
    let mut at = start;
    loop {
        buf.resize(RECORD_HEAD_BYTES, 0);
        if read_full(&mut r, &mut buf, path)? < RECORD_HEAD_BYTES {
            return Ok(at);
        }
        let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if len > WAL_RECORD_BYTES_MAX {
            return Ok(at);
        }
        buf.resize(RECORD_HEAD_BYTES + len, 0);
        if read_full(&mut r, &mut buf[RECORD_HEAD_BYTES..], path)? < len {
            return Ok(at);
        }
        let Some((record, n)) = decode(&buf) else {
            return Ok(at);
        };
        at += n as u64;
        f(&record, at)?;
    }
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8], path: &Path) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(PodError::io(path, e)),
        }
    }
    Ok(n)
}

/// Whether the log at `path` holds a valid record of transaction `txn_id`
/// exactly at `start..end` — how a survivor learns whether a dead host's
/// transaction committed. The dead host's file no longer changes.
pub(crate) fn holds_record(path: &Path, start: u64, end: u64, txn_id: u64) -> Result<bool> {
    if end <= start || end - start > (WAL_RECORD_BYTES_MAX + RECORD_HEAD_BYTES) as u64 {
        return Ok(false);
    }
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(PodError::io(path, e)),
    };
    file.seek(SeekFrom::Start(start))
        .map_err(|e| PodError::io(path, e))?;
    let mut buf = vec![0u8; (end - start) as usize];
    if read_full(&mut file, &mut buf, path)? < buf.len() {
        return Ok(false);
    }
    Ok(decode(&buf).is_some_and(|(r, n)| n == buf.len() && r.txn_id == txn_id))
}

/// The decision on distributed transaction `id` in its coordinator's log
/// at `path`: `Some(true)` committed, `Some(false)` aborted, `None` not
/// (yet) decided there.
pub(crate) fn find_decision(path: &Path, id: u64) -> Result<Option<bool>> {
    let mut found = None;
    read_log(path, |r, _| {
        if r.txn_id == id {
            match r.tag.kind {
                kind::DECIDED_COMMIT => found = Some(true),
                kind::DECIDED_ABORT => found = Some(false),
                _ => {}
            }
        }
        Ok(())
    })?;
    Ok(found)
}

/// Whether `file` lives on tmpfs, where fdatasync is a no-op.
fn on_tmpfs(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: an all-zero statfs is a valid out-buffer; the fd is open.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) };
    rc == 0 && st.f_type == libc::TMPFS_MAGIC
}

/// What a host's log did (for the report).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WalCounters {
    pub records: u64,
    pub bytes: u64,
    /// Group syncs (msync; none on tmpfs): records / flushes is the
    /// group-commit batch size.
    pub flushes: u64,
}

struct Tail {
    /// Where the next record goes; everything before it is in the file.
    end: u64,
    /// The file is allocated (fallocate) up to here.
    allocated: u64,
    /// Everything before this offset is durable.
    durable: u64,
    flushing: bool,
    /// A sync failed: nothing after `durable` will ever be.
    failed: Option<String>,
    /// Committers asleep on `flushed` (the leader wakes them only if any).
    waiting: u32,
    /// Encoding buffer of one record.
    scratch: Vec<u8>,
    counters: WalCounters,
}

/// Address space reserved for one log: far more than a run writes (about
/// 64 MB/s per host), and only the allocated prefix costs memory.
const WAL_RESERVE_BYTES: u64 = 1 << 40;
/// The log file grows by this much at a time (fallocate), so running out of
/// space is an error at a chunk boundary, not a fault on a store.
const WAL_CHUNK_BYTES: u64 = 64 << 20;

/// An open log of this host, appended by every thread of the host.
///
/// Records are copied into a shared mapping of the file: on tmpfs that is
/// already as durable as a `write` (the page cache is the file, and it
/// outlives the process), with no system call per commit. On a disk, each
/// group is made durable with one msync, by the first committer that finds
/// no sync in progress (group commit's leader); the others wait for it.
pub(crate) struct Wal {
    path: PathBuf,
    file: File,
    map: Mapping,
    sync: bool,
    tail: Mutex<Tail>,
    flushed: Condvar,
    /// The highest sequence number this host has logged or taken.
    last_seq: AtomicU64,
    /// Where the records start (after the last [`Wal::advance`]).
    start: AtomicU64,
}

impl Wal {
    /// Opens (or creates) the log at `path` for appending after its valid
    /// prefix; a torn tail from a crash is cut off. `sync`: msync each group
    /// — except on tmpfs (/dev/shm), where a written page is as durable as
    /// it gets (it survives a process crash, not the machine's).
    pub(crate) fn open(path: &Path, sync: bool) -> Result<Wal> {
        use std::os::unix::fs::FileExt;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| PodError::io(path, e))?;
        let anchor = log_anchor(&file, path)?;
        if anchor.is_none() {
            let mut head = vec![0u8; LOG_HEADER_BYTES as usize];
            head[..8].copy_from_slice(&LOG_MAGIC.to_le_bytes());
            head[8..16].copy_from_slice(&LOG_HEADER_BYTES.to_le_bytes());
            file.write_all_at(&head, 0)
                .map_err(|e| PodError::io(path, e))?;
        }
        let mut last_seq = 0;
        let end = read_log(path, |r, _| {
            last_seq = last_seq.max(r.gsn);
            Ok(())
        })?;
        // Cut the torn tail (and zeros of an unused chunk): a new record
        // must follow the last valid one directly.
        file.set_len(end).map_err(|e| PodError::io(path, e))?;
        let map = Mapping::reserve(&file, path, WAL_RESERVE_BYTES)?;
        let sync = sync && !on_tmpfs(&file);
        Ok(Wal {
            path: path.to_path_buf(),
            file,
            map,
            sync,
            tail: Mutex::new(Tail {
                end,
                allocated: end,
                durable: end,
                flushing: false,
                failed: None,
                waiting: 0,
                scratch: Vec::with_capacity(WAL_RECORD_BYTES_MAX),
                counters: WalCounters::default(),
            }),
            flushed: Condvar::new(),
            last_seq: AtomicU64::new(last_seq),
            start: AtomicU64::new(anchor.map_or(LOG_HEADER_BYTES, |(start, _)| start)),
        })
    }

    /// The sequence number of a commit: `global` (the GSN counter, for a
    /// transaction that must be ordered against other hosts) is advanced;
    /// otherwise the host's highest number so far is reused.
    pub(crate) fn next_seq(&self, global: Option<&AtomicU64>) -> u64 {
        match global {
            Some(g) => {
                let seq = g.fetch_add(1, AcqRel) + 1;
                self.last_seq.fetch_max(seq, AcqRel);
                seq
            }
            None => self.last_seq.load(std::sync::atomic::Ordering::Acquire),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Tail> {
        // A thread that panicked holding the mutex left the tail consistent
        // (every change is a single push or field store): keep going.
        self.tail.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends transaction `txn_id`'s record; `placed(start, end)` runs
    /// under the log mutex before the record is in the file (the
    /// transaction publishes where its record will be, for survivors).
    /// Returns the record's end offset, for [`Wal::wait_durable`]; an error
    /// if the file cannot grow (the record is not in it).
    pub(crate) fn append(
        &self,
        redo: &Redo,
        txn_id: u64,
        gsn: u64,
        tag: Tag,
        placed: impl FnOnce(u64, u64),
    ) -> std::result::Result<u64, String> {
        let n = redo.record_bytes();
        assert!(
            n <= WAL_RECORD_BYTES_MAX,
            "WAL record of {n} bytes over {WAL_RECORD_BYTES_MAX}"
        );
        let mut t = self.lock();
        if let Some(e) = &t.failed {
            return Err(e.clone());
        }
        let start = t.end;
        let end = start + n as u64;
        if end > t.allocated {
            self.grow(&mut t, end)?;
        }
        placed(start, end);
        let t = &mut *t;
        t.scratch.clear();
        redo.encode(txn_id, gsn, tag, &mut t.scratch);
        debug_assert_eq!(t.scratch.len(), n);
        self.map.write_bytes(start, &t.scratch);
        t.end = end;
        if !self.sync {
            // Copied into the file's pages: durable as far as tmpfs goes.
            t.durable = end;
        }
        t.counters.records += 1;
        t.counters.bytes += n as u64;
        Ok(end)
    }

    /// Allocates the file up to a chunk past `end` (ENOSPC is an error
    /// here, never a fault on a store into the mapping).
    fn grow(&self, t: &mut Tail, end: u64) -> std::result::Result<(), String> {
        use std::os::fd::AsRawFd;
        let to = end.next_multiple_of(WAL_CHUNK_BYTES).min(WAL_RESERVE_BYTES);
        let mut fail = |e: std::io::Error| {
            let msg = format!(
                "{}: cannot grow the log to {to} bytes: {e}",
                self.path.display()
            );
            t.failed = Some(msg.clone());
            msg
        };
        if end > to {
            return Err(fail(std::io::Error::other("log reservation full")));
        }
        let from = t.allocated;
        // SAFETY: fallocate on a file descriptor this log owns.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                0,
                from as libc::off_t,
                (to - from) as libc::off_t,
            )
        };
        if rc != 0 {
            return Err(fail(std::io::Error::last_os_error()));
        }
        t.allocated = to;
        Ok(())
    }

    /// Returns once everything before `end` is durable, syncing the tail
    /// itself if no other thread is (group commit's leader).
    pub(crate) fn wait_durable(&self, end: u64) -> std::result::Result<(), String> {
        let mut t = self.lock();
        loop {
            if t.durable >= end {
                return Ok(());
            }
            if let Some(e) = &t.failed {
                return Err(e.clone());
            }
            if t.flushing {
                t.waiting += 1;
                t = self.flushed.wait(t).unwrap_or_else(|p| p.into_inner());
                t.waiting -= 1;
                continue;
            }
            t.flushing = true;
            let (from, upto) = (t.durable, t.end);
            drop(t);
            let synced = self
                .map
                .sync_range(from, upto - from)
                .map_err(|e| format!("{}: {e}", self.path.display()));
            t = self.lock();
            t.flushing = false;
            match synced {
                Ok(()) => {
                    t.durable = upto;
                    t.counters.flushes += 1;
                }
                Err(e) => t.failed = Some(e),
            }
            if t.waiting > 0 {
                self.flushed.notify_all();
            }
        }
    }

    pub(crate) fn counters(&self) -> WalCounters {
        self.lock().counters
    }

    /// Where the records start: a restart replays from here.
    pub(crate) fn start(&self) -> u64 {
        self.start.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Where the next record goes: a checkpoint taken now covers every
    /// record before it.
    pub(crate) fn end(&self) -> u64 {
        self.lock().end
    }

    /// A durable checkpoint image `image` holds every record before
    /// `start` (a record boundary): a restart starts from it and reads the
    /// log from `start`, and the whole pages before `start` are punched out
    /// of the file. The header is one write of both: a crash leaves the
    /// old pair or the new one.
    pub(crate) fn advance(&self, start: u64, image: u8) -> std::result::Result<(), String> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::FileExt;
        let fail = |e: std::io::Error| format!("{}: advance: {e}", self.path.display());
        assert!(start >= LOG_HEADER_BYTES && start <= self.end() && image <= 1);
        let mut anchor = [0u8; 16];
        anchor[..8].copy_from_slice(&start.to_le_bytes());
        anchor[8..].copy_from_slice(&(image as u64).to_le_bytes());
        self.file.write_all_at(&anchor, 8).map_err(fail)?;
        if self.sync {
            self.file.sync_data().map_err(fail)?;
        }
        self.start
            .store(start, std::sync::atomic::Ordering::Release);
        let hole = (start & !(LOG_HEADER_BYTES - 1)).saturating_sub(LOG_HEADER_BYTES);
        if hole == 0 {
            return Ok(());
        }
        // SAFETY: fallocate on a file descriptor this log owns; nothing
        // reads or writes the punched pages again.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                LOG_HEADER_BYTES as libc::off_t,
                hole as libc::off_t,
            )
        };
        if rc != 0 {
            return Err(fail(std::io::Error::last_os_error()));
        }
        Ok(())
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        // A clean close leaves the file as long as its records, without the
        // rest of the last chunk (a crash leaves zeros, which readers stop at
        // and the next `open` cuts). Nothing touches the mapping any more.
        let end = self.lock().end;
        let _ = self.file.set_len(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_pod_memory::memory::files::wal_path;
    use skiff_pod_memory::testing::TempShm;

    fn redo_of(n: u8) -> Redo {
        let mut r = Redo::default();
        let row = vec![n; Array::NewOrder.row_bytes() as usize];
        r.push(Array::NewOrder, 1, n as u64, &row);
        r.push(Array::NewOrder, 2, 7, &row);
        r
    }

    #[test]
    fn records_round_trip_and_a_torn_tail_is_cut() {
        let shm = TempShm::new("wal-roundtrip");
        let path = wal_path(&shm.0, 0);
        let mut ends = Vec::new();
        {
            let wal = Wal::open(&path, true).unwrap();
            for i in 0..5u8 {
                let mut at = (0, 0);
                let end = wal
                    .append(
                        &redo_of(i),
                        100 + i as u64,
                        10 + i as u64,
                        Tag::default(),
                        |s, e| at = (s, e),
                    )
                    .unwrap();
                assert_eq!(at.1, end);
                wal.wait_durable(end).unwrap();
                ends.push(at);
            }
            assert_eq!(wal.counters().records, 5);
        }
        assert!(holds_record(&path, ends[2].0, ends[2].1, 102).unwrap());
        assert!(!holds_record(&path, ends[2].0, ends[2].1, 103).unwrap());
        // Tear the last record: it is gone, the rest stays.
        let len = std::fs::metadata(&path).unwrap().len();
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len - 3).unwrap();
        assert!(!holds_record(&path, ends[4].0, ends[4].1, 104).unwrap());
        let mut seen = Vec::new();
        let end = read_log(&path, |r, _| {
            let e = r.entries().unwrap();
            assert_eq!(e.len(), 2);
            assert_eq!(e[0].idx, r.txn_id - 100);
            assert!(e[1].image.iter().all(|&b| b == (r.txn_id - 100) as u8));
            seen.push(r.gsn);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![10, 11, 12, 13]);
        assert_eq!(end, ends[3].1);
        // Reopening cuts the torn tail and appends after the valid prefix.
        let wal = Wal::open(&path, false).unwrap();
        let end = wal
            .append(&redo_of(9), 109, 19, Tag::default(), |s, _| {
                assert_eq!(s, ends[3].1)
            })
            .unwrap();
        wal.wait_durable(end).unwrap();
        let mut n = 0;
        read_log(&path, |_, _| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 5);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn concurrent_committers_share_flushes() {
        let shm = TempShm::new("wal-group");
        committers_share_flushes(&wal_path(&shm.0, 1));
        // Off tmpfs (when the temp dir is a disk) every group is synced.
        let disk = std::env::temp_dir().join(format!("skiff-wal-{}", std::process::id()));
        committers_share_flushes(&disk);
    }

    fn committers_share_flushes(path: &Path) {
        let path = path.to_path_buf();
        let wal = Wal::open(&path, true).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let wal = &wal;
                s.spawn(move || {
                    for i in 0..200u64 {
                        let end = wal
                            .append(
                                &redo_of(t),
                                t as u64 * 1000 + i,
                                i,
                                Tag::default(),
                                |_, _| {},
                            )
                            .unwrap();
                        wal.wait_durable(end).unwrap();
                    }
                });
            }
        });
        let c = wal.counters();
        assert_eq!(c.records, 800);
        assert!(c.flushes <= 800);
        assert_eq!(wal.sync, c.flushes > 0);
        drop(wal);
        let mut n = 0;
        read_log(&path, |_, _| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 800);
        std::fs::remove_file(&path).unwrap();
    }
}

#[cfg(test)]
mod cost {
    use super::*;
    use skiff_pod_memory::memory::files::wal_path;

    /// `cargo test --release -p skiff-pod --lib wal_commit_cost -- --ignored
    /// --nocapture`: CPU cost of one commit's log append on /dev/shm.
    #[test]
    #[ignore]
    fn wal_commit_cost() {
        let shm = skiff_pod_memory::testing::TempShm::new("wal-cost");
        let path = wal_path(&shm.0, 0);
        let wal = Wal::open(&path, true).unwrap();
        let mut r = Redo::default();
        let row = vec![7u8; Array::OrderLine.row_bytes() as usize];
        for i in 0..18 {
            r.push(Array::OrderLine, 1, i, &row);
        }
        let n = 200_000u64;
        let t = std::time::Instant::now();
        for i in 0..n {
            let end = wal.append(&r, i, i, Tag::default(), |_, _| {}).unwrap();
            wal.wait_durable(end).unwrap();
        }
        let ns = t.elapsed().as_nanos() as f64 / n as f64;
        eprintln!(
            "{} bytes per record: {ns:.0} ns per commit",
            r.record_bytes()
        );
        drop(wal);
        std::fs::remove_file(&path).unwrap();
    }
}
