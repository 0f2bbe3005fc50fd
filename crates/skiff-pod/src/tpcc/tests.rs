//! TPC-C against a real pod file: the loader's population per clause
//! 4.3.3.1, each transaction's effects per clause 2.4/2.5, rollback, NO_WAIT
//! conflicts, and `check` catching broken invariants.

use std::time::Instant;

use crate::tpcc::check::check_pod;
use crate::tpcc::keys;
use skiff_pod_memory::arch::Arch;
use skiff_pod_memory::config::PodConfig;
use skiff_pod_memory::memory::layout::Array;
use skiff_pod_memory::memory::{Parts, PodMemory};
use skiff_pod_memory::testing::TempShm;
use skiff_pod_memory::tpcc::schema::*;

fn loaded(tag: &str, arch: Arch, hosts: u16, warehouses: u32) -> (TempShm, PodMemory) {
    let shm = TempShm::new(tag);
    let mut cfg = PodConfig::new(&shm.0, hosts, warehouses);
    cfg.arch = arch;
    cfg.duration = std::time::Duration::from_secs(1);
    let t = Instant::now();
    crate::load(&cfg).unwrap();
    eprintln!(
        "{tag}: loaded {warehouses} warehouses in {:.2?}",
        t.elapsed()
    );
    let mem = PodMemory::open(&shm.0, true, Parts::All).unwrap();
    (shm, mem)
}

fn read<T: bytemuck::Pod>(mem: &PodMemory, array: Array, w: u32, idx: u64) -> T {
    let loc = mem.layout.row(array, w, idx);
    mem.mapping_of(loc, 0).read(loc.off)
}

#[test]
fn loader_populates_one_warehouse_per_spec() {
    let (_shm, mem) = loaded("load", Arch::SharedEverything, 1, 1);
    let t = Instant::now();
    let report = check_pod(&mem);
    eprintln!("check took {:.2?}", t.elapsed());
    assert!(report.passed(), "{report}");
    let r = report.rows;
    assert_eq!(r.item, 100_000);
    assert_eq!(r.warehouse, 1);
    assert_eq!(r.district, 10);
    assert_eq!(r.customer, 30_000);
    assert_eq!(r.history, 30_000);
    assert_eq!(r.orders, 30_000);
    assert_eq!(r.new_order, 9_000);
    assert_eq!(r.stock, 100_000);
    // 5..=15 lines per order, uniform: 300,000 expected, sd ~550.
    assert!(
        (295_000..=305_000).contains(&r.order_line),
        "{}",
        r.order_line
    );

    let w: Warehouse = read(&mem, Array::Warehouse, 1, 0);
    assert_eq!(w.w_ytd, 30_000_000);
    assert!(w.w_tax <= 2_000);
    assert_eq!(&w.w_zip[4..], b"11111");
    let d: District = read(&mem, Array::District, 1, 0);
    assert_eq!((d.d_next_o_id, d.d_ytd), (3_001, 3_000_000));

    let (mut bad_credit, mut original) = (0, 0);
    for c_id in 1..=CUSTOMERS_PER_DISTRICT {
        let c: Customer = read(&mem, Array::Customer, 1, keys::customer(1, c_id));
        assert_eq!(
            (c.c_balance, c.c_ytd_payment, c.c_payment_cnt),
            (-1_000, 1_000, 1)
        );
        assert_eq!(c.c_credit_lim, 5_000_000);
        assert!(c.c_discount <= 5_000);
        assert_eq!(&c.c_middle, b"OE");
        bad_credit += (c.c_credit == *b"BC") as u32;
        if c_id <= 1_000 {
            let mut want = [0u8; 16];
            skiff_pod_memory::tpcc::random::last_name(c_id - 1, &mut want);
            assert_eq!(c.c_last, want, "customer {c_id}");
        }
        let data: CustomerData = read(&mem, Array::CustomerData, 1, keys::customer(1, c_id));
        assert!((300..=500).contains(&text(&data.c_data).len()));
    }
    assert!((200..=400).contains(&bad_credit), "{bad_credit} of 3000 BC");
    for i_id in 1..=ITEMS {
        let item: Item = read(&mem, Array::Item, 1, keys::item(i_id));
        assert!((100..=10_000).contains(&item.i_price));
        original += text(&item.i_data).windows(8).any(|x| x == b"ORIGINAL") as u32;
    }
    assert!(
        (9_000..=11_000).contains(&original),
        "{original} items ORIGINAL"
    );

    // The last-name index is sorted and covers the district.
    let start = keys::name_index_start(3);
    let mut prev: Option<CustomerNameEntry> = None;
    for i in 0..CUSTOMERS_PER_DISTRICT as u64 {
        let e: CustomerNameEntry = read(&mem, Array::CustomerName, 1, start + i);
        if let Some(p) = prev {
            assert!((p.c_last, p.c_first) <= (e.c_last, e.c_first));
        }
        prev = Some(e);
    }
}

