//! Shared nothing (architectures (a) and (b)): every table is in its
//! owner's partition, and a transaction that touches another host's tuple
//! runs that part on the owner, which holds the locks, and commits with
//! two-phase commit. The transport is TCP on loopback in (a) and a channel
//! in pod memory in (b); the protocol and the transaction code are the same.
//!
//! Messages (request → reply), all synchronous, from a coordinator worker
//! to a **participant** (`participant`): one thread on the owner host per remote worker,
//! with its own transaction context, so it can wait for a lock (WAIT_DIE)
//! without holding anyone else up.
//! - `LOCK table w idx mode age` → `OK rows...` | `CONFLICT`: the owner takes
//!   the lock (under the coordinator's protocol and age) and returns the
//!   tuple's rows, which the coordinator reads and writes in a local copy.
//! - `PREPARE (array w idx bytes)...` → `YES`: the owner writes the changed
//!   rows under the locks it holds (with undo) and votes. It has no reason
//!   to vote no: every lock it needs is already held.
//! - `COMMIT` → `ACK`: release. `ABORT` → `ACK`: undo, release.
//!
//! A transaction with no remote tuple commits locally without a message.
//! Messages are data: a participant validates every field and answers
//! `ERROR` to anything malformed; the coordinator treats that as a fatal
//! error of the run.
//!
//! **Failures.** A participant logs its writes in a `PREPARED` record
//! (durable) before it votes; the coordinator's `DECIDED_COMMIT` record
//! (its own writes, durable) is the commit point, and it logs
//! `DECIDED_ABORT` when it aborts after sending a PREPARE (`wal`). A
//! transport failure means the other host is down: the coordinator aborts
//! (before its decision) or carries on (after it), and the transaction's
//! input is given up as unavailable; it reconnects once the host is
//! `ALIVE` again. A participant whose coordinator went away undoes what was
//! not prepared; a prepared transaction is in doubt, and it waits for the
//! coordinator's decision in the coordinator's log, or for the coordinator
//! to be gone, which without a decision means abort ([`await_decision`]).
//! A restarted participant resolves its in-doubt records the same way
//! ([`settle_in_doubt`]).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::time::{Duration, Instant};

use crate::durability::lease::{HostRecord, life};
use crate::durability::wal;
use skiff_pod_memory::arch::Arch;
use skiff_pod_memory::constants::MESSAGE_BYTES_MAX;
use skiff_pod_memory::lockword::Mode;
use skiff_pod_memory::memory::PodMemory;
use skiff_pod_memory::memory::cxl::CxlAccess;
use skiff_pod_memory::memory::futex;
use skiff_pod_memory::memory::header::state;
use skiff_pod_memory::memory::layout::{Array, LockTable};

/// How long a coordinator waits for any one reply before it gives the
/// participant up as down.
const REPLY_WAIT_MAX: Duration = Duration::from_secs(30);
/// How long an in-doubt participant waits for its coordinator's decision
/// while the coordinator lives (it decides as soon as it learns that a
/// participant is down).
const DECISION_WAIT_MAX: Duration = Duration::from_secs(60);
/// Longest single sleep of a thread waiting for a decision or a channel.
const DOWN_POLL: Duration = Duration::from_millis(10);
/// Longest single futex sleep of a pod-memory channel end.
const CHANNEL_SLICE: Duration = Duration::from_millis(50);

/// Message codes: requests, then replies.
pub(crate) mod op {
    pub const LOCK: u32 = 1;
    pub const PREPARE: u32 = 2;
    pub const COMMIT: u32 = 3;
    pub const ABORT: u32 = 4;
    pub const OK: u32 = 10;
    pub const CONFLICT: u32 = 11;
    pub const YES: u32 = 12;
    pub const ACK: u32 = 13;
    pub const ERROR: u32 = 14;
}

