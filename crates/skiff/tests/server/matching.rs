//! Buffer matching (issue 17, VectorH §6): when workers join or leave, the
//! old owners of the moved partitions send their buffered blocks to the
//! new owners; exactly those blocks move, the first query after a join
//! reads the moved partitions from the new owner's pool, a leaving
//! worker's blocks are merged into the survivors', each matching is
//! recorded in `skiff.matchings`, and with `skiff.buffer_matching` off
//! nothing moves.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use skiff_gen::Benchmark;

use crate::resize::{is_worker_loss, live_workers, pid_of};
use crate::support::{Options, Server, partitioned_dataset, simple_rows, wait_for_workers};

/// Partitions of the test tables.
const P: u32 = 8;

/// A scan of every lineitem partition, distributed to their owners.
const SCAN: &str = "SELECT l_returnflag, sum(l_quantity), count(*) FROM lineitem GROUP BY 1";

/// Per (worker, partition) of lineitem: (blocks, misses, sent, received).
type Pools = BTreeMap<(u64, u32), [u64; 4]>;

async fn pools(client: &tokio_postgres::Client) -> Pools {
    let rows = simple_rows(
        client,
        "SELECT worker, partition, blocks, misses, sent, received FROM skiff.cache \
         WHERE table_name = 'lineitem' AND partition IS NOT NULL",
    )
    .await
    .expect("skiff.cache");
    let number = |v: &Option<String>| -> u64 {
        v.as_deref().and_then(|t| t.parse().ok()).expect("a number")
    };
    rows.iter()
        .map(|r| {
            let key = (number(&r[0]), number(&r[1]) as u32);
            (
                key,
                [number(&r[2]), number(&r[3]), number(&r[4]), number(&r[5])],
            )
        })
        .collect()
}

/// Partition → owner of lineitem's class.
async fn owners(client: &tokio_postgres::Client) -> BTreeMap<u32, u64> {
    let rows = simple_rows(
        client,
        &format!("SELECT partition, worker FROM skiff.partitions WHERE partitions = {P}"),
    )
    .await
    .expect("skiff.partitions");
    rows.iter()
        .map(|r| {
            let cell = |i: usize| {
                r[i].as_deref()
                    .expect("a value")
                    .parse::<u64>()
                    .expect("id")
            };
            (cell(0) as u32, cell(1))
        })
        .collect()
}

fn total(pools: &Pools, field: usize) -> u64 {
    pools.values().map(|v| v[field]).sum()
}

