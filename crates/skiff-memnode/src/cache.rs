//! The state cache's store: entries of opaque chunks (a Flight message's
//! metadata and body each) under string keys, in memory up to a capacity
//! and on disk beyond it.
//!
//! Owns: the key map and its accounting, the capacity and spilling (oldest
//! entries leave memory first; an entry larger than the capacity goes to
//! disk as it arrives), time to live and its sweep, read-once deletion,
//! durable entries (written with fsync and an atomic rename, never expired,
//! reloaded by the next cache over the same directory), and a CRC-32 per
//! chunk computed at put and verified on every read. It knows nothing of
//! Arrow or the network; the service ([`super::service`]) does, and calls
//! in here from blocking threads because spills and reads touch the disk.
//!
//! A put becomes visible only when [`PutWriter::finish`] runs; a writer
//! dropped before that leaves nothing (its temporary file is removed).
//!
//! File layout (spills and durable entries alike): the magic, a length-
//! prefixed [`FileHeader`], then per chunk `meta_len u32, body_len u64,
//! crc u32, meta, body` (little endian), then a footer `u32::MAX, chunks
//! u64, bytes u64`. Files only get their final name once complete.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use prost::Message;
use skiff_flight::protocol::CacheStats;
use tracing::{debug, info, warn};

const MAGIC: &[u8; 8] = b"SKIFFSC1";
const FOOTER_MARK: u32 = u32::MAX;
const FOOTER_LEN: u64 = 4 + 8 + 8;
/// A chunk header on disk: meta_len, body_len, crc.
const RECORD_HEAD: usize = 4 + 8 + 4;
const TMP: &str = "tmp";
const SPILL: &str = "spill";
const DURABLE: &str = "durable";
const LOCK: &str = "lock";

/// Settings of a cache.
#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// Where spills and durable entries go; created if missing.
    pub dir: PathBuf,
    /// Bytes of entries kept in memory; 0 = no limit.
    pub capacity: u64,
    /// Time to live of entries put without one.
    pub default_ttl: Duration,
}

/// How one entry is kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntryOptions {
    /// `None`: the cache's default. Ignored for durable entries.
    pub ttl: Option<Duration>,
    pub read_once: bool,
    pub durable: bool,
}

/// One stored message: its metadata and body, as put.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub meta: Bytes,
    pub body: Bytes,
}

/// What a finished put stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutInfo {
    pub bytes: u64,
    pub chunks: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("state {key} not found")]
    NotFound { key: String },
    #[error("state {key}: stored chunk {chunk} fails its checksum")]
    Corrupt { key: String, chunk: u64 },
    /// The stored file is damaged beyond a checksum (a length, the header).
    #[error("state {key}: stored data unreadable: {message}")]
    Unreadable { key: String, message: String },
    #[error("state {key}: {message}")]
    Io { key: String, message: String },
    #[error("state {key}: put ended before its last message")]
    Aborted { key: String },
    #[error("state key {key}...: longer than {MAX_KEY} bytes")]
    KeyTooLong { key: String },
}

impl From<CacheError> for tonic::Status {
    fn from(error: CacheError) -> Self {
        let message = error.to_string();
        match error {
            CacheError::NotFound { .. } => tonic::Status::not_found(message),
            CacheError::Corrupt { .. } | CacheError::Unreadable { .. } => {
                tonic::Status::data_loss(message)
            }
            CacheError::Io { .. } => tonic::Status::internal(message),
            CacheError::Aborted { .. } => tonic::Status::aborted(message),
            CacheError::KeyTooLong { .. } => tonic::Status::invalid_argument(message),
        }
    }
}

/// The header of an entry's file; what a reload needs to know.
#[derive(Clone, PartialEq, prost::Message)]
struct FileHeader {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(bool, tag = "2")]
    read_once: bool,
    #[prost(bool, tag = "3")]
    durable: bool,
    /// When the put finished writing (ns since the epoch): the newest file
    /// wins when a crash left two for one key.
    #[prost(uint64, tag = "4")]
    written_ns: u64,
}

