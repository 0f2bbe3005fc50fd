//! The blocks a process holds, their budget and which one goes first.
//!
//! Eviction is CLOCK with VectorH's importance order: every block has a
//! few *chances*, refilled when a scan reads it; the hand takes one chance
//! from each block it passes and evicts a block that has none left. A block
//! of a partition this node owns gets [`OWNED_CHANCES`], any other block
//! [`OTHER_CHANCES`], so between blocks read equally often the ones of
//! partitions owned elsewhere go first. Which partitions a node owns it
//! learns from the coordinator ([`BufferPool::set_owned`]); until then,
//! and in the embedded engine, it owns them all.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use arrow::array::ArrayRef;
use arrow::datatypes::DataType;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, MemoryReservation};

use crate::store::Relieve;

/// The memory consumer the pool's blocks are counted under.
pub const CONSUMER: &str = crate::store::BUFFER_POOL_CONSUMER;

/// Chances of a block of a partition this node owns (and of blocks of
/// tables that are not hash-partitioned: every node reads all of them).
pub const OWNED_CHANCES: u8 = 2;
/// Chances of a block of a partition another node owns.
pub const OTHER_CHANCES: u8 = 1;

/// One version of one file: a block read from it is valid while the file
/// a scan names has the same path, size and modification time. Delta
/// never rewrites a file in place; an external file rewritten in place
/// changes size or time, and its old blocks are never read again.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FileVersion {
    pub path: String,
    pub size: u64,
    /// Nanoseconds since the epoch, as the object store reports them.
    pub modified: i64,
    pub e_tag: Option<String>,
    /// The hash partition of a partitioned table the file holds (its
    /// `PARTITION_COLUMN=N` directory), what buffer matching moves by.
    pub partition: Option<u32>,
}

impl FileVersion {
    /// The version of the file `meta` describes.
    pub fn of(meta: &object_store::ObjectMeta) -> Self {
        FileVersion {
            path: meta.location.to_string(),
            size: meta.size,
            modified: meta
                .last_modified
                .timestamp_nanos_opt()
                .unwrap_or_else(|| meta.last_modified.timestamp_millis()),
            e_tag: meta.e_tag.clone(),
            partition: FileVersion::partition_of(meta.location.as_ref()),
        }
    }

    /// The hash partition `path` names in a `PARTITION_COLUMN=N` directory.
    pub fn partition_of(path: &str) -> Option<u32> {
        let prefix = format!("{}=", skiff_tables::partition::PARTITION_COLUMN);
        path.split('/')
            .find_map(|part| part.strip_prefix(prefix.as_str()))
            .and_then(|n| n.parse().ok())
    }
}

/// A block: one column chunk of one row group, decoded to `data_type`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BlockKey {
    pub file: Arc<FileVersion>,
    pub row_group: usize,
    /// The column's index among the file's top-level columns.
    pub column: usize,
    pub data_type: DataType,
}

/// What `skiff.cache` counts by: a table's location and, for a
/// hash-partitioned table, one of its partitions.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheScope {
    pub location: Arc<str>,
    pub partition: Option<u32>,
}

/// What `skiff.cache` shows of one [`CacheScope`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableCache {
    pub blocks: u64,
    pub bytes: u64,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    /// Blocks sent to a partition's new owner (buffer matching).
    pub sent: u64,
    /// Blocks received from a partition's old owner and kept.
    pub received: u64,
    /// Whether this node owns the scope's partition (always, for a table
    /// that is not hash-partitioned), as of the listing.
    pub owned: bool,
}

/// A block with what names it, as buffer matching moves it.
#[derive(Clone, Debug)]
pub struct Block {
    pub table: Arc<str>,
    pub key: BlockKey,
    pub array: ArrayRef,
}

/// The buffer pool of one process: decoded blocks of tables' Parquet
/// files within `budget` bytes, counted in the process's memory pool.
pub struct BufferPool {
    budget: usize,
    blocks: Mutex<Blocks>,
}

struct Blocks {
    index: HashMap<BlockKey, usize>,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    hand: usize,
    /// Per scope, in first-seen order for a stable listing.
    tables: Vec<(CacheScope, TableCache)>,
    scopes: HashMap<CacheScope, usize>,
    /// The blocks' bytes, reserved in the memory pool: the pool's size.
    reservation: MemoryReservation,
    /// Per partitioned table's location, the partitions this node owns;
    /// a location not named is owned whole.
    owned: Owned,
}

/// Partitions a node owns, per table location.
pub type Owned = HashMap<Arc<str>, BTreeSet<u32>>;

struct Slot {
    key: BlockKey,
    table: usize,
    array: ArrayRef,
    bytes: usize,
    chances: u8,
    owned: bool,
}

