//! Where every row and lock word of a run lives: a pure function of
//! [`Params`], so the coordinator, every host and `check` compute the same
//! offsets independently (and the pod header carries a hash to prove it).
//!
//! Pod file:
//! ```text
//! [header page]
//! [coherent region: host stats | host records | live figures | lock words]
//! [shared region: pod tables]
//! ```
//! Partition file of host h (only if some table is private or replicated):
//! ```text
//! [header page][lock words of private tables][private tables][replicated tables]
//! ```
//! Tables are dense arrays indexed by key (TPC-C keys are dense): a row's
//! position is its primary index. Per-warehouse arrays hold `rows_per_wh`
//! rows per warehouse, in warehouse order; in a partition only the host's
//! own warehouses, so every partition has the same layout.

use crate::arch::{Place, TableGroup, movable, place};
use crate::constants::{CACHE_LINE_BYTES, HEADER_BYTES, ORDERS_PER_DISTRICT_MIN};
use crate::error::{PodError, Result};
use crate::memory::live::HOST_LIVE_BYTES;
use crate::memory::params::Params;
use crate::stats::HOST_STATS_BYTES;
use crate::tpcc::schema::*;

/// A row array (a table or one column group of a table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Array {
    Warehouse,
    District,
    Customer,
    CustomerData,
    CustomerName,
    CustomerLastOrder,
    History,
    Order,
    NewOrder,
    OrderLine,
    Item,
    Stock,
    StockDist,
}

pub const ARRAYS: [Array; 13] = [
    Array::Warehouse,
    Array::District,
    Array::Customer,
    Array::CustomerData,
    Array::CustomerName,
    Array::CustomerLastOrder,
    Array::History,
    Array::Order,
    Array::NewOrder,
    Array::OrderLine,
    Array::Item,
    Array::Stock,
    Array::StockDist,
];

/// An array of lock words, one per lockable tuple.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockTable {
    Warehouse,
    District,
    Customer,
    Order,
    NewOrder,
    Stock,
}

const LOCK_TABLES: [LockTable; 6] = [
    LockTable::Warehouse,
    LockTable::District,
    LockTable::Customer,
    LockTable::Order,
    LockTable::NewOrder,
    LockTable::Stock,
];

impl Array {
    fn group(self) -> TableGroup {
        match self {
            Array::Warehouse => TableGroup::Warehouse,
            // HISTORY is appended under its district's lock, so it lives
            // where the district does.
            // So is each customer's latest order (NewOrder writes it under
            // the district's lock).
            Array::District | Array::History | Array::CustomerLastOrder => TableGroup::District,
            Array::Customer | Array::CustomerData => TableGroup::Customer,
            Array::CustomerName => TableGroup::NameIndex,
            Array::Order | Array::NewOrder | Array::OrderLine => TableGroup::Order,
            Array::Item => TableGroup::Item,
            Array::Stock | Array::StockDist => TableGroup::Stock,
        }
    }

    pub fn row_bytes(self) -> u64 {
        (match self {
            Array::Warehouse => size_of::<Warehouse>(),
            Array::District => size_of::<District>(),
            Array::Customer => size_of::<Customer>(),
            Array::CustomerData => size_of::<CustomerData>(),
            Array::CustomerName => size_of::<CustomerNameEntry>(),
            Array::CustomerLastOrder => size_of::<CustomerLastOrder>(),
            Array::History => size_of::<History>(),
            Array::Order => size_of::<Order>(),
            Array::NewOrder => size_of::<NewOrder>(),
            Array::OrderLine => size_of::<OrderLine>(),
            Array::Item => size_of::<Item>(),
            Array::Stock => size_of::<Stock>(),
            Array::StockDist => size_of::<StockDist>(),
        }) as u64
    }

    /// Rows per warehouse; for ITEM (not per warehouse) the whole table.
    fn rows(self, orders_per_district: u64) -> u64 {
        let districts = DISTRICTS_PER_WAREHOUSE as u64;
        match self {
            Array::Warehouse => 1,
            Array::District => districts,
            Array::Customer
            | Array::CustomerData
            | Array::CustomerName
            | Array::CustomerLastOrder => districts * CUSTOMERS_PER_DISTRICT as u64,
            Array::History | Array::Order | Array::NewOrder => districts * orders_per_district,
            Array::OrderLine => districts * orders_per_district * ORDER_LINES_PER_ORDER_MAX as u64,
            Array::Item => ITEMS as u64,
            Array::Stock | Array::StockDist => STOCK_PER_WAREHOUSE as u64,
        }
    }