use crate::cc::txn::{Txn, TxnError};
use crate::tpcc::neworder::new_order;
use crate::tpcc::payment::payment;
use skiff_pod_memory::lockword::Mode;
use skiff_pod_memory::memory::layout::LockTable;
use skiff_pod_memory::tpcc::input::{
    CustomerKey, InputGen, NewOrderInput, OrderLineInput, PaymentInput,
};
use skiff_pod_memory::tpcc::random::Rng;

fn order_input(w_id: u32, d_id: u32, c_id: u32, lines: &[(u32, u32, u32)]) -> NewOrderInput {
    let mut input = NewOrderInput {
        w_id,
        d_id,
        c_id,
        ol_cnt: lines.len() as u32,
        lines: Default::default(),
    };
    for (slot, &(i_id, supply_w_id, quantity)) in input.lines.iter_mut().zip(lines) {
        *slot = OrderLineInput {
            i_id,
            supply_w_id,
            quantity,
        };
    }
    input
}

#[test]
fn new_order_inserts_and_updates_per_spec() {
    let (_shm, mem) = loaded("neworder", Arch::SharedEverything, 1, 2);
    let stock_before: Stock = read(&mem, Array::Stock, 2, keys::stock(7));
    let local_before: Stock = read(&mem, Array::Stock, 1, keys::stock(5));
    let item5: Item = read(&mem, Array::Item, 1, keys::item(5));
    let item7: Item = read(&mem, Array::Item, 1, keys::item(7));
    let mut txn = Txn::new(&mem, 0);
    txn.begin(0);
    // Line 2 is supplied by warehouse 2: a remote line.
    let input = order_input(1, 4, 42, &[(5, 1, 3), (7, 2, 10)]);
    let out = new_order(&mut txn, &input, 1_000).unwrap();
    txn.commit();
    assert_eq!(out.o_id, 3_001);

    let d: District = read(&mem, Array::District, 1, keys::district(4));
    assert_eq!(d.d_next_o_id, 3_002);
    let cap = mem.params().orders_per_district;
    let slot = keys::order(cap, 4, 3_001);
    let o: Order = read(&mem, Array::Order, 1, slot);
    assert_eq!(
        (
            o.o_id,
            o.o_c_id,
            o.o_ol_cnt,
            o.o_all_local,
            o.o_carrier_id,
            o.o_entry_d
        ),
        (3_001, 42, 2, 0, 0, 1_000)
    );
    let no: NewOrder = read(&mem, Array::NewOrder, 1, slot);
    assert_eq!((no.no_o_id, no.no_d_id, no.no_w_id), (3_001, 4, 1));
    let ol2: OrderLine = read(&mem, Array::OrderLine, 1, keys::order_line(slot, 2));
    assert_eq!(
        (
            ol2.ol_i_id,
            ol2.ol_supply_w_id,
            ol2.ol_quantity,
            ol2.ol_delivery_d
        ),
        (7, 2, 10, 0)
    );
    assert_eq!(ol2.ol_amount, 10 * item7.i_price);
    let dist: StockDist = read(&mem, Array::StockDist, 2, keys::stock(7));
    assert_eq!(ol2.ol_dist_info, dist.s_dist[3], "S_DIST_04 for district 4");

    let s: Stock = read(&mem, Array::Stock, 2, keys::stock(7));
    let want_q = if stock_before.s_quantity >= 20 {
        stock_before.s_quantity - 10
    } else {
        stock_before.s_quantity + 81
    };
    assert_eq!(
        (s.s_quantity, s.s_ytd, s.s_order_cnt, s.s_remote_cnt),
        (want_q, 10, 1, 1)
    );
    let s_local: Stock = read(&mem, Array::Stock, 1, keys::stock(5));
    assert_eq!(
        (s_local.s_ytd, s_local.s_remote_cnt),
        (local_before.s_ytd + 3, 0)
    );

    let c: Customer = read(&mem, Array::Customer, 1, keys::customer(4, 42));
    let w: Warehouse = read(&mem, Array::Warehouse, 1, 0);
    let sum = 3 * item5.i_price + 10 * item7.i_price;
    let total = sum as i128
        * (10_000 - c.c_discount as i128)
        * (10_000 + w.w_tax as i128 + d.d_tax as i128)
        / 100_000_000;
    assert_eq!(out.total_cents, total as i64);
    // The shared-everything layout routed all of it through the CXL layer.
    assert!(txn.cxl_counters().data_misses > 10);
    assert!(txn.cxl_counters().coherent_misses >= 6);
    let report = check_pod(&mem);
    assert!(report.passed(), "{report}");
    assert_eq!(report.rows.orders, 2 * 30_000 + 1);
}

