//! TPC-C: schema, loader, inputs, the five transactions (NewOrder and
//! Payment, the Pasha paper's workload, plus OrderStatus, Delivery and
//! StockLevel for the standard mix), the auditor and the consistency check.

pub(crate) mod audit;
pub(crate) mod check;
pub(crate) mod delivery;
pub(crate) mod load;
pub(crate) mod neworder;
pub(crate) mod order_status;
pub(crate) mod payment;
pub(crate) mod stock_level;

/// Row indexes within one warehouse's arrays: TPC-C keys are dense, so the
/// position of a row is its primary index.
pub(crate) mod keys {
    use skiff_pod_memory::tpcc::schema::*;

    pub fn district(d_id: u32) -> u64 {
        debug_assert!((1..=DISTRICTS_PER_WAREHOUSE).contains(&d_id));
        (d_id - 1) as u64
    }

    pub fn customer(d_id: u32, c_id: u32) -> u64 {
        debug_assert!((1..=CUSTOMERS_PER_DISTRICT).contains(&c_id));
        district(d_id) * CUSTOMERS_PER_DISTRICT as u64 + (c_id - 1) as u64
    }

    /// First entry of a district's last-name index.
    pub fn name_index_start(d_id: u32) -> u64 {
        district(d_id) * CUSTOMERS_PER_DISTRICT as u64
    }

    /// ORDER and NEW_ORDER slot of `o_id` (1-based) in a district with
    /// `cap` slots.
    pub fn order(cap: u32, d_id: u32, o_id: u32) -> u64 {
        debug_assert!((1..=cap).contains(&o_id));
        district(d_id) * cap as u64 + (o_id - 1) as u64
    }

    pub fn order_line(order_slot: u64, ol_number: u32) -> u64 {
        debug_assert!((1..=ORDER_LINES_PER_ORDER_MAX).contains(&ol_number));
        order_slot * ORDER_LINES_PER_ORDER_MAX as u64 + (ol_number - 1) as u64
    }

    /// HISTORY slot `slot` (0-based) of a district.
    pub fn history(cap: u32, d_id: u32, slot: u32) -> u64 {
        debug_assert!(slot < cap);
        district(d_id) * cap as u64 + slot as u64
    }

    pub fn stock(i_id: u32) -> u64 {
        debug_assert!((1..=ITEMS).contains(&i_id));
        (i_id - 1) as u64
    }

    pub fn item(i_id: u32) -> u64 {
        stock(i_id)
    }
}

#[cfg(test)]
mod tests;
