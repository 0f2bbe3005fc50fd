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
//! call made (a worker registering by itself).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::prelude::SessionContext;
use skiff_cluster::Move;
use skiff_flight::protocol::{BlocksShipped, Role, ShipBlocks, ShipTable, ShipTarget, action};
use skiff_tables::ManagedTable;
use tracing::{info, warn};

use super::membership::{Membership, NodeState};
use super::partitions::partitioned_tables;
use crate::config::{MATCHING_BYTES_MAX, SHIP_ANSWER_DEADLINE};

/// Whether resizes send blocks (`skiff.buffer_matching`).
#[derive(Debug)]
pub(crate) struct Matching(AtomicBool);

impl Default for Matching {
    fn default() -> Self {
        Matching(AtomicBool::new(true))
    }
}

impl Matching {
    pub(crate) fn set(&self, on: bool) {
        self.0.store(on, Ordering::Relaxed);
    }

    pub(crate) fn on(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// What one old owner sends: its address and the request.
struct Shipment {
    from: u64,
    addr: String,
    request: ShipBlocks,
}

/// The shipments `moves` make: per live old owner, one target per live new
/// owner, naming the tables of each moved class by location.
async fn shipments(
    ctx: &SessionContext,
    addresses: &BTreeMap<u64, String>,
    moves: &[Move],
) -> Vec<Shipment> {
    let tables = partitioned_tables(ctx).await;
    let schema = ctx
        .catalog(skiff_engine::catalog::DATABASE)
        .and_then(|c| c.schema(skiff_engine::catalog::DEFAULT_SCHEMA));
    // Class → the locations of its tables.
    let mut classes: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    if let Some(schema) = schema {
        for (name, partitioning) in &tables {
            let Ok(Some(table)) = schema.table(name).await else {
                continue;
            };
            if let Some(managed) = table.downcast_ref::<ManagedTable>() {
                let location = managed.url().as_str().trim_end_matches('/').to_string();
                classes
                    .entry(partitioning.partitions)
                    .or_default()
                    .push(location);
            }
        }
    }
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

/// Ask every old owner in `moves` to send its blocks; returns when all
/// answered or gave up. Blocks sent and kept, summed.
pub(crate) async fn ship(
    ctx: &SessionContext,
    addresses: &BTreeMap<u64, String>,
    moves: &[Move],
) -> (u64, u64) {
    let shipments = shipments(ctx, addresses, moves).await;
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
            Ok(Ok(shipped)) => shipped,
            Ok(Err(e)) => {
                warn!(worker = s.from, error = %e.message(), "blocks not shipped");
                BlocksShipped::default()
            }
            Err(_) => {
                warn!(worker = s.from, "blocks not shipped in time");
                BlocksShipped::default()
            }
        }
    });
    let answers = futures::future::join_all(calls).await;
    let sent = answers
        .iter()
        .flat_map(|a| &a.targets)
        .map(|t| t.sent)
        .sum();
    let kept = answers
        .iter()
        .flat_map(|a| &a.targets)
        .map(|t| t.kept)
        .sum();
    info!(
        moves = moves.len(),
        senders = shipments.len(),
        blocks_sent = sent,
        blocks_kept = kept,
        "buffer matching done"
    );
    (sent, kept)
}
