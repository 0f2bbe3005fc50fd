//! The crate's error type: expected failures a caller can act on. Broken
//! internal invariants are assertions, not errors (style.md, rule 7).

use std::path::PathBuf;

/// Everything `skiff_pod::run`, `load`, `check` and
/// `host_main` can fail with.
#[derive(Debug, thiserror::Error)]
pub enum PodError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The configuration asks for something impossible (too many hosts,
    /// fewer warehouses than hosts, a region too small for its contents).
    #[error("invalid pod configuration: {0}")]
    Config(String),
    /// An architecture or protocol this build does not have yet. Never a
    /// silent fallback to another one.
    #[error("not yet implemented: {0}")]
    NotImplemented(String),
    /// A pod or partition file whose header does not match what this build
    /// writes (wrong magic, version, size or layout).
    #[error("{path}: not a usable pod file: {reason}")]
    BadPodFile { path: PathBuf, reason: String },
    /// Bytes read from pod memory violate the format (an id out of range).
    #[error("pod memory is corrupt: {0}")]
    Corrupt(String),
    /// A host process or thread reported an error or exited abnormally.
    #[error("host {host} failed: {reason}")]
    HostFailed { host: u16, reason: String },
    #[error("timed out: {0}")]
    Timeout(String),
    /// The pod is in a state that does not allow the request (for example
    /// `check` while hosts are still running).
    #[error("pod is busy: {0}")]
    Busy(String),
}

impl PodError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        PodError::Io {
            path: path.into(),
            source,
        }
    }
}

pub type Result<T, E = PodError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Results carry this type on every path; keep it small.
    #[test]
    fn error_size_is_bounded() {
        assert!(std::mem::size_of::<PodError>() <= 56);
    }
}
