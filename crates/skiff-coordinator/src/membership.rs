//! Cluster membership: workers and memory nodes that registered, their
//! heartbeats, and which worker takes the next query.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

use skiff_flight::protocol::{DEAD_AFTER, Heartbeat, Register, Role, RunningQuery};

use skiff_node::sync::lock;

/// Whether a node is answering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeState {
    Alive,
    Dead,
    /// Removed by an admin (`skiff.remove_worker`): told to leave.
    Removed,
}

impl NodeState {
    pub fn name(self) -> &'static str {
        match self {
            NodeState::Alive => "alive",
            NodeState::Dead => "dead",
            NodeState::Removed => "removed",
        }
    }
}

/// One registered node.
#[derive(Clone, Debug)]
pub struct Node {
    pub id: u64,
    pub role: Role,
    pub addr: String,
    pub cores: u32,
    pub memory: u64,
    pub pid: u32,
    pub state: NodeState,
    pub registered: SystemTime,
    pub last_heartbeat: Instant,
    /// Queries the coordinator assigned and that have not ended.
    pub assigned: usize,
    /// Queries the node reported in its last heartbeat.
    pub running: Vec<RunningQuery>,
    /// Memory and cache bytes, as of the last heartbeat.
    pub memory_used: u64,
    pub cache_bytes: u64,
    /// Being vacated: takes no new query.
    pub draining: bool,
    /// How long the last vacate took, once the worker held no query.
    pub vacate_ms: Option<u64>,
}

impl Node {
    /// A live worker that is not draining.
    pub fn takes_queries(&self) -> bool {
        self.role == Role::Worker && self.state == NodeState::Alive && !self.draining
    }
}

/// Which worker a query may go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    Any,
    /// Another than this one when there is another.
    Avoid(u64),
    /// This one if it is alive and not draining, else as [`Placement::Any`].
    Prefer(u64),
}

/// The registered nodes.
#[derive(Debug, Default)]
pub struct Membership {
    nodes: Mutex<BTreeMap<u64, Node>>,
    next_id: Mutex<u64>,
}

impl Membership {
    pub fn register(&self, request: &Register) -> u64 {
        let id = {
            let mut next = lock(&self.next_id);
            *next += 1;
            *next
        };
        let role = Role::try_from(request.role).unwrap_or(Role::Worker);
        let mut nodes = lock(&self.nodes);
        // A node that restarts on the same address replaces its old self.
        nodes.retain(|_, n| !(n.addr == request.addr && n.state == NodeState::Dead));
        nodes.insert(
            id,
            Node {
                id,
                role,
                addr: request.addr.clone(),
                cores: request.cores,
                memory: request.memory,
                pid: request.pid,
                state: NodeState::Alive,
                registered: SystemTime::now(),
                last_heartbeat: Instant::now(),
                assigned: 0,
                running: Vec::new(),
                memory_used: 0,
                cache_bytes: 0,
                draining: false,
                vacate_ms: None,
            },
        );
        id
    }

    /// Record a heartbeat; the node's state, `None` when it is unknown
    /// (dead nodes must register again, removed ones leave).
    pub fn heartbeat(&self, beat: &Heartbeat) -> Option<NodeState> {
        let mut nodes = lock(&self.nodes);
        let node = nodes.get_mut(&beat.node_id)?;
        if node.state == NodeState::Alive {
            node.last_heartbeat = Instant::now();
            node.running = beat.queries.clone();
            node.memory_used = beat.memory_used;
            node.cache_bytes = beat.cache_bytes;
        }
        Some(node.state)
    }

    /// Remove live worker `id` from the cluster; its next heartbeat tells it
    /// to leave. False when there is no such live worker.
    pub fn remove(&self, id: u64) -> bool {
        match lock(&self.nodes).get_mut(&id) {
            Some(node) if node.role == Role::Worker && node.state == NodeState::Alive => {
                node.state = NodeState::Removed;
                node.running.clear();
                true
            }
            _ => false,
        }
    }

    /// Declare silent nodes dead; returns the ids newly declared dead.
    pub fn sweep(&self, now: Instant) -> Vec<u64> {
        let mut dead = Vec::new();
        for node in lock(&self.nodes).values_mut() {
            if node.state == NodeState::Alive
                && now.saturating_duration_since(node.last_heartbeat) > DEAD_AFTER
            {
                node.state = NodeState::Dead;
                node.running.clear();
                dead.push(node.id);
            }
        }
        dead
    }

    /// Declare `id` dead at once (its connection broke).
    pub fn mark_dead(&self, id: u64) -> bool {
        match lock(&self.nodes).get_mut(&id) {
            Some(node) if node.state == NodeState::Alive => {
                node.state = NodeState::Dead;
                node.running.clear();
                true
            }
            _ => false,
        }
    }

    /// The live worker with the fewest assigned queries per core; the
    /// choice is counted as an assignment.
    pub fn assign(&self) -> Option<(u64, String)> {
        self.assign_to(Placement::Any)
    }

    /// [`assign`](Self::assign) within `placement`. Draining workers take
    /// nothing.
    pub fn assign_to(&self, placement: Placement) -> Option<(u64, String)> {
        let mut nodes = lock(&self.nodes);
        let usable = Node::takes_queries;
        let chosen = match placement {
            Placement::Prefer(id) if nodes.get(&id).is_some_and(usable) => Some(id),
            Placement::Avoid(avoid) => {
                least_loaded(nodes.values().filter(|n| n.id != avoid && usable(n)))
                    .or_else(|| least_loaded(nodes.values().filter(|n| usable(n))))
            }
            _ => least_loaded(nodes.values().filter(|n| usable(n))),
        }?;
        let node = nodes.get_mut(&chosen)?;
        node.assigned += 1;
        Some((node.id, node.addr.clone()))
    }

