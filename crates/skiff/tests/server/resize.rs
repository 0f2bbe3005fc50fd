//! Workers join and leave online (issue 16): while a stream of queries
//! over hash-partitioned tables runs, a seeded sequence of
//! `skiff.add_workers` and `skiff.remove_worker` steps happens; every
//! answer matches DuckDB's, and every step makes one new epoch whose moves
//! are the lower bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use skiff_cluster::{PartitionManager, minimal_moves};
use skiff_gen::Benchmark;
use skiff_testkit::queries;

use crate::golden::{check_in, run_pg};
use crate::support::{Options, Server, partitioned_dataset, simple_rows, wait_for_workers};

/// Partitions of the test tables.
const P: u32 = 8;

/// The partition map as `skiff.partitions` shows it, as a manager the
/// lower bound can be computed on (the test's own reading, not the
/// coordinator's object).
async fn map(client: &tokio_postgres::Client) -> (PartitionManager, u64) {
    let rows = simple_rows(
        client,
        &format!(
            "SELECT epoch, partition, worker, moved FROM skiff.partitions \
             WHERE partitions = {P} ORDER BY partition"
        ),
    )
    .await
    .expect("skiff.partitions");
    assert_eq!(rows.len(), P as usize, "{rows:?}");
    let cell = |r: &Vec<Option<String>>, i: usize| r[i].clone().expect("a value");
    let epoch: u64 = cell(&rows[0], 0).parse().expect("epoch");
    let owners: Vec<u64> = rows
        .iter()
        .map(|r| cell(r, 2).parse().expect("id"))
        .collect();
    let moved: Vec<bool> = rows.iter().map(|r| cell(r, 3) == "t").collect();
    let mut workers = owners.clone();
    workers.sort_unstable();
    workers.dedup();
    let json = serde_json::json!({
        "epoch": epoch,
        "workers": workers,
        "classes": { P.to_string(): { "owners": owners, "moved": moved } },
    });
    let manager: PartitionManager = serde_json::from_value(json).expect("a valid map");
    let moves = moved.iter().filter(|m| **m).count() as u64;
    (manager, moves)
}

async fn live_workers(client: &tokio_postgres::Client) -> Vec<u64> {
    let rows = simple_rows(
        client,
        "SELECT id FROM skiff.workers WHERE role = 'worker' AND state = 'alive' ORDER BY id",
    )
    .await
    .expect("skiff.workers");
    rows.iter()
        .map(|r| r[0].as_deref().unwrap_or("0").parse().expect("id"))
        .collect()
}

/// Waits (up to a minute) until the map's epoch passes `epoch`.
async fn next_map(client: &tokio_postgres::Client, epoch: u64) -> (PartitionManager, u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (manager, moves) = map(client).await;
        if manager.epoch() > epoch {
            return (manager, moves);
        }
        assert!(Instant::now() < deadline, "no new epoch after {epoch}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_join_and_leave_while_queries_run() {
    let server = Server::start(
        &partitioned_dataset(Benchmark::Tpch, P),
        Options {
            workers: Some(2),
            ..Options::default()
        },
    );
    let admin = server.pg().await;
    wait_for_workers(&admin, 2).await;

    // The query stream: TPC-H queries over the partitioned tables, each
    // answer checked, until the steps are done.
    let done = Arc::new(AtomicBool::new(false));
    let stream = {
        let done = Arc::clone(&done);
        let client = server.pg().await;
        let all = queries("tpch");
        tokio::spawn(async move {
            let mut answered = 0;
            let mut failures = Vec::new();
            for (query, sql) in all.iter().cycle() {
                if done.load(Ordering::SeqCst) && answered >= all.len() {
                    break;
                }
                if let Err(e) = check_in("tpch", query, run_pg(&client, sql).await) {
                    failures.push(format!("{query}: {e}"));
                }
                answered += 1;
            }
            (answered, failures)
        })
    };

    let mut rng = rand::rngs::StdRng::seed_from_u64(16);
    let (mut before, _) = map(&admin).await;
    for step in 0..4 {
        let live = live_workers(&admin).await;
        let add = live.len() <= 1 || (live.len() < 4 && rng.random_bool(0.5));
        let wanted: Vec<u64>;
        if add {
            simple_rows(&admin, "SELECT skiff.add_workers(1)")
                .await
                .expect("add a worker");
            wait_for_workers(&admin, live.len() + 1).await;
            wanted = live_workers(&admin).await;
        } else {
            let leaving = live[rng.random_range(0..live.len())];
            simple_rows(&admin, &format!("SELECT skiff.remove_worker('{leaving}')"))
                .await
                .expect("remove a worker");
            wanted = live.iter().copied().filter(|w| *w != leaving).collect();
        }
        let (after, moves) = next_map(&admin, before.epoch()).await;
        let what = if add { "add" } else { "remove" };
        assert_eq!(after.epoch(), before.epoch() + 1, "step {step} ({what})");
        assert_eq!(after.workers(), wanted.as_slice(), "step {step} ({what})");
        let mapping = before.mapping(P).expect("the class");
        let lower = u64::from(minimal_moves(mapping, &wanted));
        assert_eq!(
            moves, lower,
            "step {step} ({what}): moves beyond the lower bound"
        );
        before = after;
    }
    done.store(true, Ordering::SeqCst);
    let (answered, failures) = stream.await.expect("query stream");
    assert!(
        failures.is_empty(),
        "{} of {answered} answers wrong or failed:\n{}\nserver log:\n{}",
        failures.len(),
        failures.join("\n"),
        server.log_text()
    );
}