/// `skiff.matchings` once none is running: per matching (cause,
/// partitions moved, blocks kept, bytes kept, failures).
async fn matchings(client: &tokio_postgres::Client) -> Vec<(String, [u64; 4])> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let rows = simple_rows(
            client,
            "SELECT cause, state, partitions_moved, blocks_kept, bytes_kept, failures \
             FROM skiff.matchings ORDER BY id",
        )
        .await
        .expect("skiff.matchings");
        if rows.iter().all(|r| r[1].as_deref() == Some("done")) {
            let number = |v: &Option<String>| -> u64 {
                v.as_deref().and_then(|t| t.parse().ok()).expect("a number")
            };
            return rows
                .iter()
                .map(|r| {
                    let cause = r[0].clone().expect("a cause");
                    (cause, [2, 3, 4, 5].map(|i| number(&r[i])))
                })
                .collect();
        }
        assert!(Instant::now() < deadline, "a matching still runs: {rows:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait until every worker's pool owns exactly the lineitem partitions
/// the map gives it (heartbeats carry the map); the (worker, partition)
/// scopes that hold blocks of a partition the worker does not own.
async fn ownership_follows_the_map(client: &tokio_postgres::Client) -> Vec<(u64, u32)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let owned = owners(client).await;
        let rows = simple_rows(
            client,
            "SELECT worker, partition, owned, blocks FROM skiff.cache \
             WHERE table_name = 'lineitem' AND partition IS NOT NULL",
        )
        .await
        .expect("skiff.cache");
        let mut agree = true;
        let mut stale = Vec::new();
        for r in &rows {
            let number = |i: usize| -> u64 {
                r[i].as_deref()
                    .and_then(|t| t.parse().ok())
                    .expect("a number")
            };
            let (worker, partition) = (number(0), number(1) as u32);
            let says = matches!(r[2].as_deref(), Some("t" | "true"));
            agree &= says == (owned.get(&partition) == Some(&worker));
            if !says && number(3) > 0 {
                stale.push((worker, partition));
            }
        }
        if agree {
            return stale;
        }
        assert!(
            Instant::now() < deadline,
            "pools disagree with the map {owned:?}: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Wait until the pools are as `done` wants (a join's shipments are
/// detached from the resize).
async fn until(
    client: &tokio_postgres::Client,
    what: &str,
    done: impl Fn(&Pools) -> bool,
) -> Pools {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = pools(client).await;
        if done(&now) {
            return now;
        }
        assert!(Instant::now() < deadline, "{what}: {now:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resizes_move_exactly_the_blocks_of_moved_partitions() {
    let server = Server::start(
        &partitioned_dataset(Benchmark::Tpch, P),
        Options {
            workers: Some(2),
            ..Options::default()
        },
    );
    let client = server.pg().await;
    wait_for_workers(&client, 2).await;
    // Every partition's scan on its owner.
    simple_rows(&client, "SET skiff.distribute = on")
        .await
        .expect("set");
    simple_rows(&client, SCAN).await.expect("warm-up");
    let before = pools(&client).await;
    let owned_before = owners(&client).await;
    assert!(total(&before, 0) > 0, "nothing buffered: {before:?}");
    // The second worker's start moved partitions too (with nothing buffered).
    let earlier = matchings(&client).await.len();

    // A worker joins: the old owners send what they hold of the moved
    // partitions, all of it (the pools have room), and keep nothing of it.
    simple_rows(&client, "SELECT skiff.add_workers(1)")
        .await
        .expect("add a worker");
    wait_for_workers(&client, 3).await;
    let owned = owners(&client).await;
    let moved: Vec<u32> = (0..P).filter(|p| owned[p] != owned_before[p]).collect();
    assert!(!moved.is_empty(), "a join moves partitions: {owned:?}");
    let held = |pools: &Pools, worker: u64, p: u32| pools.get(&(worker, p)).map_or(0, |v| v[0]);
    let expected: u64 = moved
        .iter()
        .map(|p| held(&before, owned_before[p], *p))
        .sum();
    assert!(expected > 0);
    let after = until(&client, "the moved blocks arrive", |p| {
        total(p, 3) >= expected
    })
    .await;
    assert_eq!(total(&after, 3), expected, "received: {after:?}");
    assert_eq!(total(&after, 2), expected, "sent: {after:?}");
    // One matching for the join, which moved what the pools say.
    let recorded = matchings(&client).await;
    let [(cause, [partitions, kept, bytes, failures])] = &recorded[earlier..] else {
        panic!("one matching for the join: {recorded:?}");
    };
    assert!(cause.starts_with("epoch "), "{cause}");
    assert_eq!(*partitions, moved.len() as u64);
    assert_eq!((*kept, *failures), (expected, 0));
    assert!(*bytes > 0);
    // The workers learn the new map: each owns what it holds.
    assert_eq!(ownership_follows_the_map(&client).await, Vec::new());
    for p in &moved {
        assert_eq!(
            held(&after, owned_before[p], *p),
            0,
            "the old owner dropped {p}"
        );
        assert_eq!(
            held(&after, owned[p], *p),
            held(&before, owned_before[p], *p),
            "the new owner holds partition {p}"
        );
    }
    // The first query after the resize reads the moved partitions warm.
    simple_rows(&client, SCAN).await.expect("after the join");
    let first = pools(&client).await;
    for p in &moved {
        let misses = |pools: &Pools| pools.get(&(owned[p], *p)).map_or(0, |v| v[1]);
        assert_eq!(
            misses(&first),
            misses(&after),
            "partition {p} read from storage"
        );
    }

    // A worker leaves: before it goes it sends its blocks to its
    // partitions' next owners, and the survivors merge them.
    let leaving = owned[&moved[0]];
    let of = |pools: &Pools, field: usize, leaving_too: bool| -> u64 {
        pools
            .iter()
            .filter(|((w, _), _)| leaving_too || *w != leaving)
            .map(|(_, v)| v[field])
            .sum()
    };
    let leaving_holds = of(&first, 0, true) - of(&first, 0, false);
    let merged_before = of(&first, 3, false);
    simple_rows(&client, &format!("SELECT skiff.remove_worker('{leaving}')"))
        .await
        .expect("remove a worker");
    let merged = until(&client, "the leaving worker's blocks merged", |p| {
        !p.keys().any(|(w, _)| *w == leaving) && of(p, 3, false) >= merged_before + leaving_holds
    })
    .await;
    assert_eq!(of(&merged, 3, false), merged_before + leaving_holds);
    assert_eq!(
        total(&merged, 0),
        total(&first, 0),
        "no block lost: {merged:?}"
    );
    let recorded = matchings(&client).await;
    assert_eq!(recorded.len(), earlier + 2, "{recorded:?}");
    let (cause, [_, kept, _, failures]) = &recorded[earlier + 1];
    assert_eq!(cause, &format!("worker {leaving} leaving"));
    assert_eq!((*kept, *failures), (leaving_holds, 0));

    // With matching off, a resize sends nothing.
    let sent_so_far = total(&merged, 2);
    simple_rows(&client, "SET skiff.buffer_matching = false")
        .await
        .expect("set");
    simple_rows(&client, "SELECT skiff.add_workers(1)")
        .await
        .expect("add a worker");
    wait_for_workers(&client, 3).await;
    simple_rows(&client, SCAN)
        .await
        .expect("after the second join");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(total(&pools(&client).await, 2), sent_so_far);
    // The old owners keep the moved partitions' blocks, no longer owned:
    // they are evicted first.
    let stale = ownership_follows_the_map(&client).await;
    assert!(
        !stale.is_empty(),
        "blocks of moved partitions stay, not owned"
    );
    assert_eq!(
        matchings(&client).await.len(),
        earlier + 2,
        "no matching recorded"
    );
}

/// `SCAN`'s rows, sorted, as text.
async fn scan_rows(client: &tokio_postgres::Client) -> Result<Vec<Vec<Option<String>>>, String> {
    let mut rows = simple_rows(client, SCAN)
        .await
        .map_err(|e| format!("{e:?}"))?;
    rows.sort();
    Ok(rows)
}

/// A worker SIGKILLed in the middle of a transfer, the new owner (the
/// receiver) or an old owner (a sender): the old owners pause after each
/// block (`skiff.test_matching_pause_ms`), and the kill comes once some
/// blocks have arrived and the matching still runs. Only blocks are lost:
/// the matching ends and records the failure, and every answer after equals
/// the answer before, or is an error that says a worker was lost (while
/// `skiff serve` replaces it); never a wrong one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_during_matching_changes_no_answer() {
    let server = Server::start(
        &partitioned_dataset(Benchmark::Tpch, P),
        Options {
            workers: Some(2),
            ..Options::default()
        },
    );
    let client = server.pg().await;
    wait_for_workers(&client, 2).await;
    simple_rows(
        &client,
        "SET skiff.distribute = on; SET skiff.test_matching_pause_ms = 1000",
    )
    .await
    .expect("set");
    let expected = scan_rows(&client).await.expect("warm-up");
    for victim in ["receiver", "sender"] {
        let earlier = matchings(&client).await.len();
        let before = live_workers(&client).await;
        // A sender takes the blocks out of its pool as the transfer starts
        // (its `sent` counts them once they were taken).
        let held_by = |pools: &Pools, worker: u64| -> u64 {
            pools
                .iter()
                .filter(|((w, _), _)| *w == worker)
                .map(|(_, v)| v[0])
                .sum()
        };
        let held_before = pools(&client).await;
        simple_rows(&client, "SELECT skiff.add_workers(1)")
            .await
            .expect("add a worker");
        wait_for_workers(&client, before.len() + 1).await;
        let now = live_workers(&client).await;
        let joined = now
            .iter()
            .copied()
            .find(|w| !before.contains(w))
            .expect("the new worker");
        // In the middle: the new owner holds some of its blocks and the
        // matching still runs.
        let deadline = Instant::now() + Duration::from_secs(30);
        let sender = loop {
            let now = pools(&client).await;
            let arrived: u64 = now
                .iter()
                .filter(|((w, _), _)| *w == joined)
                .map(|(_, v)| v[3])
                .sum();
            let sender = before
                .iter()
                .copied()
                .find(|w| held_by(&now, *w) < held_by(&held_before, *w));
            let running = simple_rows(
                &client,
                "SELECT count(*) FROM skiff.matchings WHERE state = 'running'",
            )
            .await
            .expect("skiff.matchings");
            if let Some(sender) = sender
                && arrived > 0
                && running[0][0].as_deref() != Some("0")
            {
                break sender;
            }
            assert!(
                Instant::now() < deadline,
                "{victim}: no transfer under way ({arrived} blocks arrived, sender {sender:?})"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let id = if victim == "receiver" { joined } else { sender };
        let pid = pid_of(&client, id).await;
        // SAFETY: kill(2) on a child process of the server this test started.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "kill {pid}");
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut answered = 0;
        while answered < 3 {
            match scan_rows(&client).await {
                Ok(rows) => {
                    assert_eq!(rows, expected, "after killing the {victim}");
                    answered += 1;
                }
                Err(e) => assert!(is_worker_loss(&e), "after killing the {victim}: {e}"),
            }
            assert!(
                Instant::now() < deadline,
                "no answer after killing the {victim}"
            );
        }
        let recorded = matchings(&client).await;
        assert!(
            recorded[earlier..].iter().any(|(_, v)| v[3] > 0),
            "the cut transfer is recorded as failed: {recorded:?}"
        );
    }
}