    fn per_warehouse(self) -> bool {
        self != Array::Item
    }
}

impl LockTable {
    fn group(self) -> TableGroup {
        match self {
            LockTable::Warehouse => TableGroup::Warehouse,
            LockTable::District => TableGroup::District,
            LockTable::Customer => TableGroup::Customer,
            LockTable::Order | LockTable::NewOrder => TableGroup::Order,
            LockTable::Stock => TableGroup::Stock,
        }
    }

    fn array(self) -> Array {
        match self {
            LockTable::Warehouse => Array::Warehouse,
            LockTable::District => Array::District,
            LockTable::Customer => Array::Customer,
            LockTable::Order => Array::Order,
            LockTable::NewOrder => Array::NewOrder,
            LockTable::Stock => Array::Stock,
        }
    }
}

/// Pasha dynamic's pod memory (`dynamic`): offsets of the directory words
/// (one per movable tuple, coherent), the slot lock words and slot rows (per
/// host and movable table), the request mailboxes and the doorbells.
#[derive(Clone, Copy, Debug, Default)]
struct DynamicExtents {
    slots: u64,
    directory: [u64; LOCK_TABLES.len()],
    slot_locks: [u64; LOCK_TABLES.len()],
    slot_rows: [u64; ARRAYS.len()],
    mailboxes: u64,
    mailboxes_per_host: u64,
    doorbells: u64,
}

/// Shared nothing's pod memory (`remote`): a channel per (coordinator host,
/// worker, participant host) — a control line in the coherent region and
/// two message buffers in the shared region — and a TCP port word per host.
#[derive(Clone, Copy, Debug, Default)]
struct RemoteExtents {
    workers: u64,
    channel_controls: u64,
    channel_buffers: u64,
    ports: u64,
}

/// The coherent region's global recovery words: the GSN counter (`wal`).
pub const RECOVERY_GLOBAL_BYTES: u64 = 64;
/// One host's record: lease, liveness, reclaim figures, reported commits.
pub const HOST_RECORD_BYTES: u64 = 128;
/// One transaction slot in the shared region: a 64-byte header, the undo
/// entries, the before-images.
pub const TXN_SLOT_BYTES: u64 = 64
    + crate::constants::TXN_POD_UNDO_ENTRIES_MAX as u64 * 16
    + crate::constants::TXN_UNDO_BYTES_MAX as u64;

/// One request mailbox: a cache line of the coherent region.
pub const MAILBOX_BYTES: u64 = 64;

/// Where one row or lock word is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loc {
    pub place: Place,
    /// The host that owns the warehouse (for `Partition`).
    pub host: u16,
    pub off: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Extent {
    place: Option<Place>,
    base: u64,
}

/// Offsets of everything for one [`Params`].
#[derive(Clone, Debug)]
pub struct Layout {
    pub params: Params,
    arrays: [Extent; ARRAYS.len()],
    locks: [Extent; LOCK_TABLES.len()],
    first_warehouse: Vec<u32>,
    host_of_warehouse: Vec<u16>,
    pub coherent: std::ops::Range<u64>,
    pub shared: std::ops::Range<u64>,
    pub pod_bytes: u64,
    /// 0 when every table is in pod memory (no partition files).
    pub part_bytes: u64,
    pub host_stats_off: u64,
    /// Coherent: the GSN counter, then one [`HOST_RECORD_BYTES`] record per
    /// host (lease, liveness, reported commits; `lease`), then one
    /// [`HOST_LIVE_BYTES`] slot of live figures per host (`live`).
    pub recovery_off: u64,
    /// Shared region: one transaction slot (undo images for survivors,
    /// `recovery`) per worker and auditor of every host.
    pub txn_slots_off: u64,
    dynamic: DynamicExtents,
    remote: RemoteExtents,
    pub hash: u64,
}

/// Bump allocation of cache-line-aligned extents in one file.
struct Bump(u64);

impl Bump {
    fn take(&mut self, bytes: u64) -> u64 {
        let at = self.0.next_multiple_of(CACHE_LINE_BYTES);
        self.0 = at + bytes;
        at
    }
}

