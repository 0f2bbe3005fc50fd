//! The store on its own: capacity and spill, TTL, read-once, durability,
//! damage, broken-off puts and concurrent use, against a temporary
//! directory.

use super::*;

fn cache(dir: &Path, capacity: u64) -> Arc<StateCache> {
    Arc::new(
        StateCache::open(CacheConfig {
            dir: dir.to_path_buf(),
            capacity,
            default_ttl: Duration::from_secs(3600),
        })
        .unwrap(),
    )
}

/// `n` chunks of `size`-byte bodies, distinct per `seed`.
fn chunks(n: usize, size: usize, seed: u8) -> Vec<Chunk> {
    (0..n)
        .map(|i| Chunk {
            meta: Bytes::from(format!("meta {seed} {i}")),
            body: (0..size)
                .map(|j| (j as u8).wrapping_mul(31) ^ seed ^ i as u8)
                .collect::<Vec<u8>>()
                .into(),
        })
        .collect()
}

fn put(cache: &Arc<StateCache>, key: &str, options: EntryOptions, chunks: &[Chunk]) -> PutInfo {
    let mut writer = cache.begin_put(key, options).unwrap();
    for chunk in chunks {
        writer.push(chunk.meta.clone(), chunk.body.clone()).unwrap();
    }
    writer.finish().unwrap()
}

fn read_all(cache: &StateCache, key: &str) -> Result<Vec<Chunk>, CacheError> {
    let mut reader = cache.get(key)?;
    let mut out = Vec::new();
    while let Some(chunk) = reader.next_chunk()? {
        out.push(chunk);
    }
    cache.finish_read(&reader);
    Ok(out)
}

fn files(dir: &Path, kind: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == kind))
        .collect();
    found.sort();
    found
}

/// Files other than the lock.
fn all_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name() != LOCK)
        .count()
}

fn not_found(result: Result<Vec<Chunk>, CacheError>) -> bool {
    matches!(result, Err(CacheError::NotFound { .. }))
}

#[test]
fn over_capacity_spills_the_oldest_and_reads_back_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache(dir.path(), 10_000);
    let a = chunks(3, 2_000, 1);
    let b = chunks(3, 2_000, 2);
    let big = chunks(10, 2_000, 3);
    let options = EntryOptions::default();
    let stored = put(&cache, "a", options, &a);
    assert_eq!(stored.chunks, 3);
    assert!(stored.bytes > 6_000);
    assert_eq!(cache.stats().spilled, 0);
    assert!(files(dir.path(), SPILL).is_empty());
    // b does not fit beside a: a, the oldest, goes to disk.
    put(&cache, "b", options, &b);
    let stats = cache.stats();
    assert_eq!(stats.spilled, 1);
    assert_eq!(stats.memory_bytes, stored.bytes);
    assert!(stats.disk_bytes > stored.bytes);
    assert_eq!(files(dir.path(), SPILL).len(), 1);
    // Larger than the whole capacity: streamed to disk as it came.
    put(&cache, "big", options, &big);
    let stats = cache.stats();
    assert_eq!(stats.spilled, 2);
    assert_eq!(stats.entries, 3);
    assert!(stats.memory_bytes <= 10_000);
    assert_eq!(files(dir.path(), SPILL).len(), 2);
    assert_eq!(read_all(&cache, "a").unwrap(), a);
    assert_eq!(read_all(&cache, "b").unwrap(), b);
    assert_eq!(read_all(&cache, "big").unwrap(), big);
    assert_eq!(cache.stats().gets, 3);
}

#[test]
fn a_put_replaces_the_key_and_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache(dir.path(), 1_000);
    put(&cache, "k", EntryOptions::default(), &chunks(2, 2_000, 1));
    assert_eq!(files(dir.path(), SPILL).len(), 1);
    let second = chunks(1, 10, 2);
    put(&cache, "k", EntryOptions::default(), &second);
    assert_eq!(read_all(&cache, "k").unwrap(), second);
    assert!(files(dir.path(), SPILL).is_empty());
    let stats = cache.stats();
    assert_eq!((stats.entries, stats.disk_bytes), (1, 0));
}

#[test]
fn expired_entries_are_swept_from_memory_and_disk() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache(dir.path(), 5_000);
    let short = EntryOptions {
        ttl: Some(Duration::from_millis(400)),
        ..EntryOptions::default()
    };
    put(&cache, "on-disk", short, &chunks(4, 2_000, 1));
    put(&cache, "in-memory", short, &chunks(1, 100, 2));
    let durable = EntryOptions {
        ttl: Some(Duration::from_millis(1)),
        durable: true,
        ..EntryOptions::default()
    };
    put(&cache, "durable", durable, &chunks(1, 100, 3));
    put(&cache, "long", EntryOptions::default(), &chunks(1, 100, 4));
    assert_eq!(files(dir.path(), SPILL).len(), 1);
    assert_eq!(cache.sweep(Instant::now()), 0);
    std::thread::sleep(Duration::from_millis(500));
    // Past its time to live an entry is gone even before the sweep.
    assert!(not_found(read_all(&cache, "in-memory")));
    assert_eq!(cache.sweep(Instant::now()), 2);
    assert!(files(dir.path(), SPILL).is_empty());
    let stats = cache.stats();
    assert_eq!(stats.entries, 2);
    assert_eq!(stats.expired, 2);
    assert!(not_found(read_all(&cache, "on-disk")));
    // Durable entries never expire.
    assert_eq!(read_all(&cache, "durable").unwrap(), chunks(1, 100, 3));
    assert!(read_all(&cache, "long").is_ok());
    assert_eq!(cache.sweep(Instant::now() + Duration::from_secs(7200)), 1);
    assert_eq!(read_all(&cache, "durable").unwrap(), chunks(1, 100, 3));
}

