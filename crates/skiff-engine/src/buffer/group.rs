//! The shared chunk cache of a pipeline group (the paper's data transfer
//! manager, `../shared/papers/pipeline-groups-disaggregated.txt` §2-3):
//! the scans of a group's pipelines read the remote tier through one
//! [`GroupCache`], so each column of each row group crosses the wire once
//! for the whole group, however many of its scans read it.
//!
//! Every scan of the group is registered before any of them runs, with the
//! files and columns it will read ([`GroupCache::register`]). A fetch
//! brings the columns no entry holds yet, once (concurrent askers share the
//! one fetch); an entry is kept until every other registered scan that
//! reads that file's column has taken it or ended, then dropped. Nothing
//! waits on another scan: a scan that runs ahead only keeps entries alive
//! longer (what the grouper's memory budget is for), so a group cannot
//! deadlock whatever order its pipelines run in.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use arrow::array::ArrayRef;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

use super::pool::FileVersion;
use super::remote::{ChunkFetch, ChunkSource, Fetched};

/// A registered scan of a group.
pub type MemberId = usize;

/// One column of one row group, as a fetch ends for it: the column, `None`
/// when the memory node does not hold it, or why the fetch failed.
type Column = Result<Option<ArrayRef>, String>;
type SharedColumn = Shared<BoxFuture<'static, Column>>;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    file: Arc<FileVersion>,
    row_group: usize,
    column: usize,
}

struct Entry {
    column: SharedColumn,
    /// Registered scans still to take it.
    waiting: BTreeSet<MemberId>,
    /// The column's bytes once its fetch ended (0 before).
    bytes: usize,
}

/// What a group's fetches did, for its report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupCounters {
    /// Columns of row groups fetched from the memory nodes, and their bytes.
    pub chunks_fetched: u64,
    pub bytes_fetched: u64,
    /// Columns of row groups a scan took from the group's cache (fetched,
    /// or being fetched, for another scan of the group).
    pub chunks_shared: u64,
    /// Time scans waited for columns another scan's fetch was bringing.
    pub wait_ns: u64,
    /// The most bytes the cache's fetched entries held at once.
    pub held_max_bytes: u64,
}

/// A group's counters, kept apart from its cache so that a report can
/// outlive the cache (whose entries go when its last scan does).
#[derive(Debug, Default)]
pub struct GroupStats {
    chunks_fetched: AtomicU64,
    bytes_fetched: AtomicU64,
    chunks_shared: AtomicU64,
    wait_ns: AtomicU64,
    held_max_bytes: AtomicU64,
}

impl GroupStats {
    pub fn counters(&self) -> GroupCounters {
        GroupCounters {
            chunks_fetched: self.chunks_fetched.load(Ordering::Relaxed),
            bytes_fetched: self.bytes_fetched.load(Ordering::Relaxed),
            chunks_shared: self.chunks_shared.load(Ordering::Relaxed),
            wait_ns: self.wait_ns.load(Ordering::Relaxed),
            held_max_bytes: self.held_max_bytes.load(Ordering::Relaxed),
        }
    }
}

#[derive(Default)]
struct State {
    /// Who reads each (file path, column name).
    readers: HashMap<(String, String), BTreeSet<MemberId>>,
    members: usize,
    ended: BTreeSet<MemberId>,
    entries: HashMap<Key, Entry>,
    /// Bytes the entries hold (of fetches that ended).
    held: usize,
}

/// The chunk cache one pipeline group's scans share.
pub struct GroupCache {
    source: Arc<dyn ChunkSource>,
    state: Mutex<State>,
    stats: Arc<GroupStats>,
}

impl fmt::Debug for GroupCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupCache")
            .field("counters", &self.counters())
            .finish_non_exhaustive()
    }
}

impl GroupCache {
    /// A cache in front of `source`, with no scan registered yet.
    pub fn new(source: Arc<dyn ChunkSource>) -> Arc<Self> {
        Arc::new(Self {
            source,
            state: Mutex::new(State::default()),
            stats: Arc::default(),
        })
    }