impl BufferPool {
    /// A pool of at most `budget` bytes whose blocks are counted in
    /// `memory`; a budget of 0 admits nothing.
    pub fn new(budget: usize, memory: &Arc<dyn MemoryPool>) -> Arc<Self> {
        let reservation = MemoryConsumer::new(CONSUMER).register(memory);
        Arc::new(Self {
            budget,
            blocks: Mutex::new(Blocks {
                index: HashMap::new(),
                slots: Vec::new(),
                free: Vec::new(),
                hand: 0,
                tables: Vec::new(),
                scopes: HashMap::new(),
                reservation,
                owned: Owned::new(),
            }),
        })
    }

    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Bytes the blocks take now.
    pub fn bytes(&self) -> usize {
        self.lock().reservation.size()
    }

    fn lock(&self) -> MutexGuard<'_, Blocks> {
        self.blocks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The block at `key`, counted as a hit of `table`; `None` (a miss)
    /// when the pool does not hold it.
    pub fn get(&self, table: &Arc<str>, key: &BlockKey) -> Option<ArrayRef> {
        let mut blocks = self.lock();
        let slot = blocks.index.get(key).copied();
        let table = blocks.scope(table, key);
        let Some(slot) = slot else {
            blocks.tables[table].1.misses += 1;
            return None;
        };
        blocks.tables[table].1.hits += 1;
        let slot = blocks.slots[slot].as_mut()?;
        slot.chances = if slot.owned {
            OWNED_CHANCES
        } else {
            OTHER_CHANCES
        };
        Some(Arc::clone(&slot.array))
    }

    /// Whether the pool holds the block at `key` (counted as nothing: a
    /// look ahead, not a read).
    pub fn holds(&self, key: &BlockKey) -> bool {
        self.lock().index.contains_key(key)
    }

    /// Keep `array` as the block at `key`, evicting others to make room;
    /// a block larger than the budget, or one the memory pool has no room
    /// for, is not kept (the scan has its data either way). Whether it was.
    pub fn admit(&self, table: &Arc<str>, key: BlockKey, array: ArrayRef) -> bool {
        self.keep(table, key, array, false)
    }

    /// The partitions this node owns from now on (what the coordinator's
    /// map says): blocks of the others keep at most [`OTHER_CHANCES`].
    pub fn set_owned(&self, owned: Owned) {
        let mut blocks = self.lock();
        if blocks.owned == owned {
            return;
        }
        blocks.owned = owned;
        for at in 0..blocks.slots.len() {
            let Some(slot) = blocks.slots[at].as_ref() else {
                continue;
            };
            let scope = &blocks.tables[slot.table].0;
            let owns = blocks.owns(&scope.location, scope.partition);
            if let Some(slot) = blocks.slots[at].as_mut() {
                slot.owned = owns;
                if !owns {
                    slot.chances = slot.chances.min(OTHER_CHANCES);
                }
            }
        }
    }

    /// [`Self::admit`], counting a kept block as `received` when it is.
    fn keep(&self, table: &Arc<str>, key: BlockKey, array: ArrayRef, received: bool) -> bool {
        let bytes = array.get_array_memory_size();
        if bytes > self.budget {
            return false;
        }
        let mut blocks = self.lock();
        if blocks.index.contains_key(&key) {
            return false;
        }
        while blocks.reservation.size() + bytes > self.budget {
            if !blocks.evict_one() {
                return false;
            }
        }
        // Queries come first: the pool does not ask anyone to spill for
        // the cache (`SkiffMemoryPool` skips this consumer), it gives up.
        if blocks.reservation.try_grow(bytes).is_err() {
            return false;
        }
        let owned = blocks.owns(table, key.file.partition);
        let table = blocks.scope(table, &key);
        let slot = Slot {
            key: key.clone(),
            table,
            array,
            bytes,
            chances: if owned { OWNED_CHANCES } else { OTHER_CHANCES },
            owned,
        };
        let at = match blocks.free.pop() {
            Some(at) => {
                blocks.slots[at] = Some(slot);
                at
            }
            None => {
                blocks.slots.push(Some(slot));
                blocks.slots.len() - 1
            }
        };
        blocks.index.insert(key, at);
        let stats = &mut blocks.tables[table].1;
        stats.blocks += 1;
        stats.bytes += bytes as u64;
        stats.received += u64::from(received);
        blocks.check(self.budget);
        true
    }

    /// Drop every block; the bytes they took.
    pub fn clear(&self) -> usize {
        let mut blocks = self.lock();
        let freed = blocks.reservation.size();
        for at in 0..blocks.slots.len() {
            if blocks.slots[at].is_some() {
                blocks.remove(at, false);
            }
        }
        blocks.check(self.budget);
        freed
    }