impl Layout {
    /// Computes the layout. Settles `params.orders_per_district` when it is 0
    /// (not configured) to what the run wants and the coherent region holds.
    pub fn compute(mut params: Params) -> Result<Layout> {
        let remote_customers = params.hosts > 1 && params.payment_remote_probability() > 0.0;
        let remote_stock = params.hosts > 1 && params.line_remote_probability() > 0.0;
        let placement = |g| place(params.arch, g, remote_customers, remote_stock);
        let w = params.warehouses as u64;
        let w_per_host = w.div_ceil(params.hosts as u64);

        let stats_bytes = crate::constants::HOSTS_MAX as u64 * HOST_STATS_BYTES
            + RECOVERY_GLOBAL_BYTES
            + crate::constants::HOSTS_MAX as u64 * (HOST_RECORD_BYTES + HOST_LIVE_BYTES);
        if params.orders_per_district == 0 {
            params.orders_per_district = Self::fitting_orders(&params, &placement, stats_bytes)?;
        }
        let cap = params.orders_per_district as u64;
        if cap < ORDERS_PER_DISTRICT_MIN as u64 || cap > u32::MAX as u64 / 16 {
            return Err(PodError::Config(format!(
                "orders per district must be at least {ORDERS_PER_DISTRICT_MIN}, not {cap}"
            )));
        }

        let coherent_start = HEADER_BYTES;
        let mut coherent = Bump(coherent_start);
        let host_stats_off = coherent.take(stats_bytes);
        let recovery_off = host_stats_off + crate::constants::HOSTS_MAX as u64 * HOST_STATS_BYTES;
        let mut part = Bump(HEADER_BYTES);
        let counts = (cap, w, w_per_host);
        let locks = place_locks(&placement, counts, &mut coherent, &mut part);
        let mut dynamic = DynamicExtents::default();
        if params.dynamic_slots > 0 {
            dynamic = place_dynamic_coherent(&params, cap, &mut coherent);
        }
        let shared_nothing = matches!(
            params.arch,
            crate::arch::Arch::SharedNothingTcp | crate::arch::Arch::SharedNothingCxl
        );
        let mut remote = RemoteExtents::default();
        let channels = params.hosts as u64 * params.workers_per_host as u64 * params.hosts as u64;
        if shared_nothing {
            remote.workers = params.workers_per_host as u64;
            remote.channel_controls = coherent.take(channels * CACHE_LINE_BYTES);
            remote.ports = coherent.take(params.hosts as u64 * CACHE_LINE_BYTES);
        }
        let coherent_used = coherent.0 - coherent_start;
        if coherent_used > params.coherent_bytes {
            return Err(PodError::Config(format!(
                "the coherent region needs {coherent_used} bytes for host stats and lock words \
                 but has {}; raise it or lower orders per district ({cap})",
                params.coherent_bytes
            )));
        }
        let shared_start = (coherent_start + params.coherent_bytes).next_multiple_of(4096);
        let mut shared = Bump(shared_start);
        let arrays = place_arrays(&placement, counts, &mut shared, &mut part);
        let txn_slots = params.hosts as u64 * (params.workers_per_host as u64 + 1);
        let txn_slots_off = shared.take(txn_slots * TXN_SLOT_BYTES);
        if params.dynamic_slots > 0 {
            for a in ARRAYS {
                if movable(params.arch, a.group()) {
                    let per_host = dynamic.slots * a.row_bytes();
                    dynamic.slot_rows[a as usize] = shared.take(per_host * params.hosts as u64);
                }
            }
        }
        if shared_nothing {
            let per = 2 * crate::constants::MESSAGE_BYTES_MAX;
            remote.channel_buffers = shared.take(channels * per);
        }
        let shared_used = shared.0.next_multiple_of(4096) - shared_start;
        let shared_bytes = match params.shared_bytes {
            0 => shared_used,
            n if n >= shared_used => n,
            n => {
                return Err(PodError::Config(format!(
                    "the shared region needs {shared_used} bytes but has {n}"
                )));
            }
        };
        let part_bytes = if part.0 == HEADER_BYTES {
            0
        } else {
            part.0.next_multiple_of(4096)
        };
        let (first_warehouse, host_of_warehouse) = assign_warehouses(&params);
        let mut layout = Layout {
            params,
            arrays,
            locks,
            first_warehouse,
            host_of_warehouse,
            coherent: coherent_start..coherent_start + params.coherent_bytes,
            shared: shared_start..shared_start + shared_bytes,
            pod_bytes: shared_start + shared_bytes,
            part_bytes,
            host_stats_off,
            recovery_off,
            txn_slots_off,
            dynamic,
            remote,
            hash: 0,
        };
        layout.hash = layout.compute_hash();
        Ok(layout)
    }