/// The column groups of a tuple of `table` that a participant ships.
pub(crate) fn arrays_of(table: LockTable) -> &'static [Array] {
    match table {
        LockTable::Customer => &[Array::Customer, Array::CustomerData],
        LockTable::Stock => &[Array::Stock, Array::StockDist],
        LockTable::Warehouse => &[Array::Warehouse],
        LockTable::District => &[Array::District],
        // ORDER rows cover order lines and NEW_ORDER is its own: no TPC-C
        // transaction of this build reaches another host's orders.
        LockTable::Order | LockTable::NewOrder => &[],
    }
}

pub(crate) fn table_code(t: LockTable) -> u32 {
    t as u32 + 1
}

pub(crate) fn table_of(code: u32) -> Option<LockTable> {
    [
        LockTable::Warehouse,
        LockTable::District,
        LockTable::Customer,
        LockTable::Order,
        LockTable::NewOrder,
        LockTable::Stock,
    ]
    .into_iter()
    .find(|&t| table_code(t) == code)
}

pub(crate) fn array_of(code: u32) -> Option<Array> {
    [
        Array::Warehouse,
        Array::District,
        Array::Customer,
        Array::CustomerData,
        Array::Stock,
        Array::StockDist,
    ]
    .into_iter()
    .find(|&a| a as u32 + 1 == code)
}

/// A little-endian message under construction.
#[derive(Default)]
pub(crate) struct Msg(pub Vec<u8>);

impl Msg {
    fn new(op: u32) -> Msg {
        let mut m = Msg(Vec::with_capacity(256));
        m.u32(op);
        m
    }
    pub(crate) fn u32(&mut self, v: u32) -> &mut Msg {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Msg {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn bytes(&mut self, b: &[u8]) -> &mut Msg {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
        self
    }
}

/// Reads a message; every read is checked, a short message is an error.
pub(crate) struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    pub(crate) fn u32(&mut self) -> Option<u32> {
        let (h, t) = self.0.split_at_checked(4)?;
        self.0 = t;
        Some(u32::from_le_bytes(h.try_into().ok()?))
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        let (h, t) = self.0.split_at_checked(8)?;
        self.0 = t;
        Some(u64::from_le_bytes(h.try_into().ok()?))
    }
    pub(crate) fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        let (h, t) = self.0.split_at_checked(n)?;
        self.0 = t;
        Some(h)
    }
}

/// One synchronous request-reply connection from a coordinator worker to a
/// participant. `cxl` is the caller's window on pod memory: a pod channel
/// counts what its buffers and control line cost there; TCP costs nothing
/// in pod memory.
pub(crate) trait Link {
    fn call(
        &mut self,
        cxl: &mut CxlAccess<'_>,
        request: &[u8],
        reply: &mut Vec<u8>,
    ) -> Result<(), String>;
}

/// What a participant's end received.
pub(crate) enum Received {
    Request,
    /// The coordinator closed the link at the end of the run.
    Closed,
    /// The coordinator's incarnation went away (its link broke, or it is
    /// dead, or it restarted): its transaction, if any, is over.
    CoordinatorGone,
}

