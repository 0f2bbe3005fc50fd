//! Who is calling, and what a session keeps between calls.
//!
//! State model: a [`Conn`] wraps one coordinator [`ClientSession`]. It is
//! keyed either by a bearer token, made by a handshake, or (only when no
//! users are configured) by the peer address of a loopback TCP connection
//! that calls without a token. Life cycle:
//! - an anonymous session ends when its TCP connection closes;
//! - a token session ends after [`SESSION_IDLE_MAX`] without calls, or
//!   [`SESSION_DETACHED_IDLE_MAX`] after the last TCP connection that used
//!   it closed; never while one of its results is streaming.
//!
//! Results parked for `DoGet` live at most [`RESULT_UNCLAIMED_MAX`] and
//! may be claimed by the user whose statement made them (a client may
//! fetch over another connection). Prepared statements belong to their
//! session. Every map here is bounded: sessions by the coordinator's
//! `max_connections`, the rest by the `*_MAX` constants per session.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arrow::datatypes::SchemaRef;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use datafusion::common::ScalarValue;
use datafusion::execution::SendableRecordBatchStream;

use super::{RESULT_UNCLAIMED_MAX, SESSION_DETACHED_IDLE_MAX, SESSION_IDLE_MAX};
use skiff_node::sync::lock;

use skiff_coordinator::{ClientSession, PreparedStatement, StatementResult};
use skiff_node::error::{Result, ServerError, SqlState};

/// Results one session may leave waiting for `DoGet`.
pub(super) const RESULTS_PARKED_PER_SESSION_MAX: usize = 16;
/// Prepared statements one session may hold open.
pub(super) const PREPARED_PER_SESSION_MAX: usize = 256;
/// Token sessions tracked per TCP connection; beyond it a session used over
/// the connection just expires by idleness.
const TOKENS_PER_CONNECTION_MAX: usize = 8;

/// Random bytes in a token, a ticket and a prepared-statement handle.
const SECRET_BYTES: usize = 16;

/// One client session of the Flight SQL front door.
pub(super) struct Conn {
    pub(super) session: ClientSession,
    last_used: Mutex<Instant>,
    /// Live TCP connections that have used this session.
    attached: AtomicUsize,
    /// Results of this session being streamed now.
    streaming: AtomicUsize,
    prepared: Mutex<HashMap<Bytes, Prepared>>,
}

/// A prepared statement and the parameter rows last bound to it.
#[derive(Clone)]
pub(super) struct Prepared {
    pub(super) statement: PreparedStatement,
    /// Each row runs the statement once; empty when nothing was bound.
    pub(super) params: Vec<Vec<ScalarValue>>,
}

/// A started statement waiting for its `DoGet`.
pub(super) struct Parked {
    user: String,
    session: u64,
    pub(super) schema: SchemaRef,
    pub(super) stream: SendableRecordBatchStream,
    deadline: Instant,
}

impl Conn {
    fn new(session: ClientSession, now: Instant) -> Self {
        Self {
            session,
            last_used: Mutex::new(now),
            attached: AtomicUsize::new(0),
            streaming: AtomicUsize::new(0),
            prepared: Mutex::new(HashMap::new()),
        }
    }

    fn touch(&self, now: Instant) {
        *lock(&self.last_used) = now;
    }

    fn expired(&self, now: Instant) -> bool {
        let idle = now.saturating_duration_since(*lock(&self.last_used));
        self.streaming.load(Ordering::SeqCst) == 0
            && (idle >= SESSION_IDLE_MAX
                || (self.attached.load(Ordering::SeqCst) == 0 && idle >= SESSION_DETACHED_IDLE_MAX))
    }

    /// Keep `statement`; returns its handle.
    pub(super) fn add_prepared(&self, statement: PreparedStatement) -> Result<Bytes> {
        let mut prepared = lock(&self.prepared);
        if prepared.len() >= PREPARED_PER_SESSION_MAX {
            return Err(ServerError::new(
                SqlState::InsufficientResources,
                format!(
                    "too many prepared statements open in this session \
                     (max {PREPARED_PER_SESSION_MAX}); close some"
                ),
            ));
        }
        let handle = Bytes::from(secret().to_vec());
        let params = Vec::new();
        prepared.insert(handle.clone(), Prepared { statement, params });
        Ok(handle)
    }

    pub(super) fn prepared(&self, handle: &[u8]) -> Result<Prepared> {
        lock(&self.prepared)
            .get(handle)
            .cloned()
            .ok_or_else(unknown_prepared)
    }

