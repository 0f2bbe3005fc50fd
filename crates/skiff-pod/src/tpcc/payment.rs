//! The Payment transaction, clause 2.5.2.2, exactly: W_YTD and D_YTD up,
//! C_BALANCE down, C_YTD_PAYMENT and C_PAYMENT_CNT up, C_DATA rewritten for
//! bad credit, and a HISTORY row inserted.

use crate::cc::txn::{Txn, TxnError, TxnResult};
use crate::tpcc::keys;
use skiff_pod_memory::lockword::Mode;
use skiff_pod_memory::memory::layout::{Array, LockTable};
use skiff_pod_memory::tpcc::input::{CustomerKey, PaymentInput};
use skiff_pod_memory::tpcc::schema::*;

/// The terminal's output (clause 2.5.3.3), the part tests check; workers
/// discard it.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct PaymentOutput {
    pub c_id: u32,
}

pub(crate) fn payment(
    txn: &mut Txn<'_>,
    input: &PaymentInput,
    now: u64,
) -> TxnResult<PaymentOutput> {
    let cap = txn.mem().params().orders_per_district;
    let (w, amount) = (input.w_id, input.amount_cents);
    txn.lock(LockTable::Warehouse, w, 0, Mode::Exclusive)?;
    let mut warehouse: Warehouse = txn.get(Array::Warehouse, w, 0);
    warehouse.w_ytd = warehouse.w_ytd.wrapping_add(amount);
    txn.put(Array::Warehouse, w, 0, &warehouse);

    let d_idx = keys::district(input.d_id);
    txn.lock(LockTable::District, w, d_idx, Mode::Exclusive)?;
    let mut district: District = txn.get(Array::District, w, d_idx);
    district.d_ytd = district.d_ytd.wrapping_add(amount);
    let h_slot = district.d_next_h_slot;
    if h_slot >= cap {
        return Err(TxnError::Capacity(format!(
            "district {w}/{} used all {cap} history slots; raise orders per district",
            input.d_id
        )));
    }
    district.d_next_h_slot = h_slot + 1;
    txn.put(Array::District, w, d_idx, &district);

    let c_id = match input.customer {
        CustomerKey::Id(c_id) => c_id,
        CustomerKey::LastName(name) => by_last_name(txn, input.c_w_id, input.c_d_id, &name)?,
    };
    let c_idx = keys::customer(input.c_d_id, c_id);
    txn.lock(LockTable::Customer, input.c_w_id, c_idx, Mode::Exclusive)?;
    let mut customer: Customer = txn.get(Array::Customer, input.c_w_id, c_idx);
    customer.c_balance = customer.c_balance.wrapping_sub(amount);
    customer.c_ytd_payment = customer.c_ytd_payment.wrapping_add(amount);
    customer.c_payment_cnt = customer.c_payment_cnt.wrapping_add(1);
    txn.put(Array::Customer, input.c_w_id, c_idx, &customer);
    if customer.c_credit == *b"BC" {
        let mut data: CustomerData = txn.get(Array::CustomerData, input.c_w_id, c_idx);
        prepend_payment(&mut data.c_data, c_id, input);
        txn.put(Array::CustomerData, input.c_w_id, c_idx, &data);
    }

    let mut h_data = [0u8; 24];
    let mut text_buf = Vec::with_capacity(24);
    text_buf.extend_from_slice(text(&warehouse.w_name));
    text_buf.extend_from_slice(b"    ");
    text_buf.extend_from_slice(text(&district.d_name));
    set_text(&mut h_data, &text_buf);
    let history = History {
        h_amount: amount,
        h_date: now,
        h_c_id: c_id,
        h_c_d_id: input.c_d_id,
        h_c_w_id: input.c_w_id,
        h_d_id: input.d_id,
        h_w_id: w,
        _pad: 0,
        h_data,
    };
    // Covered by the district's exclusive lock, held above.
    txn.put(
        Array::History,
        w,
        keys::history(cap, input.d_id, h_slot),
        &history,
    );
    Ok(PaymentOutput { c_id })
}

/// Clause 2.5.2.2: of the district's customers with this last name, sorted
/// by C_FIRST, the one at position ceil(n / 2). Reads the immutable
/// last-name index with two binary searches.
pub(crate) fn by_last_name(
    txn: &mut Txn<'_>,
    c_w: u32,
    c_d: u32,
    name: &[u8; 16],
) -> TxnResult<u32> {
    let start = keys::name_index_start(c_d);
    let n = CUSTOMERS_PER_DISTRICT as u64;
    let entry = |txn: &mut Txn<'_>, i: u64| -> CustomerNameEntry {
        txn.get(Array::CustomerName, c_w, start + i)
    };
    let lower = partition_point(n, |i| entry(txn, i).c_last < *name);
    let upper = partition_point(n, |i| entry(txn, i).c_last <= *name);
    if upper <= lower {
        return Err(TxnError::Corrupt(format!(
            "no customer named {} in district {c_w}/{c_d}",
            String::from_utf8_lossy(text(name))
        )));
    }
    let chosen = entry(txn, lower + (upper - lower - 1) / 2);
    if chosen.c_last != *name || !(1..=CUSTOMERS_PER_DISTRICT).contains(&chosen.c_id) {
        return Err(TxnError::Corrupt(format!(
            "last-name index of district {c_w}/{c_d}"
        )));
    }
    Ok(chosen.c_id)
}

/// First index in `0..n` where `pred` is false (pred is monotone).
fn partition_point(n: u64, mut pred: impl FnMut(u64) -> bool) -> u64 {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) { lo = mid + 1 } else { hi = mid }
    }
    lo
}

/// C_DATA := "C_ID C_D_ID C_W_ID D_ID W_ID H_AMOUNT " + C_DATA, cut at 500.
fn prepend_payment(c_data: &mut [u8; 500], c_id: u32, input: &PaymentInput) {
    let head = format!(
        "{c_id} {} {} {} {} {}.{:02} ",
        input.c_d_id,
        input.c_w_id,
        input.d_id,
        input.w_id,
        input.amount_cents / 100,
        input.amount_cents % 100
    );
    let mut new = Vec::with_capacity(500 + head.len());
    new.extend_from_slice(head.as_bytes());
    new.extend_from_slice(text(c_data));
    set_text(c_data, &new);
}