/// The participant's end.
pub(crate) trait Serve {
    fn recv(&mut self, cxl: &mut CxlAccess<'_>, request: &mut Vec<u8>) -> Result<Received, String>;
    fn reply(&mut self, cxl: &mut CxlAccess<'_>, reply: &[u8]) -> Result<(), String>;
    /// Whether to keep serving after [`Received::CoordinatorGone`]: a pod
    /// channel is reused by the coordinator's next incarnation, a TCP
    /// connection is not.
    fn outlives_coordinator(&self) -> bool;
}

// ---------------------------------------------------------------- TCP (a)

pub(crate) struct TcpLink(TcpStream);

impl TcpLink {
    pub(crate) fn connect(port: u16) -> Result<TcpLink, String> {
        let s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        // A dead participant's socket is closed by its kernel at once; the
        // timeout bounds a participant that is alive but stuck.
        s.set_read_timeout(Some(REPLY_WAIT_MAX))
            .map_err(|e| e.to_string())?;
        Ok(TcpLink(s))
    }
}

fn write_frame(s: &mut TcpStream, body: &[u8]) -> Result<(), String> {
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(body);
    s.write_all(&frame).map_err(|e| format!("send: {e}"))
}

/// Reads one frame; `Ok(false)` on a clean end of stream.
fn read_frame(s: &mut TcpStream, body: &mut Vec<u8>) -> Result<bool, String> {
    let mut len = [0u8; 4];
    match s.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(false),
        Err(e) => return Err(format!("receive: {e}")),
    }
    let n = u32::from_le_bytes(len) as u64;
    if n > MESSAGE_BYTES_MAX {
        return Err(format!("a {n}-byte message is over {MESSAGE_BYTES_MAX}"));
    }
    body.resize(n as usize, 0);
    s.read_exact(body).map_err(|e| format!("receive: {e}"))?;
    Ok(true)
}

impl Link for TcpLink {
    fn call(
        &mut self,
        _cxl: &mut CxlAccess<'_>,
        request: &[u8],
        reply: &mut Vec<u8>,
    ) -> Result<(), String> {
        write_frame(&mut self.0, request)?;
        if read_frame(&mut self.0, reply)? {
            Ok(())
        } else {
            Err("the participant closed the connection".into())
        }
    }
}

pub(crate) struct TcpServe(pub TcpStream);

impl Serve for TcpServe {
    fn recv(
        &mut self,
        _cxl: &mut CxlAccess<'_>,
        request: &mut Vec<u8>,
    ) -> Result<Received, String> {
        // A broken connection is a dead coordinator: its process is gone,
        // and the kernel closed its sockets.
        Ok(match read_frame(&mut self.0, request) {
            Ok(true) => Received::Request,
            Ok(false) => Received::Closed,
            Err(_) => Received::CoordinatorGone,
        })
    }
    fn reply(&mut self, _cxl: &mut CxlAccess<'_>, reply: &[u8]) -> Result<(), String> {
        // A reply the dead coordinator cannot read is the same as a reply
        // it never got; the next recv sees the connection broken.
        let _ = write_frame(&mut self.0, reply);
        Ok(())
    }
    fn outlives_coordinator(&self) -> bool {
        false
    }
}

/// Binds the host's listener on loopback; the port goes in the pod.
pub(crate) fn listen() -> Result<(TcpListener, u16), String> {
    let l = TcpListener::bind(("127.0.0.1", 0)).map_err(|e| format!("bind: {e}"))?;
    let port = l.local_addr().map_err(|e| e.to_string())?.port();
    Ok((l, port))
}

/// Accepts one connection, sleeping in poll(2) up to `deadline`; `None`
/// once `done()` (checked every 100 ms) or the deadline passed.
pub(crate) fn accept(
    l: &TcpListener,
    deadline: Instant,
    done: impl Fn() -> bool,
) -> Result<Option<TcpStream>, String> {
    use std::os::fd::AsRawFd;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || done() {
            return Ok(None);
        }
        let mut fd = libc::pollfd {
            fd: l.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().min(100) as libc::c_int;
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut fd, 1, ms) };
        if n > 0 {
            let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
            s.set_nodelay(true).map_err(|e| e.to_string())?;
            return Ok(Some(s));
        }
    }
}

// ------------------------------------------------------ pod memory (b)

mod chan {
    pub const IDLE: u32 = 0;
    pub const REQUEST: u32 = 1;
    pub const REPLY: u32 = 2;
    pub const CLOSED: u32 = 3;
}

/// How long a coordinator waits for a channel to come back to IDLE when it
/// (re)connects: the participant drops a request left for its previous
/// incarnation within a slice.
const CHANNEL_READY_MAX: Duration = Duration::from_secs(5);

/// One channel in pod memory: a control line in the coherent region
/// (state futex word, request and reply lengths, and the incarnations of
/// the coordinator and participant a request is for) and two buffers of
/// `MESSAGE_BYTES_MAX` in the shared region.
pub(crate) struct PodChannel<'m> {
    mem: &'m PodMemory,
    /// The control line's offset in the pod file.
    control: u64,
    state: &'m AtomicU32,
    request_len: &'m AtomicU32,
    reply_len: &'m AtomicU32,
    coordinator_inc: &'m AtomicU32,
    participant_inc: &'m AtomicU32,
    request_buf: u64,
    reply_buf: u64,
    from: u16,
    to: u16,
    /// Coordinator end: its own incarnation and the participant's it
    /// connected to. Participant end: the coordinator's current session
    /// and its own incarnation.
    from_inc: u32,
    to_inc: u32,
    /// Participant end: the session's coordinator was reported gone.
    gone_reported: bool,
    /// Coordinator end: close the channel when dropped (not when the
    /// participant went down: its next incarnation serves the channel).
    close_on_drop: bool,
    /// Stop serving at this time even if never closed.
    give_up: Instant,
}