/// A chunk with the CRC-32 of its metadata and body.
#[derive(Debug)]
struct StoredChunk {
    meta: Bytes,
    body: Bytes,
    crc: u32,
}

fn crc(meta: &[u8], body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(meta);
    hasher.update(body);
    hasher.finalize()
}

struct Entry {
    id: u64,
    expires: Option<Instant>,
    read_once: bool,
    bytes: u64,
    chunks: u64,
    /// The chunks, while in memory or being spilled.
    memory: Option<Arc<Vec<StoredChunk>>>,
    /// Whether `bytes` counts against the capacity (false while spilling).
    counted: bool,
    file: Option<PathBuf>,
    file_bytes: u64,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    next_id: u64,
    memory_bytes: u64,
    /// Bytes held in memory by puts not yet finished.
    in_flight: u64,
    disk_bytes: u64,
    puts: u64,
    gets: u64,
    expired: u64,
    spilled: u64,
}

impl Inner {
    /// Take `key` out of the map and the accounting; its file, if any, is
    /// the caller's to remove (outside the lock).
    fn remove(&mut self, key: &str) -> Option<Entry> {
        let entry = self.entries.remove(key)?;
        if entry.counted {
            self.memory_bytes -= entry.bytes;
        }
        if entry.file.is_some() {
            self.disk_bytes -= entry.file_bytes;
        }
        Some(entry)
    }
}

/// The store. Share it as `Arc<StateCache>`; every method may block on the
/// disk.
pub struct StateCache {
    config: CacheConfig,
    inner: Mutex<Inner>,
    /// Held while the cache is open (released by the OS however the
    /// process ends).
    _lock: File,
}

