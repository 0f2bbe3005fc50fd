//! The initial population of clause 4.3.3.1, written straight into pod
//! memory and the partitions before any host runs (so no locks and no CXL
//! accounting: the loader is not a host). Deterministic per seed: each
//! warehouse's tables come from their own random streams, so warehouses load
//! in parallel and the result does not depend on the thread count.

use bytemuck::{Pod, Zeroable};

use crate::tpcc::keys;
use skiff_pod_memory::error::Result;
use skiff_pod_memory::memory::PodMemory;
use skiff_pod_memory::memory::layout::Array;
use skiff_pod_memory::tpcc::random::{Rng, last_name};
use skiff_pod_memory::tpcc::schema::*;

/// Stream ids of `Rng::derive`, one per table.
const STREAM_ITEM: u64 = 1;
const STREAM_WAREHOUSE: u64 = 2;
const STREAM_STOCK: u64 = 3;
const STREAM_DISTRICT: u64 = 4;

/// Initial W_YTD: 300,000.00. D_YTD: 30,000.00. H_AMOUNT: 10.00.
const W_YTD_INITIAL: i64 = 30_000_000;
const D_YTD_INITIAL: i64 = 3_000_000;
const H_AMOUNT_INITIAL: i64 = 1_000;

/// Loads every table. `now` is the load time stamp (C_SINCE, O_ENTRY_D ...).
pub(crate) fn load(mem: &PodMemory, now: u64) -> Result<()> {
    load_items(mem);
    let warehouses = mem.params().warehouses;
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(warehouses as usize);
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                for w in (1..=warehouses).filter(|w| (*w as usize - 1) % threads == t) {
                    load_warehouse(mem, w, now);
                }
            });
        }
    });
    Ok(())
}

/// Writes a row where the layout says; a replicated row to every host.
fn put<T: Pod>(mem: &PodMemory, array: Array, w: u32, idx: u64, row: &T) {
    let loc = mem.layout.row(array, w, idx);
    if loc.place == skiff_pod_memory::arch::Place::Replicated {
        for h in 0..mem.params().hosts {
            mem.mapping_of(loc, h).write(loc.off, row);
        }
    } else {
        mem.mapping_of(loc, 0).write(loc.off, row);
    }
}

fn load_items(mem: &PodMemory) {
    let mut rng = Rng::derive(mem.params().seed, STREAM_ITEM, 0);
    for i_id in 1..=ITEMS {
        let mut item = Item::zeroed();
        item.i_id = i_id;
        item.i_im_id = rng.uniform_u32(1, 10_000);
        rng.astring(&mut item.i_name, 14, 24);
        item.i_price = rng.uniform(100, 10_000) as i64;
        rng.data_with_original(&mut item.i_data, 26, 50);
        put(mem, Array::Item, 1, keys::item(i_id), &item);
    }
}

fn load_warehouse(mem: &PodMemory, w: u32, now: u64) {
    let seed = mem.params().seed;
    let mut rng = Rng::derive(seed, STREAM_WAREHOUSE, w as u64);
    let mut wh = Warehouse::zeroed();
    wh.w_id = w;
    rng.astring(&mut wh.w_name, 6, 10);
    address(
        &mut rng,
        &mut wh.w_street_1,
        &mut wh.w_street_2,
        &mut wh.w_city,
        &mut wh.w_state,
        &mut wh.w_zip,
    );
    wh.w_tax = rng.uniform_u32(0, 2_000);
    wh.w_ytd = W_YTD_INITIAL;
    put(mem, Array::Warehouse, w, 0, &wh);

    load_stock(mem, w);
    for d_id in 1..=DISTRICTS_PER_WAREHOUSE {
        let mut rng = Rng::derive(seed, STREAM_DISTRICT, (w as u64) << 8 | d_id as u64);
        load_district(mem, &mut rng, w, d_id);
        load_customers(mem, &mut rng, w, d_id, now);
        load_orders(mem, &mut rng, w, d_id, now);
    }
}

fn address(
    rng: &mut Rng,
    s1: &mut [u8; 20],
    s2: &mut [u8; 20],
    city: &mut [u8; 20],
    state: &mut [u8; 2],
    zip: &mut [u8; 9],
) {
    rng.astring(s1, 10, 20);
    rng.astring(s2, 10, 20);
    rng.astring(city, 10, 20);
    rng.astring(state, 2, 2);
    rng.zip(zip);
}

fn load_stock(mem: &PodMemory, w: u32) {
    let mut rng = Rng::derive(mem.params().seed, STREAM_STOCK, w as u64);
    for i_id in 1..=STOCK_PER_WAREHOUSE {
        let mut stock = Stock::zeroed();
        stock.s_i_id = i_id;
        stock.s_w_id = w;
        stock.s_quantity = rng.uniform_u32(10, 100);
        rng.data_with_original(&mut stock.s_data, 26, 50);
        let mut dist = StockDist::zeroed();
        for d in dist.s_dist.iter_mut() {
            rng.astring(d, 24, 24);
        }
        put(mem, Array::Stock, w, keys::stock(i_id), &stock);
        put(mem, Array::StockDist, w, keys::stock(i_id), &dist);
    }
}

fn load_district(mem: &PodMemory, rng: &mut Rng, w: u32, d_id: u32) {
    let mut d = District::zeroed();
    d.d_id = d_id;
    d.d_w_id = w;
    rng.astring(&mut d.d_name, 6, 10);
    address(
        rng,
        &mut d.d_street_1,
        &mut d.d_street_2,
        &mut d.d_city,
        &mut d.d_state,
        &mut d.d_zip,
    );
    d.d_tax = rng.uniform_u32(0, 2_000);
    d.d_ytd = D_YTD_INITIAL;
    d.d_next_o_id = ORDERS_PER_DISTRICT_INITIAL + 1;
    d.d_next_delivery_o_id = FIRST_UNDELIVERED_O_ID;
    // One HISTORY row per customer below.
    d.d_next_h_slot = CUSTOMERS_PER_DISTRICT;
    put(mem, Array::District, w, keys::district(d_id), &d);
}

