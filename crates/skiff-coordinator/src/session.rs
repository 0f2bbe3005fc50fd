//! A client's session: its user, its own settings (`SET` changes only this
//! session) over the shared catalog, with the caller's role in them, and
//! the statement it is running.

use std::any::Any;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::common::config::{ConfigEntry, ConfigExtension, ExtensionOptions};
use datafusion::common::{Result, config_err};
use datafusion::config::ConfigOptions;
use datafusion::prelude::SessionContext;

use crate::auth::Role;
use skiff_node::sync::lock;

/// Who runs a statement, as the admin functions see it: carried in the
/// session's config, because that is what DataFusion hands a function when
/// it runs (`ScalarFunctionArgs::config_options`), taken from the session
/// that planned the statement (a view made by an admin does not lend its
/// maker's role). No statement can change it: `SET` is refused.
#[derive(Clone, Debug)]
pub(crate) struct Caller {
    pub(crate) user: String,
    pub(crate) role: Role,
}

impl Caller {
    /// The caller of a statement planned with `options`; a context without
    /// one (the coordinator's own) has no rights.
    pub(crate) fn of(options: &ConfigOptions) -> Caller {
        options
            .extensions
            .get::<Caller>()
            .cloned()
            .unwrap_or(Caller {
                user: String::new(),
                role: Role::User,
            })
    }

    pub(crate) fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }
}

impl ConfigExtension for Caller {
    const PREFIX: &'static str = "skiff_caller";
}

impl ExtensionOptions for Caller {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, _value: &str) -> Result<()> {
        config_err!("skiff_caller.{key} is read-only: it is the session's user and role")
    }

    fn entries(&self) -> Vec<ConfigEntry> {
        Vec::new()
    }
}

/// One connected client.
pub struct ClientSession {
    id: u64,
    user: String,
    peer: Option<SocketAddr>,
    pub(crate) ctx: SessionContext,
    current: Mutex<Option<u64>>,
    /// Statements of SQL `PREPARE name AS ...`, by name: kept as text and
    /// planned at each `EXECUTE`, so they never answer from a stale plan.
    named: Mutex<HashMap<String, String>>,
    /// Open sessions, shared with the coordinator; this one leaves it on drop.
    pub(crate) open: Arc<AtomicUsize>,
}

impl ClientSession {
    /// A session over `ctx`, counted in `open` until it is dropped;
    /// [`crate::Coordinator::open_session`] opens the coordinator's.
    pub fn new(
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
            named: Mutex::new(HashMap::new()),
            open,
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// The session's DataFusion context: its settings over the shared
    /// catalog.
    pub fn context(&self) -> &SessionContext {
        &self.ctx
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

    /// Keep `PREPARE name AS ...` (its whole text); false when the name is
    /// taken.
    pub(crate) fn name_statement(&self, name: &str, sql: &str) -> bool {
        let mut named = lock(&self.named);
        if named.contains_key(name) {
            return false;
        }
        named.insert(name.to_string(), sql.to_string());
        true
    }

    /// The `PREPARE` text kept under `name`.
    pub(crate) fn named_statement(&self, name: &str) -> Option<String> {
        lock(&self.named).get(name).cloned()
    }

    /// Forget the statement prepared as `name`, or every one for `None`;
    /// false when there was no such statement.
    pub fn deallocate(&self, name: Option<&str>) -> bool {
        let mut named = lock(&self.named);
        match name {
            Some(name) => named.remove(name).is_some(),
            None => {
                named.clear();
                true
            }
        }
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