    /// The order capacity wanted for the run, reduced to what the coherent
    /// region can hold lock words for when orders are in pod memory.
    fn fitting_orders(
        params: &Params,
        placement: &dyn Fn(TableGroup) -> Place,
        stats_bytes: u64,
    ) -> Result<u32> {
        let want = params.default_orders_per_district() as u64;
        if placement(TableGroup::Order) != Place::Pod {
            return Ok(want as u32);
        }
        let w = params.warehouses as u64;
        let mut fixed = stats_bytes;
        for t in LOCK_TABLES {
            if placement(t.group()) == Place::Pod && t.group() != TableGroup::Order {
                fixed += t.array().rows(0) * w * 8 + CACHE_LINE_BYTES;
            }
        }
        // ORDER and NEW_ORDER: one lock word each per slot of every district.
        let per_slot = 2 * 8 * DISTRICTS_PER_WAREHOUSE as u64 * w;
        let room = params
            .coherent_bytes
            .saturating_sub(fixed + 2 * CACHE_LINE_BYTES)
            / per_slot;
        if room < ORDERS_PER_DISTRICT_MIN as u64 {
            return Err(PodError::Config(format!(
                "a {} byte coherent region cannot hold the lock words of {w} warehouses",
                params.coherent_bytes
            )));
        }
        Ok(want.min(room) as u32)
    }

    fn compute_hash(&self) -> u64 {
        let mut h = Fnv::new();
        for e in self.arrays.iter().chain(self.locks.iter()) {
            h.add(e.base);
            h.add(e.place.map_or(0, |p| p as u64 + 1));
        }
        for x in [
            self.coherent.start,
            self.coherent.end,
            self.shared.start,
            self.shared.end,
            self.pod_bytes,
            self.part_bytes,
            self.host_stats_off,
            HOST_STATS_BYTES,
            HOST_LIVE_BYTES,
            self.recovery_off,
            self.txn_slots_off,
            TXN_SLOT_BYTES,
        ] {
            h.add(x);
        }
        for a in ARRAYS {
            h.add(a.row_bytes());
        }
        let d = &self.dynamic;
        for x in [d.slots, d.mailboxes, d.mailboxes_per_host, d.doorbells] {
            h.add(x);
        }
        for x in d.directory.iter().chain(&d.slot_locks).chain(&d.slot_rows) {
            h.add(*x);
        }
        let r = &self.remote;
        for x in [r.workers, r.channel_controls, r.channel_buffers, r.ports] {
            h.add(x);
        }
        h.0
    }

    /// Rows of `array` per warehouse (per pod for ITEM).
    pub fn rows_of(&self, array: Array) -> u64 {
        array.rows(self.params.orders_per_district as u64)
    }

    /// Host `host`'s live figures in the coherent region (`live`), after
    /// every host's record.
    pub fn host_live(&self, host: u16) -> u64 {
        assert!((host as usize) < crate::constants::HOSTS_MAX);
        self.recovery_off
            + RECOVERY_GLOBAL_BYTES
            + crate::constants::HOSTS_MAX as u64 * HOST_RECORD_BYTES
            + host as u64 * HOST_LIVE_BYTES
    }

    /// Host `host`'s record in the coherent region (`lease`).
    pub fn host_record(&self, host: u16) -> u64 {
        assert!((host as usize) < crate::constants::HOSTS_MAX);
        self.recovery_off + RECOVERY_GLOBAL_BYTES + host as u64 * HOST_RECORD_BYTES
    }

    /// The transaction slot of worker `worker` (the auditor is
    /// `workers_per_host`) of `host`, in the shared region.
    pub fn txn_slot(&self, host: u16, worker: u16) -> u64 {
        let per = self.params.workers_per_host as u64 + 1;
        assert!(host < self.params.hosts && (worker as u64) < per);
        self.txn_slots_off + (host as u64 * per + worker as u64) * TXN_SLOT_BYTES
    }

