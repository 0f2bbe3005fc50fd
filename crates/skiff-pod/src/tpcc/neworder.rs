//! The NewOrder transaction, clause 2.4.2.2, exactly: every insert made
//! (ORDER, NEW_ORDER, ORDER_LINE), stock updated per the spec's quantity rule,
//! a rollback on an unused item id after all other work.

use crate::cc::txn::{Txn, TxnError, TxnResult};
use crate::tpcc::keys;
use skiff_pod_memory::lockword::Mode;
use skiff_pod_memory::memory::layout::{Array, LockTable};
use skiff_pod_memory::tpcc::input::NewOrderInput;
use skiff_pod_memory::tpcc::schema::*;

/// The terminal's output (clause 2.4.3.3), the parts tests check; workers
/// discard it.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct NewOrderOutput {
    pub o_id: u32,
    /// sum(OL_AMOUNT) * (1 - C_DISCOUNT) * (1 + W_TAX + D_TAX), in cents.
    pub total_cents: i64,
}

pub(crate) fn new_order(
    txn: &mut Txn<'_>,
    input: &NewOrderInput,
    now: u64,
) -> TxnResult<NewOrderOutput> {
    let cap = txn.mem().params().orders_per_district;
    let w = input.w_id;
    txn.lock(LockTable::Warehouse, w, 0, Mode::Shared)?;
    let warehouse: Warehouse = txn.get(Array::Warehouse, w, 0);

    let d_idx = keys::district(input.d_id);
    txn.lock(LockTable::District, w, d_idx, Mode::Exclusive)?;
    let mut district: District = txn.get(Array::District, w, d_idx);
    let o_id = district.d_next_o_id;
    if o_id == 0 {
        return Err(TxnError::Corrupt(format!(
            "D_NEXT_O_ID 0 in district {w}/{}",
            input.d_id
        )));
    }
    if o_id > cap {
        return Err(TxnError::Capacity(format!(
            "district {w}/{} used all {cap} order slots; raise orders per district",
            input.d_id
        )));
    }
    district.d_next_o_id = o_id + 1;
    txn.put(Array::District, w, d_idx, &district);

    let c_idx = keys::customer(input.d_id, input.c_id);
    txn.lock(LockTable::Customer, w, c_idx, Mode::Shared)?;
    let customer: Customer = txn.get(Array::Customer, w, c_idx);

    let o_slot = keys::order(cap, input.d_id, o_id);
    insert_order(txn, input, o_id, o_slot, now)?;

    let sum_cents = order_lines(txn, input, o_id, o_slot)?;
    let total = sum_cents as i128
        * (10_000 - customer.c_discount.min(10_000) as i128)
        * (10_000 + warehouse.w_tax as i128 + district.d_tax as i128)
        / 100_000_000;
    Ok(NewOrderOutput {
        o_id,
        total_cents: total as i64,
    })
}

/// Every order line: item, stock update, ORDER_LINE insert. Returns
/// sum(OL_AMOUNT) in cents.
fn order_lines(txn: &mut Txn<'_>, input: &NewOrderInput, o_id: u32, o_slot: u64) -> TxnResult<i64> {
    let w = input.w_id;
    let mut sum_cents = 0i64;
    for (n, line) in input.lines().iter().enumerate() {
        // Clause 2.4.2.3: an unused item id is "not found"; the spec puts it
        // on the last line, so all other work is done before rolling back.
        if !(1..=ITEMS).contains(&line.i_id) {
            return Err(TxnError::Rollback);
        }
        let item: Item = txn.get(Array::Item, w, keys::item(line.i_id));
        let dist_info = update_stock(txn, input, line.i_id, line.supply_w_id, line.quantity)?;
        let amount = line.quantity as i64 * item.i_price;
        sum_cents = sum_cents.wrapping_add(amount);
        let order_line = OrderLine {
            ol_amount: amount,
            ol_delivery_d: 0,
            ol_o_id: o_id,
            ol_d_id: input.d_id,
            ol_w_id: w,
            ol_number: n as u32 + 1,
            ol_i_id: line.i_id,
            ol_supply_w_id: line.supply_w_id,
            ol_quantity: line.quantity,
            ol_dist_info: dist_info,
            _pad: [0; 4],
        };
        txn.put(
            Array::OrderLine,
            w,
            keys::order_line(o_slot, n as u32 + 1),
            &order_line,
        );
    }
    Ok(sum_cents)
}

fn insert_order(
    txn: &mut Txn<'_>,
    input: &NewOrderInput,
    o_id: u32,
    o_slot: u64,
    now: u64,
) -> TxnResult<()> {
    let w = input.w_id;
    // The district's exclusive lock already makes this slot ours; locking
    // the new rows keeps later readers (OrderStatus, Delivery) honest.
    txn.lock(LockTable::Order, w, o_slot, Mode::Exclusive)?;
    let order = Order {
        o_entry_d: now,
        o_id,
        o_d_id: input.d_id,
        o_w_id: w,
        o_c_id: input.c_id,
        o_carrier_id: 0,
        o_ol_cnt: input.ol_cnt,
        o_all_local: input.all_local() as u32,
        _pad: 0,
    };
    txn.put(Array::Order, w, o_slot, &order);
    txn.lock(LockTable::NewOrder, w, o_slot, Mode::Exclusive)?;
    let new_order = NewOrder {
        no_o_id: o_id,
        no_d_id: input.d_id,
        no_w_id: w,
        _pad: 0,
    };
    txn.put(Array::NewOrder, w, o_slot, &new_order);
    // The customer's latest order, for OrderStatus (under the district's
    // exclusive lock, which covers it).
    let last = CustomerLastOrder { o_id, _pad: 0 };
    let c_idx = keys::customer(input.d_id, input.c_id);
    txn.put(Array::CustomerLastOrder, w, c_idx, &last);
    Ok(())
}

/// Clause 2.4.2.2's stock rule; returns S_DIST_xx for the order's district.
fn update_stock(
    txn: &mut Txn<'_>,
    input: &NewOrderInput,
    i_id: u32,
    s_w: u32,
    qty: u32,
) -> TxnResult<[u8; 24]> {
    let s_idx = keys::stock(i_id);
    txn.lock(LockTable::Stock, s_w, s_idx, Mode::Exclusive)?;
    let mut stock: Stock = txn.get(Array::Stock, s_w, s_idx);
    let dist_info: [u8; 24] = txn.get_at(
        Array::StockDist,
        s_w,
        s_idx,
        24 * keys::district(input.d_id),
    );
    // Values from pod memory: wrapping arithmetic, so corrupt bytes give
    // wrong numbers (which `check` reports) rather than a panic.
    stock.s_quantity = if stock.s_quantity >= qty + 10 {
        stock.s_quantity.wrapping_sub(qty)
    } else {
        stock.s_quantity.wrapping_add(91).wrapping_sub(qty)
    };
    stock.s_ytd = stock.s_ytd.wrapping_add(qty);
    stock.s_order_cnt = stock.s_order_cnt.wrapping_add(1);
    if s_w != input.w_id {
        stock.s_remote_cnt = stock.s_remote_cnt.wrapping_add(1);
    }
    txn.put(Array::Stock, s_w, s_idx, &stock);
    Ok(dist_info)
}
