//! The partition manager of VectorH §5.2: per equivalence class a mapping
//! partition → worker and an is_moved array, all versioned by one epoch.
//!
//! A class is created with its partitions dealt round-robin over the
//! workers (sorted by id). A resize computes each worker's target count
//! (`P / n`, and one more for `P % n` of them), gives the extra partitions
//! to the workers that already hold the most, and then walks the mapping
//! once, moving a partition only if its owner left or holds more than its
//! target, to a worker still short of its own. Every worker ends within one
//! partition of every other, and the number moved is the least any balanced
//! assignment could move ([`minimal_moves`]). Tables of one class share the
//! mapping, so partition i of each of them is always on the same worker.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// A worker as the coordinator's membership names it.
pub type WorkerId = u64;

/// Most partitions a table may have: each one is a partition directory of
/// every table of its class (files, and a task per scan), so far more than
/// a cluster's worker count buys balance at the price of tiny files.
pub const PARTITIONS_MAX: u32 = 1024;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ClusterError {
    #[error("a partitioned table needs between 1 and {PARTITIONS_MAX} partitions, not {0}")]
    Partitions(u32),
    #[error("partitioned tables need at least one worker to own their partitions")]
    NoWorkers,
    #[error("partition mapping is damaged: {0}")]
    Damaged(String),
}

/// One partition changing owner in a resize.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Move {
    /// The class: its number of partitions.
    pub partitions: u32,
    pub partition: u32,
    /// `None`: the partition's class had no owner for it (never the case
    /// after a class is created; kept so a move is self-describing).
    pub from: Option<WorkerId>,
    pub to: WorkerId,
}

/// Partition → worker for one equivalence class, and which partitions the
/// last resize moved (the ones a new owner must read from storage, or an
/// old owner may drop).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionMapping {
    owners: Vec<WorkerId>,
    moved: Vec<bool>,
}

impl PartitionMapping {
    fn round_robin(partitions: u32, workers: &[WorkerId]) -> PartitionMapping {
        assert!(!workers.is_empty());
        PartitionMapping {
            owners: (0..partitions as usize)
                .map(|i| workers[i % workers.len()])
                .collect(),
            moved: vec![false; partitions as usize],
        }
    }

    pub fn partitions(&self) -> u32 {
        self.owners.len() as u32
    }

    pub fn owner(&self, partition: u32) -> Option<WorkerId> {
        self.owners.get(partition as usize).copied()
    }

    /// Owner of each partition, by partition id.
    pub fn owners(&self) -> &[WorkerId] {
        &self.owners
    }

    /// Whether the last resize moved each partition.
    pub fn moved(&self) -> &[bool] {
        &self.moved
    }

    /// The partitions `worker` owns, in order.
    pub fn owned_by(&self, worker: WorkerId) -> impl Iterator<Item = u32> + '_ {
        (0..self.partitions()).filter(move |&p| self.owners[p as usize] == worker)
    }

    /// Partitions per worker, for the workers that own any.
    fn counts(&self) -> BTreeMap<WorkerId, u32> {
        let mut counts = BTreeMap::new();
        for &w in &self.owners {
            *counts.entry(w).or_insert(0) += 1;
        }
        counts
    }

    /// Rebalances over `workers` (sorted, non-empty); returns what moved.
    fn rebalance(&mut self, workers: &[WorkerId]) -> Vec<Move> {
        let partitions = self.partitions();
        let targets = targets(&self.counts(), partitions, workers);
        let mut counts = self.counts();
        // Receivers in id order, each as often as it is short: the walk
        // below fills them front to back.
        let mut short: Vec<WorkerId> = Vec::new();
        for (&w, &target) in &targets {
            let have = counts.get(&w).copied().unwrap_or(0);
            short.extend(std::iter::repeat_n(w, target.saturating_sub(have) as usize));
        }
        let mut receivers = short.into_iter();
        let mut moves = Vec::new();
        for (p, owner) in self.owners.iter_mut().enumerate() {
            let have = counts.get(owner).copied().unwrap_or(0);
            let keep = targets.get(owner).is_some_and(|&t| have <= t);
            self.moved[p] = !keep;
            if keep {
                continue;
            }
            let to = receivers
                .next()
                .expect("a partition over its owner's target has a receiver short of its own");
            moves.push(Move {
                partitions,
                partition: p as u32,
                from: Some(*owner),
                to,
            });
            *counts.entry(*owner).or_insert(0) -= 1;
            *counts.entry(to).or_insert(0) += 1;
            *owner = to;
        }
        assert!(receivers.next().is_none(), "every short worker was filled");
        moves
    }
}