    /// Every range of lock words in the coherent region (tables placed in
    /// pod memory, and (e)'s slot words): what a survivor scans for a dead
    /// host's locks. Directory words, mailboxes and the rest are not lock
    /// words and are not in it.
    ///
    /// `orders_used(w, d)`, when given, bounds the ORDER and NEW_ORDER words
    /// scanned per district to the first that many slots (the rest were
    /// never locked); with a run's default capacity most words are unused.
    pub fn pod_lock_ranges(
        &self,
        orders_used: Option<&dyn Fn(u32, u64) -> u64>,
    ) -> Vec<std::ops::Range<u64>> {
        let cap = self.params.orders_per_district as u64;
        let w = self.params.warehouses as u64;
        let mut out = Vec::new();
        for t in LOCK_TABLES {
            let e = self.locks[t as usize];
            let orders = matches!(t, LockTable::Order | LockTable::NewOrder);
            match (e.place, orders_used) {
                (Some(Place::Pod), Some(used)) if orders => {
                    for wh in 1..=self.params.warehouses {
                        for d in 0..DISTRICTS_PER_WAREHOUSE as u64 {
                            let first = self.lock(t, wh, d * cap).off;
                            out.push(first..first + used(wh, d).min(cap) * 8);
                        }
                    }
                }
                (Some(Place::Pod), _) => out.push(e.base..e.base + t.array().rows(cap) * w * 8),
                _ => {}
            }
            if self.movable(t) {
                let base = self.dynamic.slot_locks[t as usize];
                out.push(base..base + self.dynamic.slots * self.params.hosts as u64 * 8);
            }
        }
        out
    }

    pub fn warehouses_of(&self, host: u16) -> std::ops::RangeInclusive<u32> {
        let h = host as usize;
        self.first_warehouse[h]..=self.first_warehouse[h + 1] - 1
    }

    pub fn host_of(&self, w: u32) -> u16 {
        assert!(
            w >= 1 && w <= self.params.warehouses,
            "warehouse {w} out of range"
        );
        self.host_of_warehouse[w as usize - 1]
    }

    pub fn place_of(&self, array: Array) -> Place {
        self.arrays[array as usize]
            .place
            .expect("every array is placed")
    }

    #[cfg(test)]
    pub fn lock_place(&self, table: LockTable) -> Place {
        self.locks[table as usize]
            .place
            .expect("every lock table is placed")
    }

    /// Whether the host runs with a partition file.
    pub fn has_partitions(&self) -> bool {
        self.part_bytes > 0
    }

    /// Row `idx` of `array` for warehouse `w` (ignored for ITEM).
    pub fn row(&self, array: Array, w: u32, idx: u64) -> Loc {
        let cap = self.params.orders_per_district as u64;
        let rows = array.rows(cap);
        assert!(idx < rows, "{array:?} row {idx} out of {rows}");
        let e = self.arrays[array as usize];
        let place = e.place.expect("every array is placed");
        let (host, slot) = self.slot(array.per_warehouse(), place, w, rows, idx);
        Loc {
            place,
            host,
            off: e.base + slot * array.row_bytes(),
        }
    }

    /// The lock word of tuple `idx` of `table` for warehouse `w`.
    pub fn lock(&self, table: LockTable, w: u32, idx: u64) -> Loc {
        let rows = table.array().rows(self.params.orders_per_district as u64);
        assert!(idx < rows, "{table:?} lock {idx} out of {rows}");
        let e = self.locks[table as usize];
        let place = e.place.expect("every lock table is placed");
        let (host, slot) = self.slot(true, place, w, rows, idx);
        Loc {
            place,
            host,
            off: e.base + slot * 8,
        }
    }

    fn slot(&self, per_warehouse: bool, place: Place, w: u32, rows: u64, idx: u64) -> (u16, u64) {
        if !per_warehouse {
            return (0, idx);
        }
        let host = self.host_of(w);
        let w_index = match place {
            // Replicated per-warehouse arrays hold every warehouse.
            Place::Pod | Place::Replicated => (w - 1) as u64,
            Place::Partition => (w - self.first_warehouse[host as usize]) as u64,
        };
        (host, w_index * rows + idx)
    }

    /// Tuples of `table` per warehouse.
    pub fn lock_rows(&self, table: LockTable) -> u64 {
        table.array().rows(self.params.orders_per_district as u64)
    }

    /// Shared nothing: the channel from worker `worker` of host `from` to
    /// host `to`: (its control line, its two message buffers).
    pub fn channel(&self, from: u16, worker: u16, to: u16) -> (u64, u64) {
        let r = &self.remote;
        let hosts = self.params.hosts as u64;
        assert!(r.workers > 0 && from < self.params.hosts && to < self.params.hosts);
        assert!((worker as u64) < r.workers);
        let i = (from as u64 * r.workers + worker as u64) * hosts + to as u64;
        let per = 2 * crate::constants::MESSAGE_BYTES_MAX;
        (
            r.channel_controls + i * CACHE_LINE_BYTES,
            r.channel_buffers + i * per,
        )
    }

    /// Shared nothing over TCP: the word holding host `host`'s port.
    pub fn port_word(&self, host: u16) -> u64 {
        assert!(self.remote.workers > 0 && host < self.params.hosts);
        self.remote.ports + host as u64 * CACHE_LINE_BYTES
    }