#[test]
fn read_once_deletes_after_a_full_read_only() {
    let dir = tempfile::tempdir().unwrap();
    // Capacity 0: unbounded; a second cache spills, to cover both paths.
    for capacity in [0, 100] {
        let cache = cache(dir.path(), capacity);
        let once = EntryOptions {
            read_once: true,
            ..EntryOptions::default()
        };
        let data = chunks(3, 500, 1);
        put(&cache, "m", once, &data);
        put(&cache, "keep", EntryOptions::default(), &data);
        // An aborted read leaves the entry.
        let mut reader = cache.get("m").unwrap();
        assert!(reader.next_chunk().unwrap().is_some());
        cache.finish_read(&reader);
        drop(reader);
        assert_eq!(read_all(&cache, "m").unwrap(), data);
        assert!(not_found(read_all(&cache, "m")));
        // Without read-once it stays.
        assert_eq!(read_all(&cache, "keep").unwrap(), data);
        assert_eq!(read_all(&cache, "keep").unwrap(), data);
        assert!(cache.delete("keep"));
        assert!(!cache.delete("keep"));
        assert_eq!(cache.stats().entries, 0);
        assert_eq!(all_files(dir.path()), 0);
    }
}

#[test]
fn durable_entries_are_reloaded_by_a_new_cache() {
    let dir = tempfile::tempdir().unwrap();
    let durable = EntryOptions {
        durable: true,
        ..EntryOptions::default()
    };
    let small = chunks(2, 100, 1);
    let large = chunks(8, 1_000, 2);
    {
        let cache = cache(dir.path(), 4_000);
        put(&cache, "small", durable, &small);
        put(&cache, "large", durable, &large);
        put(
            &cache,
            "gone",
            EntryOptions::default(),
            &chunks(6, 1_000, 3),
        );
        // Replaced: only the newest file of a key is kept.
        put(&cache, "small", durable, &chunks(1, 1, 4));
        put(&cache, "small", durable, &small);
        assert_eq!(files(dir.path(), DURABLE).len(), 2);
        assert_eq!(read_all(&cache, "small").unwrap(), small);
    }
    let again = cache(dir.path(), 4_000);
    let stats = again.stats();
    assert_eq!(stats.entries, 2);
    assert_eq!(stats.memory_bytes, 0);
    assert_eq!(read_all(&again, "small").unwrap(), small);
    assert_eq!(read_all(&again, "large").unwrap(), large);
    assert!(not_found(read_all(&again, "gone")));
    // A spill of the old process is not state: removed at start.
    assert!(files(dir.path(), SPILL).is_empty());
    assert!(again.delete("large"));
    assert_eq!(files(dir.path(), DURABLE).len(), 1);
}

#[test]
fn a_flipped_byte_on_disk_fails_the_get_with_data_loss() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache(dir.path(), 100);
    put(&cache, "q7", EntryOptions::default(), &chunks(3, 1_000, 1));
    let spilled = files(dir.path(), SPILL);
    assert_eq!(spilled.len(), 1);
    let mut bytes = std::fs::read(&spilled[0]).unwrap();
    // Inside the last chunk's body, before the footer.
    let at = bytes.len() - FOOTER_LEN as usize - 10;
    bytes[at] ^= 0x40;
    std::fs::write(&spilled[0], &bytes).unwrap();
    let error = read_all(&cache, "q7").unwrap_err();
    assert!(
        matches!(error, CacheError::Corrupt { chunk: 2, .. }),
        "{error}"
    );
    let status = tonic::Status::from(error);
    assert_eq!(status.code(), tonic::Code::DataLoss);
    assert!(status.message().contains("q7"), "{}", status.message());
    // A damaged length is data loss too, never a huge allocation.
    let head = MAGIC.len() + HEADER_SLOT;
    bytes[head + 4..head + 12].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&spilled[0], &bytes).unwrap();
    let status = tonic::Status::from(read_all(&cache, "q7").unwrap_err());
    assert_eq!(status.code(), tonic::Code::DataLoss);
    // A failed read is no read: the entry stays.
    assert_eq!(cache.stats().entries, 1);
}

