//! What survives a host's death and how the pod gets over it: each host's
//! redo log (`wal`), the transaction slots that let a survivor undo a dead
//! host's pod writes (`recovery`), the leases that tell hosts who died and
//! who cleans up (`lease`), and checkpoints of each partition (`checkpoint`)
//! that a restarted host rebuilds from (`run::host::rebuild_partition`).

pub(crate) mod checkpoint;
pub(crate) mod lease;
pub(crate) mod recovery;
pub(crate) mod wal;