    /// The least loaded worker taking queries, without assigning it one.
    pub fn pick(&self) -> Option<u64> {
        let nodes = lock(&self.nodes);
        least_loaded(nodes.values().filter(|n| Node::takes_queries(n)))
    }

    /// The worker named by `name`: its node id or its address.
    pub fn resolve_worker(&self, name: &str) -> Option<u64> {
        let nodes = lock(&self.nodes);
        nodes
            .values()
            .filter(|n| n.role == Role::Worker && n.state == NodeState::Alive)
            .find(|n| n.addr == name || name.parse::<u64>().is_ok_and(|id| id == n.id))
            .map(|n| n.id)
    }

    /// Mark a worker draining: it takes no new query; false when unknown.
    pub fn start_draining(&self, id: u64) -> bool {
        match lock(&self.nodes).get_mut(&id) {
            Some(node) if node.role == Role::Worker => {
                node.draining = true;
                node.vacate_ms = None;
                true
            }
            _ => false,
        }
    }

    /// Let a drained worker take queries again; false when no such live
    /// worker is draining.
    pub fn stop_draining(&self, id: u64) -> bool {
        match lock(&self.nodes).get_mut(&id) {
            Some(node) if node.role == Role::Worker && node.draining => {
                node.draining = false;
                true
            }
            _ => false,
        }
    }

    /// Whether some live worker takes new queries.
    pub fn any_usable_worker(&self) -> bool {
        lock(&self.nodes).values().any(Node::takes_queries)
    }

    /// The workers that take new queries, (id, address) by id.
    pub fn usable_workers(&self) -> Vec<(u64, String)> {
        lock(&self.nodes)
            .values()
            .filter(|n| n.takes_queries())
            .map(|n| (n.id, n.addr.clone()))
            .collect()
    }

    /// The live workers, draining or not, by id: the owners of partitions.
    pub fn live_workers(&self) -> Vec<u64> {
        lock(&self.nodes)
            .values()
            .filter(|n| n.role == Role::Worker && n.state == NodeState::Alive)
            .map(|n| n.id)
            .collect()
    }

    pub fn vacated(&self, id: u64, ms: u64) {
        if let Some(node) = lock(&self.nodes).get_mut(&id) {
            node.vacate_ms = Some(ms);
        }
    }

    /// A live memory node's address, for the state cache.
    pub fn memory_node(&self) -> Option<String> {
        lock(&self.nodes)
            .values()
            .find(|n| n.role == Role::MemoryNode && n.state == NodeState::Alive)
            .map(|n| n.addr.clone())
    }

    pub fn release(&self, id: u64) {
        if let Some(node) = lock(&self.nodes).get_mut(&id) {
            node.assigned = node.assigned.saturating_sub(1);
        }
    }

    /// The role node `id` registered with.
    pub fn role(&self, id: u64) -> Option<Role> {
        lock(&self.nodes).get(&id).map(|n| n.role)
    }

    pub fn nodes(&self) -> Vec<Node> {
        lock(&self.nodes).values().cloned().collect()
    }

    pub fn live(&self, role: Role) -> usize {
        lock(&self.nodes)
            .values()
            .filter(|n| n.role == role && n.state == NodeState::Alive)
            .count()
    }
}

/// The node with the fewest assigned queries per core (lowest id on ties).
fn least_loaded<'a>(nodes: impl Iterator<Item = &'a Node>) -> Option<u64> {
    nodes
        .min_by(|a, b| {
            let load = |n: &Node| n.assigned as f64 / f64::from(n.cores.max(1));
            load(a).total_cmp(&load(b)).then(a.id.cmp(&b.id))
        })
        .map(|n| n.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn register(m: &Membership, addr: &str, cores: u32) -> u64 {
        m.register(&Register {
            role: Role::Worker as i32,
            addr: addr.into(),
            cores,
            memory: 0,
            pid: 1,
            preload: Vec::new(),
        })
    }

    #[test]
    fn least_loaded_per_core_and_death() {
        let m = Membership::default();
        let a = register(&m, "a:1", 1);
        let b = register(&m, "b:1", 2);
        assert_eq!(m.assign().map(|x| x.0), Some(a));
        assert_eq!(m.assign().map(|x| x.0), Some(b));
        assert_eq!(m.assign().map(|x| x.0), Some(b));
        m.release(a);
        assert_eq!(m.assign().map(|x| x.0), Some(a));
        let later = Instant::now() + DEAD_AFTER + std::time::Duration::from_millis(10);
        let beat = Heartbeat {
            node_id: a,
            ..Heartbeat::default()
        };
        assert_eq!(m.heartbeat(&beat), Some(NodeState::Alive));
        assert_eq!(m.sweep(later), vec![a, b]);
        assert!(m.assign().is_none());
        assert_eq!(m.heartbeat(&beat), Some(NodeState::Dead));
    }

    #[test]
    fn a_removed_worker_is_told_to_leave_and_owns_nothing() {
        let m = Membership::default();
        let a = register(&m, "a:1", 1);
        let b = register(&m, "b:1", 1);
        assert!(m.remove(a));
        assert!(!m.remove(a), "removed twice");
        let beat = Heartbeat {
            node_id: a,
            ..Heartbeat::default()
        };
        assert_eq!(m.heartbeat(&beat), Some(NodeState::Removed));
        assert_eq!(m.live_workers(), vec![b]);
        assert_eq!(m.assign().map(|x| x.0), Some(b));
    }
}
