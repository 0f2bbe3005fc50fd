//! Memory pressure: the intermediate store gives memory back to operators.
//!
//! DataFusion's memory pools never call back into consumers, so an operator
//! that cannot grow fails even while the store holds outputs no one is
//! reading right now. [`SkiffMemoryPool`] wraps the real pool: when a
//! reservation that is not the store's own cannot grow, it asks every live
//! store to move idle outputs to disk, then tries once more.

use std::fmt;
use std::sync::{Arc, Mutex, Weak};

use datafusion::common::Result;
use datafusion::execution::memory_pool::{
    MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};

use super::output::CONSUMER_PREFIX;

/// The memory consumer the buffer pool's blocks are counted under: it
/// gives up a block rather than push anyone out, so it is never asked.
pub const BUFFER_POOL_CONSUMER: &str = "BufferPool";

/// Something that can release pool memory by spilling.
pub trait Relieve: Send + Sync {
    /// Release about `wanted` bytes; returns the bytes released.
    fn relieve(&self, wanted: usize) -> usize;
}

/// Stores registered at once; dead entries are pruned on every registration.
const STORES_MAX: usize = 4096;

/// A memory pool that makes room by spilling the stores' idle outputs.
pub struct SkiffMemoryPool {
    inner: Arc<dyn MemoryPool>,
    stores: Mutex<Vec<Weak<dyn Relieve>>>,
}

impl SkiffMemoryPool {
    pub fn new(inner: Arc<dyn MemoryPool>) -> Self {
        Self {
            inner,
            stores: Mutex::new(Vec::new()),
        }
    }

    /// Let `store` be asked for memory while it lives.
    pub fn register_store(&self, store: Weak<dyn Relieve>) {
        let mut stores = self.stores.lock().unwrap_or_else(|e| e.into_inner());
        stores.retain(|s| s.strong_count() > 0);
        if stores.len() < STORES_MAX {
            stores.push(store);
        }
    }

    fn relieve(&self, wanted: usize) -> usize {
        // Upgrade outside the loop: a store must not be asked while this
        // lock is held, since spilling shrinks reservations in this pool.
        let stores: Vec<Arc<dyn Relieve>> = self
            .stores
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        let mut released = 0;
        for store in stores {
            if released >= wanted {
                break;
            }
            released += store.relieve(wanted - released);
        }
        released
    }
}

impl fmt::Debug for SkiffMemoryPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SkiffMemoryPool")
            .field("inner", &self.inner)
            .finish()
    }
}

impl fmt::Display for SkiffMemoryPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SkiffMemoryPool({})", self.inner)
    }
}

impl MemoryPool for SkiffMemoryPool {
    fn name(&self) -> &str {
        "SkiffMemoryPool"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.inner.register(consumer)
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.inner.unregister(consumer)
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.inner.grow(reservation, additional)
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.inner.shrink(reservation, shrink)
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        let refused = match self.inner.try_grow(reservation, additional) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        // The store spills its own overflow as it writes; asking it to
        // spill for itself could deadlock on the partition it is writing.
        // The buffer pool gives up a block rather than push anyone out.
        let name = reservation.consumer().name();
        if name.starts_with(CONSUMER_PREFIX) || name == BUFFER_POOL_CONSUMER {
            return Err(refused);
        }
        if self.relieve(additional) == 0 {
            return Err(refused);
        }
        self.inner.try_grow(reservation, additional)
    }

    fn reserved(&self) -> usize {
        self.inner.reserved()
    }

    fn memory_limit(&self) -> MemoryLimit {
        self.inner.memory_limit()
    }
}