impl<'m> PodChannel<'m> {
    fn open(mem: &'m PodMemory, from: u16, worker: u16, to: u16, give_up: Instant) -> Self {
        let (control, bufs) = mem.layout.channel(from, worker, to);
        PodChannel {
            mem,
            control,
            state: mem.pod.atomic_u32(control),
            request_len: mem.pod.atomic_u32(control + 4),
            reply_len: mem.pod.atomic_u32(control + 8),
            coordinator_inc: mem.pod.atomic_u32(control + 12),
            participant_inc: mem.pod.atomic_u32(control + 16),
            request_buf: bufs,
            reply_buf: bufs + MESSAGE_BYTES_MAX,
            from,
            to,
            from_inc: HostRecord::of(mem, from).incarnation(),
            to_inc: HostRecord::of(mem, to).incarnation(),
            gone_reported: false,
            close_on_drop: false,
            give_up,
        }
    }

    /// The participant's end of the channel from worker `worker` of `from`
    /// to this host `to`.
    pub(crate) fn serving(
        mem: &'m PodMemory,
        from: u16,
        worker: u16,
        to: u16,
        give_up: Instant,
    ) -> PodChannel<'m> {
        PodChannel::open(mem, from, worker, to, give_up)
    }

    /// The coordinator's end, from worker `worker` of `from` to `to`, once
    /// the channel is IDLE: a reply nobody read (the participant went down
    /// after it) is dropped; a request left for a previous incarnation of
    /// the participant is dropped by the participant's next incarnation.
    fn connect(
        mem: &'m PodMemory,
        from: u16,
        worker: u16,
        to: u16,
        to_inc: u32,
    ) -> Result<PodChannel<'m>, String> {
        let mut ch = PodChannel::open(mem, from, worker, to, Instant::now());
        ch.to_inc = to_inc;
        let until = Instant::now() + CHANNEL_READY_MAX;
        loop {
            let s = ch.state.load(Acquire);
            match s {
                chan::IDLE => break,
                chan::REPLY => {
                    let _ = ch
                        .state
                        .compare_exchange(chan::REPLY, chan::IDLE, AcqRel, Acquire);
                    continue;
                }
                _ => {}
            }
            if !HostRecord::of(mem, to).alive_as(to_inc) || Instant::now() > until {
                return Err(format!("channel to host {to} not idle ({s})"));
            }
            futex::wait(ch.state, s, CHANNEL_SLICE);
        }
        ch.close_on_drop = true;
        Ok(ch)
    }

    /// Sleeps until the state satisfies `done`; `None` after `until`.
    fn wait(&self, until: Instant, done: impl Fn(u32) -> bool) -> Option<u32> {
        futex::wait_until(self.state, until, CHANNEL_SLICE, done)
    }

    fn put(
        &self,
        cxl: &mut CxlAccess<'_>,
        buf: u64,
        len: &AtomicU32,
        body: &[u8],
    ) -> Result<(), String> {
        if body.len() as u64 > MESSAGE_BYTES_MAX {
            return Err(format!(
                "a {}-byte message is over {MESSAGE_BYTES_MAX}",
                body.len()
            ));
        }
        cxl.write_message(buf, body);
        // The length and then the state word: one access to the line.
        cxl.channel_control(self.control);
        len.store(body.len() as u32, Release);
        Ok(())
    }

    fn take(
        &self,
        cxl: &mut CxlAccess<'_>,
        buf: u64,
        len: &AtomicU32,
        body: &mut Vec<u8>,
    ) -> Result<(), String> {
        cxl.channel_control(self.control);
        let n = len.load(Acquire) as u64;
        if n > MESSAGE_BYTES_MAX {
            return Err(format!("channel length {n} is over {MESSAGE_BYTES_MAX}"));
        }
        body.resize(n as usize, 0);
        cxl.read_message(buf, body);
        Ok(())
    }

    /// The coordinator is done with the channel.
    pub(crate) fn close(&self) {
        self.state.store(chan::CLOSED, Release);
        futex::wake_all(self.state);
    }
}