    /// Whether this is a shared-nothing layout (a remote tuple is reached
    /// through its owner, `remote`).
    pub fn shared_nothing(&self) -> bool {
        self.remote.workers > 0
    }

    /// Whether tuples of `table` move on demand (Pasha dynamic).
    pub fn movable(&self, table: LockTable) -> bool {
        self.dynamic.slots > 0 && movable(self.params.arch, table.group())
    }

    /// (e): whether another host can ever write this pod's movable tuples
    /// (they move only when another host asks for one, which takes a
    /// remote access the run's inputs can make).
    pub fn tuples_can_move(&self) -> bool {
        let p = &self.params;
        self.dynamic.slots > 0
            && p.hosts > 1
            && (p.payment_remote_probability() > 0.0 || p.line_remote_probability() > 0.0)
    }

    /// Slots per host and movable table (0 unless Pasha dynamic).
    pub fn dynamic_slots(&self) -> u32 {
        self.dynamic.slots as u32
    }

    /// The directory word of movable tuple `idx` of `table`, warehouse `w`:
    /// 0, or the forward to the slot holding it. In the coherent region.
    pub fn directory(&self, table: LockTable, w: u32, idx: u64) -> u64 {
        assert!(self.movable(table), "{table:?} does not move");
        let rows = table.array().rows(0);
        assert!(idx < rows && w >= 1 && w <= self.params.warehouses);
        self.dynamic.directory[table as usize] + ((w - 1) as u64 * rows + idx) * 8
    }

    /// The lock word of slot `slot` of host `owner`'s pool for `table`.
    pub fn slot_lock(&self, table: LockTable, owner: u16, slot: u32) -> u64 {
        assert!(self.movable(table), "{table:?} does not move");
        assert!((slot as u64) < self.dynamic.slots && owner < self.params.hosts);
        self.dynamic.slot_locks[table as usize]
            + (owner as u64 * self.dynamic.slots + slot as u64) * 8
    }

    /// Row of `array` in slot `slot` of host `owner`'s pool (shared region).
    pub fn slot_row(&self, array: Array, owner: u16, slot: u32) -> Loc {
        assert!(
            self.dynamic.slots > 0 && movable(self.params.arch, array.group()),
            "{array:?} does not move"
        );
        assert!((slot as u64) < self.dynamic.slots && owner < self.params.hosts);
        let i = owner as u64 * self.dynamic.slots + slot as u64;
        Loc {
            place: Place::Pod,
            host: owner,
            off: self.dynamic.slot_rows[array as usize] + i * array.row_bytes(),
        }
    }

    /// The request mailbox of worker `worker` (workers, then the auditor) of
    /// `host`.
    pub fn mailbox(&self, host: u16, worker: u16) -> u64 {
        let per = self.dynamic.mailboxes_per_host;
        assert!(per > 0 && host < self.params.hosts && (worker as u64) < per);
        self.dynamic.mailboxes + (host as u64 * per + worker as u64) * MAILBOX_BYTES
    }

    pub fn mailboxes_per_host(&self) -> u16 {
        self.dynamic.mailboxes_per_host as u16
    }

    /// The futex word a host's mover sleeps on, bumped with each request.
    pub fn doorbell(&self, host: u16) -> u64 {
        assert!(self.dynamic.slots > 0 && host < self.params.hosts);
        self.dynamic.doorbells + host as u64 * CACHE_LINE_BYTES
    }

    /// The lock table whose tuples own the rows of `array`, for movable arrays.
    pub fn movable_lock_table(&self, array: Array) -> Option<LockTable> {
        if self.dynamic.slots == 0 || !movable(self.params.arch, array.group()) {
            return None;
        }
        match array {
            Array::Customer | Array::CustomerData => Some(LockTable::Customer),
            Array::Stock | Array::StockDist => Some(LockTable::Stock),
            _ => None,
        }
    }

    /// The lock word that protects row `idx` of `array`, and its index; `None`
    /// for arrays never written after load.
    pub fn covering_lock(&self, array: Array, idx: u64) -> Option<(LockTable, u64)> {
        let cap = self.params.orders_per_district as u64;
        match array {
            Array::Warehouse => Some((LockTable::Warehouse, idx)),
            Array::District => Some((LockTable::District, idx)),
            Array::History => Some((LockTable::District, idx / cap)),
            Array::CustomerLastOrder => {
                Some((LockTable::District, idx / CUSTOMERS_PER_DISTRICT as u64))
            }
            Array::Customer | Array::CustomerData => Some((LockTable::Customer, idx)),
            Array::Order => Some((LockTable::Order, idx)),
            Array::NewOrder => Some((LockTable::NewOrder, idx)),
            Array::OrderLine => Some((LockTable::Order, idx / ORDER_LINES_PER_ORDER_MAX as u64)),
            Array::Stock | Array::StockDist => Some((LockTable::Stock, idx)),
            Array::CustomerName | Array::Item => None,
        }
    }
}

