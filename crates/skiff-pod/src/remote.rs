//! Shared nothing (architectures (a) and (b)): every table is in its
//! owner's partition, and a transaction that touches another host's tuple
//! runs that part on the owner, which holds the locks, and commits with
//! two-phase commit. The transport is TCP on loopback in (a) and a channel
//! in pod memory in (b); the protocol and the transaction code are the same.
//!
//! Messages (request → reply), all synchronous, from a coordinator worker
//! to a **participant**: one thread on the owner host per remote worker,
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
//! `ERROR` to anything malformed; the coordinator treats that, and a
//! transport failure, as a fatal error of the run.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
use std::time::{Duration, Instant};

use crate::arch::Arch;
use crate::futex;
use crate::layout::{Array, LockTable};
use crate::lockword::Mode;
use crate::memory::PodMemory;
use crate::txn::{Txn, TxnError};

/// Largest message: a PREPARE with every row a transaction may change at
/// one participant (15 stock rows of NewOrder: 15 * (24 + 80) bytes;
/// Payment's customer: 2 * 24 + 184 + 500) fits many times over.
pub(crate) const MESSAGE_BYTES_MAX: u64 = 16 * 1024;

/// How long a coordinator waits for any one reply before failing the run.
const REPLY_WAIT_MAX: Duration = Duration::from_secs(30);
/// Longest single futex sleep of a pod-memory channel end.
const CHANNEL_SLICE: Duration = Duration::from_millis(50);