#[test]
fn a_put_dropped_midway_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache(dir.path(), 1_000);
    put(&cache, "old", EntryOptions::default(), &chunks(1, 10, 9));
    for options in [
        EntryOptions::default(),
        EntryOptions {
            durable: true,
            ..EntryOptions::default()
        },
    ] {
        for size in [10, 5_000] {
            let mut writer = cache.begin_put("k", options).unwrap();
            for chunk in chunks(3, size, 1) {
                writer.push(chunk.meta, chunk.body).unwrap();
            }
            // Not visible before it finishes.
            assert!(not_found(read_all(&cache, "k")));
            drop(writer);
            assert!(not_found(read_all(&cache, "k")));
            assert!(files(dir.path(), TMP).is_empty());
        }
    }
    // Nor does it disturb a key it would have replaced.
    let mut writer = cache.begin_put("old", EntryOptions::default()).unwrap();
    writer.push(Bytes::from("x"), Bytes::from("y")).unwrap();
    drop(writer);
    assert_eq!(read_all(&cache, "old").unwrap(), chunks(1, 10, 9));
    let stats = cache.stats();
    assert_eq!((stats.entries, stats.puts), (1, 1));
    assert_eq!(all_files(dir.path()), 0);
}

#[test]
fn one_cache_per_directory() {
    let dir = tempfile::tempdir().unwrap();
    let first = cache(dir.path(), 0);
    let config = CacheConfig {
        dir: dir.path().to_path_buf(),
        capacity: 0,
        default_ttl: Duration::from_secs(1),
    };
    let Err(busy) = StateCache::open(config.clone()) else {
        panic!("a second cache opened the same directory");
    };
    assert!(busy.to_string().contains("in use"), "{busy}");
    drop(first);
    assert!(StateCache::open(config).is_ok());
}

/// Puts, gets, deletes and sweeps from several threads over a small
/// capacity: every get sees exactly what some put stored, the accounting
/// stays within the capacity, and deleting everything leaves nothing.
#[test]
fn concurrent_use_keeps_the_books() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache(dir.path(), 20_000);
    std::thread::scope(|scope| {
        for t in 0..4u8 {
            let cache = Arc::clone(&cache);
            scope.spawn(move || {
                for i in 0..150usize {
                    let key = format!("k{}", (i * 7 + t as usize) % 12);
                    let seed = (i % 5) as u8;
                    let options = EntryOptions {
                        durable: i % 11 == 0,
                        read_once: i % 13 == 0,
                        ..EntryOptions::default()
                    };
                    match i % 4 {
                        0 | 1 => {
                            put(&cache, &key, options, &chunks(1 + i % 4, 1_500, seed));
                        }
                        2 => {
                            if let Ok(got) = read_all(&cache, &key) {
                                // A whole entry of one put: same seed and
                                // size throughout.
                                let again = chunks(got.len(), 1_500, got[0].body[0]);
                                assert_eq!(got, again);
                            }
                        }
                        _ => {
                            cache.delete(&key);
                            cache.sweep(Instant::now());
                        }
                    }
                    assert!(cache.stats().memory_bytes <= 20_000);
                }
            });
        }
    });
    for k in 0..12 {
        cache.delete(&format!("k{k}"));
    }
    let stats = cache.stats();
    assert_eq!(
        (stats.entries, stats.memory_bytes, stats.disk_bytes),
        (0, 0, 0)
    );
    assert_eq!(lock_in_flight(&cache), 0);
    assert_eq!(all_files(dir.path()), 0);
}

/// Puts in flight share the capacity: one that finds it taken by another
/// streams to disk; a finished or dropped put gives its share back.
#[test]
fn puts_in_flight_share_the_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache(dir.path(), 10_000);
    let options = EntryOptions::default();
    let mut a = cache.begin_put("a", options).unwrap();
    let mut b = cache.begin_put("b", options).unwrap();
    let data = chunks(3, 2_000, 1);
    for chunk in &data {
        a.push(chunk.meta.clone(), chunk.body.clone()).unwrap();
    }
    for chunk in &data {
        b.push(chunk.meta.clone(), chunk.body.clone()).unwrap();
    }
    // b found most of the capacity held by a and went to disk.
    assert_eq!(files(dir.path(), TMP).len(), 1);
    a.finish().unwrap();
    b.finish().unwrap();
    let stats = cache.stats();
    assert_eq!(stats.spilled, 1);
    assert!(stats.memory_bytes > 6_000 && stats.memory_bytes < 7_000);
    assert_eq!(lock_in_flight(&cache), 0);
    let mut c = cache.begin_put("c", options).unwrap();
    for chunk in &data {
        c.push(chunk.meta.clone(), chunk.body.clone()).unwrap();
    }
    assert!(lock_in_flight(&cache) > 6_000);
    drop(c);
    assert_eq!(lock_in_flight(&cache), 0);
    assert_eq!(read_all(&cache, "a").unwrap(), data);
    assert_eq!(read_all(&cache, "b").unwrap(), data);
}

fn lock_in_flight(cache: &StateCache) -> u64 {
    cache.lock().in_flight
}