/// Each worker's count after a resize: `P / n`, plus one for the `P % n`
/// workers that hold the most now (ties by id), which keeps the most in
/// place.
fn targets(
    counts: &BTreeMap<WorkerId, u32>,
    partitions: u32,
    workers: &[WorkerId],
) -> BTreeMap<WorkerId, u32> {
    let n = workers.len() as u32;
    let (base, extra) = (partitions / n, (partitions % n) as usize);
    let mut by_count: Vec<WorkerId> = workers.to_vec();
    by_count.sort_by_key(|w| (std::cmp::Reverse(counts.get(w).copied().unwrap_or(0)), *w));
    by_count
        .iter()
        .enumerate()
        .map(|(i, &w)| (w, base + u32::from(i < extra)))
        .collect()
}

/// The fewest partitions any resize of `mapping` onto `workers` can move
/// while leaving every worker within one partition of every other: all of
/// a departing worker's, and a staying worker's beyond its new share, where
/// the `P % n` larger shares go to the workers holding the most. (With `d`
/// partitions balanced over `n_old` workers and `n_new` divisible into `d`,
/// this is the paper's `d / max(n_old, n_new) * |n_new - n_old|`.)
pub fn minimal_moves(mapping: &PartitionMapping, workers: &[WorkerId]) -> u32 {
    let n = workers.len() as u32;
    if n == 0 {
        return mapping.partitions();
    }
    let d = mapping.partitions();
    let (base, extra) = (d / n, d % n);
    let counts = mapping.counts();
    let stays = |w: &WorkerId| counts.get(w).copied().unwrap_or(0);
    // Kept in place: up to `base` on each staying worker, and one more on
    // as many of those holding more than `base` as there are larger shares.
    let kept_base: u32 = workers.iter().map(|w| stays(w).min(base)).sum();
    let above = workers.iter().filter(|w| stays(w) > base).count() as u32;
    d - kept_base - above.min(extra)
}

/// Every equivalence class's mapping at one epoch. A value: a resize makes
/// the next epoch's manager, and a query keeps the one it started under.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Stored")]
pub struct PartitionManager {
    epoch: u64,
    workers: Vec<WorkerId>,
    classes: BTreeMap<u32, PartitionMapping>,
}

/// What is persisted, validated on the way in.
#[derive(Deserialize)]
struct Stored {
    epoch: u64,
    workers: Vec<WorkerId>,
    classes: BTreeMap<u32, PartitionMapping>,
}

impl TryFrom<Stored> for PartitionManager {
    type Error = ClusterError;

    fn try_from(s: Stored) -> Result<PartitionManager, ClusterError> {
        let manager = PartitionManager {
            epoch: s.epoch,
            workers: s.workers,
            classes: s.classes,
        };
        manager.validate()?;
        Ok(manager)
    }
}

