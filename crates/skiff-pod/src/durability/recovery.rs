//! What survives a host's death, and how the pod gets over it.
//!
//! A host's partition is its private memory: it dies with the host. The pod
//! file (coherent and shared regions) and the hosts' logs survive. Three
//! mechanisms use that:
//!
//! - **Transaction slots** (shared region, one per worker and auditor):
//!   before a transaction writes a row in pod memory in place, it copies the
//!   row's before-image into its slot; before its log record can reach the
//!   file it writes where the record will be (`COMMITTING`). A slot is
//!   `IDLE` again before the transaction releases a lock.
//! - **Reclaim** ([`reclaim`], run by the survivor that won the dead host's
//!   record, `lease`): for each of the dead host's slots, the transaction
//!   committed iff its record is in the dead host's log file exactly where
//!   the slot says (the file no longer changes); if not, its before-images
//!   go back, newest first. Then every lock word in pod memory is scanned
//!   and the dead host's exclusive locks (owner field) and shared locks
//!   (its reader bit) are released.
//! - **Rebuild** ([`rebuild_partition`], by the restarted host): a fresh,
//!   zeroed partition gets the checkpoint image its log names
//!   (`PATH.hostN.ckpt0` or `.ckpt1`: the partition as loaded, or as a
//!   checkpoint during the run left it, `checkpoint`), then its own log from
//!   the log's start, in order.
//!
//! A transaction a host reported committed had its record durable before it
//! released anything, so reclaim keeps its pod writes and rebuild redoes its
//! private ones; one that was not durable is undone in pod memory and never
//! redone. Both decide from the same bytes of the same file.

use std::collections::HashMap;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::atomic::{AtomicU32, AtomicU64};

use crate::durability::wal::{self, kind};
use skiff_pod_memory::arch::Place;
use skiff_pod_memory::constants::{TXN_POD_UNDO_ENTRIES_MAX, TXN_UNDO_BYTES_MAX};
use skiff_pod_memory::error::{PodError, Result};
use skiff_pod_memory::lockword;
use skiff_pod_memory::memory::PodMemory;
use skiff_pod_memory::memory::cxl::CxlAccess;
use skiff_pod_memory::memory::futex;
use skiff_pod_memory::memory::layout::{Array, RECOVERY_GLOBAL_BYTES};
use skiff_pod_memory::tpcc::schema::District;

/// Transaction slot states.
const SLOT_IDLE: u64 = 0;
const SLOT_ACTIVE: u64 = 1;
const SLOT_COMMITTING: u64 = 2;

const SLOT_STATE: u64 = 0;
const SLOT_TXN_ID: u64 = 8;
const SLOT_LOG_START: u64 = 16;
const SLOT_LOG_END: u64 = 24;
const SLOT_UNDO_N: u64 = 32;
const SLOT_ENTRIES: u64 = 64;
const SLOT_ENTRY_BYTES: u64 = 16;
const SLOT_IMAGES: u64 = SLOT_ENTRIES + TXN_POD_UNDO_ENTRIES_MAX as u64 * SLOT_ENTRY_BYTES;
const LOCK_OFF_MAX: u64 = 1 << 48;

/// The global sequence number counter (coherent region).
pub(crate) fn gsn_word(mem: &PodMemory) -> &AtomicU64 {
    mem.pod.atomic_u64(mem.layout.recovery_off)
}

const _: () = assert!(RECOVERY_GLOBAL_BYTES >= 8);

/// A worker's transaction slot, written only by its worker while the host
/// lives. Writes are counted as CXL write-backs (`CxlAccess::write_own`).
pub(crate) struct TxnSlot {
    off: u64,
    undo_n: u64,
    used: u64,
    active: bool,
}

impl TxnSlot {
    pub(crate) fn new(off: u64) -> TxnSlot {
        TxnSlot {
            off,
            undo_n: 0,
            used: 0,
            active: false,
        }
    }