    /// Register a scan that reads `columns` (by name) of `files` (by path);
    /// its reads go through [`GroupCache::member`].
    pub fn register(&self, files: &[String], columns: &[String]) -> MemberId {
        let mut state = self.lock();
        let id = state.members;
        state.members += 1;
        for file in files {
            for column in columns {
                state
                    .readers
                    .entry((file.clone(), column.clone()))
                    .or_default()
                    .insert(id);
            }
        }
        id
    }

    /// The remote tier as scan `id` reads it. Dropping the last clone ends
    /// the scan: entries no longer wait for it.
    pub fn member(self: &Arc<Self>, id: MemberId) -> Arc<dyn ChunkSource> {
        assert!(id < self.lock().members, "member {id} was registered");
        Arc::new(Member {
            cache: Arc::clone(self),
            id,
        })
    }

    /// Scan `id` reads no more: drop what only it still waited for.
    pub fn end(&self, id: MemberId) {
        let mut state = self.lock();
        if !state.ended.insert(id) {
            return;
        }
        let mut freed = 0;
        state.entries.retain(|_, entry| {
            entry.waiting.remove(&id);
            let keep = !entry.waiting.is_empty();
            if !keep {
                freed += entry.bytes;
            }
            keep
        });
        state.held = state.held.saturating_sub(freed);
    }

    pub fn counters(&self) -> GroupCounters {
        self.stats.counters()
    }

    /// The counters, to read after the cache is gone.
    pub fn stats(&self) -> Arc<GroupStats> {
        Arc::clone(&self.stats)
    }

    /// Entries held now (fetched or under way).
    pub fn held(&self) -> usize {
        self.lock().entries.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fetch(
        self: &Arc<Self>,
        id: MemberId,
        fetch: ChunkFetch,
    ) -> Option<BoxFuture<'static, Fetched>> {
        assert_eq!(fetch.columns.len(), fetch.names.len(), "a name per column");
        let mut state = self.lock();
        let mut columns: Vec<Option<SharedColumn>> = vec![None; fetch.columns.len()];
        let mut missing = Vec::new();
        let mut shared = 0;
        for (at, &column) in fetch.columns.iter().enumerate() {
            let key = Key {
                file: Arc::clone(&fetch.file),
                row_group: fetch.row_group,
                column,
            };
            let Some(entry) = state.entries.get_mut(&key) else {
                missing.push(at);
                continue;
            };
            columns[at] = Some(entry.column.clone());
            shared += 1;
            entry.waiting.remove(&id);
            if entry.waiting.is_empty() {
                let bytes = entry.bytes;
                state.entries.remove(&key);
                state.held = state.held.saturating_sub(bytes);
            }
        }
        if !missing.is_empty() {
            let asked = ChunkFetch {
                columns: missing.iter().map(|&at| fetch.columns[at]).collect(),
                names: missing.iter().map(|&at| fetch.names[at].clone()).collect(),
                ..fetch.clone()
            };
            // Not held (another version of the file, a node left alone):
            // the scan reads every column from storage.
            let fetching = self.source.fetch(asked)?;
            let keys: Vec<Key> = missing
                .iter()
                .map(|&at| Key {
                    file: Arc::clone(&fetch.file),
                    row_group: fetch.row_group,
                    column: fetch.columns[at],
                })
                .collect();
            let cache = Arc::clone(self);
            let admitted = keys.clone();
            let whole = async move {
                let fetched = fetching.await;
                if let Ok(got) = &fetched {
                    cache.admit(&admitted, got);
                }
                fetched
            }
            .boxed()
            .shared();
            for (nth, (&at, key)) in missing.iter().zip(keys).enumerate() {
                let column = whole
                    .clone()
                    .map(move |fetched| match fetched {
                        Ok(got) => Ok(got.get(nth).cloned().flatten()),
                        Err(e) => Err(e),
                    })
                    .boxed()
                    .shared();
                columns[at] = Some(column.clone());
                let reader = (fetch.file.path.clone(), fetch.names[at].to_string());
                let mut waiting = state.readers.get(&reader).cloned().unwrap_or_default();
                waiting.remove(&id);
                for ended in &state.ended {
                    waiting.remove(ended);
                }
                if !waiting.is_empty() {
                    let entry = Entry {
                        column,
                        waiting,
                        bytes: 0,
                    };
                    state.entries.insert(key, entry);
                }
            }
        }
        drop(state);
        self.stats
            .chunks_shared
            .fetch_add(shared, Ordering::Relaxed);
        let cache = Arc::clone(self);
        let all_shared = missing.is_empty();
        Some(
            async move {
                let started = Instant::now();
                let mut out = Vec::with_capacity(columns.len());
                for column in columns {
                    let Some(column) = column else {
                        return Err("group cache: a column neither held nor fetched".into());
                    };
                    out.push(column.await?);
                }
                if all_shared {
                    let waited = started.elapsed().as_nanos() as u64;
                    cache.stats.wait_ns.fetch_add(waited, Ordering::Relaxed);
                }
                Ok(out)
            }
            .boxed(),
        )
    }

