//! The auditor: a read-only transaction that checks consistency condition 1
//! (W_YTD = sum of D_YTD) while Payments run. Under serializability it can
//! never see the invariant broken, whichever host's memory the rows are in.

use crate::cc::txn::{Txn, TxnResult};
use crate::tpcc::keys;
use skiff_pod_memory::lockword::Mode;
use skiff_pod_memory::memory::layout::{Array, LockTable};
use skiff_pod_memory::tpcc::schema::*;

/// Whether warehouse `w` satisfies W_YTD = sum(D_YTD).
pub(crate) fn audit_warehouse(txn: &mut Txn<'_>, w: u32) -> TxnResult<bool> {
    txn.lock(LockTable::Warehouse, w, 0, Mode::Shared)?;
    let warehouse: Warehouse = txn.get(Array::Warehouse, w, 0);
    let mut sum = 0i64;
    for d_id in 1..=DISTRICTS_PER_WAREHOUSE {
        let d_idx = keys::district(d_id);
        txn.lock(LockTable::District, w, d_idx, Mode::Shared)?;
        let district: District = txn.get(Array::District, w, d_idx);
        sum = sum.wrapping_add(district.d_ytd);
    }
    Ok(warehouse.w_ytd == sum)
}