/// (order slots per district, warehouses, warehouses per host).
type Counts = (u64, u64, u64);

/// Lock arrays: pod tables' in the coherent region, the others' in the
/// partition (sized for the largest host's block of warehouses).
fn place_locks(
    placement: &dyn Fn(TableGroup) -> Place,
    (cap, w, w_per_host): Counts,
    coherent: &mut Bump,
    part: &mut Bump,
) -> [Extent; LOCK_TABLES.len()] {
    LOCK_TABLES.map(|t| {
        let rows = t.array().rows(cap);
        match placement(t.group()) {
            Place::Pod => Extent {
                place: Some(Place::Pod),
                base: coherent.take(rows * w * 8),
            },
            // Replicated tables are read-only and have no lock array.
            Place::Partition | Place::Replicated => Extent {
                place: Some(Place::Partition),
                base: part.take(rows * w_per_host * 8),
            },
        }
    })
}

/// Pasha dynamic's coherent-region structures (see [`DynamicExtents`]).
fn place_dynamic_coherent(params: &Params, cap: u64, coherent: &mut Bump) -> DynamicExtents {
    let w = params.warehouses as u64;
    let hosts = params.hosts as u64;
    let slots = params.dynamic_slots as u64;
    let mut d = DynamicExtents {
        slots,
        // Every worker and the auditor may ask.
        mailboxes_per_host: params.workers_per_host as u64 + 1,
        ..DynamicExtents::default()
    };
    for t in LOCK_TABLES {
        if movable(params.arch, t.group()) {
            d.directory[t as usize] = coherent.take(t.array().rows(cap) * w * 8);
            d.slot_locks[t as usize] = coherent.take(slots * hosts * 8);
        }
    }
    d.mailboxes = coherent.take(hosts * d.mailboxes_per_host * MAILBOX_BYTES);
    d.doorbells = coherent.take(hosts * CACHE_LINE_BYTES);
    d
}

/// Row arrays: pod tables' in the shared region for all warehouses, private
/// ones in the partition for the host's block, replicated ones whole.
fn place_arrays(
    placement: &dyn Fn(TableGroup) -> Place,
    (cap, w, w_per_host): Counts,
    shared: &mut Bump,
    part: &mut Bump,
) -> [Extent; ARRAYS.len()] {
    ARRAYS.map(|a| {
        let p = placement(a.group());
        let per = if a.per_warehouse() { w } else { 1 };
        let bytes = a.rows(cap) * a.row_bytes();
        let base = match p {
            Place::Pod => shared.take(bytes * per),
            Place::Partition => part.take(bytes * w_per_host),
            Place::Replicated => part.take(bytes * per),
        };
        Extent {
            place: Some(p),
            base,
        }
    })
}

/// Host h owns warehouses `first[h] ..= first[h+1]-1`: contiguous blocks of
/// nearly equal size (`floor(h * W / H) + 1`).
fn assign_warehouses(params: &Params) -> (Vec<u32>, Vec<u16>) {
    let (w, h) = (params.warehouses as u64, params.hosts as u64);
    let first: Vec<u32> = (0..=h).map(|i| (i * w / h) as u32 + 1).collect();
    let mut host_of = Vec::with_capacity(w as usize);
    for host in 0..h as usize {
        for _ in first[host]..first[host + 1] {
            host_of.push(host as u16);
        }
    }
    assert_eq!(host_of.len() as u64, w);
    (first, host_of)
}