impl StateCache {
    /// Open the cache over `config.dir`: leftovers of an earlier process
    /// (temporary files, spills) are removed and durable entries reloaded.
    pub fn open(config: CacheConfig) -> Result<Self, CacheError> {
        let io = |e: std::io::Error| CacheError::Io {
            key: String::new(),
            message: format!("state directory {}: {e}", config.dir.display()),
        };
        std::fs::create_dir_all(&config.dir).map_err(io)?;
        // Opening removes another cache's spills: one cache per directory.
        let lock = File::create(config.dir.join(LOCK)).map_err(io)?;
        if let Err(e) = lock.try_lock() {
            return Err(match e {
                std::fs::TryLockError::WouldBlock => CacheError::Io {
                    key: String::new(),
                    message: format!(
                        "state directory {} is in use by another memory node",
                        config.dir.display()
                    ),
                },
                std::fs::TryLockError::Error(e) => io(e),
            });
        }
        let mut durable = Vec::new();
        for dirent in std::fs::read_dir(&config.dir).map_err(io)? {
            let path = dirent.map_err(io)?.path();
            match path.extension().and_then(|e| e.to_str()) {
                Some(TMP | SPILL) => remove_file(&path),
                Some(DURABLE) => match read_summary(&path) {
                    Ok(summary) => durable.push((path, summary)),
                    Err(e) => warn!(path = %path.display(), error = %e, "unreadable durable state"),
                },
                _ => {}
            }
        }
        // Oldest first, so ids follow age and the newest file of a key wins.
        durable.sort_by_key(|(_, s)| s.header.written_ns);
        let mut inner = Inner::default();
        for (path, summary) in durable {
            inner.next_id += 1;
            let entry = Entry {
                id: inner.next_id,
                expires: None,
                read_once: summary.header.read_once,
                bytes: summary.bytes,
                chunks: summary.chunks,
                memory: None,
                counted: false,
                file: Some(path),
                file_bytes: summary.file_bytes,
            };
            inner.disk_bytes += entry.file_bytes;
            if let Some(old) = inner.entries.insert(summary.header.key, entry) {
                inner.disk_bytes -= old.file_bytes;
                if let Some(file) = old.file {
                    remove_file(&file);
                }
            }
        }
        if !inner.entries.is_empty() {
            info!(
                entries = inner.entries.len(),
                bytes = inner.disk_bytes,
                dir = %config.dir.display(),
                "reloaded durable state"
            );
        }
        Ok(Self {
            config,
            inner: Mutex::new(inner),
            _lock: lock,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.config.dir
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The map stays consistent across a panic elsewhere: every update
        // is done before the guard drops.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Start putting `key`; nothing is visible until [`PutWriter::finish`].
    pub fn begin_put(
        self: &Arc<Self>,
        key: &str,
        options: EntryOptions,
    ) -> Result<PutWriter, CacheError> {
        if key.len() > MAX_KEY {
            return Err(CacheError::KeyTooLong {
                key: key.chars().take(64).collect(),
            });
        }
        let mut writer = PutWriter {
            cache: Arc::clone(self),
            key: key.to_string(),
            options,
            memory: Some(Vec::new()),
            bytes: 0,
            chunks: 0,
            file: None,
            reserved: 0,
        };
        if options.durable {
            writer.file = Some(writer.new_file()?);
        }
        Ok(writer)
    }

    /// A reader of `key`'s chunks; `NotFound` when absent or expired.
    pub fn get(&self, key: &str) -> Result<Reader, CacheError> {
        let inner = self.lock();
        let not_found = || CacheError::NotFound {
            key: key.to_string(),
        };
        let entry = inner.entries.get(key).ok_or_else(not_found)?;
        if entry.expires.is_some_and(|t| t <= Instant::now()) {
            return Err(not_found());
        }
        let source = match (&entry.memory, &entry.file) {
            (Some(chunks), _) => Source::Memory(Arc::clone(chunks)),
            // Opened under the lock: nobody removes the file meanwhile, and
            // once open it stays readable even if the entry goes.
            (None, Some(path)) => {
                let file = File::open(path).map_err(|e| io_error(key, path, e))?;
                let mut file = BufReader::new(file);
                read_header(&mut file).map_err(|e| CacheError::Unreadable {
                    key: key.to_string(),
                    message: format!("header of {}: {e}", path.display()),
                })?;
                Source::Disk {
                    file,
                    path: path.clone(),
                }
            }
            (None, None) => return Err(not_found()),
        };
        Ok(Reader {
            key: key.to_string(),
            id: entry.id,
            read_once: entry.read_once,
            chunks: entry.chunks,
            next: 0,
            source,
        })
    }

    /// Record that `reader` was streamed completely: counted as a get, and
    /// a read-once entry is deleted (unless a newer put replaced it).
    pub fn finish_read(&self, reader: &Reader) {
        if !reader.is_complete() {
            return;
        }
        let removed = {
            let mut inner = self.lock();
            inner.gets += 1;
            let same = inner
                .entries
                .get(&reader.key)
                .is_some_and(|e| e.id == reader.id);
            if reader.read_once && same {
                inner.remove(&reader.key)
            } else {
                None
            }
        };
        if let Some(entry) = removed {
            debug!(key = %reader.key, "read-once state delivered; deleted");
            if let Some(file) = entry.file {
                remove_file(&file);
            }
        }
    }

    /// Delete `key`; true if it was there.
    pub fn delete(&self, key: &str) -> bool {
        let removed = self.lock().remove(key);
        match removed {
            Some(entry) => {
                debug!(%key, "state deleted");
                if let Some(file) = entry.file {
                    remove_file(&file);
                }
                true
            }
            None => false,
        }
    }

    /// Delete every entry whose key begins with `prefix`; how many there
    /// were.
    pub fn delete_under(&self, prefix: &str) -> usize {
        let removed: Vec<Entry> = {
            let mut inner = self.lock();
            let keys: Vec<String> = inner
                .entries
                .keys()
                .filter(|k| k.starts_with(prefix))
                .cloned()
                .collect();
            keys.iter().filter_map(|k| inner.remove(k)).collect()
        };
        for file in removed.iter().filter_map(|e| e.file.as_ref()) {
            remove_file(file);
        }
        debug!(%prefix, deleted = removed.len(), "states deleted");
        removed.len()
    }

    /// Delete every entry whose time to live has run out by `now`.
    pub fn sweep(&self, now: Instant) -> usize {
        let removed: Vec<(String, Entry)> = {
            let mut inner = self.lock();
            let expired: Vec<String> = inner
                .entries
                .iter()
                .filter(|(_, e)| e.expires.is_some_and(|t| t <= now))
                .map(|(k, _)| k.clone())
                .collect();
            inner.expired += expired.len() as u64;
            expired
                .into_iter()
                .filter_map(|k| inner.remove(&k).map(|e| (k, e)))
                .collect()
        };
        for (key, entry) in &removed {
            info!(%key, bytes = entry.bytes, "state expired");
            if let Some(file) = &entry.file {
                remove_file(file);
            }
        }
        removed.len()
    }

    pub fn stats(&self) -> CacheStats {
        let inner = self.lock();
        CacheStats {
            entries: inner.entries.len() as u64,
            memory_bytes: inner.memory_bytes,
            disk_bytes: inner.disk_bytes,
            puts: inner.puts,
            gets: inner.gets,
            expired: inner.expired,
            spilled: inner.spilled,
            capacity: self.config.capacity,
        }
    }

    /// Reserve `bytes` of the capacity for a put in flight; false when the
    /// puts in flight already hold it all (the put then streams to disk).
    /// Completed entries are not counted: they can be spilled.
    fn reserve(&self, bytes: u64) -> bool {
        let capacity = self.config.capacity;
        let mut inner = self.lock();
        if capacity > 0 && inner.in_flight + bytes > capacity {
            return false;
        }
        inner.in_flight += bytes;
        true
    }

    fn release(&self, bytes: u64) {
        if bytes > 0 {
            self.lock().in_flight -= bytes;
        }
    }

    /// Whether `bytes` can ever be held in memory.
    fn fits(&self, bytes: u64) -> bool {
        self.config.capacity == 0 || bytes <= self.config.capacity
    }

    /// Insert a finished entry, replacing the key's old one, and spill the
    /// oldest entries if it does not fit beside them.
    fn insert(&self, key: &str, mut entry: Entry) -> PutInfo {
        let info = PutInfo {
            bytes: entry.bytes,
            chunks: entry.chunks,
        };
        let (old, spill) = {
            let mut inner = self.lock();
            let old = inner.remove(key);
            let spill = if entry.memory.is_some() {
                let spill = self.make_room(&mut inner, entry.bytes);
                entry.counted = true;
                inner.memory_bytes += entry.bytes;
                spill
            } else {
                Vec::new()
            };
            if entry.file.is_some() {
                inner.disk_bytes += entry.file_bytes;
            }
            inner.next_id += 1;
            entry.id = inner.next_id;
            inner.puts += 1;
            inner.entries.insert(key.to_string(), entry);
            (old, spill)
        };
        if let Some(file) = old.and_then(|e| e.file) {
            remove_file(&file);
        }
        for victim in spill {
            self.spill(victim);
        }
        info
    }

    /// Take the oldest entries out of the memory count until `need` more
    /// bytes fit. Entries already on disk (durable) just drop their memory
    /// copy; the others are returned to be written outside the lock.
    fn make_room(&self, inner: &mut Inner, need: u64) -> Vec<Victim> {
        let capacity = self.config.capacity;
        if capacity == 0 || inner.memory_bytes + need <= capacity {
            return Vec::new();
        }
        let mut resident: Vec<(u64, String)> = inner
            .entries
            .iter()
            .filter(|(_, e)| e.counted)
            .map(|(k, e)| (e.id, k.clone()))
            .collect();
        resident.sort_unstable();
        let mut victims = Vec::new();
        for (_, key) in resident {
            if inner.memory_bytes + need <= capacity {
                break;
            }
            let Some(entry) = inner.entries.get_mut(&key) else {
                continue;
            };
            entry.counted = false;
            let bytes = entry.bytes;
            if entry.file.is_some() {
                entry.memory = None;
            } else if let Some(chunks) = &entry.memory {
                victims.push(Victim {
                    key: key.clone(),
                    id: entry.id,
                    read_once: entry.read_once,
                    chunks: Arc::clone(chunks),
                });
            }
            inner.memory_bytes -= bytes;
        }
        victims
    }

    /// Write `victim` to disk and point its entry there. Readers that
    /// already hold its chunks keep reading them from memory.
    fn spill(&self, victim: Victim) {
        let written = (|| -> Result<(PathBuf, u64), CacheError> {
            let mut file = FileWriter::create(&self.config.dir, &victim.key)?;
            for chunk in victim.chunks.iter() {
                file.write_chunk(chunk)?;
            }
            let header = FileHeader {
                key: victim.key.clone(),
                read_once: victim.read_once,
                durable: false,
                written_ns: now_ns(),
            };
            let (bytes, chunks) = sums(&victim.chunks);
            file.finish(&header, chunks, bytes, SPILL, false)
        })();
        let mut inner = self.lock();
        let entry = inner
            .entries
            .get_mut(&victim.key)
            .filter(|e| e.id == victim.id);
        match (written, entry) {
            (Ok((path, file_bytes)), Some(entry)) => {
                debug!(key = %victim.key, bytes = entry.bytes, "state spilled to disk");
                entry.memory = None;
                entry.file = Some(path);
                entry.file_bytes = file_bytes;
                inner.disk_bytes += file_bytes;
                inner.spilled += 1;
            }
            // Deleted or replaced while it was being written.
            (Ok((path, _)), None) => remove_file(&path),
            (Err(e), Some(entry)) => {
                // Nothing is lost: it stays in memory, over the capacity.
                warn!(key = %victim.key, error = %e, "cannot spill state; kept in memory");
                entry.counted = true;
                let bytes = entry.bytes;
                inner.memory_bytes += bytes;
            }
            (Err(_), None) => {}
        }
    }
}

struct Victim {
    key: String,
    id: u64,
    read_once: bool,
    chunks: Arc<Vec<StoredChunk>>,
}

fn sums(chunks: &[StoredChunk]) -> (u64, u64) {
    let bytes = chunks
        .iter()
        .map(|c| (c.meta.len() + c.body.len()) as u64)
        .sum();
    (bytes, chunks.len() as u64)
}

/// A put in progress. Chunks stay in memory while they fit the capacity;
/// past it (or for a durable entry, from the start) they go to a temporary
/// file, renamed into place by [`PutWriter::finish`].
pub struct PutWriter {
    cache: Arc<StateCache>,
    key: String,
    options: EntryOptions,
    memory: Option<Vec<StoredChunk>>,
    bytes: u64,
    chunks: u64,
    file: Option<FileWriter>,
    /// Bytes of `memory` reserved against the capacity while in flight.
    reserved: u64,
}

impl Drop for PutWriter {
    fn drop(&mut self) {
        self.cache.release(std::mem::take(&mut self.reserved));
    }
}

impl PutWriter {
    fn new_file(&self) -> Result<FileWriter, CacheError> {
        FileWriter::create(&self.cache.config.dir, &self.key)
    }

    /// Append one message.
    pub fn push(&mut self, meta: Bytes, body: Bytes) -> Result<(), CacheError> {
        let chunk = StoredChunk {
            crc: crc(&meta, &body),
            meta,
            body,
        };
        self.bytes += (chunk.meta.len() + chunk.body.len()) as u64;
        self.chunks += 1;
        if let Some(file) = self.file.as_mut() {
            file.write_chunk(&chunk)?;
        }
        let size = (chunk.meta.len() + chunk.body.len()) as u64;
        let keep = self.memory.is_some() && self.cache.fits(self.bytes) && self.cache.reserve(size);
        match self.memory.as_mut() {
            Some(memory) if keep => {
                memory.push(chunk);
                self.reserved += size;
            }
            Some(_) => {
                // Too big for memory however much is spilled, or other puts
                // in flight hold the rest of it: stream the rest to disk
                // instead of holding it.
                let memory = self.memory.take().unwrap_or_default();
                self.cache.release(std::mem::take(&mut self.reserved));
                if self.file.is_none() {
                    let mut file = self.new_file()?;
                    for held in memory.iter().chain([&chunk]) {
                        file.write_chunk(held)?;
                    }
                    self.file = Some(file);
                }
            }
            None => {}
        }
        Ok(())
    }

    /// Make the entry visible, replacing the key's old one.
    pub fn finish(mut self) -> Result<PutInfo, CacheError> {
        let durable = self.options.durable;
        let file = match self.file.take() {
            Some(file) => {
                let header = FileHeader {
                    key: self.key.clone(),
                    read_once: self.options.read_once,
                    durable,
                    written_ns: now_ns(),
                };
                let kind = if durable { DURABLE } else { SPILL };
                Some(file.finish(&header, self.chunks, self.bytes, kind, durable)?)
            }
            None => None,
        };
        let ttl = self.options.ttl.unwrap_or(self.cache.config.default_ttl);
        let in_memory = self.memory.is_some();
        let spilled_now = file.is_some() && !in_memory && !durable;
        let (file, file_bytes) = match file {
            Some((path, bytes)) => (Some(path), bytes),
            None => (None, 0),
        };
        let entry = Entry {
            id: 0,
            expires: (!durable).then(|| Instant::now() + ttl),
            read_once: self.options.read_once,
            bytes: self.bytes,
            chunks: self.chunks,
            memory: self.memory.take().map(Arc::new),
            counted: false,
            file,
            file_bytes,
        };
        // From here the entry's bytes count as stored, not in flight.
        self.cache.release(std::mem::take(&mut self.reserved));
        let info = self.cache.insert(&self.key, entry);
        if spilled_now {
            self.cache.lock().spilled += 1;
        }
        info!(
            key = %self.key,
            bytes = info.bytes,
            chunks = info.chunks,
            durable,
            in_memory,
            "state stored"
        );
        Ok(info)
    }
}

/// A file being written under a temporary name; removed if dropped before
/// [`FileWriter::finish`] renamed it.
struct FileWriter {
    key: String,
    tmp: PathBuf,
    out: Option<BufWriter<File>>,
    len: u64,
    renamed: bool,
}

impl FileWriter {
    fn create(dir: &Path, key: &str) -> Result<Self, CacheError> {
        let tmp = dir.join(format!("{:016x}.{TMP}", rand::random::<u64>()));
        let file = File::create(&tmp).map_err(|e| io_error(key, &tmp, e))?;
        let mut writer = Self {
            key: key.to_string(),
            tmp,
            out: Some(BufWriter::new(file)),
            len: 0,
            renamed: false,
        };
        // The header holds the write time, known only at the end: it goes
        // into a fixed slot after the magic, filled in by `finish`.
        writer.write(MAGIC)?;
        writer.write(&[0; HEADER_SLOT])?;
        Ok(writer)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), CacheError> {
        let Some(out) = self.out.as_mut() else {
            return Err(io_error(
                &self.key,
                &self.tmp,
                std::io::Error::other("already finished"),
            ));
        };
        out.write_all(bytes)
            .map_err(|e| io_error(&self.key, &self.tmp, e))?;
        self.len += bytes.len() as u64;
        Ok(())
    }

    fn write_chunk(&mut self, chunk: &StoredChunk) -> Result<(), CacheError> {
        let mut head = [0u8; RECORD_HEAD];
        head[..4].copy_from_slice(&(chunk.meta.len() as u32).to_le_bytes());
        head[4..12].copy_from_slice(&(chunk.body.len() as u64).to_le_bytes());
        head[12..].copy_from_slice(&chunk.crc.to_le_bytes());
        self.write(&head)?;
        self.write(&chunk.meta)?;
        self.write(&chunk.body)
    }

    /// Footer, header slot, flush (and fsync when `sync`), rename to
    /// `<random>.<kind>`; returns the final path and the file's length.
    fn finish(
        mut self,
        header: &FileHeader,
        chunks: u64,
        bytes: u64,
        kind: &str,
        sync: bool,
    ) -> Result<(PathBuf, u64), CacheError> {
        let mut footer = [0u8; FOOTER_LEN as usize];
        footer[..4].copy_from_slice(&FOOTER_MARK.to_le_bytes());
        footer[4..12].copy_from_slice(&chunks.to_le_bytes());
        footer[12..].copy_from_slice(&bytes.to_le_bytes());
        self.write(&footer)?;
        let key = self.key.clone();
        let tmp = self.tmp.clone();
        let fail = |e: std::io::Error| io_error(&key, &tmp, e);
        let encoded = header.encode_length_delimited_to_vec();
        if encoded.len() > HEADER_SLOT {
            return Err(fail(std::io::Error::other("key too long")));
        }
        let out = self
            .out
            .take()
            .ok_or_else(|| fail(std::io::Error::other("no file")))?;
        let mut file = out.into_inner().map_err(|e| fail(e.into_error()))?;
        file.seek(SeekFrom::Start(MAGIC.len() as u64))
            .map_err(fail)?;
        file.write_all(&encoded).map_err(fail)?;
        if sync {
            file.sync_all().map_err(fail)?;
        }
        drop(file);
        let path = tmp.with_extension(kind);
        std::fs::rename(&tmp, &path).map_err(fail)?;
        self.renamed = true;
        if sync {
            // The rename itself must reach the disk for the entry to
            // survive a crash.
            let dir = path.parent().unwrap_or(Path::new("."));
            if let Err(e) = File::open(dir).and_then(|d| d.sync_all()) {
                remove_file(&path);
                return Err(io_error(&key, &path, e));
            }
        }
        Ok((path, self.len))
    }
}

impl Drop for FileWriter {
    fn drop(&mut self) {
        if !self.renamed {
            drop(self.out.take());
            remove_file(&self.tmp);
        }
    }
}

/// Room for the length-delimited [`FileHeader`] after the magic. Keys are
/// short (query ids); a longer one is refused at finish.
const HEADER_SLOT: usize = 4096;
/// Longest key: its header must fit [`HEADER_SLOT`].
const MAX_KEY: usize = 1024;

struct Summary {
    header: FileHeader,
    chunks: u64,
    bytes: u64,
    file_bytes: u64,
}

fn read_header(file: &mut impl Read) -> std::io::Result<FileHeader> {
    let mut magic = [0u8; 8];
    file.read_exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(std::io::Error::other("not a state cache file"));
    }
    let mut slot = vec![0u8; HEADER_SLOT];
    file.read_exact(&mut slot)?;
    FileHeader::decode_length_delimited(slot.as_slice()).map_err(std::io::Error::other)
}

/// Header and footer of a complete file, without reading its chunks.
fn read_summary(path: &Path) -> std::io::Result<Summary> {
    let mut file = File::open(path)?;
    let header = read_header(&mut file)?;
    let file_bytes = file.metadata()?.len();
    file.seek(SeekFrom::End(-(FOOTER_LEN as i64)))?;
    let mut footer = [0u8; FOOTER_LEN as usize];
    file.read_exact(&mut footer)?;
    let (mark, chunks, bytes) = parse_footer(&footer);
    if mark != FOOTER_MARK {
        return Err(std::io::Error::other("no footer"));
    }
    Ok(Summary {
        header,
        chunks,
        bytes,
        file_bytes,
    })
}

fn parse_footer(footer: &[u8; FOOTER_LEN as usize]) -> (u32, u64, u64) {
    let mut mark = [0u8; 4];
    let mut chunks = [0u8; 8];
    let mut bytes = [0u8; 8];
    mark.copy_from_slice(&footer[..4]);
    chunks.copy_from_slice(&footer[4..12]);
    bytes.copy_from_slice(&footer[12..]);
    (
        u32::from_le_bytes(mark),
        u64::from_le_bytes(chunks),
        u64::from_le_bytes(bytes),
    )
}

enum Source {
    Memory(Arc<Vec<StoredChunk>>),
    Disk {
        file: BufReader<File>,
        path: PathBuf,
    },
}

/// The chunks of one entry, in order, each verified against its CRC-32.
pub struct Reader {
    key: String,
    id: u64,
    read_once: bool,
    chunks: u64,
    next: u64,
    source: Source,
}

impl Reader {
    pub fn key(&self) -> &str {
        &self.key
    }

    /// True once every chunk has been returned.
    pub fn is_complete(&self) -> bool {
        self.next == self.chunks
    }

    /// The next chunk; `None` after the last. Damage is `Corrupt`.
    pub fn next_chunk(&mut self) -> Result<Option<Chunk>, CacheError> {
        if self.next >= self.chunks {
            return Ok(None);
        }
        let index = self.next;
        let stored = match &mut self.source {
            Source::Memory(chunks) => {
                let Some(chunk) = chunks.get(index as usize) else {
                    return Err(self.corrupt(index));
                };
                StoredChunk {
                    meta: chunk.meta.clone(),
                    body: chunk.body.clone(),
                    crc: chunk.crc,
                }
            }
            Source::Disk { file, path } => {
                read_record(file).map_err(|e| CacheError::Unreadable {
                    key: self.key.clone(),
                    message: format!("chunk {index} of {}: {e}", path.display()),
                })?
            }
        };
        if crc(&stored.meta, &stored.body) != stored.crc {
            return Err(self.corrupt(index));
        }
        self.next += 1;
        Ok(Some(Chunk {
            meta: stored.meta,
            body: stored.body,
        }))
    }

    fn corrupt(&self, chunk: u64) -> CacheError {
        CacheError::Corrupt {
            key: self.key.clone(),
            chunk,
        }
    }
}

/// One chunk record. A damaged length surfaces as a read error or a CRC
/// mismatch; lengths are capped by what the file can hold.
fn read_record(file: &mut BufReader<File>) -> std::io::Result<StoredChunk> {
    let mut head = [0u8; RECORD_HEAD];
    file.read_exact(&mut head)?;
    let mut meta_len = [0u8; 4];
    let mut body_len = [0u8; 8];
    let mut crc = [0u8; 4];
    meta_len.copy_from_slice(&head[..4]);
    body_len.copy_from_slice(&head[4..12]);
    crc.copy_from_slice(&head[12..]);
    let meta_len = u64::from(u32::from_le_bytes(meta_len));
    let body_len = u64::from_le_bytes(body_len);
    let size = file.get_ref().metadata()?.len();
    if meta_len.saturating_add(body_len) > size {
        return Err(std::io::Error::other("chunk length beyond the file"));
    }
    let mut meta = vec![0u8; meta_len as usize];
    file.read_exact(&mut meta)?;
    let mut body = vec![0u8; body_len as usize];
    file.read_exact(&mut body)?;
    Ok(StoredChunk {
        meta: meta.into(),
        body: body.into(),
        crc: u32::from_le_bytes(crc),
    })
}

fn io_error(key: &str, path: &Path, e: std::io::Error) -> CacheError {
    CacheError::Io {
        key: key.to_string(),
        message: format!("{}: {e}", path.display()),
    }
}

fn remove_file(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        warn!(path = %path.display(), error = %e, "cannot remove state file");
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;