    /// Saves the before-image of a pod row about to be written in place.
    pub(crate) fn save(
        &mut self,
        cxl: &mut CxlAccess<'_>,
        txn_id: u64,
        row_off: u64,
        lock_off: u64,
        before: &[u8],
    ) {
        assert!(
            (self.undo_n as usize) < TXN_POD_UNDO_ENTRIES_MAX,
            "over {TXN_POD_UNDO_ENTRIES_MAX} pod rows written in one transaction"
        );
        assert!(self.used as usize + before.len() <= TXN_UNDO_BYTES_MAX);
        assert!(lock_off < LOCK_OFF_MAX && before.len() < 1 << 16);
        if !self.active {
            cxl.write_own(self.off + SLOT_TXN_ID, &txn_id.to_le_bytes());
            cxl.own_word(self.off + SLOT_STATE)
                .store(SLOT_ACTIVE, Release);
            self.active = true;
        }
        cxl.write_own(self.off + SLOT_IMAGES + self.used, before);
        let mut entry = [0u8; 16];
        entry[..8].copy_from_slice(&row_off.to_le_bytes());
        entry[8..].copy_from_slice(&(lock_off << 16 | before.len() as u64).to_le_bytes());
        cxl.write_own(
            self.off + SLOT_ENTRIES + self.undo_n * SLOT_ENTRY_BYTES,
            &entry,
        );
        self.used += before.len() as u64;
        self.undo_n += 1;
        // The entry is complete before it counts, and it counts before the
        // row changes: a survivor never restores half an image, and never
        // misses one.
        cxl.own_word(self.off + SLOT_UNDO_N)
            .store(self.undo_n, Release);
    }

    /// The transaction's log record will be at `start..end`: from now on a
    /// survivor asks the log whether it committed. Called under the log
    /// mutex, before any flush can write the record.
    pub(crate) fn committing(&self, cxl: &mut CxlAccess<'_>, start: u64, end: u64) {
        if !self.active {
            return;
        }
        cxl.write_own(self.off + SLOT_LOG_START, &start.to_le_bytes());
        cxl.write_own(self.off + SLOT_LOG_END, &end.to_le_bytes());
        cxl.own_word(self.off + SLOT_STATE)
            .store(SLOT_COMMITTING, Release);
    }

    /// The transaction is over (committed durably, or undone): nothing for
    /// a survivor to do. Before any lock is released.
    pub(crate) fn clear(&mut self, cxl: &mut CxlAccess<'_>) {
        if !self.active {
            return;
        }
        cxl.own_word(self.off + SLOT_STATE)
            .store(SLOT_IDLE, Release);
        cxl.own_word(self.off + SLOT_UNDO_N).store(0, Release);
        self.active = false;
        self.undo_n = 0;
        self.used = 0;
    }
}

/// What [`reclaim`] did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Reclaimed {
    /// Transactions whose pod writes were undone.
    pub undone: u32,
    /// Transactions found committing whose record was durable (kept).
    pub kept: u32,
    pub locks_released: u64,
}

/// Undoes dead host `dead`'s unfinished transactions in pod memory and
/// releases every lock it held there. The caller won the right to do so
/// (`lease`): the host's processes are gone and nobody else reclaims it.
pub(crate) fn reclaim(mem: &PodMemory, dead: u16) -> Result<Reclaimed> {
    let mut out = Reclaimed::default();
    let log = skiff_pod_memory::memory::files::wal_path(mem.pod.path(), dead);
    for worker in 0..=mem.params().workers_per_host {
        let off = mem.layout.txn_slot(dead, worker);
        let state = mem.pod.atomic_u64(off + SLOT_STATE).load(Acquire);
        let committed = match state {
            SLOT_IDLE => continue,
            SLOT_ACTIVE => false,
            SLOT_COMMITTING => {
                let start = mem.pod.read::<u64>(off + SLOT_LOG_START);
                let end = mem.pod.read::<u64>(off + SLOT_LOG_END);
                let txn = mem.pod.read::<u64>(off + SLOT_TXN_ID);
                wal::holds_record(&log, start, end, txn)?
            }
            s => {
                return Err(PodError::Corrupt(format!(
                    "transaction slot {dead}/{worker} in state {s}"
                )));
            }
        };
        if committed {
            out.kept += 1;
        } else {
            undo_slot(mem, off)?;
            out.undone += 1;
        }
        mem.pod.atomic_u64(off + SLOT_UNDO_N).store(0, Release);
        mem.pod
            .atomic_u64(off + SLOT_STATE)
            .store(SLOT_IDLE, Release);
    }
    out.locks_released = release_locks(mem, dead);
    Ok(out)
}