impl Link for PodChannel<'_> {
    fn call(
        &mut self,
        cxl: &mut CxlAccess<'_>,
        request: &[u8],
        reply: &mut Vec<u8>,
    ) -> Result<(), String> {
        let s = self.state.load(Acquire);
        if s != chan::IDLE {
            return Err(format!("channel in state {s}, not idle"));
        }
        self.put(cxl, self.request_buf, self.request_len, request)?;
        self.coordinator_inc.store(self.from_inc, Relaxed);
        self.participant_inc.store(self.to_inc, Relaxed);
        self.state.store(chan::REQUEST, Release);
        futex::wake_all(self.state);
        let until = Instant::now() + REPLY_WAIT_MAX;
        loop {
            let slice = (Instant::now() + CHANNEL_SLICE).min(until);
            if self.wait(slice, |s| s == chan::REPLY).is_some() {
                break;
            }
            let down = !HostRecord::of(self.mem, self.to).alive_as(self.to_inc);
            if down || Instant::now() >= until {
                // Its next incarnation serves the channel: leave it open.
                self.close_on_drop = false;
                return Err(format!("host {} did not reply", self.to));
            }
        }
        self.take(cxl, self.reply_buf, self.reply_len, reply)?;
        self.state.store(chan::IDLE, Release);
        Ok(())
    }
}

impl Serve for PodChannel<'_> {
    fn recv(&mut self, cxl: &mut CxlAccess<'_>, request: &mut Vec<u8>) -> Result<Received, String> {
        let control = self.mem.control();
        loop {
            let slice = (Instant::now() + CHANNEL_SLICE).min(self.give_up);
            match self.wait(slice, |s| s == chan::REQUEST || s == chan::CLOSED) {
                Some(chan::REQUEST) => {
                    if self.participant_inc.load(Relaxed) != self.to_inc {
                        // For a previous incarnation of this host: its
                        // sender gave it up when that one died.
                        let _ =
                            self.state
                                .compare_exchange(chan::REQUEST, chan::IDLE, AcqRel, Acquire);
                        continue;
                    }
                    let inc = self.coordinator_inc.load(Relaxed);
                    if inc != self.from_inc {
                        // The coordinator restarted: its previous
                        // incarnation's transaction ends first; the request
                        // stays for the next call.
                        let report = !self.gone_reported;
                        (self.from_inc, self.gone_reported) = (inc, false);
                        if report {
                            return Ok(Received::CoordinatorGone);
                        }
                    }
                    self.take(cxl, self.request_buf, self.request_len, request)?;
                    return Ok(Received::Request);
                }
                Some(_) => return Ok(Received::Closed),
                None => {}
            }
            if Instant::now() >= self.give_up {
                return Ok(Received::Closed);
            }
            if !HostRecord::of(self.mem, self.from).alive_as(self.from_inc) {
                if !self.gone_reported {
                    self.gone_reported = true;
                    return Ok(Received::CoordinatorGone);
                }
                // Nobody will close it: the run ends without that host.
                if control.state() != state::RUNNING {
                    return Ok(Received::Closed);
                }
            }
        }
    }
    fn reply(&mut self, cxl: &mut CxlAccess<'_>, reply: &[u8]) -> Result<(), String> {
        self.put(cxl, self.reply_buf, self.reply_len, reply)?;
        let swapped = self
            .state
            .compare_exchange(chan::REQUEST, chan::REPLY, AcqRel, Acquire);
        if swapped.is_err() {
            return Err("channel state changed under a request".into());
        }
        futex::wake_all(self.state);
        Ok(())
    }
    fn outlives_coordinator(&self) -> bool {
        true
    }
}