    /// Per scope: what the pool holds of it and how its reads went.
    pub fn tables(&self) -> Vec<(CacheScope, TableCache)> {
        let blocks = self.lock();
        blocks
            .tables
            .iter()
            .map(|(scope, cache)| {
                let owned = blocks.owns(&scope.location, scope.partition);
                (scope.clone(), TableCache { owned, ..*cache })
            })
            .collect()
    }

    /// Take out the blocks of the partitions `wanted` names (by table
    /// location and partition), most important first (most chances left),
    /// at most `bytes_max` bytes of them: what
    /// an old owner sends a partition's new owner (VectorH §6). Whatever is
    /// sent, this node no longer owns those partitions.
    pub fn take_partitions(
        &self,
        wanted: impl Fn(&str, u32) -> bool,
        bytes_max: usize,
    ) -> Vec<Block> {
        let mut blocks = self.lock();
        let mut found: Vec<(u8, usize)> = blocks
            .slots
            .iter()
            .enumerate()
            .filter_map(|(at, slot)| {
                let slot = slot.as_ref()?;
                let partition = slot.key.file.partition?;
                let location = &blocks.tables[slot.table].0.location;
                wanted(location, partition).then_some((slot.chances, at))
            })
            .collect();
        found.sort_by(|a, b| b.cmp(a));
        let mut taken = Vec::new();
        let mut bytes = 0usize;
        for (_, at) in found {
            let Some(slot) = blocks.slots[at].as_ref() else {
                continue;
            };
            if bytes + slot.bytes > bytes_max {
                continue;
            }
            bytes += slot.bytes;
            taken.push(Block {
                table: Arc::clone(&blocks.tables[slot.table].0.location),
                key: slot.key.clone(),
                array: Arc::clone(&slot.array),
            });
            blocks.remove(at, false);
        }
        blocks.check(self.budget);
        taken
    }

    /// Count `block` as sent to its partition's new owner.
    pub fn note_sent(&self, block: &Block) {
        let mut blocks = self.lock();
        let scope = blocks.scope(&block.table, &block.key);
        blocks.tables[scope].1.sent += 1;
    }

    /// Keep a block an old owner sent (a partition this node now owns);
    /// whether it was kept (not when already here or without room).
    pub fn receive(&self, block: Block) -> bool {
        self.keep(&block.table, block.key, block.array, true)
    }
}

impl Blocks {
    /// Whether this node owns `partition` of the table at `location`.
    fn owns(&self, location: &str, partition: Option<u32>) -> bool {
        let Some(partition) = partition else {
            return true;
        };
        self.owned
            .get(location)
            .is_none_or(|owned| owned.contains(&partition))
    }

    fn scope(&mut self, location: &Arc<str>, key: &BlockKey) -> usize {
        let scope = CacheScope {
            location: Arc::clone(location),
            partition: key.file.partition,
        };
        if let Some(&at) = self.scopes.get(&scope) {
            return at;
        }
        self.tables.push((scope.clone(), TableCache::default()));
        self.scopes.insert(scope, self.tables.len() - 1);
        self.tables.len() - 1
    }

    /// Advance the hand to the next block without chances and evict it;
    /// false when the pool is empty.
    fn evict_one(&mut self) -> bool {
        if self.index.is_empty() {
            return false;
        }
        // Every pass takes a chance from each block, so within
        // `OWNED_CHANCES + 1` passes some block has none left.
        let steps = self.slots.len() * (usize::from(OWNED_CHANCES) + 1);
        for _ in 0..=steps {
            let at = self.hand;
            self.hand = (self.hand + 1) % self.slots.len();
            let Some(slot) = self.slots[at].as_mut() else {
                continue;
            };
            if slot.chances == 0 {
                self.remove(at, true);
                return true;
            }
            slot.chances -= 1;
        }
        unreachable!("a CLOCK pass over a non-empty pool evicts a block");
    }

    fn remove(&mut self, at: usize, evicted: bool) {
        let Some(slot) = self.slots[at].take() else {
            return;
        };
        self.index.remove(&slot.key);
        self.free.push(at);
        self.reservation.shrink(slot.bytes);
        let stats = &mut self.tables[slot.table].1;
        stats.blocks -= 1;
        stats.bytes -= slot.bytes as u64;
        if evicted {
            stats.evictions += 1;
        }
    }

    /// The pool's invariants: its reservation is what its blocks take (the
    /// scopes' sums), within the budget.
    fn check(&self, budget: usize) {
        let reserved = self.reservation.size();
        assert!(reserved <= budget, "buffer pool above its budget");
        debug_assert_eq!(
            reserved as u64,
            self.tables.iter().map(|(_, t)| t.bytes).sum::<u64>()
        );
        debug_assert_eq!(self.index.len(), self.slots.len() - self.free.len());
    }
}