/// Restores a slot's before-images, newest first. Slot contents are data.
fn undo_slot(mem: &PodMemory, off: u64) -> Result<()> {
    let n = mem.pod.atomic_u64(off + SLOT_UNDO_N).load(Acquire);
    if n > TXN_POD_UNDO_ENTRIES_MAX as u64 {
        return Err(PodError::Corrupt(format!(
            "transaction slot at {off}: {n} entries"
        )));
    }
    let mut entries = Vec::with_capacity(n as usize);
    let mut used = 0u64;
    for i in 0..n {
        let e = off + SLOT_ENTRIES + i * SLOT_ENTRY_BYTES;
        let row_off = mem.pod.read::<u64>(e);
        let packed = mem.pod.read::<u64>(e + 8);
        let (lock_off, len) = (packed >> 16, packed & 0xFFFF);
        entries.push((row_off, lock_off, used, len));
        used += len;
    }
    let shared = &mem.layout.shared;
    let coherent = &mem.layout.coherent;
    if used > TXN_UNDO_BYTES_MAX as u64 {
        return Err(PodError::Corrupt(format!(
            "transaction slot at {off}: {used} bytes"
        )));
    }
    let mut image = vec![0u8; TXN_UNDO_BYTES_MAX];
    for &(row_off, lock_off, at, len) in entries.iter().rev() {
        if row_off < shared.start
            || row_off + len > shared.end
            || !coherent.contains(&lock_off)
            || !lock_off.is_multiple_of(8)
        {
            return Err(PodError::Corrupt(format!(
                "transaction slot at {off}: undo of {row_off}+{len} under lock {lock_off}"
            )));
        }
        let img = &mut image[..len as usize];
        mem.pod.read_bytes(off + SLOT_IMAGES + at, img);
        mem.pod.write_bytes(row_off, img);
        // Every host's cached copy of the tuple is stale now.
        mem.pod
            .atomic_u64(lock_off)
            .fetch_and(!lockword::VALID_MASK, Release);
    }
    Ok(())
}

/// Releases every lock `dead` holds on a pod lock word; wakes waiters.
fn release_locks(mem: &PodMemory, dead: u16) -> u64 {
    let control = mem.control();
    let mut released = 0;
    let layout = &mem.layout;
    // When districts are in pod memory, D_NEXT_O_ID (restored by the undo
    // above) bounds the order slots ever locked: the dead host's insert, if
    // any, is slot D_NEXT_O_ID - 1. Values read are data: bounded by the
    // capacity in `pod_lock_ranges`.
    let used = |w: u32, d: u64| -> u64 {
        let loc = layout.row(Array::District, w, d);
        mem.pod.read::<District>(loc.off).d_next_o_id as u64 + 1
    };
    let bound: Option<&dyn Fn(u32, u64) -> u64> =
        (layout.place_of(Array::District) == Place::Pod).then_some(&used);
    for range in layout.pod_lock_ranges(bound) {
        for off in range.step_by(8) {
            let word = mem.pod.atomic_u64(off);
            if word.load(std::sync::atomic::Ordering::Relaxed) == 0 {
                continue;
            }
            if let Some(waiters) = lockword::release_dead(word, dead) {
                released += 1;
                if waiters {
                    let epoch: &AtomicU32 = control.release_epoch(off);
                    epoch.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    futex::wake_all(epoch);
                }
            }
        }
    }
    released
}

