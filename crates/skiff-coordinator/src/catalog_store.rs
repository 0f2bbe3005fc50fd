//! The persistent part of the catalog: tables and views created by SQL
//! (`CREATE EXTERNAL TABLE`, `CREATE VIEW`), kept as their statements in
//! `DATA_DIR/.skiff/catalog.json` and replayed when the coordinator starts.
//! Tables found in the data directory itself are rediscovered instead.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use skiff_node::error::{Result, ServerError, SqlState};
use skiff_node::sync::lock;

const FORMAT_VERSION: u32 = 1;

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CatalogFile {
    pub version: u32,
    pub entries: Vec<CatalogEntry>,
}

/// One object and the statement that creates it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CatalogEntry {
    /// Lower-case table or view name as DataFusion resolved it.
    pub name: String,
    pub sql: String,
}

/// The catalog file and its in-memory copy.
#[derive(Debug)]
pub struct CatalogStore {
    path: PathBuf,
    file: Mutex<CatalogFile>,
    /// Held for the store's life: one coordinator per data directory. The
    /// operating system releases it when the process dies, however it dies.
    _lock: std::fs::File,
}

impl CatalogStore {
    /// Open (or start) the catalog in the state directory `dir` of the
    /// data directory `data`. A file that cannot be parsed is an error,
    /// never silently replaced.
    pub fn open(dir: &Path, data: &str) -> Result<Self> {
        let io = |what: &str, e: std::io::Error| {
            ServerError::internal(format!("cannot {what} in {}: {e}", dir.display()))
        };
        std::fs::create_dir_all(dir).map_err(|e| io("create the catalog directory", e))?;
        let lock = std::fs::File::create(dir.join("lock")).map_err(|e| io("create lock", e))?;
        if let Err(e) = lock.try_lock() {
            return Err(match e {
                std::fs::TryLockError::WouldBlock => ServerError::new(
                    SqlState::InsufficientResources,
                    format!("data directory {data} is in use by another coordinator"),
                ),
                std::fs::TryLockError::Error(e) => io("lock the catalog", e),
            });
        }
        let path = dir.join("catalog.json");
        let file = match std::fs::read(&path) {
            Ok(bytes) => {
                let file: CatalogFile = serde_json::from_slice(&bytes).map_err(|e| {
                    ServerError::internal(format!("catalog {} is damaged: {e}", path.display()))
                })?;
                if file.version != FORMAT_VERSION {
                    return Err(ServerError::internal(format!(
                        "catalog {} has format version {}, this Skiff reads {FORMAT_VERSION}",
                        path.display(),
                        file.version
                    )));
                }
                file
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => CatalogFile {
                version: FORMAT_VERSION,
                entries: Vec::new(),
            },
            Err(e) => {
                return Err(ServerError::internal(format!(
                    "cannot read catalog {}: {e}",
                    path.display()
                )));
            }
        };
        Ok(Self {
            path,
            file: Mutex::new(file),
            _lock: lock,
        })
    }

    pub fn entries(&self) -> Vec<CatalogEntry> {
        lock(&self.file).entries.clone()
    }

    /// Record that `name` is (re)created by `sql`.
    pub fn put(&self, name: &str, sql: &str) -> Result<()> {
        let mut file = lock(&self.file);
        let mut next = file.clone();
        next.entries.retain(|e| e.name != name);
        next.entries.push(CatalogEntry {
            name: name.to_string(),
            sql: sql.trim().to_string(),
        });
        self.write(&next)?;
        *file = next;
        Ok(())
    }

    /// Forget `name`; true if it was recorded.
    pub fn remove(&self, name: &str) -> Result<bool> {
        let mut file = lock(&self.file);
        if !file.entries.iter().any(|e| e.name == name) {
            return Ok(false);
        }
        let mut next = file.clone();
        next.entries.retain(|e| e.name != name);
        self.write(&next)?;
        *file = next;
        Ok(true)
    }

    fn write(&self, file: &CatalogFile) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(file)
            .map_err(|e| ServerError::internal(format!("cannot encode catalog: {e}")))?;
        write_atomically(&self.path, &bytes)
    }
}

/// Write `bytes` to `path` atomically and durably: a crash leaves the old
/// file or the new one.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let io =
        |e: std::io::Error| ServerError::internal(format!("cannot write {}: {e}", path.display()));
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    {
        use std::io::Write;
        let mut out = std::fs::File::create(&tmp).map_err(io)?;
        out.write_all(bytes).map_err(io)?;
        out.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, path).map_err(io)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survives_reopen_and_rejects_damage() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join(".skiff");
        let store = CatalogStore::open(&state, "data").unwrap();
        store.put("t", "CREATE EXTERNAL TABLE t ...").unwrap();
        store.put("v", "CREATE VIEW v AS SELECT 1").unwrap();
        store
            .put("t", "CREATE EXTERNAL TABLE t STORED AS CSV ...")
            .unwrap();
        assert!(store.remove("v").unwrap());
        assert!(!store.remove("v").unwrap());
        drop(store);
        let again = CatalogStore::open(&state, "data").unwrap();
        assert_eq!(again.entries().len(), 1);
        assert!(again.entries()[0].sql.contains("CSV"));
        let busy = CatalogStore::open(&state, "data").unwrap_err();
        assert!(busy.message.contains("in use"), "{busy}");
        drop(again);
        std::fs::write(dir.path().join(".skiff/catalog.json"), b"{not json").unwrap();
        assert!(CatalogStore::open(&state, "data").is_err());
    }
}