impl Relieve for BufferPool {
    /// Memory pressure from a query: blocks go before anyone spills.
    fn relieve(&self, wanted: usize) -> usize {
        let mut blocks = self.lock();
        let before = blocks.reservation.size();
        while before - blocks.reservation.size() < wanted && blocks.evict_one() {}
        blocks.check(self.budget);
        before - blocks.reservation.size()
    }
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let blocks = self.lock();
        f.debug_struct("BufferPool")
            .field("budget", &self.budget)
            .field("bytes", &blocks.reservation.size())
            .field("blocks", &blocks.index.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::Int64Array;
    use datafusion::execution::memory_pool::GreedyMemoryPool;

    use super::*;

    fn key(row_group: usize) -> BlockKey {
        in_partition(row_group, None)
    }

    /// Row group `row_group`'s block of a file in `partition`.
    fn in_partition(row_group: usize, partition: Option<u32>) -> BlockKey {
        BlockKey {
            file: Arc::new(FileVersion {
                path: format!("t/{partition:?}.parquet"),
                size: 10,
                modified: 1,
                e_tag: None,
                partition,
            }),
            row_group,
            column: 0,
            data_type: DataType::Int64,
        }
    }

    fn array() -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(0..1000))
    }

    #[test]
    fn blocks_stay_within_the_budget_and_the_memory_pool() {
        let memory: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 30));
        let one = array().get_array_memory_size();
        let pool = BufferPool::new(3 * one + one / 2, &memory);
        let table: Arc<str> = "t".into();
        for rg in 0..10 {
            assert!(pool.get(&table, &key(rg)).is_none());
            pool.admit(&table, key(rg), array());
            assert!(pool.bytes() <= pool.budget());
            assert_eq!(memory.reserved(), pool.bytes());
        }
        let stats = &pool.tables()[0].1;
        assert_eq!((stats.blocks, stats.misses, stats.evictions), (3, 10, 7));
        assert!(pool.get(&table, &key(9)).is_some());
        assert_eq!(pool.clear(), 3 * one);
        assert_eq!(memory.reserved(), 0);
    }

    #[test]
    fn blocks_of_partitions_owned_elsewhere_go_first() {
        let memory: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 30));
        let one = array().get_array_memory_size();
        let pool = BufferPool::new(2 * one, &memory);
        let table: Arc<str> = "t".into();
        pool.set_owned(Owned::from([(Arc::clone(&table), BTreeSet::from([0]))]));
        let (mine, theirs) = (in_partition(0, Some(0)), in_partition(0, Some(1)));
        pool.admit(&table, mine.clone(), array());
        pool.admit(&table, theirs.clone(), array());
        pool.admit(&table, in_partition(1, Some(0)), array());
        assert!(pool.get(&table, &mine).is_some(), "the owned block stays");
        assert!(pool.get(&table, &theirs).is_none());
    }

    #[test]
    fn a_partition_given_away_loses_its_importance() {
        let memory: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 30));
        let one = array().get_array_memory_size();
        let pool = BufferPool::new(2 * one, &memory);
        let table: Arc<str> = "t".into();
        // Owned whole until the coordinator says otherwise.
        let (a, b) = (in_partition(0, Some(0)), in_partition(0, Some(1)));
        pool.admit(&table, a.clone(), array());
        pool.admit(&table, b.clone(), array());
        // Partition 0 moves elsewhere: its block goes before 1's, though
        // both were read alike (and the hand starts at 0's).
        pool.set_owned(Owned::from([(Arc::clone(&table), BTreeSet::from([1]))]));
        pool.admit(&table, in_partition(1, Some(1)), array());
        assert!(pool.get(&table, &b).is_some(), "the owned block stays");
        assert!(pool.get(&table, &a).is_none());
        // Other tables' blocks and unpartitioned ones stay owned.
        assert!(pool.lock().owns("u", Some(0)));
        assert!(pool.lock().owns("t", None));
    }

    #[test]
    fn memory_pressure_takes_blocks_back() {
        let memory: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 30));
        let one = array().get_array_memory_size();
        let pool = BufferPool::new(4 * one, &memory);
        let table: Arc<str> = "t".into();
        for rg in 0..4 {
            pool.admit(&table, key(rg), array());
        }
        assert_eq!(pool.relieve(one + 1), 2 * one);
        assert_eq!(memory.reserved(), 2 * one);
    }

    #[test]
    fn a_full_memory_pool_refuses_blocks_without_failing() {
        let one = array().get_array_memory_size();
        let memory: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(one + one / 2));
        let pool = BufferPool::new(4 * one, &memory);
        let table: Arc<str> = "t".into();
        pool.admit(&table, key(0), array());
        pool.admit(&table, key(1), array());
        assert_eq!(pool.bytes(), one);
        assert!(pool.get(&table, &key(1)).is_none());
    }
}
