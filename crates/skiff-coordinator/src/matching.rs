//! Buffer matching (VectorH §6) on the coordinator: when a resize moves
//! partitions, each old owner that is still alive is asked to send its
//! buffered blocks of them to their new owners (`skiff.buffer.ship`), so
//! that the first query after the resize finds them warm. A joining worker
//! receives from the old owners after the map changed; a leaving worker
//! sends before it is removed, so the survivors merge its blocks into the
//! room they have. Nothing waits on a transfer but the removal, and that
//! only up to `MATCHING_DEADLINE`: a block that does not arrive is read
//! from storage. `SET skiff.buffer_matching = false` before
//! `skiff.add_workers` / `skiff.remove_worker` turns it off (for
//! comparisons); the last such call's setting holds for resizes that no
//! call made (a worker registering by itself). Every matching is
//! recorded, running and done, in `skiff.matchings` (the last
//! `MATCHINGS_KEPT`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Instant, SystemTime};

use datafusion::prelude::SessionContext;
use skiff_cluster::Move;
use skiff_flight::protocol::{BlocksShipped, Role, ShipBlocks, ShipTable, ShipTarget, action};
use tracing::{info, warn};

use super::membership::{Membership, NodeState};
use super::partitions::partitioned_tables;
use crate::config::{MATCHING_BYTES_MAX, MATCHINGS_KEPT, SHIP_ANSWER_DEADLINE};
use skiff_node::sync::lock;

/// Whether resizes send blocks (`skiff.buffer_matching`), and the record
/// of the last matchings.
#[derive(Debug)]
pub(crate) struct Matching {
    on: AtomicBool,
    /// A test hook's pause after each block (`skiff.test_matching_pause_ms`).
    pause_ms: AtomicU64,
    log: Mutex<Log>,
}

#[derive(Debug, Default)]
struct Log {
    next_id: u64,
    records: VecDeque<Record>,
}

/// One matching, as `skiff.matchings` shows it.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    pub id: u64,
    /// What moved the partitions: a new epoch of the map, or a worker
    /// leaving.
    pub cause: String,
    pub started: SystemTime,
    clock: Instant,
    /// Partitions that changed owner.
    pub moves: usize,
    /// Milliseconds it took; `None` while it runs.
    pub elapsed_ms: Option<u64>,
    pub shipped: Shipped,
}

/// What a matching moved, summed over its senders and receivers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Shipped {
    pub senders: usize,
    pub receivers: usize,
    pub blocks_sent: u64,
    pub blocks_kept: u64,
    pub bytes_kept: u64,
    /// Transfers (one sender to one receiver) or senders that failed or
    /// did not answer in time.
    pub failures: u64,
}

impl Default for Matching {
    fn default() -> Self {
        Matching {
            on: AtomicBool::new(true),
            pause_ms: AtomicU64::new(0),
            log: Mutex::default(),
        }
    }
}

impl Matching {
    pub(crate) fn set(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
    }

    pub(crate) fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// The settings of the session that resizes: on or off, and a test
    /// hook's pause (accepted only with `--fault-injection`).
    pub(crate) fn set_from(&self, options: Option<&skiff_engine::SkiffOptions>) {
        self.set(options.is_none_or(|o| o.buffer_matching));
        let pause = options.map_or(0, |o| o.test_matching_pause_ms);
        self.pause_ms.store(pause, Ordering::Relaxed);
    }

    pub(crate) fn pause_ms(&self) -> u64 {
        self.pause_ms.load(Ordering::Relaxed)
    }

    /// Record a matching that starts now; its id for [`Matching::finish`].
    pub(crate) fn begin(&self, cause: String, moves: usize) -> u64 {
        let mut log = lock(&self.log);
        log.next_id += 1;
        let id = log.next_id;
        log.records.push_back(Record {
            id,
            cause,
            started: SystemTime::now(),
            clock: Instant::now(),
            moves,
            elapsed_ms: None,
            shipped: Shipped::default(),
        });
        while log.records.len() > MATCHINGS_KEPT {
            log.records.pop_front();
        }
        id
    }

    /// Matching `id` ended having moved `shipped`.
    pub(crate) fn finish(&self, id: u64, shipped: Shipped) {
        let mut log = lock(&self.log);
        if let Some(record) = log.records.iter_mut().find(|r| r.id == id) {
            assert!(record.elapsed_ms.is_none(), "matching {id} finished twice");
            record.elapsed_ms = Some(record.clock.elapsed().as_millis() as u64);
            record.shipped = shipped;
        }
    }

    /// The recorded matchings, oldest first.
    pub(crate) fn records(&self) -> Vec<Record> {
        lock(&self.log).records.iter().cloned().collect()
    }
}

/// Whether `moves` take a partition from a worker in `addresses` (one
/// that can still send its blocks).
pub(crate) fn any_sender(addresses: &BTreeMap<u64, String>, moves: &[Move]) -> bool {
    moves
        .iter()
        .any(|m| m.from.is_some_and(|from| addresses.contains_key(&from)))
}

