//! Concurrency control: the lock word every lockable tuple has (`lockword`)
//! and a worker's transaction context over it (`txn`): strict two-phase
//! locking under NO_WAIT or WAIT_DIE, routed by each architecture's
//! placement (`arch`).

pub(crate) mod txn;