impl PartitionManager {
    /// Epoch 1 with `workers` and no class yet.
    pub fn new(workers: impl IntoIterator<Item = WorkerId>) -> PartitionManager {
        let workers: BTreeSet<WorkerId> = workers.into_iter().collect();
        PartitionManager {
            epoch: 1,
            workers: workers.into_iter().collect(),
            classes: BTreeMap::new(),
        }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The workers partitions are spread over, by id.
    pub fn workers(&self) -> &[WorkerId] {
        &self.workers
    }

    /// The mapping of the class with `partitions` partitions, if a table of
    /// it exists.
    pub fn mapping(&self, partitions: u32) -> Option<&PartitionMapping> {
        self.classes.get(&partitions)
    }

    /// Every class, by its number of partitions.
    pub fn classes(&self) -> impl Iterator<Item = (u32, &PartitionMapping)> {
        self.classes.iter().map(|(&p, m)| (p, m))
    }

    /// The worker that owns `partition` of a table with `partitions`.
    pub fn owner(&self, partitions: u32, partition: u32) -> Option<WorkerId> {
        self.mapping(partitions)?.owner(partition)
    }

    /// Makes sure the class of `partitions` exists (a table of it is being
    /// created); a new class is dealt round-robin over the workers. Returns
    /// its mapping. Existing mappings do not change, so the epoch does not.
    pub fn ensure_class(&mut self, partitions: u32) -> Result<&PartitionMapping, ClusterError> {
        if partitions == 0 || partitions > PARTITIONS_MAX {
            return Err(ClusterError::Partitions(partitions));
        }
        if self.workers.is_empty() {
            return Err(ClusterError::NoWorkers);
        }
        let workers = &self.workers;
        Ok(self
            .classes
            .entry(partitions)
            .or_insert_with(|| PartitionMapping::round_robin(partitions, workers)))
    }

    /// The next epoch: partitions spread over `workers`, moving the fewest
    /// (per class, [`minimal_moves`]). Returns every move, class by class.
    /// Refuses an empty worker set while any class exists (nobody would own
    /// its partitions), leaving the manager as it was.
    pub fn resize(
        &mut self,
        workers: impl IntoIterator<Item = WorkerId>,
    ) -> Result<Vec<Move>, ClusterError> {
        let workers: Vec<WorkerId> = workers
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if workers.is_empty() && !self.classes.is_empty() {
            return Err(ClusterError::NoWorkers);
        }
        let mut moves = Vec::new();
        for mapping in self.classes.values_mut() {
            moves.extend(mapping.rebalance(&workers));
        }
        self.workers = workers;
        self.epoch += 1;
        Ok(moves)
    }

    /// Checks what a stored manager claims: every owner is a worker, every
    /// class has as many owners and flags as partitions, within bounds.
    pub fn validate(&self) -> Result<(), ClusterError> {
        let damaged = |what: String| Err(ClusterError::Damaged(what));
        if !self.workers.is_sorted() || self.workers.windows(2).any(|w| w[0] == w[1]) {
            return damaged("workers are not a sorted set".into());
        }
        for (&p, m) in &self.classes {
            if p == 0 || p > PARTITIONS_MAX {
                return damaged(format!("a class of {p} partitions"));
            }
            if m.owners.len() != p as usize || m.moved.len() != p as usize {
                return damaged(format!(
                    "class {p} has {} owners and {} flags",
                    m.owners.len(),
                    m.moved.len()
                ));
            }
            if let Some(w) = m
                .owners
                .iter()
                .find(|w| self.workers.binary_search(w).is_err())
            {
                return damaged(format!("class {p} names worker {w}, which is not a member"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_class_is_dealt_round_robin() {
        let mut m = PartitionManager::new([7, 3, 5]);
        let c = m.ensure_class(7).unwrap().clone();
        assert_eq!(c.owners(), &[3, 5, 7, 3, 5, 7, 3]);
        assert_eq!(m.epoch(), 1);
        assert_eq!(m.ensure_class(0), Err(ClusterError::Partitions(0)));
        assert_eq!(
            m.ensure_class(PARTITIONS_MAX + 1),
            Err(ClusterError::Partitions(PARTITIONS_MAX + 1))
        );
        assert_eq!(
            PartitionManager::new([]).ensure_class(4),
            Err(ClusterError::NoWorkers)
        );
    }

    #[test]
    fn adding_a_worker_moves_only_its_share() {
        let mut m = PartitionManager::new([1, 2]);
        m.ensure_class(12).unwrap();
        let moves = m.resize([1, 2, 3]).unwrap();
        assert_eq!(moves.len(), 4, "12 / 3 * 1");
        assert!(moves.iter().all(|mv| mv.to == 3));
        let c = m.mapping(12).unwrap();
        assert_eq!(c.owned_by(3).count(), 4);
        assert_eq!(c.moved().iter().filter(|&&b| b).count(), 4);
        assert_eq!(m.epoch(), 2);
    }

    #[test]
    fn removing_a_worker_moves_only_its_partitions() {
        let mut m = PartitionManager::new([1, 2, 3]);
        m.ensure_class(12).unwrap();
        let before = m.mapping(12).unwrap().clone();
        let moves = m.resize([1, 3]).unwrap();
        assert_eq!(moves.len(), 4);
        assert!(moves.iter().all(|mv| mv.from == Some(2)));
        let after = m.mapping(12).unwrap();
        for p in 0..12 {
            if before.owner(p) != Some(2) {
                assert_eq!(before.owner(p), after.owner(p));
            }
        }
    }

    #[test]
    fn the_last_worker_cannot_leave_a_class_ownerless() {
        let mut m = PartitionManager::new([1]);
        m.ensure_class(4).unwrap();
        let before = m.clone();
        assert_eq!(m.resize([]), Err(ClusterError::NoWorkers));
        assert_eq!(m, before);
    }

    #[test]
    fn a_stored_manager_is_validated() {
        let mut m = PartitionManager::new([1, 2]);
        m.ensure_class(8).unwrap();
        let text = serde_json::to_string(&m).unwrap();
        let back: PartitionManager = serde_json::from_str(&text).unwrap();
        assert_eq!(back, m);
        let foreign = text.replace("\"workers\":[1,2]", "\"workers\":[1,3]");
        let err = serde_json::from_str::<PartitionManager>(&foreign).unwrap_err();
        assert!(err.to_string().contains("worker 2"), "{err}");
        let short = text.replace("[1,2,1,2,1,2,1,2]", "[1,2,1,2]");
        let err = serde_json::from_str::<PartitionManager>(&short).unwrap_err();
        assert!(err.to_string().contains("4 owners"), "{err}");
    }
}