fn load_customers(mem: &PodMemory, rng: &mut Rng, w: u32, d_id: u32, now: u64) {
    let c_last_load = mem.params().nurand.c_last_load;
    let mut names = Vec::with_capacity(CUSTOMERS_PER_DISTRICT as usize);
    for c_id in 1..=CUSTOMERS_PER_DISTRICT {
        let mut c = Customer::zeroed();
        c.c_id = c_id;
        c.c_d_id = d_id;
        c.c_w_id = w;
        // Clause 4.3.3.1: the first 1,000 customers take every name once.
        let number = if c_id <= 1_000 {
            c_id - 1
        } else {
            rng.nurand(255, 0, 999, c_last_load)
        };
        last_name(number, &mut c.c_last);
        c.c_middle = *b"OE";
        rng.astring(&mut c.c_first, 8, 16);
        address(
            rng,
            &mut c.c_street_1,
            &mut c.c_street_2,
            &mut c.c_city,
            &mut c.c_state,
            &mut c.c_zip,
        );
        rng.nstring(&mut c.c_phone);
        c.c_since = now;
        c.c_credit = if rng.uniform(1, 10) == 1 {
            *b"BC"
        } else {
            *b"GC"
        };
        c.c_credit_lim = 5_000_000;
        c.c_discount = rng.uniform_u32(0, 5_000);
        c.c_balance = -1_000;
        c.c_ytd_payment = 1_000;
        c.c_payment_cnt = 1;
        c.c_delivery_cnt = 0;
        let mut data = CustomerData::zeroed();
        rng.astring(&mut data.c_data, 300, 500);
        put(mem, Array::Customer, w, keys::customer(d_id, c_id), &c);
        put(
            mem,
            Array::CustomerData,
            w,
            keys::customer(d_id, c_id),
            &data,
        );
        names.push(CustomerNameEntry {
            c_last: c.c_last,
            c_first: c.c_first,
            c_id,
        });

        load_history(mem, rng, w, d_id, c_id, now);
    }
    names.sort_by_key(|a| (a.c_last, a.c_first, a.c_id));
    let start = keys::name_index_start(d_id);
    for (i, e) in names.iter().enumerate() {
        put(mem, Array::CustomerName, w, start + i as u64, e);
    }
}

/// The one HISTORY row of each loaded customer, in slot `c_id - 1`.
fn load_history(mem: &PodMemory, rng: &mut Rng, w: u32, d_id: u32, c_id: u32, now: u64) {
    let mut h = History::zeroed();
    h.h_c_id = c_id;
    h.h_c_d_id = d_id;
    h.h_c_w_id = w;
    h.h_d_id = d_id;
    h.h_w_id = w;
    h.h_date = now;
    h.h_amount = H_AMOUNT_INITIAL;
    rng.astring(&mut h.h_data, 12, 24);
    let cap = mem.params().orders_per_district;
    put(
        mem,
        Array::History,
        w,
        keys::history(cap, d_id, c_id - 1),
        &h,
    );
}

fn load_orders(mem: &PodMemory, rng: &mut Rng, w: u32, d_id: u32, now: u64) {
    let cap = mem.params().orders_per_district;
    // O_C_ID: a random permutation of the district's customers.
    let mut customers: Vec<u32> = (1..=CUSTOMERS_PER_DISTRICT).collect();
    for i in (1..customers.len()).rev() {
        let j = rng.uniform(0, i as u64) as usize;
        customers.swap(i, j);
    }
    for o_id in 1..=ORDERS_PER_DISTRICT_INITIAL {
        let delivered = o_id < FIRST_UNDELIVERED_O_ID;
        let slot = keys::order(cap, d_id, o_id);
        let order = Order {
            o_entry_d: now,
            o_id,
            o_d_id: d_id,
            o_w_id: w,
            o_c_id: customers[o_id as usize - 1],
            o_carrier_id: if delivered { rng.uniform_u32(1, 10) } else { 0 },
            o_ol_cnt: rng.uniform_u32(ORDER_LINES_PER_ORDER_MIN, ORDER_LINES_PER_ORDER_MAX),
            o_all_local: 1,
            _pad: 0,
        };
        put(mem, Array::Order, w, slot, &order);
        for ol_number in 1..=order.o_ol_cnt {
            let mut ol = OrderLine::zeroed();
            ol.ol_o_id = o_id;
            ol.ol_d_id = d_id;
            ol.ol_w_id = w;
            ol.ol_number = ol_number;
            ol.ol_i_id = rng.uniform_u32(1, ITEMS);
            ol.ol_supply_w_id = w;
            ol.ol_delivery_d = if delivered { now } else { 0 };
            ol.ol_quantity = 5;
            ol.ol_amount = if delivered {
                0
            } else {
                rng.uniform(1, 999_999) as i64
            };
            rng.astring(&mut ol.ol_dist_info, 24, 24);
            put(
                mem,
                Array::OrderLine,
                w,
                keys::order_line(slot, ol_number),
                &ol,
            );
        }
        let last = CustomerLastOrder { o_id, _pad: 0 };
        let c_idx = keys::customer(d_id, order.o_c_id);
        put(mem, Array::CustomerLastOrder, w, c_idx, &last);
        if !delivered {
            let no = NewOrder {
                no_o_id: o_id,
                no_d_id: d_id,
                no_w_id: w,
                _pad: 0,
            };
            put(mem, Array::NewOrder, w, slot, &no);
        }
    }
}
