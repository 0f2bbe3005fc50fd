//! A client's session: its user, its own settings (`SET` changes only this
//! session) over the shared catalog, and the statement it is running.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::prelude::SessionContext;

use crate::coordinator::queries::lock;

/// One connected client.
pub struct ClientSession {
    id: u64,
    user: String,
    peer: Option<SocketAddr>,
    pub(crate) ctx: SessionContext,
    current: Mutex<Option<u64>>,
    /// Open sessions, shared with the coordinator; this one leaves it on drop.
    pub(crate) open: Arc<AtomicUsize>,
}

impl ClientSession {
    pub(crate) fn new(
        id: u64,
        user: &str,
        peer: Option<SocketAddr>,
        ctx: SessionContext,
        open: Arc<AtomicUsize>,
    ) -> Self {
        Self {
            id,
            user: user.to_string(),
            peer,
            ctx,
            current: Mutex::new(None),
            open,
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn user(&self) -> &str {
        &self.user
    }

    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// The query this session runs now, if any.
    pub fn current_query(&self) -> Option<u64> {
        *lock(&self.current)
    }

    pub(crate) fn set_current(&self, query: Option<u64>) {
        *lock(&self.current) = query;
    }
}

impl std::fmt::Debug for ClientSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientSession")
            .field("id", &self.id)
            .field("user", &self.user)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

impl Drop for ClientSession {
    fn drop(&mut self) {
        let open = self.open.fetch_sub(1, Ordering::SeqCst) - 1;
        crate::metrics::sessions(open);
    }
}