    /// A fetch of `keys` ended with `got`: count it, and the bytes of the
    /// entries still held for other scans.
    fn admit(&self, keys: &[Key], got: &[Option<ArrayRef>]) {
        let c = &self.stats;
        let arrays = got.iter().flatten();
        let bytes: usize = arrays.clone().map(|a| a.get_array_memory_size()).sum();
        c.chunks_fetched
            .fetch_add(arrays.count() as u64, Ordering::Relaxed);
        c.bytes_fetched.fetch_add(bytes as u64, Ordering::Relaxed);
        let mut state = self.lock();
        let mut held = 0;
        for (key, array) in keys.iter().zip(got) {
            if let (Some(entry), Some(array)) = (state.entries.get_mut(key), array) {
                entry.bytes = array.get_array_memory_size();
                held += entry.bytes;
            }
        }
        state.held += held;
        c.held_max_bytes
            .fetch_max(state.held as u64, Ordering::Relaxed);
    }
}

/// One registered scan's view of the group's cache.
struct Member {
    cache: Arc<GroupCache>,
    id: MemberId,
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupMember").field("id", &self.id).finish()
    }
}

impl ChunkSource for Member {
    fn holds(&self, table: &str) -> bool {
        self.cache.source.holds(table)
    }

    fn fetch(&self, fetch: ChunkFetch) -> Option<BoxFuture<'static, Fetched>> {
        self.cache.fetch(self.id, fetch)
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.cache.end(self.id);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use arrow::array::{Array, Int64Array};
    use datafusion::common::runtime::SpawnedTask;
    use tokio::sync::Notify;

    use super::*;

    /// A memory node that holds columns 0 and 1 of every row group, counts
    /// the columns asked and, when `gate` is set, answers only once it is
    /// opened.
    #[derive(Debug, Default)]
    struct Node {
        asked: AtomicUsize,
        gate: Option<Arc<Notify>>,
    }

    impl ChunkSource for Node {
        fn holds(&self, _table: &str) -> bool {
            true
        }