/// Whether a log entry names a row of `host`'s partition (entries are data).
fn in_partition(mem: &PodMemory, host: u16, e: &wal::Entry<'_>) -> bool {
    let layout = &mem.layout;
    layout.place_of(e.array) == Place::Partition
        && e.w >= 1
        && e.w <= mem.params().warehouses
        && layout.host_of(e.w) == host
        && e.idx < layout.rows_of(e.array)
}

/// Outside (e), only the owner writes its partition's rows, and two of its
/// transactions that wrote one row appended their records in commit order
/// (the second waited for the first's locks, released after its append):
/// replaying its own log front to back, each image over the last, is exact.
///
/// In shared nothing a participant's `PREPARED` record counts iff its
/// distributed transaction committed, as `outcomes` says (by distributed
/// transaction, `remote::settle_in_doubt`). Returns the number of log
/// records read and rows written.
pub(crate) fn replay_own_log(
    mem: &PodMemory,
    host: u16,
    outcomes: &HashMap<u64, bool>,
) -> Result<(u64, u64)> {
    let path = skiff_pod_memory::memory::files::wal_path(mem.pod.path(), host);
    let (mut records, mut rows) = (0u64, 0u64);
    let part = mem.part(host);
    wal::read_log(&path, |r, _| {
        records += 1;
        let applies = match r.tag.kind {
            kind::LOCAL | kind::DECIDED_COMMIT => true,
            kind::PREPARED => outcomes.get(&r.tag.peer) == Some(&true),
            _ => false,
        };
        if !applies {
            return Ok(());
        }
        let entries = r
            .entries()
            .map_err(|e| PodError::Corrupt(format!("{}: {e}", path.display())))?;
        for e in entries.iter().filter(|e| in_partition(mem, host, e)) {
            part.write_bytes(mem.layout.row(e.array, e.w, e.idx).off, e.image);
            rows += 1;
        }
        Ok(())
    })?;
    Ok((records, rows))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;

    use super::*;
    use crate::cc::txn::Txn;
    use crate::durability::wal::{Redo, Tag, Wal};
    use crate::tpcc::check::check_pod;
    use skiff_pod_memory::arch::Arch;
    use skiff_pod_memory::config::PodConfig;
    use skiff_pod_memory::memory::Parts;
    use skiff_pod_memory::memory::files::checkpoint_path;
    use skiff_pod_memory::testing::TempShm;
    use skiff_pod_memory::tpcc::input::InputGen;
    use skiff_pod_memory::tpcc::random::Rng;
    use skiff_pod_memory::tpcc::schema::Warehouse;

    fn loaded(tag: &str) -> (TempShm, PodMemory) {
        let shm = TempShm::new(tag);
        let mut cfg = PodConfig::new(&shm.0, 2, 2);
        cfg.arch = Arch::SharedEverything;
        cfg.duration = std::time::Duration::from_secs(1);
        crate::load(&cfg).unwrap();
        let mem = PodMemory::open(&shm.0, true, Parts::All).unwrap();
        (shm, mem)
    }

    fn pod_read<T: bytemuck::Pod>(mem: &PodMemory, array: Array, w: u32, idx: u64) -> T {
        mem.pod.read(mem.layout.row(array, w, idx).off)
    }

    fn held_words(mem: &PodMemory) -> usize {
        let mut n = 0;
        for r in mem.layout.pod_lock_ranges(None) {
            for off in r.step_by(8) {
                n += lockword::held(mem.pod.atomic_u64(off).load(Acquire)) as usize;
            }
        }
        n
    }

    /// Host 1 dies in the middle of NewOrders and Payments (rows written in
    /// place in pod memory, shared and exclusive locks held): reclaim puts
    /// every before-image back and frees every lock; the pod is consistent.
    #[test]
    fn reclaim_undoes_a_dead_hosts_unfinished_transactions() {
        let (shm, mem) = loaded("reclaim-undo");
        let wal = Wal::open(&skiff_pod_memory::memory::files::wal_path(&shm.0, 1), false).unwrap();
        let inputs = InputGen {
            warehouses: 2,
            line_remote_p: 0.5,
            payment_remote_p: 0.5,
            nurand: mem.params().nurand,
        };
        let mut rng = Rng::new(7);
        let w_before: Warehouse = pod_read(&mem, Array::Warehouse, 2, 0);
        let d_before: Vec<District> = (0..10)
            .map(|d| pod_read(&mem, Array::District, 2, d))
            .collect();
        let d1_before: Vec<District> = (0..10)
            .map(|d| pod_read(&mem, Array::District, 1, d))
            .collect();
        // Worker 0 dies inside a Payment, the auditor slot inside a NewOrder.
        let mut pay = Txn::for_worker(&mem, 1, 0);
        pay.attach_log(&wal, true);
        pay.begin(1);
        crate::tpcc::payment::payment(&mut pay, &inputs.payment(&mut rng, 2), 5).unwrap();
        let mut order = Txn::for_worker(&mem, 1, 1);
        order.attach_log(&wal, true);
        order.begin(1);
        let input = inputs.new_order(&mut rng, 1);
        let done = crate::tpcc::neworder::new_order(&mut order, &input, 5);
        assert!(matches!(
            done,
            Ok(_) | Err(crate::cc::txn::TxnError::Rollback)
        ));
        let o_before: Vec<District> = (0..10)
            .map(|d| pod_read(&mem, Array::District, 1, d))
            .collect();
        let w_dirty: Warehouse = pod_read(&mem, Array::Warehouse, 2, 0);
        assert_ne!(w_dirty.w_ytd, w_before.w_ytd);
        std::mem::forget(pay);
        std::mem::forget(order);
        assert!(held_words(&mem) >= 4);

        let r = reclaim(&mem, 1).unwrap();
        assert_eq!((r.undone, r.kept), (2, 0), "{r:?}");
        assert_eq!(held_words(&mem), 0);
        let w_after: Warehouse = pod_read(&mem, Array::Warehouse, 2, 0);
        assert_eq!(w_after.w_ytd, w_before.w_ytd);
        for (d, before) in d_before.iter().enumerate() {
            let after: District = pod_read(&mem, Array::District, 2, d as u64);
            assert_eq!(bytemuck::bytes_of(&after), bytemuck::bytes_of(before));
        }
        // The NewOrder's D_NEXT_O_ID increment is gone too.
        assert_ne!(
            o_before.iter().map(|d| d.d_next_o_id).sum::<u32>(),
            d1_before.iter().map(|d| d.d_next_o_id).sum::<u32>()
        );
        for (d, before) in d1_before.iter().enumerate() {
            let after: District = pod_read(&mem, Array::District, 1, d as u64);
            assert_eq!(bytemuck::bytes_of(&after), bytemuck::bytes_of(before));
        }
        let report = check_pod(&mem);
        assert!(report.passed(), "{report}");
        // Another host can take every lock again.
        let mut t = Txn::new(&mem, 0);
        t.begin(2);
        crate::tpcc::payment::payment(&mut t, &inputs.payment(&mut rng, 2), 6).unwrap();
        t.commit();
    }

    /// A partition lost with its host comes back row for row from the
    /// checkpoint image its log names and the log, whatever state the other
    /// image is in; then all conditions hold.
    #[test]
    fn rebuild_restores_a_lost_partition_from_checkpoint_and_log() {
        let shm = TempShm::new("rebuild");
        let mut cfg = PodConfig::new(&shm.0, 2, 2);
        cfg.arch = Arch::PashaStatic;
        cfg.duration = std::time::Duration::from_secs(1);
        crate::load(&cfg).unwrap();
        let mem = PodMemory::open(&shm.0, true, Parts::All).unwrap();
        let wal = Wal::open(&skiff_pod_memory::memory::files::wal_path(&shm.0, 1), false).unwrap();
        let inputs = InputGen {
            warehouses: 2,
            line_remote_p: 0.1,
            payment_remote_p: 0.3,
            nurand: mem.params().nurand,
        };
        let mut rng = Rng::new(11);
        let mut t = Txn::for_worker(&mem, 1, 0);
        t.attach_log(&wal, true);
        let input = skiff_pod_memory::tpcc::input::DeliveryInput {
            w_id: 2,
            o_carrier_id: 4,
        };
        for i in 0..300 {
            t.begin(1);
            let done = match i % 3 {
                0 => crate::tpcc::neworder::new_order(&mut t, &inputs.new_order(&mut rng, 2), 9)
                    .map(|_| ()),
                1 => crate::tpcc::payment::payment(&mut t, &inputs.payment(&mut rng, 2), 9)
                    .map(|_| ()),
                _ => crate::tpcc::delivery::deliver_district(&mut t, &input, 1 + i % 10, 9)
                    .map(|_| ()),
            };
            match done {
                Ok(()) => t.commit(),
                Err(_) => t.abort(),
            }
        }
        drop(t);
        let snapshot = |mem: &PodMemory| -> Vec<u8> {
            let mut out = Vec::new();
            let cap = mem.params().orders_per_district as u64;
            for (array, rows) in [
                (Array::Warehouse, 1),
                (Array::District, 10),
                (Array::Order, 10 * cap),
                (Array::NewOrder, 10 * cap),
                (Array::History, 10 * cap),
            ] {
                for idx in 0..rows {
                    let loc = mem.layout.row(array, 2, idx);
                    let mut row = vec![0u8; array.row_bytes() as usize];
                    mem.part(1).read_bytes(loc.off, &mut row);
                    out.extend_from_slice(&row);
                }
            }
            out
        };
        let before = snapshot(&mem);
        drop(mem);
        // A checkpoint died half-way through the image the log does not
        // name: the rebuild never reads it.
        let other = checkpoint_path(&shm.0, 1, 1);
        let half = std::fs::metadata(&other).unwrap().len() / 2;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&other)
            .unwrap()
            .write_all_at(&vec![0xA5; 1 << 20], half)
            .unwrap();
        let lost = PodMemory::open_restarting(&shm.0, 1).unwrap();
        assert_ne!(snapshot(&lost), before, "the partition is gone");
        let (records, rows) = crate::run::host::rebuild_partition(&lost, 1, &wal).unwrap();
        assert!(records >= 200 && rows > 0, "{records} {rows}");
        drop(lost);
        let mem = PodMemory::open(&shm.0, true, Parts::All).unwrap();
        assert!(snapshot(&mem) == before);
        let report = check_pod(&mem);
        assert!(report.passed(), "{report}");
    }

    /// Shared nothing: a participant that died after it prepared (its
    /// PREPARED record durable, no outcome) is rebuilt with its part iff
    /// the coordinator's log says commit; without a decision from a
    /// coordinator that is gone, it is aborted. Either way the outcome is
    /// logged, so a second rebuild needs no coordinator log.
    #[test]
    fn a_restarted_participant_follows_the_coordinators_decision() {
        use skiff_pod_memory::lockword::Mode;
        use skiff_pod_memory::memory::layout::LockTable;
        use skiff_pod_memory::tpcc::schema::Customer;
        for decision in [Some(true), Some(false), None] {
            let shm = TempShm::new("in-doubt");
            let mut cfg = PodConfig::new(&shm.0, 2, 2);
            cfg.arch = Arch::SharedNothingCxl;
            cfg.duration = std::time::Duration::from_secs(1);
            crate::load(&cfg).unwrap();
            let mem = PodMemory::open(&shm.0, true, Parts::All).unwrap();
            let wal1 =
                Wal::open(&skiff_pod_memory::memory::files::wal_path(&shm.0, 1), false).unwrap();
            let wal0 =
                Wal::open(&skiff_pod_memory::memory::files::wal_path(&shm.0, 0), false).unwrap();
            let c = crate::tpcc::keys::customer(3, 17);
            let before: Customer = mem.part(1).read(mem.layout.row(Array::Customer, 2, c).off);
            // Host 0's transaction 7 of incarnation 0; host 1 prepares its
            // part and dies.
            let id = 7u64;
            let mut p = Txn::for_worker(&mem, 1, 0);
            p.attach_log(&wal1, false);
            p.begin(1);
            p.lock(LockTable::Customer, 2, c, Mode::Exclusive).unwrap();
            let mut cu: Customer = p.get(Array::Customer, 2, c);
            cu.c_balance += 12_345;
            p.put(Array::Customer, 2, c, &cu);
            // As the participant's handler does: counted, then logged.
            crate::durability::lease::HostRecord::of(&mem, 0).in_doubt_add();
            p.prepare(Tag {
                kind: kind::PREPARED,
                peer: id,
                peer_inc: 0,
            })
            .unwrap();
            std::mem::forget(p);
            if let Some(committed) = decision {
                let kind = if committed {
                    kind::DECIDED_COMMIT
                } else {
                    kind::DECIDED_ABORT
                };
                let tag = Tag {
                    kind,
                    ..Tag::default()
                };
                wal0.append(&Redo::default(), id, 1, tag, |_, _| {})
                    .unwrap();
            }
            drop(mem);
            let committed = decision == Some(true);
            let want = before.c_balance + if committed { 12_345 } else { 0 };
            for round in 0..2 {
                let lost = PodMemory::open_restarting(&shm.0, 1).unwrap();
                crate::run::host::rebuild_partition(&lost, 1, &wal1).unwrap();
                let loc = lost.layout.row(Array::Customer, 2, c);
                let after: Customer = lost.part(1).read(loc.off);
                assert_eq!(after.c_balance, want, "{decision:?}, round {round}");
                // The coordinator (never announced) is gone; its log too
                // for the second round: the marker answers.
                std::fs::remove_file(skiff_pod_memory::memory::files::wal_path(&shm.0, 0))
                    .unwrap_or(());
            }
            let mut markers = 0;
            wal::read_log(
                &skiff_pod_memory::memory::files::wal_path(&shm.0, 1),
                |r, _| {
                    let resolved = [kind::RESOLVED_COMMIT, kind::RESOLVED_ABORT];
                    markers += (resolved.contains(&r.tag.kind) && r.tag.peer == id) as u32;
                    Ok(())
                },
            )
            .unwrap();
            assert_eq!(markers, 1, "{decision:?}");
            // Resolved: host 0 may truncate its log again.
            let mem = PodMemory::open(&shm.0, false, Parts::All).unwrap();
            assert_eq!(
                crate::durability::lease::HostRecord::of(&mem, 0).in_doubt(),
                0
            );
        }
    }

    /// A host that died after its commit record was durable but before it
    /// released its locks committed: reclaim keeps its writes. If the record
    /// is torn (not durable), the same state is undone.
    #[test]
    fn reclaim_keeps_a_durable_commit_and_undoes_a_torn_one() {
        for torn in [false, true] {
            let (shm, mem) = loaded("reclaim-commit");
            let path = skiff_pod_memory::memory::files::wal_path(&shm.0, 1);
            let wal = Wal::open(&path, false).unwrap();
            let inputs = InputGen {
                warehouses: 2,
                line_remote_p: 0.0,
                payment_remote_p: 0.0,
                nurand: mem.params().nurand,
            };
            let before: Warehouse = pod_read(&mem, Array::Warehouse, 2, 0);
            let mut t = Txn::for_worker(&mem, 1, 0);
            t.attach_log(&wal, true);
            t.begin(1);
            let input = inputs.payment(&mut Rng::new(3), 2);
            crate::tpcc::payment::payment(&mut t, &input, 5).unwrap();
            t.crash_while_committing();
            std::mem::forget(t);
            if torn {
                let len = wal::read_log(&path, |_, _| Ok(())).unwrap();
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_len(len - 1)
                    .unwrap();
            }
            let r = reclaim(&mem, 1).unwrap();
            assert_eq!((r.kept, r.undone), if torn { (0, 1) } else { (1, 0) });
            assert_eq!(held_words(&mem), 0);
            let after: Warehouse = pod_read(&mem, Array::Warehouse, 2, 0);
            let want = before.w_ytd + if torn { 0 } else { input.amount_cents };
            assert_eq!(after.w_ytd, want);
            let report = check_pod(&mem);
            assert!(report.passed(), "{report}");
        }
    }
}
