//! Where the data directory is: a local directory, or a prefix in an
//! S3-compatible object store (`s3://bucket/prefix`).
//!
//! Everything Skiff knows about S3 lives here: building a store from the
//! usual `AWS_*` environment variables (refusing, rather than falling back
//! to the slow instance-metadata lookup, when none are set), teaching
//! deltalake the `s3` scheme (its object-store and log-store registries;
//! the default log store commits with `If-None-Match: *`, which S3 honours,
//! so two writers never both win a version), and an object-store registry
//! for DataFusion that builds a bucket's store on first use, so a worker
//! given a plan over `s3://` files needs nothing but the same environment.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::object_store::{DefaultObjectStoreRegistry, ObjectStoreRegistry};
use deltalake_core::logstore::{
    LogStore, LogStoreFactory, ObjectStoreFactory, ObjectStoreRef, StorageConfig, default_logstore,
    logstore_factories, object_store_factories,
};
use deltalake_core::{DeltaResult, DeltaTableError};
use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ClientConfigKey, ObjectStore, ObjectStoreExt, RetryConfig};
use url::Url;

use crate::error::TableError;

/// How long a connection to the object store may take to open.
const CONNECT_TIMEOUT: &str = "5s";
/// Retries of a failed request, and how long retrying may last in all:
/// object_store's defaults (10 retries over 3 minutes) make a wrong
/// endpoint look like a hang.
const MAX_RETRIES: usize = 3;
const RETRY_TIMEOUT: Duration = Duration::from_secs(30);

/// The data directory.
#[derive(Clone, Debug)]
pub enum DataLocation {
    Local(PathBuf),
    Object(ObjectRoot),
}

/// A prefix in an object store that holds one table per sub-prefix.
#[derive(Clone, Debug)]
pub struct ObjectRoot {
    /// `s3://bucket/prefix/`, always ending in `/`.
    url: Url,
    /// The bucket's store; paths below are from the bucket's root.
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
}

impl DataLocation {
    /// `s3://bucket[/prefix]` names an object store (its store is built
    /// from the environment, see [`s3_store`]); anything else a directory.
    pub fn parse(text: &OsStr) -> Result<Self, TableError> {
        match text.to_str() {
            Some(url) if names_object_store(text) => Ok(Self::Object(ObjectRoot::parse(url)?)),
            _ => Ok(Self::Local(PathBuf::from(text))),
        }
    }

    /// The directory, when the data is local.
    pub fn local_dir(&self) -> Option<&Path> {
        match self {
            Self::Local(dir) => Some(dir),
            Self::Object(_) => None,
        }
    }

    /// How logs and messages name it.
    pub fn display(&self) -> String {
        match self {
            Self::Local(dir) => dir.display().to_string(),
            Self::Object(root) => root.url.to_string(),
        }
    }
}

/// Whether `text` names an object store rather than a directory.
pub fn names_object_store(text: &OsStr) -> bool {
    text.to_str().is_some_and(|t| t.starts_with("s3://"))
}

impl ObjectRoot {
    fn parse(text: &str) -> Result<Self, TableError> {
        let mut url = Url::parse(text)
            .map_err(|e| TableError::Io(format!("{text} is not a valid URL: {e}")))?;
        let bucket = match url.host_str() {
            Some(bucket) if !bucket.is_empty() => bucket.to_string(),
            _ => {
                return Err(TableError::Io(format!(
                    "{text} names no bucket: write s3://BUCKET/PREFIX"
                )));
            }
        };
        if !url.path().ends_with('/') {
            let path = format!("{}/", url.path());
            url.set_path(&path);
        }
        let prefix = ObjectPath::from_url_path(url.path())
            .map_err(|e| TableError::Io(format!("{text}: {e}")))?;
        let store = s3_store(&bucket)?;
        Ok(Self { url, store, prefix })
    }

    pub fn url(&self) -> &Url {
        &self.url
    }