        fn fetch(&self, fetch: ChunkFetch) -> Option<BoxFuture<'static, Fetched>> {
            self.asked.fetch_add(fetch.columns.len(), Ordering::SeqCst);
            let gate = self.gate.clone();
            Some(
                async move {
                    if let Some(gate) = gate {
                        gate.notified().await;
                    }
                    Ok(fetch
                        .columns
                        .iter()
                        .map(|&c| {
                            let value = (fetch.row_group * 10 + c) as i64;
                            (c < 2)
                                .then(|| Arc::new(Int64Array::from(vec![value; fetch.rows])) as _)
                        })
                        .collect())
                }
                .boxed(),
            )
        }
    }

    fn file() -> Arc<FileVersion> {
        Arc::new(FileVersion {
            path: "t/part-0.parquet".into(),
            size: 100,
            modified: 1,
            e_tag: None,
            partition: None,
        })
    }

    fn ask(row_group: usize, columns: &[usize]) -> ChunkFetch {
        ChunkFetch {
            table: Arc::from("t"),
            file: file(),
            row_group,
            columns: columns.to_vec(),
            names: columns.iter().map(|c| Arc::from(format!("c{c}"))).collect(),
            rows: 3,
        }
    }

    fn names(columns: &[usize]) -> Vec<String> {
        columns.iter().map(|c| format!("c{c}")).collect()
    }

    async fn values(
        source: &Arc<dyn ChunkSource>,
        row_group: usize,
        columns: &[usize],
    ) -> Vec<Option<i64>> {
        let fetched = source
            .fetch(ask(row_group, columns))
            .expect("held")
            .await
            .expect("fetched");
        fetched
            .iter()
            .map(|a| {
                a.as_ref().map(|a| {
                    a.as_any()
                        .downcast_ref::<Int64Array>()
                        .expect("i64")
                        .value(0)
                })
            })
            .collect()
    }

    #[tokio::test]
    async fn each_column_of_a_row_group_is_fetched_once_for_the_group() {
        let node = Arc::new(Node::default());
        let cache = GroupCache::new(Arc::clone(&node) as _);
        let files = vec![file().path.clone()];
        let a = cache.member(cache.register(&files, &names(&[0, 1])));
        let b = cache.member(cache.register(&files, &names(&[1])));
        assert_eq!(values(&a, 0, &[0, 1]).await, vec![Some(0), Some(1)]);
        assert_eq!(
            cache.held(),
            1,
            "column 1 kept for b, column 0 read by a alone"
        );
        assert_eq!(values(&b, 0, &[1]).await, vec![Some(1)]);
        assert_eq!(cache.held(), 0, "every reader passed");
        assert_eq!(node.asked.load(Ordering::SeqCst), 2);
        let counters = cache.counters();
        assert_eq!((counters.chunks_fetched, counters.chunks_shared), (2, 1));
        assert_eq!(
            counters.bytes_fetched,
            2 * Int64Array::from(vec![0i64; 3]).get_array_memory_size() as u64
        );
        // Past what the group shares, b fetches for itself.
        assert_eq!(values(&b, 1, &[1]).await, vec![Some(11)]);
        assert_eq!(cache.held(), 1, "row group 1's column 1 waits for a");
        drop(a);
        assert_eq!(cache.held(), 0, "a ended: nothing waits for it");
        assert_eq!(node.asked.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn readers_asking_at_once_share_one_fetch() {
        let gate = Arc::new(Notify::new());
        let node = Arc::new(Node {
            gate: Some(Arc::clone(&gate)),
            ..Node::default()
        });
        let cache = GroupCache::new(Arc::clone(&node) as _);
        let files = vec![file().path.clone()];
        let members: Vec<_> = (0..3)
            .map(|_| cache.member(cache.register(&files, &names(&[0, 2]))))
            .collect();
        let reads: Vec<_> = members
            .iter()
            .map(|m| m.fetch(ask(0, &[0, 2])).expect("held"))
            .collect();
        assert_eq!(node.asked.load(Ordering::SeqCst), 2, "one fetch under way");
        let all = SpawnedTask::spawn(futures::future::join_all(reads));
        tokio::task::yield_now().await;
        gate.notify_one();
        for fetched in all.join().await.expect("joined") {
            let fetched = fetched.expect("fetched");
            assert!(
                fetched[0].is_some() && fetched[1].is_none(),
                "column 2 is not held"
            );
        }
        assert_eq!(node.asked.load(Ordering::SeqCst), 2);
        assert_eq!(cache.held(), 0);
        assert_eq!(cache.counters().chunks_shared, 4);
    }

    #[tokio::test]
    async fn a_reader_outside_the_registration_keeps_nothing() {
        let node = Arc::new(Node::default());
        let cache = GroupCache::new(Arc::clone(&node) as _);
        let a = cache.member(cache.register(&["other.parquet".into()], &names(&[0])));
        let _b = cache.member(cache.register(&["other.parquet".into()], &names(&[0])));
        assert_eq!(values(&a, 0, &[0]).await, vec![Some(0)]);
        assert_eq!(cache.held(), 0, "nobody registered for this file");
    }
}
