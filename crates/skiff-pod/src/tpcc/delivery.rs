//! The Delivery transaction, clause 2.7.4.2: for each district of the
//! warehouse, the oldest undelivered order is delivered — its NEW_ORDER row
//! deleted, O_CARRIER_ID set, every OL_DELIVERY_D set, and the customer's
//! C_BALANCE raised by the order's total and C_DELIVERY_CNT by one.
//!
//! As clause 2.7.4.2 allows, each district is its own database transaction
//! ([`deliver_district`]); the worker runs the ten in order and counts the
//! business transaction once all ten committed.
//!
//! Phantoms: the oldest undelivered order is `D_NEXT_DELIVERY_O_ID`, a
//! column of the district row, read and advanced under the district's
//! exclusive lock. Every NewOrder takes that lock exclusively before it
//! takes an O_ID, so no order can appear below `D_NEXT_O_ID`, and no other
//! Delivery can pick the same order, while this one holds it.

use bytemuck::Zeroable;

use crate::cc::txn::{Txn, TxnError, TxnResult};
use crate::tpcc::keys;
use skiff_pod_memory::lockword::Mode;
use skiff_pod_memory::memory::layout::{Array, LockTable};
use skiff_pod_memory::tpcc::input::DeliveryInput;
use skiff_pod_memory::tpcc::schema::*;

/// Delivers the oldest undelivered order of district `d_id`; `None` when
/// the district has none (clause 2.7.4.2: skipped, nothing written).
pub(crate) fn deliver_district(
    txn: &mut Txn<'_>,
    input: &DeliveryInput,
    d_id: u32,
    now: u64,
) -> TxnResult<Option<u32>> {
    let cap = txn.mem().params().orders_per_district;
    let w = input.w_id;
    let d_idx = keys::district(d_id);
    txn.lock(LockTable::District, w, d_idx, Mode::Exclusive)?;
    let mut district: District = txn.get(Array::District, w, d_idx);
    let o_id = district.d_next_delivery_o_id;
    if o_id >= district.d_next_o_id {
        return Ok(None);
    }
    if o_id == 0 || o_id > cap {
        return Err(TxnError::Corrupt(format!(
            "district {w}/{d_id}: D_NEXT_DELIVERY_O_ID {o_id}"
        )));
    }
    let slot = keys::order(cap, d_id, o_id);
    txn.lock(LockTable::NewOrder, w, slot, Mode::Exclusive)?;
    let no: NewOrder = txn.get(Array::NewOrder, w, slot);
    if no.no_o_id != o_id {
        return Err(TxnError::Corrupt(format!(
            "order {w}/{d_id}/{o_id} to deliver has new-order row {}",
            no.no_o_id
        )));
    }
    txn.put(Array::NewOrder, w, slot, &NewOrder::zeroed());

    txn.lock(LockTable::Order, w, slot, Mode::Exclusive)?;
    let mut order: Order = txn.get(Array::Order, w, slot);
    if order.o_id != o_id
        || !(1..=CUSTOMERS_PER_DISTRICT).contains(&order.o_c_id)
        || order.o_ol_cnt > ORDER_LINES_PER_ORDER_MAX
    {
        return Err(TxnError::Corrupt(format!(
            "order {w}/{d_id}/{o_id}: O_ID {}, O_C_ID {}, O_OL_CNT {}",
            order.o_id, order.o_c_id, order.o_ol_cnt
        )));
    }
    order.o_carrier_id = input.o_carrier_id;
    txn.put(Array::Order, w, slot, &order);
    let mut total = 0i64;
    for n in 1..=order.o_ol_cnt {
        let idx = keys::order_line(slot, n);
        let mut line: OrderLine = txn.get(Array::OrderLine, w, idx);
        line.ol_delivery_d = now;
        total = total.wrapping_add(line.ol_amount);
        txn.put(Array::OrderLine, w, idx, &line);
    }

    let c_idx = keys::customer(d_id, order.o_c_id);
    txn.lock(LockTable::Customer, w, c_idx, Mode::Exclusive)?;
    let mut customer: Customer = txn.get(Array::Customer, w, c_idx);
    customer.c_balance = customer.c_balance.wrapping_add(total);
    customer.c_delivery_cnt = customer.c_delivery_cnt.wrapping_add(1);
    txn.put(Array::Customer, w, c_idx, &customer);

    district.d_next_delivery_o_id = o_id + 1;
    txn.put(Array::District, w, d_idx, &district);
    Ok(Some(o_id))
}