    /// Where table `name` lives: `s3://bucket/prefix/name/`.
    pub fn table_url(&self, name: &str) -> Url {
        let mut url = self.url.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().push(name).push("");
        }
        url
    }

    /// The prefix of table `name`'s objects: the key deltalake derives from
    /// [`ObjectRoot::table_url`] (decoded, unlike a path part, which would
    /// escape `#` or `%` into another key).
    pub(crate) fn table_prefix(&self, name: &str) -> ObjectPath {
        let url = self.table_url(name);
        ObjectPath::from_url_path(url.path()).unwrap_or_else(|_| self.prefix.clone().join(name))
    }

    /// The names of the sub-prefixes that hold a Delta table, and of those
    /// holding `marker` (see the store's `DROP`), sorted. A wrong endpoint,
    /// bucket or key fails here, with the store's answer.
    pub(crate) async fn tables(&self, marker: &str) -> Result<Vec<(String, bool)>, TableError> {
        let listed = self
            .store
            .list_with_delimiter(Some(&self.prefix))
            .await
            .map_err(|e| self.error("cannot list", e))?;
        let mut tables = Vec::new();
        for dir in listed.common_prefixes {
            let Some(name) = dir.filename().map(str::to_string) else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            // A HEAD and one page of the log: listing the prefix itself
            // would list every data file of the table.
            let dropped = self.holds(&name, marker).await?;
            if dropped || self.holds_table(&name).await? {
                tables.push((name, dropped));
            }
        }
        tables.sort();
        Ok(tables)
    }

    /// True when `name/_delta_log/` holds anything.
    pub(crate) async fn holds_table(&self, name: &str) -> Result<bool, TableError> {
        let log = self.table_prefix(name).join("_delta_log");
        let mut listing = self.store.list(Some(&log));
        match listing.try_next().await {
            Ok(first) => Ok(first.is_some()),
            Err(e) => Err(self.error("cannot list", e)),
        }
    }

    /// True when the object `name/file` exists.
    pub(crate) async fn holds(&self, name: &str, file: &str) -> Result<bool, TableError> {
        match self.store.head(&self.table_prefix(name).join(file)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.error("cannot read", e)),
        }
    }

    /// Delete every object under `name/`, the one named `last` (if any)
    /// after all the others.
    pub(crate) async fn remove_table(&self, name: &str, last: &str) -> Result<(), TableError> {
        let prefix = self.table_prefix(name);
        let last = prefix.clone().join(last);
        let keep = last.clone();
        let paths = self
            .store
            .list(Some(&prefix))
            .map_ok(|meta| meta.location)
            .try_filter(move |path| futures::future::ready(*path != keep))
            .boxed();
        self.store
            .delete_stream(paths)
            .try_collect::<Vec<_>>()
            .await
            .map_err(|e| self.error("cannot delete", e))?;
        match self.store.delete(&last).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error("cannot delete", e)),
        }
    }

    /// Write an empty object `name/file`.
    pub(crate) async fn put_marker(&self, name: &str, file: &str) -> Result<(), TableError> {
        let path = self.table_prefix(name).join(file);
        self.store
            .put(&path, bytes::Bytes::new().into())
            .await
            .map(|_| ())
            .map_err(|e| self.error("cannot write", e))
    }

    fn error(&self, what: &str, e: object_store::Error) -> TableError {
        TableError::Io(format!("{what} {}: {e}", self.url))
    }
}

/// The store of `bucket`, built once per process from the `AWS_*`
/// environment (keys, `AWS_REGION`, `AWS_ENDPOINT_URL` for an
/// S3-compatible server, `AWS_ALLOW_HTTP=true` for a plain-http one).
pub fn s3_store(bucket: &str) -> Result<Arc<dyn ObjectStore>, TableError> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<dyn ObjectStore>>>> = OnceLock::new();
    let stores = STORES.get_or_init(Default::default);
    let mut stores = stores
        .lock()
        .map_err(|_| TableError::Io("the object-store cache is poisoned".into()))?;
    if let Some(store) = stores.get(bucket) {
        return Ok(Arc::clone(store));
    }
    check_credentials(|key| std::env::var(key).ok())?;
    let store = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
            CONNECT_TIMEOUT,
        )
        .with_retry(RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: MAX_RETRIES,
            retry_timeout: RETRY_TIMEOUT,
        })
        .build()
        .map_err(|e| TableError::Io(format!("cannot use bucket {bucket}: {e}")))?;
    let store: Arc<dyn ObjectStore> = Arc::new(store);
    stores.insert(bucket.to_string(), Arc::clone(&store));
    Ok(store)
}

/// Refuse to start without credentials: object_store would otherwise ask
/// the EC2 instance-metadata service, which off EC2 fails only after
/// minutes.
fn check_credentials(env: impl Fn(&str) -> Option<String>) -> Result<(), TableError> {
    let set = |key: &str| env(key).is_some_and(|v| !v.is_empty());
    let endpoint = env("AWS_ENDPOINT_URL").or_else(|| env("AWS_ENDPOINT"));
    if endpoint
        .as_deref()
        .is_some_and(|e| e.starts_with("http://"))
        && !env("AWS_ALLOW_HTTP").is_some_and(|v| v.eq_ignore_ascii_case("true"))
    {
        return Err(TableError::Io(
            "AWS_ENDPOINT_URL is a plain http:// address: set AWS_ALLOW_HTTP=true to use it".into(),
        ));
    }
    match (set("AWS_ACCESS_KEY_ID"), set("AWS_SECRET_ACCESS_KEY")) {
        (true, true) => Ok(()),
        (true, false) => Err(TableError::Io(
            "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not".into(),
        )),
        (false, true) => Err(TableError::Io(
            "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not".into(),
        )),
        (false, false)
            if set("AWS_WEB_IDENTITY_TOKEN_FILE")
                || set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
                || set("AWS_CONTAINER_CREDENTIALS_FULL_URI") =>
        {
            Ok(())
        }
        (false, false) => Err(TableError::Io(
            "an s3:// data directory needs credentials: set AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY (and AWS_REGION; for an S3-compatible server \
             AWS_ENDPOINT_URL, with AWS_ALLOW_HTTP=true for http://)"
                .into(),
        )),
    }
}