/// What one old owner sends: its address and the request.
struct Shipment {
    from: u64,
    addr: String,
    request: ShipBlocks,
}

/// The locations of the hash-partitioned tables, by class (their number
/// of partitions).
pub(crate) async fn locations_by_class(ctx: &SessionContext) -> BTreeMap<u32, Vec<String>> {
    let mut classes: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for table in partitioned_tables(ctx).await {
        classes
            .entry(table.partitioning.partitions)
            .or_default()
            .push(table.location);
    }
    classes
}

/// The shipments `moves` make: per live old owner, one target per live new
/// owner, naming the tables of each moved class by location.
async fn shipments(
    ctx: &SessionContext,
    addresses: &BTreeMap<u64, String>,
    moves: &[Move],
    pause_ms: u64,
) -> Vec<Shipment> {
    let classes = locations_by_class(ctx).await;
    // (from, to) → class → partitions.
    let mut pairs: BTreeMap<(u64, u64), BTreeMap<u32, Vec<u32>>> = BTreeMap::new();
    for m in moves {
        let Some(from) = m.from else { continue };
        pairs
            .entry((from, m.to))
            .or_default()
            .entry(m.partitions)
            .or_default()
            .push(m.partition);
    }
    let mut by_sender: BTreeMap<u64, Vec<ShipTarget>> = BTreeMap::new();
    for ((from, to), by_class) in pairs {
        let (Some(_), Some(to_addr)) = (addresses.get(&from), addresses.get(&to)) else {
            continue;
        };
        let mut ship_tables = Vec::new();
        for (class, partitions) in by_class {
            for location in classes.get(&class).into_iter().flatten() {
                ship_tables.push(ShipTable {
                    location: location.clone(),
                    partitions: partitions.clone(),
                });
            }
        }
        if !ship_tables.is_empty() {
            by_sender.entry(from).or_default().push(ShipTarget {
                addr: to_addr.clone(),
                tables: ship_tables,
            });
        }
    }
    by_sender
        .into_iter()
        .filter_map(|(from, targets)| {
            Some(Shipment {
                from,
                addr: addresses.get(&from)?.clone(),
                request: ShipBlocks {
                    targets,
                    bytes_max: MATCHING_BYTES_MAX,
                    pause_ms,
                },
            })
        })
        .collect()
}

/// The live workers' addresses by id, and `also`'s (a worker being
/// removed, still up) when given.
pub(crate) fn addresses(membership: &Membership, also: Option<u64>) -> BTreeMap<u64, String> {
    membership
        .nodes()
        .into_iter()
        .filter(|n| n.role == Role::Worker)
        .filter(|n| n.state == NodeState::Alive || Some(n.id) == also)
        .map(|n| (n.id, n.addr))
        .collect()
}

/// Ask every old owner in `moves` to send its blocks (pausing `pause_ms`
/// after each, a test hook); returns when all answered or gave up, what
/// they moved.
pub(crate) async fn ship(
    ctx: &SessionContext,
    addresses: &BTreeMap<u64, String>,
    moves: &[Move],
    pause_ms: u64,
) -> Shipped {
    let shipments = shipments(ctx, addresses, moves, pause_ms).await;
    let receivers: BTreeSet<&str> = shipments
        .iter()
        .flat_map(|s| &s.request.targets)
        .map(|t| t.addr.as_str())
        .collect();
    let calls = shipments.iter().map(|s| async move {
        let asked = async {
            let mut client = skiff_flight::connect(&s.addr).await?;
            skiff_flight::do_action::<_, BlocksShipped>(
                &mut client,
                action::BUFFER_SHIP,
                &s.request,
            )
            .await
        };
        match tokio::time::timeout(SHIP_ANSWER_DEADLINE, asked).await {
            Ok(Ok(shipped)) => Some(shipped),
            Ok(Err(e)) => {
                warn!(worker = s.from, error = %e.message(), "blocks not shipped");
                None
            }
            Err(_) => {
                warn!(worker = s.from, "blocks not shipped in time");
                None
            }
        }
    });
    let answers = futures::future::join_all(calls).await;
    let mut shipped = Shipped {
        senders: shipments.len(),
        receivers: receivers.len(),
        ..Shipped::default()
    };
    for answer in &answers {
        let Some(answer) = answer else {
            shipped.failures += 1;
            continue;
        };
        for target in &answer.targets {
            shipped.blocks_sent += target.sent;
            shipped.blocks_kept += target.kept;
            shipped.bytes_kept += target.bytes;
            shipped.failures += u64::from(!target.error.is_empty());
        }
    }
    info!(
        moves = moves.len(),
        senders = shipped.senders,
        blocks_sent = shipped.blocks_sent,
        blocks_kept = shipped.blocks_kept,
        bytes_kept = shipped.bytes_kept,
        "buffer matching done"
    );
    shipped
}
