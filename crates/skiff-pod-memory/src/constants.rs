//! Every bound of the pod in one place, named `noun_unit_max`, each with the
//! reason for its value. Relations between them are asserted at compile time.

/// Hosts in a pod. The lock word keeps one cache-validity bit per host in
/// 16 bits (see `lockword`), so this cannot grow without changing it.
pub const HOSTS_MAX: usize = 16;

/// Worker threads per host. Bounds the reader count of a lock word
/// (`HOSTS_MAX * WORKERS_PER_HOST_MAX` concurrent readers, plus auditors).
pub const WORKERS_PER_HOST_MAX: usize = 64;

/// Warehouses in one pod: the loader writes about 80 MB per warehouse.
pub const WAREHOUSES_MAX: u32 = 1024;

/// Longest run: a day, in milliseconds.
pub const DURATION_MS_MAX: u64 = 24 * 3600 * 1000;

/// Largest coherent or shared region: 1 TiB (sparse files; the bound keeps
/// offset arithmetic far from overflow).
pub const REGION_BYTES_MAX: u64 = 1 << 40;

/// A cache line, the unit of modeled CXL misses.
pub const CACHE_LINE_BYTES: u64 = 64;

/// Header page of the pod file and of each partition file.
pub const HEADER_BYTES: u64 = 4096;

/// Largest message between shared-nothing hosts (`remote`): a PREPARE
/// with every row a transaction may change at one participant (15 stock
/// rows of NewOrder: 15 * (24 + 80) bytes; Payment's customer: 2 * 24 +
/// 184 + 500) fits many times over.
pub const MESSAGE_BYTES_MAX: u64 = 16 * 1024;

/// Locks one transaction may hold. StockLevel is the largest: its district,
/// 20 orders and up to 300 distinct stock rows = 321 (NewOrder takes 20).
pub const TXN_LOCKS_MAX: usize = 384;

/// Before-images one transaction may log. NewOrder logs the district (120),
/// order (40), new-order (16), 15 stock rows (80 each) and 15 order lines
/// (72 each) = 2,448 bytes; Payment at most ~1 KiB.
pub const TXN_UNDO_BYTES_MAX: usize = 16 * 1024;

/// Distinct cache lines one transaction tracks for miss counting. NewOrder in
/// the shared-everything layout touches about 150. Power of two (hash set).
pub const TXN_LINES_MAX: usize = 2048;

/// Attempts of one transaction input before the worker gives up on it. NO_WAIT
/// retries after every conflict; a livelock would otherwise never end.
pub const TXN_ATTEMPTS_MAX: u32 = 100_000;

/// Compare-and-swap retries on one lock word before NO_WAIT calls it a
/// conflict. Only concurrent reader arrivals make a CAS fail.
pub const LOCK_CAS_RETRY_MAX: u32 = 64;

/// Bytes of an error message a host leaves in its stats slot.
pub const HOST_ERROR_BYTES_MAX: usize = 240;

/// Bytes of the reason a run ended early, kept in the pod header.
pub const STOP_REASON_BYTES_MAX: usize = 240;

/// Order (and history) slots per district when the configuration does not
/// say: 3,000 initial orders plus room for the run.
pub const ORDERS_PER_DISTRICT_DEFAULT_MAX: u32 = 3_000 + 200_000;

/// Fewest order slots per district that still leave room to run.
pub const ORDERS_PER_DISTRICT_MIN: u32 = 3_000 + 1_000;

/// Empty order slots `check` reads past the last order of a district to
/// prove no stray order exists beyond it.
pub const CHECK_GAP_SCAN_MAX: u32 = 1_000;

/// Pasha dynamic: shared-region slots per host and movable table when not
/// configured. 65,536 STOCK slots (20 MiB) and as many CUSTOMER slots
/// (44 MiB) per host: fewer than the rows of one warehouse's STOCK, so the
/// clock runs, and less pod memory than (d) takes for the same tables. With
/// 16,384, the tuples another host uses at 60% multi-warehouse did not fit:
/// at steady state (after 20 s) 0.15 moves per transaction, over half of
/// them tuples moved in before, against 0.06 and none with 65,536
/// (docs/pod.md, "Warm-up").
pub const DYNAMIC_SLOTS_DEFAULT: u32 = 65_536;

/// Fewest slots: a NewOrder may need 15 remote stock rows at once.
pub const DYNAMIC_SLOTS_MIN: u32 = 16;

/// Most slots: a forward keeps the slot in 32 bits; this keeps the shared
/// region under 16 GiB per host.
pub const DYNAMIC_SLOTS_MAX: u32 = 1 << 24;

/// Most tuples the owner's mover visits per cooling sweep (one every 100 ms;
/// `dynamic::COOL_TURN` sets the pace below this).
pub const DYNAMIC_COOL_SWEEP_MAX: u32 = 512;

/// Times a transaction asks an owner for one tuple before it treats the
/// tuple as busy (a conflict): between the reply and the retry, the clock
/// may have moved it back.
pub const DYNAMIC_ASKS_MAX: u32 = 3;

/// Bytes of one write-ahead-log record: every after-image of a transaction
/// plus 20 bytes per row. NewOrder writes ~40 rows (~3.3 KiB); Payment with
/// bad credit ~800 bytes. The same bound as the undo log, with headroom.
pub const WAL_RECORD_BYTES_MAX: usize = 2 * TXN_UNDO_BYTES_MAX;
/// Rows one transaction may write into pod memory (its undo entries kept in
/// pod memory for survivors, `recovery`). NewOrder writes 34 at most.
pub const TXN_POD_UNDO_ENTRIES_MAX: usize = 128;
/// A host's lease: survivors consider it dead once its heartbeat is this old
/// and its process is gone.
pub const LEASE_MS: u64 = 400;
/// Interval of the heartbeat and of the survivors' lease check.
pub const LEASE_BEAT_MS: u64 = 100;
/// How often a worker adds what it counted to its host's live figures
/// (`memory::live`): a watcher's rates lag by at most this.
pub const LIVE_PUBLISH_MS: u64 = 100;
/// A NewOrder holds at most this many stock rows at once.
const ORDER_LINES_PER_ORDER_MAX_FOR_SLOTS: u64 = 15;

const _: () = {
    assert!(HOSTS_MAX <= 16);
    assert!(TXN_LINES_MAX.is_power_of_two());
    // Reader count is 16 bits in the lock word.
    assert!(HOSTS_MAX * (WORKERS_PER_HOST_MAX + 1) < u16::MAX as usize);
    assert!(TXN_LOCKS_MAX > 1 + 20 + 20 * 15);
    assert!(HOST_ERROR_BYTES_MAX.is_multiple_of(8));
    assert!(STOP_REASON_BYTES_MAX.is_multiple_of(8));
    assert!(DYNAMIC_SLOTS_MIN as u64 > ORDER_LINES_PER_ORDER_MAX_FOR_SLOTS);
    assert!(
        DYNAMIC_SLOTS_MIN <= DYNAMIC_SLOTS_DEFAULT && DYNAMIC_SLOTS_DEFAULT <= DYNAMIC_SLOTS_MAX
    );
};
