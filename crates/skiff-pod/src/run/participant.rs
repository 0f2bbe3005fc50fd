//! The participant of shared nothing (architectures (a) and (b), `remote`):
//! one thread on the owner host per remote coordinator worker, with its own
//! transaction context, that takes locks, prepares and commits the parts of
//! that worker's transactions that touch this host's partition.

use crate::arch::remote::{
    Msg, Reader, Received, Serve, array_of, arrays_of, await_decision, coordinator_of, op,
    table_code, table_of,
};
use crate::cc::txn::{Txn, TxnError};
use crate::durability::checkpoint::Gate;
use crate::durability::lease::HostRecord;
use crate::durability::wal::{self, Wal};
use skiff_pod_memory::lockword::Mode;
use skiff_pod_memory::memory::PodMemory;
use skiff_pod_memory::memory::cxl::CxlCounters;
use skiff_pod_memory::memory::layout::LockTable;
use skiff_pod_memory::stats::thread_cpu_ns;

/// Serves one coordinator worker until it closes the link: LOCK, PREPARE,
/// COMMIT and ABORT on this host's partition. Returns the CPU time it used
/// and the CXL traffic its channel caused since measurement started
/// (`Window`: it restarts its clock at the first request after the warm-up
/// ended).
pub(crate) fn serve<'m>(
    mem: &'m PodMemory,
    host: u16,
    wal: &'m Wal,
    gate: &Gate,
    mut link: impl Serve,
) -> Result<(u64, CxlCounters), String> {
    let mut window = mem.control().window();
    let mut cpu_start = thread_cpu_ns();
    let mut txn = Txn::for_worker(mem, host, 0);
    let mut cxl_start = CxlCounters::default();
    // The owner logs what it writes for remote coordinators; shared nothing
    // writes only partitions, so no transaction slot.
    txn.attach_log(wal, false);
    let (mut request, mut reply) = (Vec::new(), Msg::default());
    // Inside the checkpoint gate from a transaction's first request to
    // its end.
    let mut inside = false;
    loop {
        match link.recv(txn.cxl_mut(), &mut request)? {
            Received::Request => {
                if window.restarted() {
                    cpu_start = thread_cpu_ns();
                    cxl_start = txn.cxl_counters();
                }
                if !inside {
                    gate.enter();
                    inside = true;
                }
                reply.0.clear();
                let prepared = txn.prepared();
                handle(&mut txn, host, &request, &mut reply);
                settled(mem, prepared, &txn);
                if !txn.is_active() {
                    gate.leave();
                    inside = false;
                }
                link.reply(txn.cxl_mut(), &reply.0)?;
            }
            Received::Closed => break,
            Received::CoordinatorGone => {
                let prepared = txn.prepared();
                end_session(mem, &mut txn)?;
                settled(mem, prepared, &txn);
                if inside {
                    gate.leave();
                    inside = false;
                }
                if !link.outlives_coordinator() {
                    break;
                }
            }
        }
    }
    let prepared = txn.prepared();
    end_session(mem, &mut txn)?;
    settled(mem, prepared, &txn);
    if inside {
        gate.leave();
    }
    if window.restarted() {
        // No request since the warm-up ended: nothing was measured.
        cpu_start = thread_cpu_ns();
        cxl_start = txn.cxl_counters();
    }
    Ok((
        thread_cpu_ns() - cpu_start,
        txn.cxl_counters().since(&cxl_start),
    ))
}

/// A prepared part (`prepared`, before the request) that is resolved now
/// no longer holds its coordinator's decision in its log.
fn settled(mem: &PodMemory, prepared: Option<wal::Tag>, txn: &Txn<'_>) {
    if let Some(tag) = prepared
        && txn.prepared().is_none()
        && let Some(coordinator) = coordinator_of(mem, tag)
    {
        HostRecord::of(mem, coordinator).in_doubt_sub();
    }
}

/// The coordinator's transaction ends without it: what was not prepared is
/// undone; a prepared one is in doubt and follows the coordinator's
/// decision.
fn end_session(mem: &PodMemory, txn: &mut Txn<'_>) -> Result<(), String> {
    if !txn.is_active() {
        return Ok(());
    }
    let committed = match txn.prepared() {
        Some(tag) => await_decision(mem, tag)?,
        None => false,
    };
    if committed {
        txn.commit();
    } else {
        txn.abort();
    }
    txn.take_fatal().map_or(Ok(()), Err)
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
        txn.begin(age & ((1 << skiff_pod_memory::lockword::AGE_BITS) - 1));
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
    let (Some(id), Some(inc), Some(n)) = (r.u64(), r.u32(), r.u32()) else {
        return false;
    };
    if !txn.is_active() || txn.prepared().is_some() {
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
    let tag = wal::Tag {
        kind: wal::kind::PREPARED,
        peer: id,
        peer_inc: inc,
    };
    let Some(coordinator) = coordinator_of(txn.mem(), tag) else {
        return false;
    };
    // Counted before it is logged, so the coordinator never drops a
    // decision a logged prepared part may need.
    HostRecord::of(txn.mem(), coordinator).in_doubt_add();
    // Durable before the vote: a restart redoes it if the coordinator
    // decides to commit.
    if txn.prepare(tag).is_err() {
        return false;
    }
    reply.u32(op::YES);
    true
}