#[test]
fn new_order_rollback_leaves_no_trace() {
    let (_shm, mem) = loaded("rollback", Arch::PashaStatic, 1, 1);
    let stock_before: Stock = read(&mem, Array::Stock, 1, keys::stock(9));
    let mut txn = Txn::new(&mem, 0);
    txn.begin(0);
    let input = order_input(1, 2, 7, &[(9, 1, 4), (ITEMS + 1, 1, 1)]);
    assert_eq!(
        new_order(&mut txn, &input, 5).unwrap_err(),
        TxnError::Rollback
    );
    txn.abort();
    let d: District = read(&mem, Array::District, 1, keys::district(2));
    assert_eq!(d.d_next_o_id, 3_001);
    let slot = keys::order(mem.params().orders_per_district, 2, 3_001);
    let o: Order = read(&mem, Array::Order, 1, slot);
    assert_eq!(o.o_id, 0, "order slot restored to empty");
    let ol: OrderLine = read(&mem, Array::OrderLine, 1, keys::order_line(slot, 1));
    assert_eq!(ol.ol_o_id, 0);
    let s: Stock = read(&mem, Array::Stock, 1, keys::stock(9));
    assert_eq!(
        (s.s_quantity, s.s_ytd, s.s_order_cnt),
        (stock_before.s_quantity, 0, 0)
    );
    // One host, Pasha static: everything is private, nothing is CXL traffic.
    assert_eq!(txn.cxl_counters().misses(), 0);
    // The same worker can run the next order, and it gets the same O_ID.
    txn.begin(0);
    let ok = order_input(1, 2, 7, &[(9, 1, 4)]);
    assert_eq!(new_order(&mut txn, &ok, 6).unwrap().o_id, 3_001);
    txn.commit();
    let report = check_pod(&mem);
    assert!(report.passed(), "{report}");
}

