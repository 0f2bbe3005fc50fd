//! The StockLevel transaction, clause 2.8.2.2: of the items in the last 20
//! orders of a district, how many distinct ones have S_QUANTITY below a
//! threshold in the home warehouse. Read-only.
//!
//! Clause 3.4.0.1 lets StockLevel run at a weaker isolation; it runs under
//! the same strict 2PL as the rest, with shared locks on the district, the
//! 20 orders (covering their lines) and every stock row it reads. The
//! district's shared lock fixes D_NEXT_O_ID: a NewOrder holds it exclusively
//! while it inserts, so no order can appear in (or be half-inserted into)
//! the range of 20 — the read set has no phantoms.

use crate::cc::txn::{Txn, TxnError, TxnResult};
use crate::tpcc::keys;
use skiff_pod_memory::lockword::Mode;
use skiff_pod_memory::memory::layout::{Array, LockTable};
use skiff_pod_memory::tpcc::input::StockLevelInput;
use skiff_pod_memory::tpcc::schema::*;

/// Orders StockLevel examines.
pub(crate) const STOCK_LEVEL_ORDERS: u32 = 20;

/// The number of distinct items below the threshold (clause 2.8.3.3).
pub(crate) fn stock_level(txn: &mut Txn<'_>, input: &StockLevelInput) -> TxnResult<u32> {
    let cap = txn.mem().params().orders_per_district;
    let (w, d_id) = (input.w_id, input.d_id);
    txn.lock(LockTable::District, w, keys::district(d_id), Mode::Shared)?;
    let district: District = txn.get(Array::District, w, keys::district(d_id));
    let next = district.d_next_o_id;
    if next == 0 || next > cap + 1 {
        return Err(TxnError::Corrupt(format!(
            "district {w}/{d_id}: D_NEXT_O_ID {next}"
        )));
    }
    let mut items = Vec::with_capacity((STOCK_LEVEL_ORDERS * ORDER_LINES_PER_ORDER_MAX) as usize);
    for o_id in next.saturating_sub(STOCK_LEVEL_ORDERS).max(1)..next {
        let slot = keys::order(cap, d_id, o_id);
        txn.lock(LockTable::Order, w, slot, Mode::Shared)?;
        let order: Order = txn.get(Array::Order, w, slot);
        if order.o_ol_cnt > ORDER_LINES_PER_ORDER_MAX {
            return Err(TxnError::Corrupt(format!(
                "order {w}/{d_id}/{o_id}: O_OL_CNT {}",
                order.o_ol_cnt
            )));
        }
        for n in 1..=order.o_ol_cnt {
            let line: OrderLine = txn.get(Array::OrderLine, w, keys::order_line(slot, n));
            if !(1..=ITEMS).contains(&line.ol_i_id) {
                return Err(TxnError::Corrupt(format!(
                    "order line {w}/{d_id}/{o_id}/{n}: item {}",
                    line.ol_i_id
                )));
            }
            items.push(line.ol_i_id);
        }
    }
    items.sort_unstable();
    items.dedup();
    let mut low = 0;
    for i_id in items {
        let s_idx = keys::stock(i_id);
        txn.lock(LockTable::Stock, w, s_idx, Mode::Shared)?;
        let stock: Stock = txn.get(Array::Stock, w, s_idx);
        low += (stock.s_quantity < input.threshold) as u32;
    }
    Ok(low)
}