/// Teach deltalake the `s3` scheme. Idempotent; call before opening any
/// table.
pub fn install() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        if let Ok(s3) = Url::parse("s3://") {
            object_store_factories().insert(s3.clone(), Arc::new(S3StoreFactory));
            logstore_factories().insert(s3, Arc::new(S3LogStoreFactory));
        }
    });
}

struct S3StoreFactory;

impl ObjectStoreFactory for S3StoreFactory {
    fn parse_url_opts(
        &self,
        url: &Url,
        config: &StorageConfig,
    ) -> DeltaResult<(ObjectStoreRef, ObjectPath)> {
        let bucket = url
            .host_str()
            .ok_or_else(|| DeltaTableError::InvalidTableLocation(url.to_string()))?;
        let mut store = s3_store(bucket).map_err(|e| DeltaTableError::generic(e.to_string()))?;
        if let Some(runtime) = &config.runtime {
            store = Arc::new(deltalake_core::logstore::DeltaIOStorageBackend::new(
                store,
                runtime.clone(),
            ));
        }
        let path = ObjectPath::from_url_path(url.path())?;
        Ok((store, path))
    }
}

/// deltalake's own log store: it commits a version with a conditional
/// put (only its default and LakeFS stores do), which S3 supports.
struct S3LogStoreFactory;

impl LogStoreFactory for S3LogStoreFactory {
    fn with_options(
        &self,
        prefixed_store: ObjectStoreRef,
        root_store: ObjectStoreRef,
        location: &Url,
        options: &StorageConfig,
    ) -> DeltaResult<Arc<dyn LogStore>> {
        Ok(default_logstore(
            prefixed_store,
            root_store,
            location,
            options,
        ))
    }
}

/// DataFusion's object-store registry, which builds an `s3://` bucket's
/// store on first use.
#[derive(Debug, Default)]
pub struct Stores(DefaultObjectStoreRegistry);

impl ObjectStoreRegistry for Stores {
    fn register_store(
        &self,
        url: &Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        self.0.register_store(url, store)
    }

    fn deregister_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        self.0.deregister_store(url)
    }

    fn get_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        match self.0.get_store(url) {
            Ok(store) => Ok(store),
            Err(_) if url.scheme() == "s3" && url.host_str().is_some_and(|h| !h.is_empty()) => {
                let bucket = url.host_str().unwrap_or_default();
                let store = s3_store(bucket).map_err(|e| {
                    DataFusionError::External(Box::new(TableError::Io(format!(
                        "cannot read s3://{bucket}: {e}"
                    ))))
                })?;
                self.0.register_store(url, Arc::clone(&store));
                Ok(store)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |key| map.get(key).cloned()
    }

    #[test]
    fn credentials_are_required_and_checked_in_pairs() {
        let none = check_credentials(env(&[])).unwrap_err().to_string();
        assert!(none.contains("needs credentials"), "{none}");
        let half = check_credentials(env(&[("AWS_ACCESS_KEY_ID", "a")]))
            .unwrap_err()
            .to_string();
        assert!(half.contains("AWS_SECRET_ACCESS_KEY is not"), "{half}");
        let both = [("AWS_ACCESS_KEY_ID", "a"), ("AWS_SECRET_ACCESS_KEY", "b")];
        assert!(check_credentials(env(&both)).is_ok());
        let web = [("AWS_WEB_IDENTITY_TOKEN_FILE", "/t")];
        assert!(check_credentials(env(&web)).is_ok());
    }

    #[test]
    fn a_plain_http_endpoint_must_be_allowed() {
        let mut pairs = vec![
            ("AWS_ACCESS_KEY_ID", "a"),
            ("AWS_SECRET_ACCESS_KEY", "b"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9000"),
        ];
        let refused = check_credentials(env(&pairs)).unwrap_err().to_string();
        assert!(refused.contains("AWS_ALLOW_HTTP"), "{refused}");
        pairs.push(("AWS_ALLOW_HTTP", "true"));
        assert!(check_credentials(env(&pairs)).is_ok());
    }

    #[test]
    fn a_local_path_is_a_directory() {
        let location = DataLocation::parse(OsStr::new("/tmp/data")).unwrap();
        assert_eq!(location.local_dir(), Some(Path::new("/tmp/data")));
    }

    #[test]
    fn table_urls_escape_their_names() {
        let root = ObjectRoot {
            url: Url::parse("s3://b/p/").unwrap(),
            store: Arc::new(object_store::memory::InMemory::new()),
            prefix: ObjectPath::from("p"),
        };
        assert_eq!(root.table_url("t").as_str(), "s3://b/p/t/");
        assert_eq!(
            root.table_url("my table#1").as_str(),
            "s3://b/p/my%20table%231/"
        );
        assert_eq!(root.table_prefix("t").as_ref(), "p/t");
        // The key deltalake writes under: the URL's path, decoded.
        for name in ["a#b%c", "my table", "x?y*z"] {
            let url = root.table_url(name);
            let delta = ObjectPath::from_url_path(url.path()).unwrap();
            assert_eq!(root.table_prefix(name), delta, "{name}");
            assert_eq!(delta.filename(), Some(name), "{name}");
        }
    }
}