#[test]
fn payment_updates_ytd_balance_history_and_picks_the_middle_namesake() {
    let (_shm, mem) = loaded("payment", Arch::SharedEverything, 2, 2);
    // Customers of warehouse 2, district 3 named like customer 17 (each name
    // exists once among the first 1,000, and NURand adds namesakes).
    let mut name = [0u8; 16];
    skiff_pod_memory::tpcc::random::last_name(16, &mut name);
    let mut namesakes: Vec<(Vec<u8>, u32)> = (1..=CUSTOMERS_PER_DISTRICT)
        .map(|c| read::<Customer>(&mem, Array::Customer, 2, keys::customer(3, c)))
        .filter(|c| c.c_last == name)
        .map(|c| (c.c_first.to_vec(), c.c_id))
        .collect();
    namesakes.sort();
    // Position ceil(n / 2), 1-based.
    let expected = namesakes[namesakes.len().div_ceil(2) - 1].1;
    let before: Customer = read(&mem, Array::Customer, 2, keys::customer(3, expected));

    // Host 0 pays for a customer of warehouse 2 (owned by host 1).
    let mut txn = Txn::new(&mem, 0);
    txn.begin(0);
    let input = PaymentInput {
        w_id: 1,
        d_id: 5,
        c_w_id: 2,
        c_d_id: 3,
        customer: CustomerKey::LastName(name),
        amount_cents: 12_345,
    };
    let out = payment(&mut txn, &input, 77).unwrap();
    txn.commit();
    assert_eq!(out.c_id, expected, "{} namesakes", namesakes.len());

    let after: Customer = read(&mem, Array::Customer, 2, keys::customer(3, expected));
    assert_eq!(after.c_balance, before.c_balance - 12_345);
    assert_eq!(after.c_ytd_payment, before.c_ytd_payment + 12_345);
    assert_eq!(after.c_payment_cnt, before.c_payment_cnt + 1);
    let w: Warehouse = read(&mem, Array::Warehouse, 1, 0);
    assert_eq!(w.w_ytd, 30_000_000 + 12_345);
    let d: District = read(&mem, Array::District, 1, keys::district(5));
    assert_eq!((d.d_ytd, d.d_next_h_slot), (3_000_000 + 12_345, 3_001));
    let h: History = read(
        &mem,
        Array::History,
        1,
        keys::history(mem.params().orders_per_district, 5, 3_000),
    );
    assert_eq!(
        (
            h.h_c_id, h.h_c_d_id, h.h_c_w_id, h.h_d_id, h.h_w_id, h.h_amount, h.h_date
        ),
        (expected, 3, 2, 5, 1, 12_345, 77)
    );
    let mut want_data = text(&w.w_name).to_vec();
    want_data.extend_from_slice(b"    ");
    let d_name = text(&d.d_name).to_vec();
    want_data.extend_from_slice(&d_name);
    assert_eq!(text(&h.h_data), &want_data[..]);
    let report = check_pod(&mem);
    assert!(report.passed(), "{report}");
}

#[test]
fn bad_credit_payment_prepends_to_c_data() {
    let (_shm, mem) = loaded("badcredit", Arch::PashaStatic, 1, 1);
    let c_id = (1..=CUSTOMERS_PER_DISTRICT)
        .find(|&c| {
            read::<Customer>(&mem, Array::Customer, 1, keys::customer(1, c)).c_credit == *b"BC"
        })
        .unwrap();
    let before: CustomerData = read(&mem, Array::CustomerData, 1, keys::customer(1, c_id));
    let mut txn = Txn::new(&mem, 0);
    txn.begin(0);
    let input = PaymentInput {
        w_id: 1,
        d_id: 2,
        c_w_id: 1,
        c_d_id: 1,
        customer: CustomerKey::Id(c_id),
        amount_cents: 507,
    };
    payment(&mut txn, &input, 1).unwrap();
    txn.commit();
    let after: CustomerData = read(&mem, Array::CustomerData, 1, keys::customer(1, c_id));
    let head = format!("{c_id} 1 1 2 1 5.07 ");
    let mut want = head.into_bytes();
    want.extend_from_slice(text(&before.c_data));
    want.truncate(500);
    assert_eq!(text(&after.c_data), &want[..]);
    assert!(check_pod(&mem).passed());
}

