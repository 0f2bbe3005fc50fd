//! Property test of the partition manager: seeded random sequences of
//! workers joining and leaving (up to 64 workers, classes of up to 1024
//! partitions); after every step each class is balanced within one
//! partition, every owner is a member, the partitions moved are exactly the
//! lower bound, and the moves, the is_moved flags and the change of the
//! mapping agree.

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use skiff_cluster::{PartitionManager, PartitionMapping, WorkerId, minimal_moves};

const WORKERS_MAX: usize = 64;

fn counts(m: &PartitionMapping, workers: &[WorkerId]) -> BTreeMap<WorkerId, u32> {
    let mut c: BTreeMap<WorkerId, u32> = workers.iter().map(|&w| (w, 0)).collect();
    for &o in m.owners() {
        *c.get_mut(&o).expect("every owner is a member") += 1;
    }
    c
}

fn check_step(before: &PartitionManager, after: &PartitionManager, moves: &[skiff_cluster::Move]) {
    assert_eq!(after.epoch(), before.epoch() + 1);
    for (p, old) in before.classes() {
        let new = after.mapping(p).expect("a class survives a resize");
        let c = counts(new, after.workers());
        let (lo, hi) = (c.values().min().copied(), c.values().max().copied());
        assert!(
            hi.unwrap_or(0) - lo.unwrap_or(0) <= 1,
            "class {p} unbalanced: {c:?}"
        );
        let changed: Vec<u32> = (0..p).filter(|&i| old.owner(i) != new.owner(i)).collect();
        let flagged: Vec<u32> = (0..p).filter(|&i| new.moved()[i as usize]).collect();
        let listed: Vec<u32> = moves
            .iter()
            .filter(|mv| mv.partitions == p)
            .map(|mv| mv.partition)
            .collect();
        assert_eq!(changed, flagged, "class {p}: is_moved is the change");
        assert_eq!(changed, listed, "class {p}: the moves are the change");
        let bound = minimal_moves(old, after.workers());
        assert_eq!(
            changed.len() as u32,
            bound,
            "class {p}: moves are the lower bound"
        );
        for mv in moves.iter().filter(|mv| mv.partitions == p) {
            assert_eq!(mv.from, old.owner(mv.partition));
            assert_eq!(Some(mv.to), new.owner(mv.partition));
        }
    }
}

/// The paper's bound where it is exact: balanced before, the new count
/// divides the partitions.
fn paper_bound(p: u32, n_old: usize, n_new: usize) -> Option<u32> {
    let n_max = n_old.max(n_new) as u32;
    let divides = p.is_multiple_of(n_new as u32) && p.is_multiple_of(n_old as u32);
    divides.then(|| p / n_max * n_old.abs_diff(n_new) as u32)
}

#[test]
fn random_resizes_stay_balanced_and_move_the_lower_bound() {
    for seed in 0..40u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut next_id: WorkerId = 1;
        let first = rng.random_range(1..=8);
        let mut members: BTreeSet<WorkerId> = (0..first)
            .map(|_| {
                next_id += 1;
                next_id
            })
            .collect();
        let mut m = PartitionManager::new(members.iter().copied());
        for _ in 0..rng.random_range(1..=3) {
            let p = match rng.random_range(0..3) {
                0 => rng.random_range(1..=16),
                1 => 1 << rng.random_range(4..=10),
                _ => rng.random_range(1..=1024),
            };
            m.ensure_class(p).expect("a valid class");
        }
        for _ in 0..30 {
            let grow = members.len() < 2 || (members.len() < WORKERS_MAX && rng.random_bool(0.5));
            let n = rng.random_range(1..=4usize);
            if grow {
                for _ in 0..n.min(WORKERS_MAX - members.len()) {
                    next_id += 1;
                    members.insert(next_id);
                }
            } else {
                for _ in 0..n.min(members.len() - 1) {
                    let i = rng.random_range(0..members.len());
                    let w = *members.iter().nth(i).expect("in range");
                    members.remove(&w);
                }
            }
            let before = m.clone();
            let moves = m.resize(members.iter().copied()).expect("members remain");
            check_step(&before, &m, &moves);
            for (p, _) in before.classes() {
                let old = before.workers().len();
                if let Some(bound) = paper_bound(p, old, members.len()) {
                    let added_only = before.workers().iter().all(|w| members.contains(w));
                    let removed_only = members.iter().all(|w| before.workers().contains(w));
                    if added_only || removed_only {
                        let moved = moves.iter().filter(|mv| mv.partitions == p).count();
                        assert_eq!(moved as u32, bound, "seed {seed}, class {p}");
                    }
                }
            }
        }
    }
}

#[test]
fn tables_of_one_class_share_every_owner() {
    let mut m = PartitionManager::new([4, 9, 11]);
    let orders = m.ensure_class(24).expect("valid").clone();
    let lineitem = m.ensure_class(24).expect("valid").clone();
    assert_eq!(orders, lineitem);
    m.resize([4, 11, 12, 13]).expect("members remain");
    let c = m.mapping(24).expect("class");
    assert!((0..24).all(|i| m.owner(24, i) == c.owner(i)));
}