    pub(super) fn bind(&self, handle: &[u8], params: Vec<Vec<ScalarValue>>) -> Result<()> {
        let mut prepared = lock(&self.prepared);
        let entry = prepared.get_mut(handle).ok_or_else(unknown_prepared)?;
        entry.params = params;
        Ok(())
    }

    pub(super) fn close_prepared(&self, handle: &[u8]) {
        lock(&self.prepared).remove(handle);
    }

    /// Count a result stream of this session until the guard drops.
    pub(super) fn streaming(self: &Arc<Self>) -> StreamingGuard {
        self.streaming.fetch_add(1, Ordering::SeqCst);
        StreamingGuard(Arc::clone(self))
    }
}

/// Keeps its session from expiring while a result streams.
pub(super) struct StreamingGuard(Arc<Conn>);

impl Drop for StreamingGuard {
    fn drop(&mut self) {
        self.0.streaming.fetch_sub(1, Ordering::SeqCst);
        self.0.touch(Instant::now());
    }
}

fn unknown_prepared() -> ServerError {
    ServerError::new(
        SqlState::InvalidParameterValue,
        "unknown prepared statement handle (closed, or made in another session)",
    )
}

fn secret() -> [u8; SECRET_BYTES] {
    rand::random()
}

/// All sessions and parked results of the front door.
#[derive(Default)]
pub(super) struct Registry {
    tokens: Mutex<HashMap<String, Arc<Conn>>>,
    anonymous: Mutex<HashMap<SocketAddr, Arc<Conn>>>,
    /// Per live TCP connection: the tokens used over it.
    links: Mutex<HashMap<SocketAddr, Vec<String>>>,
    results: Mutex<HashMap<Bytes, Parked>>,
}

impl Registry {
    /// Register `session` under a new bearer token, made over `peer`.
    pub(super) fn open_token(&self, session: ClientSession, peer: Option<SocketAddr>) -> String {
        let token = URL_SAFE_NO_PAD.encode(secret());
        let conn = Arc::new(Conn::new(session, Instant::now()));
        lock(&self.tokens).insert(token.clone(), Arc::clone(&conn));
        self.link(&conn, &token, peer);
        token
    }

    /// The session of `token`, used over `peer`.
    pub(super) fn by_token(&self, token: &str, peer: Option<SocketAddr>) -> Result<Arc<Conn>> {
        let conn = lock(&self.tokens).get(token).cloned().ok_or_else(|| {
            ServerError::new(
                SqlState::InvalidAuthorization,
                "unknown or expired bearer token; authenticate again with a handshake",
            )
        })?;
        conn.touch(Instant::now());
        self.link(&conn, token, peer);
        Ok(conn)
    }

    /// The anonymous session of connection `peer`, opened by `open` on
    /// its first call.
    pub(super) fn anonymous(
        &self,
        peer: SocketAddr,
        open: impl FnOnce() -> Result<ClientSession>,
    ) -> Result<Arc<Conn>> {
        let now = Instant::now();
        let mut anonymous = lock(&self.anonymous);
        if let Some(conn) = anonymous.get(&peer) {
            conn.touch(now);
            return Ok(Arc::clone(conn));
        }
        let conn = Arc::new(Conn::new(open()?, now));
        conn.attached.store(1, Ordering::SeqCst);
        anonymous.insert(peer, Arc::clone(&conn));
        Ok(conn)
    }