#[test]
fn no_wait_conflicts_abort_at_once_and_release_everything() {
    let (_shm, mem) = loaded("conflict", Arch::SharedEverything, 2, 2);
    let mut holder = Txn::new(&mem, 1);
    holder.begin(0);
    holder
        .lock(LockTable::District, 1, keys::district(6), Mode::Shared)
        .unwrap();

    let mut txn = Txn::new(&mem, 0);
    txn.begin(0);
    let input = order_input(1, 6, 1, &[(3, 1, 1)]);
    assert_eq!(
        new_order(&mut txn, &input, 9).unwrap_err(),
        TxnError::Conflict
    );
    txn.abort();
    // The warehouse lock NewOrder took first was released by the abort: an
    // exclusive lock on it succeeds now.
    let mut probe = Txn::new(&mem, 1);
    probe.begin(0);
    probe
        .lock(LockTable::Warehouse, 1, 0, Mode::Exclusive)
        .unwrap();
    probe.abort();

    holder.commit();
    txn.begin(0);
    assert_eq!(new_order(&mut txn, &input, 9).unwrap().o_id, 3_001);
    txn.commit();
    assert!(check_pod(&mem).passed());
}

#[test]
fn random_mix_on_one_thread_keeps_every_condition() {
    let (_shm, mem) = loaded("mix", Arch::SharedEverything, 1, 2);
    let p = mem.params();
    let inputs = InputGen {
        warehouses: 2,
        line_remote_p: 0.2,
        payment_remote_p: 0.5,
        nurand: p.nurand,
    };
    let mut rng = Rng::new(11);
    let mut txn = Txn::new(&mem, 0);
    let (mut committed, mut rolled_back) = (0, 0);
    for i in 0..2_000u64 {
        let w = 1 + (i % 2) as u32;
        txn.begin(0);
        let r = if i % 2 == 0 {
            let input = inputs.new_order(&mut rng, w);
            new_order(&mut txn, &input, 1 + i).map(|_| ())
        } else {
            let input = inputs.payment(&mut rng, w);
            payment(&mut txn, &input, 1 + i).map(|_| ())
        };
        match r {
            Ok(()) => {
                txn.commit();
                committed += 1;
            }
            Err(TxnError::Rollback) => {
                txn.abort();
                rolled_back += 1;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(
        rolled_back > 0 && committed > 1_900,
        "{committed} {rolled_back}"
    );
    let report = check_pod(&mem);
    assert!(report.passed(), "{report}");
}

#[test]
fn check_catches_each_kind_of_damage() {
    let (_shm, mem) = loaded("damage", Arch::PashaStatic, 1, 1);
    let cap = mem.params().orders_per_district;
    let write = |array: Array, idx: u64, f: &dyn Fn(&mut [u8])| {
        let loc = mem.layout.row(array, 1, idx);
        let m = mem.mapping_of(loc, 0);
        let mut buf = vec![0u8; array.row_bytes() as usize];
        m.read_bytes(loc.off, &mut buf);
        f(&mut buf);
        m.write_bytes(loc.off, &buf);
    };
    // W_YTD off by a cent: conditions 1 and 8.
    write(Array::Warehouse, 0, &|b| b[0] = b[0].wrapping_add(1));
    // A new-order row of district 2 deleted: conditions 3, 5 and 11.
    write(Array::NewOrder, keys::order(cap, 2, 2_500), &|b| b.fill(0));
    // An order line of a delivered order of district 3 removed: 4 and 6.
    write(
        Array::OrderLine,
        keys::order_line(keys::order(cap, 3, 10), 1),
        &|b| b.fill(0),
    );
    // A customer's balance changed: 10 and 12.
    write(Array::Customer, keys::customer(4, 99), &|b| {
        b[8] = b[8].wrapping_add(1)
    });
    let report = check_pod(&mem);
    let failed: Vec<u8> = report
        .conditions
        .iter()
        .filter(|c| c.violations > 0)
        .map(|c| c.number)
        .collect();
    assert_eq!(failed, vec![1, 3, 4, 5, 6, 8, 10, 11, 12], "{report}");
    assert!(
        report
            .condition(1)
            .first_violation
            .as_deref()
            .unwrap()
            .contains("W_YTD")
    );
}

#[test]
fn the_auditor_sees_a_broken_invariant() {
    let (_shm, mem) = loaded("audit", Arch::SharedEverything, 1, 1);
    let mut txn = Txn::new(&mem, 0);
    txn.begin(0);
    assert_eq!(crate::tpcc::audit::audit_warehouse(&mut txn, 1), Ok(true));
    txn.commit();
    let loc = mem.layout.row(Array::District, 1, keys::district(7));
    let mut d: District = mem.pod.read(loc.off);
    d.d_ytd += 1;
    mem.pod.write(loc.off, &d);
    txn.begin(0);
    assert_eq!(crate::tpcc::audit::audit_warehouse(&mut txn, 1), Ok(false));
    txn.commit();
}

/// The auditor runs against two "hosts" paying into both warehouses (remote
/// customers included) until it has committed 200 audits while 2,000
/// payments committed; none may see W_YTD != sum(D_YTD). Then all twelve
/// conditions hold.
///
/// Run on pod rows with two hosts and on private rows with one; with shared
/// locks disabled it reports dozens of violations.
#[test]
fn auditor_sees_consistent_ytd_under_concurrent_payments() {
    audit_under_payments(Arch::SharedEverything, 2);
    audit_under_payments(Arch::PashaStatic, 1);
}

fn audit_under_payments(arch: Arch, hosts: u16) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let (_shm, mem) = loaded("auditor", arch, hosts, 2);
    let nurand = mem.params().nurand;
    let stop = AtomicBool::new(false);
    let paid = AtomicU64::new(0);
    let (audits, violations) = std::thread::scope(|s| {
        for host in 0..2u16 {
            let (mem, stop, paid) = (&mem, &stop, &paid);
            s.spawn(move || {
                let inputs = InputGen {
                    warehouses: 2,
                    line_remote_p: 0.0,
                    payment_remote_p: 0.5,
                    nurand,
                };
                let mut rng = Rng::new(host as u64);
                let mut txn = Txn::new(mem, host % hosts);
                while !stop.load(Ordering::Relaxed) {
                    let input = inputs.payment(&mut rng, host as u32 + 1);
                    txn.begin(0);
                    match payment(&mut txn, &input, 1) {
                        Ok(_) => {
                            txn.commit();
                            paid.fetch_add(1, Ordering::Relaxed);
                            // A terminal's think time, short: under NO_WAIT a
                            // payer that re-locks its warehouse at once can
                            // starve the auditor on a loaded 2-core machine.
                            std::thread::sleep(std::time::Duration::from_micros(20));
                        }
                        Err(TxnError::Conflict) => {
                            txn.abort();
                            std::thread::yield_now();
                        }
                        Err(e) => panic!("{e:?}"),
                    }
                }
            });
        }
        let mut txn = Txn::new(&mem, hosts - 1);
        let (mut audits, mut violations) = (0, 0);
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        // Audit while payments run: at least 200 audits and 2,000 payments.
        while (audits < 200 || paid.load(Ordering::Relaxed) < 2_000) && Instant::now() < deadline {
            txn.begin(0);
            match crate::tpcc::audit::audit_warehouse(&mut txn, 1 + audits % 2) {
                Ok(holds) => {
                    txn.commit();
                    audits += 1;
                    violations += !holds as u32;
                }
                Err(TxnError::Conflict) => {
                    txn.abort();
                    std::thread::yield_now();
                }
                Err(e) => panic!("{e:?}"),
            }
        }
        stop.store(true, Ordering::Relaxed);
        (audits, violations)
    });
    assert!(audits >= 200, "the auditor starved: {audits}");
    assert_eq!(violations, 0);
    let report = check_pod(&mem);
    assert!(report.passed(), "{report}");
    assert!(
        report.rows.history >= 62_000,
        "payments ran: {}",
        report.rows.history
    );
}

use crate::tpcc::delivery::deliver_district;
use crate::tpcc::order_status::order_status;
use crate::tpcc::stock_level::stock_level;
use skiff_pod_memory::tpcc::input::{DeliveryInput, OrderStatusInput, StockLevelInput};

/// Delivery of one district, clause 2.7.4.2: the oldest undelivered order
/// (2,101 after the load) loses its NEW_ORDER row, gets its carrier and its
/// lines' delivery date; the customer is charged its total. A district with
/// nothing to deliver is skipped. Then all twelve conditions hold.
#[test]
fn delivery_delivers_the_oldest_order_per_spec() {
    let (_shm, mem) = loaded("delivery", Arch::PashaStatic, 1, 1);
    let cap = mem.params().orders_per_district;
    let slot = keys::order(cap, 3, FIRST_UNDELIVERED_O_ID);
    let order: Order = read(&mem, Array::Order, 1, slot);
    let c_before: Customer = read(&mem, Array::Customer, 1, keys::customer(3, order.o_c_id));
    let total: i64 = (1..=order.o_ol_cnt)
        .map(|n| read::<OrderLine>(&mem, Array::OrderLine, 1, keys::order_line(slot, n)).ol_amount)
        .sum();
    let input = DeliveryInput {
        w_id: 1,
        o_carrier_id: 7,
    };
    let mut txn = Txn::new(&mem, 0);
    txn.begin(0);
    assert_eq!(
        deliver_district(&mut txn, &input, 3, 9_999),
        Ok(Some(FIRST_UNDELIVERED_O_ID))
    );
    txn.commit();

    let no: NewOrder = read(&mem, Array::NewOrder, 1, slot);
    assert_eq!(no.no_o_id, 0, "the NEW_ORDER row is deleted");
    let o: Order = read(&mem, Array::Order, 1, slot);
    assert_eq!(o.o_carrier_id, 7);
    for n in 1..=o.o_ol_cnt {
        let ol: OrderLine = read(&mem, Array::OrderLine, 1, keys::order_line(slot, n));
        assert_eq!(ol.ol_delivery_d, 9_999);
    }
    let c: Customer = read(&mem, Array::Customer, 1, keys::customer(3, order.o_c_id));
    assert_eq!(c.c_balance, c_before.c_balance + total);
    assert_eq!(c.c_delivery_cnt, c_before.c_delivery_cnt + 1);
    let d: District = read(&mem, Array::District, 1, keys::district(3));
    assert_eq!(d.d_next_delivery_o_id, FIRST_UNDELIVERED_O_ID + 1);
    let report = check_pod(&mem);
    assert!(report.passed(), "{report}");
    assert_eq!(report.rows.new_order, 9_000 - 1);

    // Deliver everything left in district 5: then it is skipped.
    for o_id in FIRST_UNDELIVERED_O_ID..=ORDERS_PER_DISTRICT_INITIAL {
        txn.begin(0);
        assert_eq!(deliver_district(&mut txn, &input, 5, 1), Ok(Some(o_id)));
        txn.commit();
    }
    txn.begin(0);
    assert_eq!(deliver_district(&mut txn, &input, 5, 1), Ok(None));
    txn.commit();
    let report = check_pod(&mem);
    assert!(report.passed(), "{report}");
}

/// OrderStatus, clause 2.6.2.2: the customer's latest order — the loaded
/// one, then the one a NewOrder just inserted — with its lines.
#[test]
fn order_status_reads_the_customers_latest_order() {
    let (_shm, mem) = loaded("orderstatus", Arch::SharedEverything, 1, 1);
    let cap = mem.params().orders_per_district;
    let by_id = OrderStatusInput {
        w_id: 1,
        d_id: 2,
        customer: CustomerKey::Id(77),
    };
    let mut txn = Txn::new(&mem, 0);
    txn.begin(0);
    let out = order_status(&mut txn, &by_id).unwrap();
    txn.commit();
    let loaded_order: Order = read(&mem, Array::Order, 1, keys::order(cap, 2, out.o_id));
    assert_eq!(loaded_order.o_c_id, 77);
    assert!(out.o_id <= ORDERS_PER_DISTRICT_INITIAL);
    assert_eq!(out.lines, loaded_order.o_ol_cnt);

    txn.begin(0);
    let placed = new_order(&mut txn, &order_input(1, 2, 77, &[(3, 1, 2), (9, 1, 4)]), 5).unwrap();
    txn.commit();
    txn.begin(0);
    let out = order_status(&mut txn, &by_id).unwrap();
    txn.commit();
    assert_eq!(
        (out.c_id, out.o_id, out.lines, out.o_carrier_id),
        (77, placed.o_id, 2, 0)
    );
    let item = |i| read::<Item>(&mem, Array::Item, 1, keys::item(i)).i_price;
    assert_eq!(out.amount, 2 * item(3) + 4 * item(9));
    let c: Customer = read(&mem, Array::Customer, 1, keys::customer(2, 77));
    assert_eq!(out.c_balance, c.c_balance);

    // By last name: the customer the name index picks, and its order.
    let by_name = OrderStatusInput {
        w_id: 1,
        d_id: 2,
        customer: CustomerKey::LastName(c.c_last),
    };
    txn.begin(0);
    let out = order_status(&mut txn, &by_name).unwrap();
    txn.commit();
    let named: Customer = read(&mem, Array::Customer, 1, keys::customer(2, out.c_id));
    assert_eq!(named.c_last, c.c_last);
    let o: Order = read(&mem, Array::Order, 1, keys::order(cap, 2, out.o_id));
    assert_eq!(o.o_c_id, out.c_id);
}

/// StockLevel, clause 2.8.2.2, against a count from the rows themselves.
#[test]
fn stock_level_counts_distinct_low_items_of_the_last_20_orders() {
    let (_shm, mem) = loaded("stocklevel", Arch::PashaStatic, 1, 1);
    let cap = mem.params().orders_per_district;
    let mut txn = Txn::new(&mem, 0);
    // Orders that repeat item 11 and lower its stock.
    for _ in 0..3 {
        txn.begin(0);
        new_order(
            &mut txn,
            &order_input(1, 6, 5, &[(11, 1, 9), (12, 1, 1)]),
            5,
        )
        .unwrap();
        txn.commit();
    }
    for threshold in [10, 15, 20, 100] {
        let d: District = read(&mem, Array::District, 1, keys::district(6));
        let mut items = std::collections::BTreeSet::new();
        for o_id in d.d_next_o_id - 20..d.d_next_o_id {
            let slot = keys::order(cap, 6, o_id);
            let o: Order = read(&mem, Array::Order, 1, slot);
            for n in 1..=o.o_ol_cnt {
                items.insert(
                    read::<OrderLine>(&mem, Array::OrderLine, 1, keys::order_line(slot, n)).ol_i_id,
                );
            }
        }
        let want = items
            .iter()
            .filter(|&&i| {
                read::<Stock>(&mem, Array::Stock, 1, keys::stock(i)).s_quantity < threshold
            })
            .count() as u32;
        txn.begin(0);
        let got = stock_level(
            &mut txn,
            &StockLevelInput {
                w_id: 1,
                d_id: 6,
                threshold,
            },
        )
        .unwrap();
        txn.commit();
        assert_eq!(got, want, "threshold {threshold}");
        if threshold == 100 {
            assert!(got > 0);
        }
    }
}