/// The coordinator host of the distributed transaction a tag names, if it
/// is one (tags are data).
pub(crate) fn coordinator_of(mem: &PodMemory, tag: wal::Tag) -> Option<u16> {
    let host = (tag.peer >> 56) as u16;
    (host < mem.params().hosts).then_some(host)
}

/// The outcome of the distributed transaction a `PREPARED` record names:
/// its coordinator's decision if its log has one; otherwise abort once
/// that incarnation of the coordinator is gone (it can no longer decide:
/// presumed abort). While it lives it has not decided yet, and will as
/// soon as it learns that this participant's host went down.
pub(crate) fn await_decision(mem: &PodMemory, tag: wal::Tag) -> Result<bool, String> {
    let Some(coordinator) = coordinator_of(mem, tag) else {
        return Err(format!("prepared record names transaction {:#x}", tag.peer));
    };
    let log = skiff_pod_memory::memory::files::wal_path(mem.pod.path(), coordinator);
    let give_up = Instant::now() + DECISION_WAIT_MAX;
    loop {
        // Read before the log: if it was gone then, the log was final.
        let alive = HostRecord::of(mem, coordinator).alive_as(tag.peer_inc);
        if let Some(committed) = wal::find_decision(&log, tag.peer).map_err(|e| e.to_string())? {
            return Ok(committed);
        }
        if !alive {
            return Ok(false);
        }
        if Instant::now() > give_up {
            return Err(format!(
                "host {coordinator} did not decide transaction {:#x} in {DECISION_WAIT_MAX:?}",
                tag.peer
            ));
        }
        std::thread::sleep(DOWN_POLL);
    }
}

/// The outcomes of a restarted host's prepared transactions, by distributed
/// transaction (`wal::Tag::peer`), for the replay of its log
/// (`recovery::replay_own_log`): its own `RESOLVED_*` marker says, or, for
/// one that was in doubt when the host died, the coordinator's log
/// ([`await_decision`]); that outcome is logged now, so the log answers for
/// itself from here on. (Its locks were held until the outcome, so records
/// after it in the log are later writes.)
pub(crate) fn settle_in_doubt(
    mem: &PodMemory,
    host: u16,
    wal: &wal::Wal,
) -> skiff_pod_memory::error::Result<HashMap<u64, bool>> {
    use skiff_pod_memory::error::PodError;
    use wal::kind;
    let path = skiff_pod_memory::memory::files::wal_path(mem.pod.path(), host);
    let mut outcomes: HashMap<u64, bool> = HashMap::new();
    let mut prepared = Vec::new();
    wal::read_log(&path, |r, _| {
        match r.tag.kind {
            kind::RESOLVED_COMMIT => _ = outcomes.insert(r.tag.peer, true),
            kind::RESOLVED_ABORT => _ = outcomes.insert(r.tag.peer, false),
            kind::PREPARED => prepared.push((r.txn_id, r.tag)),
            _ => {}
        }
        Ok(())
    })?;
    for (txn_id, tag) in prepared {
        if outcomes.contains_key(&tag.peer) {
            continue;
        }
        let committed = await_decision(mem, tag).map_err(PodError::Corrupt)?;
        outcomes.insert(tag.peer, committed);
        if let Some(coordinator) = coordinator_of(mem, tag) {
            HostRecord::of(mem, coordinator).in_doubt_sub();
        }
        let kind = if committed {
            kind::RESOLVED_COMMIT
        } else {
            kind::RESOLVED_ABORT
        };
        let logged = wal
            .append(
                &wal::Redo::default(),
                txn_id,
                wal.next_seq(None),
                wal::Tag { kind, ..tag },
                |_, _| {},
            )
            .and_then(|end| wal.wait_durable(end));
        logged.map_err(PodError::Corrupt)?;
    }
    Ok(outcomes)
}

// ------------------------------------------------------------ coordinator

/// A remote tuple a coordinator holds a lock on, with its local copy.
pub(crate) struct RemoteTuple {
    pub table: LockTable,
    pub w: u32,
    pub idx: u64,
    pub owner: u16,
    /// One row per column group (`arrays_of(table)`), and whether written.
    pub rows: Vec<(Vec<u8>, bool)>,
}

