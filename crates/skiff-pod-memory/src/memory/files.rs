//! The files of a pod, named after the pod file's path: `PATH` (the pod
//! memory), `PATH.hostN` (host N's partition), `PATH.hostN.wal` (its log)
//! and `PATH.hostN.ckpt0`/`.ckpt1` (its checkpoint images).

use std::path::{Path, PathBuf};

use crate::constants::HOSTS_MAX;
use crate::error::{PodError, Result};

/// `PATH.hostN`: the partition file of host `host`.
pub fn part_path(pod_path: &Path, host: u16) -> PathBuf {
    let mut s = pod_path.as_os_str().to_owned();
    s.push(format!(".host{host}"));
    s.into()
}

/// `PATH.hostN.wal`: the log of host `host`.
pub fn wal_path(pod_path: &Path, host: u16) -> PathBuf {
    let mut s = pod_path.as_os_str().to_owned();
    s.push(format!(".host{host}.wal"));
    s.into()
}

/// `PATH.hostN.ckptI`: checkpoint image `image` (0 or 1) of host `host`'s
/// partition. The log's header says which one a restart starts from; the
/// other is the one the next checkpoint brings up to date (`checkpoint`).
pub fn checkpoint_path(pod_path: &Path, host: u16, image: u8) -> PathBuf {
    let mut s = pod_path.as_os_str().to_owned();
    s.push(format!(".host{host}.ckpt{image}"));
    s.into()
}

/// Removes a pod file and every partition file beside it; missing files are
/// fine.
pub fn remove_files(path: &Path) -> Result<()> {
    let remove = |p: &Path| match std::fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(PodError::io(p, e)),
    };
    remove(path)?;
    for h in 0..HOSTS_MAX as u16 {
        remove(&part_path(path, h))?;
        remove(&wal_path(path, h))?;
        for image in 0..2 {
            remove(&checkpoint_path(path, h, image))?;
        }
    }
    Ok(())
}
