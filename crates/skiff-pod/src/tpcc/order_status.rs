//! The OrderStatus transaction, clause 2.6.2.2: a customer of the home
//! warehouse (by last name 60% of the time), its balance, and its latest
//! order with every line. Read-only.
//!
//! The latest order is the customer's CUSTOMER_LAST_ORDER row (not a spec
//! table: a one-column index NewOrder writes), read under the district's
//! shared lock, which covers it. A NewOrder holds that lock exclusively
//! from before it takes its O_ID to its commit, so no newer order of the
//! customer can appear (or be half-inserted) while OrderStatus holds it:
//! the read is phantom-free.

use crate::cc::txn::{Txn, TxnError, TxnResult};
use crate::tpcc::keys;
use crate::tpcc::payment::by_last_name;
use skiff_pod_memory::lockword::Mode;
use skiff_pod_memory::memory::layout::{Array, LockTable};
use skiff_pod_memory::tpcc::input::{CustomerKey, OrderStatusInput};
use skiff_pod_memory::tpcc::schema::*;

/// The terminal's output (clause 2.6.3.3), the parts tests check; workers
/// discard it.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct OrderStatusOutput {
    pub c_id: u32,
    pub c_balance: i64,
    pub o_id: u32,
    pub o_carrier_id: u32,
    pub lines: u32,
    /// sum(OL_AMOUNT) of the order, in cents.
    pub amount: i64,
}

pub(crate) fn order_status(
    txn: &mut Txn<'_>,
    input: &OrderStatusInput,
) -> TxnResult<OrderStatusOutput> {
    let cap = txn.mem().params().orders_per_district;
    let (w, d_id) = (input.w_id, input.d_id);
    let c_id = match input.customer {
        CustomerKey::Id(c_id) => c_id,
        CustomerKey::LastName(name) => by_last_name(txn, w, d_id, &name)?,
    };
    let c_idx = keys::customer(d_id, c_id);
    txn.lock(LockTable::Customer, w, c_idx, Mode::Shared)?;
    let customer: Customer = txn.get(Array::Customer, w, c_idx);

    txn.lock(LockTable::District, w, keys::district(d_id), Mode::Shared)?;
    let last: CustomerLastOrder = txn.get(Array::CustomerLastOrder, w, c_idx);
    let o_id = last.o_id;
    if !(1..=cap).contains(&o_id) {
        return Err(TxnError::Corrupt(format!(
            "customer {w}/{d_id}/{c_id}: latest order {o_id}"
        )));
    }
    let slot = keys::order(cap, d_id, o_id);
    txn.lock(LockTable::Order, w, slot, Mode::Shared)?;
    let order: Order = txn.get(Array::Order, w, slot);
    if order.o_id != o_id || order.o_c_id != c_id || order.o_ol_cnt > ORDER_LINES_PER_ORDER_MAX {
        return Err(TxnError::Corrupt(format!(
            "customer {w}/{d_id}/{c_id}: latest order {o_id} holds O_ID {} of customer {}",
            order.o_id, order.o_c_id
        )));
    }
    let mut amount = 0i64;
    for n in 1..=order.o_ol_cnt {
        let line: OrderLine = txn.get(Array::OrderLine, w, keys::order_line(slot, n));
        amount = amount.wrapping_add(line.ol_amount);
    }
    Ok(OrderStatusOutput {
        c_id,
        c_balance: customer.c_balance,
        o_id,
        o_carrier_id: order.o_carrier_id,
        lines: order.o_ol_cnt,
        amount,
    })
}