/// A link to one incarnation of another host.
struct Connected<'m> {
    link: Box<dyn Link + 'm>,
    incarnation: u32,
}

/// A coordinator worker's side of shared nothing: its links to every other
/// host (made on first use, and again after the host restarted), the
/// remote tuples of the current transaction, and counters.
pub(crate) struct Coordinator<'m> {
    mem: &'m PodMemory,
    host: u16,
    worker: u16,
    links: Vec<Option<Connected<'m>>>,
    pub tuples: Vec<RemoteTuple>,
    /// Hosts holding locks for the current transaction.
    participants: Vec<u16>,
    /// A PREPARE went out for the current transaction: an abort must be
    /// logged as a decision (a participant may be in doubt).
    prepare_sent: bool,
    reply: Vec<u8>,
    pub messages: u64,
}

/// Why a remote call failed.
pub(crate) enum RemoteError {
    Conflict,
    /// The participant's host is down (or restarting).
    Unreachable,
    Fatal(String),
}

impl<'m> Coordinator<'m> {
    /// The coordinator of worker `worker` of `host`; links are made on
    /// first use (TCP connections to the ports hosts publish in (a), pod
    /// channels in (b)).
    pub(crate) fn new(mem: &'m PodMemory, host: u16, worker: u16) -> Coordinator<'m> {
        Coordinator {
            mem,
            host,
            worker,
            links: (0..mem.params().hosts).map(|_| None).collect(),
            tuples: Vec::new(),
            participants: Vec::new(),
            prepare_sent: false,
            reply: Vec::new(),
            messages: 0,
        }
    }

    /// The link to host `to`'s current incarnation, connecting if needed.
    fn link(&mut self, to: u16) -> Result<&mut Box<dyn Link + 'm>, RemoteError> {
        let (mem, host, worker) = (self.mem, self.host, self.worker);
        if to == host || to >= mem.params().hosts {
            return Err(RemoteError::Fatal(format!("no link to host {to}")));
        }
        let record = HostRecord::of(mem, to);
        // A host that missed a heartbeat and whose process is gone gets no
        // request: over a pod channel it would take a slice to notice.
        if record.beat_is_late() && !record.alive_as(record.incarnation()) {
            self.links[to as usize] = None;
            return Err(RemoteError::Unreachable);
        }
        let slot = &mut self.links[to as usize];
        let current = slot
            .as_ref()
            .is_some_and(|c| c.incarnation == record.incarnation());
        if !current {
            *slot = None;
            if record.life() != life::ALIVE {
                return Err(RemoteError::Unreachable);
            }
            let incarnation = record.incarnation();
            let link: Box<dyn Link + 'm> = if mem.params().arch == Arch::SharedNothingTcp {
                let port = mem.pod.atomic_u32(mem.layout.port_word(to)).load(Acquire);
                let port = u16::try_from(port)
                    .map_err(|_| RemoteError::Fatal(format!("port {port} of host {to}")))?;
                Box::new(TcpLink::connect(port).map_err(|_| RemoteError::Unreachable)?)
            } else {
                let ch = PodChannel::connect(mem, host, worker, to, incarnation)
                    .map_err(|_| RemoteError::Unreachable)?;
                Box::new(ch)
            };
            *slot = Some(Connected { link, incarnation });
        }
        match slot {
            Some(c) => Ok(&mut c.link),
            None => Err(RemoteError::Unreachable),
        }
    }

    /// One request and its reply. A transport failure is the host going
    /// down: the link is dropped, and made again once it is back.
    fn call(
        &mut self,
        cxl: &mut CxlAccess<'_>,
        to: u16,
        request: &Msg,
    ) -> Result<Reader<'_>, RemoteError> {
        let mut reply = std::mem::take(&mut self.reply);
        let called = self.link(to)?.call(cxl, &request.0, &mut reply);
        self.reply = reply;
        if called.is_err() {
            self.links[to as usize] = None;
            return Err(RemoteError::Unreachable);
        }
        self.messages += 2;
        Ok(Reader(&self.reply))
    }

    /// Locks a remote tuple at its owner and keeps its rows; returns its
    /// index in `tuples`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn lock(
        &mut self,
        cxl: &mut CxlAccess<'_>,
        owner: u16,
        table: LockTable,
        w: u32,
        idx: u64,
        mode: Mode,
        age: u32,
    ) -> Result<usize, RemoteError> {
        let mut m = Msg::new(op::LOCK);
        m.u32(table_code(table)).u32(w).u64(idx);
        m.u32((mode == Mode::Exclusive) as u32).u32(age);
        if !self.participants.contains(&owner) {
            self.participants.push(owner);
        }
        let mut r = self.call(cxl, owner, &m)?;
        match r.u32() {
            Some(op::OK) => {}
            Some(op::CONFLICT) => return Err(RemoteError::Conflict),
            other => {
                return Err(RemoteError::Fatal(format!(
                    "host {owner} answered LOCK with {other:?}"
                )));
            }
        }
        let mut rows = Vec::new();
        for &a in arrays_of(table) {
            match r.bytes() {
                Some(b) if b.len() as u64 == a.row_bytes() => rows.push((b.to_vec(), false)),
                _ => return Err(RemoteError::Fatal(format!("host {owner}: bad {a:?} row"))),
            }
        }
        self.tuples.push(RemoteTuple {
            table,
            w,
            idx,
            owner,
            rows,
        });
        Ok(self.tuples.len() - 1)
    }

    /// Phase one of two-phase commit for distributed transaction `id` of
    /// this host's incarnation `incarnation`: every participant writes and
    /// logs its part, and votes.
    pub(crate) fn prepare(
        &mut self,
        cxl: &mut CxlAccess<'_>,
        id: u64,
        incarnation: u32,
    ) -> Result<(), RemoteError> {
        for p in self.participants.clone() {
            let mut m = Msg::new(op::PREPARE);
            m.u64(id).u32(incarnation);
            let dirty: Vec<&RemoteTuple> = self.tuples.iter().filter(|t| t.owner == p).collect();
            let n: usize = dirty
                .iter()
                .map(|t| t.rows.iter().filter(|r| r.1).count())
                .sum();
            m.u32(n as u32);
            for t in dirty {
                for (&a, (row, written)) in arrays_of(t.table).iter().zip(&t.rows) {
                    if *written {
                        m.u32(a as u32 + 1).u32(t.w).u64(t.idx).bytes(row);
                    }
                }
            }
            self.prepare_sent = true;
            let mut r = self.call(cxl, p, &m)?;
            if r.u32() != Some(op::YES) {
                return Err(RemoteError::Fatal(format!("host {p} did not vote yes")));
            }
        }
        Ok(())
    }

    /// Phase two, once the decision is durable: tells every participant
    /// to commit or to abort (undo) and release. A participant that went
    /// down follows the decision in this host's log when it restarts.
    pub(crate) fn finish(&mut self, cxl: &mut CxlAccess<'_>, commit: bool) -> Result<(), String> {
        let participants = std::mem::take(&mut self.participants);
        let m = Msg::new(if commit { op::COMMIT } else { op::ABORT });
        for &p in &participants {
            match self.call(cxl, p, &m).map(|mut r| r.u32()) {
                Ok(Some(op::ACK)) | Err(RemoteError::Unreachable) => {}
                Ok(_) | Err(RemoteError::Conflict) => {
                    return Err(format!("host {p} did not acknowledge"));
                }
                Err(RemoteError::Fatal(e)) => return Err(e),
            }
        }
        self.tuples.clear();
        self.prepare_sent = false;
        Ok(())
    }

    pub(crate) fn has_participants(&self) -> bool {
        !self.participants.is_empty()
    }

    pub(crate) fn prepare_sent(&self) -> bool {
        self.prepare_sent
    }
}

impl Drop for PodChannel<'_> {
    fn drop(&mut self) {
        // Only a coordinator's end closes, at the end of the run.
        if self.close_on_drop && self.state.load(Acquire) == chan::IDLE {
            self.close();
        }
    }
}