mod op {
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

fn table_code(t: LockTable) -> u32 {
    t as u32 + 1
}

fn table_of(code: u32) -> Option<LockTable> {
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

fn array_of(code: u32) -> Option<Array> {
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
    fn u32(&mut self, v: u32) -> &mut Msg {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Msg {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Msg {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
        self
    }
}

/// Reads a message; every read is checked, a short message is an error.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn u32(&mut self) -> Option<u32> {
        let (h, t) = self.0.split_at_checked(4)?;
        self.0 = t;
        Some(u32::from_le_bytes(h.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        let (h, t) = self.0.split_at_checked(8)?;
        self.0 = t;
        Some(u64::from_le_bytes(h.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        let (h, t) = self.0.split_at_checked(n)?;
        self.0 = t;
        Some(h)
    }
}

/// One synchronous request-reply connection from a coordinator worker to a
/// participant.
pub(crate) trait Link {
    fn call(&mut self, request: &[u8], reply: &mut Vec<u8>) -> Result<(), String>;
}

/// The participant's end.
pub(crate) trait Serve {
    /// The next request, or `None` when the coordinator closed the link.
    fn recv(&mut self, request: &mut Vec<u8>) -> Result<Option<()>, String>;
    fn reply(&mut self, reply: &[u8]) -> Result<(), String>;
}

// ---------------------------------------------------------------- TCP (a)

pub(crate) struct TcpLink(TcpStream);

impl TcpLink {
    pub(crate) fn connect(port: u16) -> Result<TcpLink, String> {
        let s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
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
    fn call(&mut self, request: &[u8], reply: &mut Vec<u8>) -> Result<(), String> {
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
    fn recv(&mut self, request: &mut Vec<u8>) -> Result<Option<()>, String> {
        Ok(read_frame(&mut self.0, request)?.then_some(()))
    }
    fn reply(&mut self, reply: &[u8]) -> Result<(), String> {
        write_frame(&mut self.0, reply)
    }
}

/// Binds the host's listener on loopback; the port goes in the pod.
pub(crate) fn listen() -> Result<(TcpListener, u16), String> {
    let l = TcpListener::bind(("127.0.0.1", 0)).map_err(|e| format!("bind: {e}"))?;
    let port = l.local_addr().map_err(|e| e.to_string())?.port();
    Ok((l, port))
}

/// Accepts one connection, sleeping in poll(2) up to `deadline`.
pub(crate) fn accept(l: &TcpListener, deadline: Instant) -> Result<TcpStream, String> {
    use std::os::fd::AsRawFd;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("no coordinator connected in time".into());
        }
        let mut fd = libc::pollfd {
            fd: l.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().min(1_000) as libc::c_int;
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut fd, 1, ms) };
        if n > 0 {
            let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
            s.set_nodelay(true).map_err(|e| e.to_string())?;
            return Ok(s);
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

/// One channel in pod memory: a control line in the coherent region
/// (state futex word, request and reply lengths) and two buffers of
/// `MESSAGE_BYTES_MAX` in the shared region.
pub(crate) struct PodChannel<'m> {
    mem: &'m PodMemory,
    state: &'m AtomicU32,
    request_len: &'m AtomicU32,
    reply_len: &'m AtomicU32,
    request_buf: u64,
    reply_buf: u64,
    /// Stop serving at this time even if never closed (a dead coordinator).
    give_up: Instant,
}

impl<'m> PodChannel<'m> {
    /// The channel from worker `worker` of `from` to host `to`.
    pub(crate) fn open(
        mem: &'m PodMemory,
        from: u16,
        worker: u16,
        to: u16,
        give_up: Instant,
    ) -> PodChannel<'m> {
        let (control, bufs) = mem.layout.channel(from, worker, to);
        PodChannel {
            mem,
            state: mem.pod.atomic_u32(control),
            request_len: mem.pod.atomic_u32(control + 4),
            reply_len: mem.pod.atomic_u32(control + 8),
            request_buf: bufs,
            reply_buf: bufs + MESSAGE_BYTES_MAX,
            give_up,
        }
    }

    /// Sleeps until the state satisfies `done`; `None` after `until`.
    fn wait(&self, until: Instant, done: impl Fn(u32) -> bool) -> Option<u32> {
        futex::wait_until(self.state, until, CHANNEL_SLICE, done)
    }

    fn put(&self, buf: u64, len: &AtomicU32, body: &[u8]) -> Result<(), String> {
        if body.len() as u64 > MESSAGE_BYTES_MAX {
            return Err(format!(
                "a {}-byte message is over {MESSAGE_BYTES_MAX}",
                body.len()
            ));
        }
        self.mem.pod.write_bytes(buf, body);
        len.store(body.len() as u32, Release);
        Ok(())
    }

    fn take(&self, buf: u64, len: &AtomicU32, body: &mut Vec<u8>) -> Result<(), String> {
        let n = len.load(Acquire) as u64;
        if n > MESSAGE_BYTES_MAX {
            return Err(format!("channel length {n} is over {MESSAGE_BYTES_MAX}"));
        }
        body.resize(n as usize, 0);
        self.mem.pod.read_bytes(buf, body);
        Ok(())
    }

    /// The coordinator is done with the channel.
    pub(crate) fn close(&self) {
        self.state.store(chan::CLOSED, Release);
        futex::wake_all(self.state);
    }
}

impl Link for PodChannel<'_> {
    fn call(&mut self, request: &[u8], reply: &mut Vec<u8>) -> Result<(), String> {
        let s = self.state.load(Acquire);
        if s != chan::IDLE {
            return Err(format!("channel in state {s}, not idle"));
        }
        self.put(self.request_buf, self.request_len, request)?;
        self.state.store(chan::REQUEST, Release);
        futex::wake_all(self.state);
        let until = Instant::now() + REPLY_WAIT_MAX;
        if self.wait(until, |s| s == chan::REPLY).is_none() {
            return Err(format!("no reply in {REPLY_WAIT_MAX:?}"));
        }
        self.take(self.reply_buf, self.reply_len, reply)?;
        self.state.store(chan::IDLE, Release);
        Ok(())
    }
}

impl Serve for PodChannel<'_> {
    fn recv(&mut self, request: &mut Vec<u8>) -> Result<Option<()>, String> {
        match self.wait(self.give_up, |s| s == chan::REQUEST || s == chan::CLOSED) {
            Some(chan::REQUEST) => {
                self.take(self.request_buf, self.request_len, request)?;
                Ok(Some(()))
            }
            _ => Ok(None),
        }
    }
    fn reply(&mut self, reply: &[u8]) -> Result<(), String> {
        self.put(self.reply_buf, self.reply_len, reply)?;
        let swapped = self
            .state
            .compare_exchange(chan::REQUEST, chan::REPLY, AcqRel, Acquire);
        if swapped.is_err() {
            return Err("channel state changed under a request".into());
        }
        futex::wake_all(self.state);
        Ok(())
    }
}

// ------------------------------------------------------------ participant

/// Serves one coordinator worker until it closes the link: LOCK, PREPARE,
/// COMMIT and ABORT on this host's partition. Returns the messages it
/// answered.
pub(crate) fn serve<'m>(
    mem: &'m PodMemory,
    host: u16,
    wal: &'m crate::wal::Wal,
    mut link: impl Serve,
) -> Result<u64, String> {
    let mut txn = Txn::for_worker(mem, host, 0);
    // The owner logs what it writes for remote coordinators; shared nothing
    // writes only partitions, so no transaction slot.
    txn.attach_log(wal, false);
    let (mut request, mut reply) = (Vec::new(), Msg::default());
    let mut answered = 0;
    while link.recv(&mut request)?.is_some() {
        reply.0.clear();
        handle(&mut txn, host, &request, &mut reply);
        link.reply(&reply.0)?;
        answered += 1;
    }
    if txn.is_active() {
        txn.abort();
    }
    Ok(answered)
}

fn handle(txn: &mut Txn<'_>, host: u16, request: &[u8], reply: &mut Msg) {
    let mut r = Reader(request);
    let ok = match r.u32() {
        Some(op::LOCK) => lock(txn, host, &mut r, reply),
        Some(op::PREPARE) => prepare(txn, host, &mut r, reply),
        Some(op::COMMIT) if txn.is_active() => {
            txn.commit();
            reply.u32(op::ACK);
            true
        }
        Some(op::ABORT) => {
            if txn.is_active() {
                txn.abort();
            }
            reply.u32(op::ACK);
            true
        }
        _ => false,
    };
    if !ok {
        reply.0.clear();
        reply.u32(op::ERROR);
    }
}

/// A tuple key from a request, validated against this host's partition.
fn key(txn: &Txn<'_>, host: u16, table: u32, w: u32, idx: u64) -> Option<(LockTable, u32, u64)> {
    let l = &txn.mem().layout;
    let table = table_of(table)?;
    let owned = (1..=l.params.warehouses).contains(&w) && l.host_of(w) == host;
    (owned && idx < l.lock_rows(table) && !arrays_of(table).is_empty()).then_some((table, w, idx))
}

fn lock(txn: &mut Txn<'_>, host: u16, r: &mut Reader<'_>, reply: &mut Msg) -> bool {
    let (Some(t), Some(w), Some(idx), Some(mode), Some(age)) =
        (r.u32(), r.u32(), r.u64(), r.u32(), r.u32())
    else {
        return false;
    };
    let Some((table, w, idx)) = key(txn, host, t, w, idx) else {
        return false;
    };
    let mode = match mode {
        0 => Mode::Shared,
        1 => Mode::Exclusive,
        _ => return false,
    };
    if !txn.is_active() {
        txn.begin(age & ((1 << crate::lockword::AGE_BITS) - 1));
    }
    match txn.lock(table, w, idx, mode) {
        Ok(()) => {
            reply.u32(op::OK);
            let mut buf = Vec::new();
            for &a in arrays_of(table) {
                buf.resize(a.row_bytes() as usize, 0);
                txn.get_bytes(a, w, idx, &mut buf);
                reply.bytes(&buf);
            }
            true
        }
        Err(TxnError::Conflict) => {
            reply.u32(op::CONFLICT);
            true
        }
        Err(_) => false,
    }
}

fn prepare(txn: &mut Txn<'_>, host: u16, r: &mut Reader<'_>, reply: &mut Msg) -> bool {
    let Some(n) = r.u32() else { return false };
    if !txn.is_active() {
        return false;
    }
    for _ in 0..n {
        let (Some(a), Some(w), Some(idx), Some(bytes)) = (r.u32(), r.u32(), r.u64(), r.bytes())
        else {
            return false;
        };
        let Some(array) = array_of(a) else {
            return false;
        };
        let l = &txn.mem().layout;
        let Some((table, lidx)) = l.covering_lock(array, idx) else {
            return false;
        };
        if key(txn, host, table_code(table), w, lidx).is_none()
            || bytes.len() as u64 != array.row_bytes()
            || !txn.holds(table, w, lidx, Mode::Exclusive)
        {
            return false;
        }
        txn.put_bytes(array, w, idx, bytes);
    }
    reply.u32(op::YES);
    true
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

/// A coordinator worker's side of shared nothing: its links to every other
/// host, the remote tuples of the current transaction, and counters.
pub(crate) struct Coordinator<'m> {
    links: Vec<Option<Box<dyn Link + 'm>>>,
    pub tuples: Vec<RemoteTuple>,
    /// Hosts holding locks for the current transaction.
    participants: Vec<u16>,
    reply: Vec<u8>,
    pub messages: u64,
}

/// Why a remote call failed.
pub(crate) enum RemoteError {
    Conflict,
    Fatal(String),
}

impl<'m> Coordinator<'m> {
    /// Links from worker `worker` of `host` to every other host: TCP
    /// connections to their published ports in (a), pod channels in (b).
    pub(crate) fn connect(
        mem: &'m PodMemory,
        host: u16,
        worker: u16,
        give_up: Instant,
    ) -> Result<Coordinator<'m>, String> {
        let hosts = mem.params().hosts;
        let mut links: Vec<Option<Box<dyn Link + 'm>>> = Vec::with_capacity(hosts as usize);
        for to in 0..hosts {
            links.push(if to == host {
                None
            } else if mem.params().arch == Arch::SharedNothingTcp {
                let port = mem.pod.atomic_u32(mem.layout.port_word(to)).load(Acquire);
                let port = u16::try_from(port).map_err(|_| format!("port {port} of host {to}"))?;
                Some(Box::new(TcpLink::connect(port)?))
            } else {
                Some(Box::new(PodChannel::open(mem, host, worker, to, give_up)))
            });
        }
        Ok(Coordinator {
            links,
            tuples: Vec::new(),
            participants: Vec::new(),
            reply: Vec::new(),
            messages: 0,
        })
    }

    fn call(&mut self, to: u16, request: &Msg) -> Result<Reader<'_>, String> {
        let link = self.links[to as usize]
            .as_mut()
            .ok_or_else(|| format!("no link to host {to}"))?;
        link.call(&request.0, &mut self.reply)?;
        self.messages += 2;
        Ok(Reader(&self.reply))
    }

    /// Locks a remote tuple at its owner and keeps its rows; returns its
    /// index in `tuples`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn lock(
        &mut self,
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
        let mut r = self.call(owner, &m).map_err(RemoteError::Fatal)?;
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

    /// Two-phase commit over every participant of the transaction.
    pub(crate) fn commit(&mut self) -> Result<(), String> {
        let participants = std::mem::take(&mut self.participants);
        for &p in &participants {
            let mut m = Msg::new(op::PREPARE);
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
            let mut r = self.call(p, &m)?;
            if r.u32() != Some(op::YES) {
                return Err(format!("host {p} did not vote yes"));
            }
        }
        for &p in &participants {
            let mut r = self.call(p, &Msg::new(op::COMMIT))?;
            if r.u32() != Some(op::ACK) {
                return Err(format!("host {p} did not acknowledge the commit"));
            }
        }
        self.tuples.clear();
        Ok(())
    }

    /// Tells every participant to undo and release.
    pub(crate) fn abort(&mut self) -> Result<(), String> {
        let participants = std::mem::take(&mut self.participants);
        for &p in &participants {
            let mut r = self.call(p, &Msg::new(op::ABORT))?;
            if r.u32() != Some(op::ACK) {
                return Err(format!("host {p} did not acknowledge the abort"));
            }
        }
        self.tuples.clear();
        Ok(())
    }

    pub(crate) fn has_participants(&self) -> bool {
        !self.participants.is_empty()
    }
}

impl Drop for PodChannel<'_> {
    fn drop(&mut self) {
        // Only a coordinator's end closes; a participant's end is dropped
        // after it saw CLOSED (or gave up).
        if self.state.load(Acquire) == chan::IDLE {
            self.close();
        }
    }
}