/// FNV-1a over u64 words; a layout fingerprint, not a security hash.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn add(&mut self, x: u64) {
        for b in x.to_le_bytes() {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::Arch;
    use crate::config::PodConfig;

    fn params(arch: Arch, hosts: u16, w: u32) -> Params {
        let mut c = PodConfig::new("/dev/shm/unused", hosts, w);
        c.arch = arch;
        c.duration = std::time::Duration::from_secs(1);
        c.params()
    }

    #[test]
    fn warehouses_are_assigned_in_blocks() {
        let l = Layout::compute(params(Arch::SharedEverything, 3, 8)).unwrap();
        let blocks: Vec<_> = (0..3).map(|h| l.warehouses_of(h)).collect();
        assert_eq!(blocks, vec![1..=2, 3..=5, 6..=8]);
        for h in 0..3u16 {
            for w in l.warehouses_of(h) {
                assert_eq!(l.host_of(w), h);
            }
        }
    }

    #[test]
    fn shared_everything_puts_all_rows_in_the_shared_region() {
        let l = Layout::compute(params(Arch::SharedEverything, 2, 2)).unwrap();
        assert!(!l.has_partitions());
        for a in ARRAYS {
            let first = l.row(a, 1, 0);
            let last_w = if a.per_warehouse() { 2 } else { 1 };
            let last = l.row(a, last_w, a.rows(l.params.orders_per_district as u64) - 1);
            assert_eq!(first.place, Place::Pod);
            assert!(l.shared.contains(&first.off) && last.off + a.row_bytes() <= l.shared.end);
        }
        for t in LOCK_TABLES {
            let loc = l.lock(t, 2, 0);
            assert!(l.coherent.contains(&loc.off));
        }
    }

    #[test]
    fn arrays_do_not_overlap() {
        for arch in [Arch::SharedEverything, Arch::PashaStatic] {
            let l = Layout::compute(params(arch, 2, 4)).unwrap();
            let cap = l.params.orders_per_district as u64;
            let mut spans: Vec<(Place, u64, u64)> = ARRAYS
                .iter()
                .map(|&a| {
                    let e = l.arrays[a as usize];
                    let per = match (e.place.unwrap(), a.per_warehouse()) {
                        (_, false) => 1,
                        (Place::Pod, true) => 4,
                        _ => 2,
                    };
                    let p = if e.place == Some(Place::Pod) {
                        Place::Pod
                    } else {
                        Place::Partition
                    };
                    (p, e.base, e.base + a.rows(cap) * a.row_bytes() * per)
                })
                .collect();
            spans.sort_by_key(|s| (s.0 as u8, s.1));
            for pair in spans.windows(2) {
                if pair[0].0 == pair[1].0 {
                    assert!(pair[0].2 <= pair[1].1, "{arch:?}: {pair:?}");
                }
            }
        }
    }

    #[test]
    fn pasha_static_shares_customer_and_stock_only() {
        let l = Layout::compute(params(Arch::PashaStatic, 2, 2)).unwrap();
        assert_eq!(l.place_of(Array::Customer), Place::Pod);
        assert_eq!(l.place_of(Array::CustomerName), Place::Pod);
        assert_eq!(l.place_of(Array::Stock), Place::Pod);
        assert_eq!(l.place_of(Array::District), Place::Partition);
        assert_eq!(l.place_of(Array::History), Place::Partition);
        assert_eq!(l.place_of(Array::Item), Place::Replicated);
        assert_eq!(l.lock_place(LockTable::Stock), Place::Pod);
        assert_eq!(l.lock_place(LockTable::Order), Place::Partition);
        // Partition offsets do not depend on which host owns the warehouse.
        assert_eq!(
            l.row(Array::District, 1, 3).off,
            l.row(Array::District, 2, 3).off
        );
        // One host: nothing crosses hosts, nothing is shared.
        let one = Layout::compute(params(Arch::PashaStatic, 1, 2)).unwrap();
        assert_eq!(one.place_of(Array::Customer), Place::Partition);
    }

    #[test]
    fn a_small_coherent_region_limits_orders_or_fails_clearly() {
        let mut p = params(Arch::SharedEverything, 1, 1);
        p.duration_ms = 3_600_000;
        p.coherent_bytes = 8 << 20;
        let l = Layout::compute(p).unwrap();
        assert!(l.params.orders_per_district < 3_000 + 3_600 * 20_000);
        assert!(l.coherent.end - l.coherent.start == 8 << 20);
        p.coherent_bytes = 1 << 20;
        let e = Layout::compute(p).unwrap_err();
        assert!(e.to_string().contains("coherent region"), "{e}");
    }

    #[test]
    fn hash_depends_on_layout() {
        let a = Layout::compute(params(Arch::SharedEverything, 2, 2)).unwrap();
        let b = Layout::compute(params(Arch::PashaStatic, 2, 2)).unwrap();
        let a2 = Layout::compute(params(Arch::SharedEverything, 2, 2)).unwrap();
        assert_ne!(a.hash, b.hash);
        assert_eq!(a.hash, a2.hash);
    }
}