    fn link(&self, conn: &Conn, token: &str, peer: Option<SocketAddr>) {
        let Some(peer) = peer else { return };
        let mut links = lock(&self.links);
        let tokens = links.entry(peer).or_default();
        if tokens.len() < TOKENS_PER_CONNECTION_MAX && !tokens.iter().any(|t| t == token) {
            tokens.push(token.to_string());
            conn.attached.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The TCP connection from `peer` closed.
    pub(super) fn connection_closed(&self, peer: SocketAddr) {
        let anonymous = lock(&self.anonymous).remove(&peer);
        drop(anonymous);
        let Some(tokens) = lock(&self.links).remove(&peer) else {
            return;
        };
        let now = Instant::now();
        let sessions = lock(&self.tokens);
        for token in tokens {
            if let Some(conn) = sessions.get(&token) {
                conn.attached.fetch_sub(1, Ordering::SeqCst);
                // The detached grace period starts now.
                conn.touch(now);
            }
        }
    }

    /// Close the token session that has been detached (no live TCP
    /// connection) the longest and has nothing streaming or parked; false
    /// when there is none. Called when the connection limit is reached, so
    /// that clients which connect once per query are not refused because
    /// of sessions waiting out [`SESSION_DETACHED_IDLE_MAX`].
    pub(super) fn reclaim_detached(&self) -> bool {
        let busy: Vec<u64> = lock(&self.results).values().map(|p| p.session).collect();
        let reclaimed = {
            let mut tokens = lock(&self.tokens);
            let oldest = tokens
                .iter()
                .filter(|(_, conn)| {
                    conn.attached.load(Ordering::SeqCst) == 0
                        && conn.streaming.load(Ordering::SeqCst) == 0
                        && !busy.contains(&conn.session.id())
                })
                .min_by_key(|(_, conn)| *lock(&conn.last_used))
                .map(|(token, _)| token.clone());
            oldest.and_then(|token| tokens.remove(&token))
        };
        reclaimed.is_some()
    }

    /// Close expired sessions and drop unclaimed results.
    pub(super) fn sweep(&self) {
        self.sweep_at(Instant::now());
    }

    pub(super) fn sweep_at(&self, now: Instant) {
        // Dropped outside the locks: dropping a result cancels its query.
        let expired: Vec<Arc<Conn>> = {
            let mut tokens = lock(&self.tokens);
            let keys: Vec<String> = tokens
                .iter()
                .filter(|(_, conn)| conn.expired(now))
                .map(|(token, _)| token.clone())
                .collect();
            keys.iter().filter_map(|k| tokens.remove(k)).collect()
        };
        let unclaimed: Vec<Parked> = {
            let mut results = lock(&self.results);
            let keys: Vec<Bytes> = results
                .iter()
                .filter(|(_, parked)| parked.deadline <= now)
                .map(|(handle, _)| handle.clone())
                .collect();
            keys.iter().filter_map(|k| results.remove(k)).collect()
        };
        drop(expired);
        drop(unclaimed);
    }

    /// Park `result` until its `DoGet`; returns its ticket handle (the
    /// query id, then random bytes).
    pub(super) fn park(
        &self,
        conn: &Conn,
        schema: SchemaRef,
        result: StatementResult,
    ) -> Result<Bytes> {
        let mut results = lock(&self.results);
        let session = conn.session.id();
        let parked = results.values().filter(|p| p.session == session).count();
        if parked >= RESULTS_PARKED_PER_SESSION_MAX {
            return Err(ServerError::new(
                SqlState::InsufficientResources,
                format!(
                    "too many results of this session wait for DoGet \
                     (max {RESULTS_PARKED_PER_SESSION_MAX}); fetch or cancel them"
                ),
            ));
        }
        let mut handle = result.query_id.to_be_bytes().to_vec();
        handle.extend_from_slice(&secret());
        let handle = Bytes::from(handle);
        let parked = Parked {
            user: conn.session.user().to_string(),
            session,
            schema,
            stream: result.stream,
            deadline: Instant::now() + RESULT_UNCLAIMED_MAX,
        };
        results.insert(handle.clone(), parked);
        Ok(handle)
    }

    /// Take the result parked under `handle` for `conn`.
    pub(super) fn claim(&self, conn: &Conn, handle: &[u8]) -> Result<Parked> {
        let mut results = lock(&self.results);
        match results.remove(handle) {
            Some(parked) if parked.user == conn.session.user() => Ok(parked),
            other => {
                if let Some(parked) = other {
                    results.insert(Bytes::copy_from_slice(handle), parked);
                }
                Err(ServerError::new(
                    SqlState::InvalidParameterValue,
                    "unknown ticket: results are fetched once, within a minute of \
                     GetFlightInfo, by the user who ran the statement",
                ))
            }
        }
    }

    /// Drop the result parked under `handle` if `conn`'s user owns it.
    pub(super) fn discard(&self, conn: &Conn, handle: &[u8]) -> bool {
        let removed = {
            let mut results = lock(&self.results);
            match results.get(handle) {
                Some(parked) if parked.user == conn.session.user() => results.remove(handle),
                _ => None,
            }
        };
        removed.is_some()
    }

    #[cfg(test)]
    pub(super) fn counts(&self) -> (usize, usize, usize) {
        (
            lock(&self.tokens).len(),
            lock(&self.anonymous).len(),
            lock(&self.results).len(),
        )
    }
}

/// The query id a ticket handle made by [`Registry::park`] starts with.
pub(super) fn query_of(handle: &[u8]) -> Option<u64> {
    let id: [u8; 8] = handle.get(..8)?.try_into().ok()?;
    (handle.len() == 8 + SECRET_BYTES).then(|| u64::from_be_bytes(id))
}
