//! A file mapped into this process: the pod file (header, coherent region,
//! shared region) or one host's partition file.
//!
//! Pod memory is addressed by byte offsets from the start of the file, never
//! by pointers: every process maps the file at a different address. This is
//! the only module that turns an offset into a pointer. Offsets come from the
//! layout, which was validated against the file when it was mapped, so an
//! offset out of bounds here is a bug and asserts. Values read *out of* the
//! mapping are data and are validated by their readers.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64};

use bytemuck::Pod;
use memmap2::{MmapOptions, MmapRaw};

use crate::error::{PodError, Result};

/// One mapped file. `MAP_SHARED`: writes are visible to every process that
/// maps the same file, which is what makes it pod memory.
pub struct Mapping {
    path: PathBuf,
    map: MmapRaw,
    len: u64,
    writable: bool,
    /// One bit per page written through `write`/`write_bytes` since the
    /// last [`Mapping::take_dirty`] (a host's own partition, for
    /// incremental checkpoints); atomics are not tracked.
    dirty: Option<Box<[AtomicU64]>>,
}

/// The page size dirty tracking counts in.
pub const PAGE_BYTES: u64 = 4096;

impl Mapping {
    /// Creates (or truncates) `path` with `len` zero bytes and maps it. The
    /// file is sparse: pages cost memory only once written.
    pub fn create(path: &Path, len: u64) -> Result<Mapping> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| PodError::io(path, e))?;
        file.set_len(len).map_err(|e| PodError::io(path, e))?;
        let map = MmapOptions::new()
            .len(to_usize(len)?)
            .map_raw(&file)
            .map_err(|e| PodError::io(path, e))?;
        Ok(Mapping {
            path: path.to_path_buf(),
            map,
            len,
            writable: true,
            dirty: None,
        })
    }

    /// Maps an existing file whole. `writable: false` maps it read-only (for
    /// `check`); any write through such a mapping asserts.
    pub fn open(path: &Path, writable: bool) -> Result<Mapping> {
        use std::os::unix::fs::OpenOptionsExt;
        // Non-blocking: opening a FIFO put where a pod was expected must
        // not hang the reader (mapping it then fails); no effect on files.
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| PodError::io(path, e))?;
        let len = file.metadata().map_err(|e| PodError::io(path, e))?.len();
        if len < crate::constants::HEADER_BYTES {
            return Err(PodError::BadPodFile {
                path: path.to_path_buf(),
                reason: format!("{len} bytes is shorter than a header"),
            });
        }
        let options = {
            let mut o = MmapOptions::new();
            o.len(to_usize(len)?);
            o
        };
        let map = if writable {
            options.map_raw(&file)
        } else {
            options.map_raw_read_only(&file)
        }
        .map_err(|e| PodError::io(path, e))?;
        Ok(Mapping {
            path: path.to_path_buf(),
            map,
            len,
            writable,
            dirty: None,
        })
    }

    /// Maps `reserve` bytes of `file` (opened read-write at `path`),
    /// however long the file is now: address space for a file that grows
    /// (a host's log). Touching a page past the file's end faults
    /// (SIGBUS), so the owner grows the file before writing there.
    pub fn reserve(file: &std::fs::File, path: &Path, reserve: u64) -> Result<Mapping> {
        let map = MmapOptions::new()
            .len(to_usize(reserve)?)
            .map_raw(file)
            .map_err(|e| PodError::io(path, e))?;
        Ok(Mapping {
            path: path.to_path_buf(),
            map,
            len: reserve,
            writable: true,
            dirty: None,
        })
    }

    /// Writes `[off, off + len)` back to the file and waits (msync): what
    /// makes a mapped log durable on a disk.
    pub fn sync_range(&self, off: u64, len: u64) -> std::io::Result<()> {
        let page = 4096;
        let start = off / page * page;
        let p = self.ptr(start, off + len - start, 1);
        // SAFETY: `p` and the length are within the mapping (checked by
        // `ptr`), and `start` is page-aligned as msync requires.
        let rc = unsafe { libc::msync(p.cast(), (off + len - start) as usize, libc::MS_SYNC) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The mapping's size in bytes.
    pub fn bytes(&self) -> u64 {
        self.len
    }

    /// Pointer to `[off, off + len)`, asserted in bounds and aligned.
    fn ptr(&self, off: u64, len: u64, align: u64) -> *mut u8 {
        assert!(
            off.checked_add(len).is_some_and(|end| end <= self.len),
            "offset {off}+{len} outside {} ({} bytes)",
            self.path.display(),
            self.len
        );
        assert_eq!(off % align, 0, "offset {off} not {align}-aligned");
        // SAFETY: in bounds of the mapping, checked above.
        unsafe { self.map.as_mut_ptr().add(off as usize) }
    }

    /// The atomic u64 at `off` (lock words, counters). Atomics in a shared
    /// file mapping are coherent across processes on the same machine.
    pub fn atomic_u64(&self, off: u64) -> &AtomicU64 {
        let p = self.ptr(off, 8, 8);
        // SAFETY: aligned, in bounds, lives as long as `self`; AtomicU64 has
        // the layout of u64 and every bit pattern is valid.
        unsafe { &*(p as *const AtomicU64) }
    }

    /// The atomic u32 at `off` (futex words).
    pub fn atomic_u32(&self, off: u64) -> &AtomicU32 {
        let p = self.ptr(off, 4, 4);
        // SAFETY: as in `atomic_u64`.
        unsafe { &*(p as *const AtomicU32) }
    }

    /// Copies a row out. `T: Pod`, so any bytes make a valid `T`; what the
    /// fields mean is for the caller to validate.
    pub fn read<T: Pod>(&self, off: u64) -> T {
        let p = self.ptr(off, size_of::<T>() as u64, align_of::<T>() as u64);
        // SAFETY: in bounds and aligned for T; T is Pod. Concurrent writers
        // are excluded by the lock protocol of the caller.
        unsafe { std::ptr::read(p as *const T) }
    }

    /// Tracks which pages are written from now on.
    pub fn track_writes(&mut self) {
        let words = self.len.div_ceil(PAGE_BYTES).div_ceil(64);
        self.dirty = Some((0..words).map(|_| AtomicU64::new(0)).collect());
    }

    /// The file matches its checkpoint again (a restart just copied the
    /// checkpoint in): forget what was written.
    pub fn forget_dirty(&self) {
        for word in self.dirty.iter().flatten() {
            word.store(0, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn mark(&self, off: u64, len: u64) {
        let Some(bits) = &self.dirty else { return };
        for page in off / PAGE_BYTES..=(off + len.max(1) - 1) / PAGE_BYTES {
            let bit = 1 << (page % 64);
            let word = &bits[(page / 64) as usize];
            // A load first: most writes hit a page already dirty, and a
            // read keeps the line shared between the host's threads.
            if word.load(std::sync::atomic::Ordering::Relaxed) & bit == 0 {
                word.fetch_or(bit, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// The pages written since the last call, as runs (first page, pages),
    /// and forgets them. The caller keeps writers out while it copies them.
    pub fn take_dirty(&self) -> Vec<(u64, u64)> {
        let pages = self.len.div_ceil(PAGE_BYTES);
        let Some(bits) = &self.dirty else {
            panic!("{}: writes are not tracked", self.path.display());
        };

        let mut runs: Vec<(u64, u64)> = Vec::new();
        for (i, word) in bits.iter().enumerate() {
            let mut w = word.swap(0, std::sync::atomic::Ordering::Relaxed);
            while w != 0 {
                let page = i as u64 * 64 + w.trailing_zeros() as u64;
                w &= w - 1;
                if page >= pages {
                    break;
                }
                match runs.last_mut() {
                    Some((first, n)) if *first + *n == page => *n += 1,
                    _ => runs.push((page, 1)),
                }
            }
        }
        runs
    }

    /// Copies a row in.
    pub fn write<T: Pod>(&self, off: u64, value: &T) {
        assert!(self.writable, "write to read-only {}", self.path.display());
        self.mark(off, size_of::<T>() as u64);
        let p = self.ptr(off, size_of::<T>() as u64, align_of::<T>() as u64);
        // SAFETY: as in `read`; the caller holds the row's exclusive lock (or
        // no host is running yet).
        unsafe { std::ptr::write(p as *mut T, *value) }
    }

    /// Copies `dst.len()` bytes out of `[off, ...)`.
    pub fn read_bytes(&self, off: u64, dst: &mut [u8]) {
        let p = self.ptr(off, dst.len() as u64, 1);
        // SAFETY: in bounds; u8 has no alignment or validity requirement.
        unsafe { std::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), dst.len()) }
    }

    /// Copies `src` into `[off, ...)`.
    pub fn write_bytes(&self, off: u64, src: &[u8]) {
        assert!(self.writable, "write to read-only {}", self.path.display());
        self.mark(off, src.len() as u64);
        let p = self.ptr(off, src.len() as u64, 1);
        // SAFETY: in bounds; see `write` for exclusion.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) }
    }
}

fn to_usize(len: u64) -> Result<usize> {
    usize::try_from(len)
        .map_err(|_| PodError::Config(format!("{len} bytes does not fit in memory")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    use crate::testing::TempShm;

    /// Writes mark their pages (a write across a boundary marks both);
    /// atomics do not; taking the set forgets it.
    #[test]
    fn written_pages_are_tracked_for_checkpoints() {
        let shm = TempShm::new("dirty");
        let mut m = Mapping::create(&shm.0, 200 * PAGE_BYTES).unwrap();
        m.track_writes();
        m.write::<u64>(5 * PAGE_BYTES + 8, &1);
        m.write_bytes(7 * PAGE_BYTES - 2, b"abcd");
        m.write_bytes(9 * PAGE_BYTES, b"z");
        m.write_bytes(130 * PAGE_BYTES, b"x");
        m.atomic_u64(50 * PAGE_BYTES).store(9, Ordering::Relaxed);
        assert_eq!(m.take_dirty(), vec![(5, 3), (9, 1), (130, 1)]);
        assert!(m.take_dirty().is_empty());
        m.write_bytes(0, b"y");
        m.forget_dirty();
        assert!(m.take_dirty().is_empty());
    }

    #[test]
    fn two_mappings_of_one_file_see_each_other() {
        let shm = TempShm::new("region");
        let a = Mapping::create(&shm.0, 8192).unwrap();
        let b = Mapping::open(&shm.0, true).unwrap();
        a.write::<u64>(4096, &0xdead_beef);
        assert_eq!(b.read::<u64>(4096), 0xdead_beef);
        b.atomic_u64(4104).fetch_add(5, Ordering::SeqCst);
        assert_eq!(a.atomic_u64(4104).load(Ordering::SeqCst), 5);
        let mut buf = [0u8; 3];
        a.write_bytes(100, b"abc");
        b.read_bytes(100, &mut buf);
        assert_eq!(&buf, b"abc");
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn out_of_bounds_offset_asserts() {
        let shm = TempShm::new("region-oob");
        let a = Mapping::create(&shm.0, 4096).unwrap();
        a.read::<u64>(4096);
    }

    #[test]
    #[should_panic(expected = "read-only")]
    fn read_only_mapping_refuses_writes() {
        let shm = TempShm::new("region-ro");
        drop(Mapping::create(&shm.0, 4096).unwrap());
        let ro = Mapping::open(&shm.0, false).unwrap();
        ro.write::<u64>(0, &1);
    }

    #[test]
    fn short_file_is_an_error_not_a_panic() {
        let shm = TempShm::new("region-short");
        std::fs::write(&shm.0, b"tiny").unwrap();
        assert!(matches!(
            Mapping::open(&shm.0, false),
            Err(PodError::BadPodFile { .. })
        ));
    }
}
