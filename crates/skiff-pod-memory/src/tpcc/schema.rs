//! TPC-C rows (clause 1.3) as plain-old-data structs that live in pod memory
//! or a partition.
//!
//! Representation choices, the same everywhere:
//! - money in integer cents (`i64`); W_TAX, D_TAX, C_DISCOUNT in
//!   ten-thousandths (`u32`, numeric(4,4) exactly);
//! - text in fixed byte arrays at the spec's maximum width, padded with 0
//!   (a shorter varchar ends at the first 0);
//! - date-times in Unix seconds; `0` is NULL (O_CARRIER_ID uses 0 for NULL as
//!   its values are 1..10);
//! - a slot is present when its key column is non-zero (ids start at 1).
//!
//! Wide, rarely used columns are split into their own column group so a
//! transaction that does not need them does not load them (C_DATA: only
//! Payment on a bad-credit customer; S_DIST_xx: one of ten per NewOrder line).
//! A column group has no lock of its own: the tuple's lock covers all groups.

use bytemuck::{Pod, Zeroable};

pub const ITEMS: u32 = 100_000;
pub const DISTRICTS_PER_WAREHOUSE: u32 = 10;
pub const CUSTOMERS_PER_DISTRICT: u32 = 3_000;
pub const STOCK_PER_WAREHOUSE: u32 = ITEMS;
/// Orders per district at load (clause 4.3.3.1).
pub const ORDERS_PER_DISTRICT_INITIAL: u32 = 3_000;
/// Initial orders with O_ID below this are delivered.
pub const FIRST_UNDELIVERED_O_ID: u32 = 2_101;
pub const ORDER_LINES_PER_ORDER_MAX: u32 = 15;
pub const ORDER_LINES_PER_ORDER_MIN: u32 = 5;

#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct Warehouse {
    pub w_ytd: i64,
    pub w_id: u32,
    pub w_tax: u32,
    pub w_name: [u8; 10],
    pub w_street_1: [u8; 20],
    pub w_street_2: [u8; 20],
    pub w_city: [u8; 20],
    pub w_state: [u8; 2],
    pub w_zip: [u8; 9],
    pub _pad: [u8; 7],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct District {
    pub d_ytd: i64,
    pub d_w_id: u32,
    pub d_id: u32,
    pub d_next_o_id: u32,
    pub d_tax: u32,
    /// Not a spec column: the next free HISTORY slot of this district. HISTORY
    /// has no key; its rows are appended under this district's lock (Payment
    /// holds it to update D_YTD anyway).
    pub d_next_h_slot: u32,
    /// Not a spec column: the oldest order Delivery has not delivered (the
    /// smallest NO_O_ID while NEW_ORDER is not empty). Delivery advances it
    /// under this district's lock, so it never scans for the oldest order.
    pub d_next_delivery_o_id: u32,
    pub d_name: [u8; 10],
    pub d_street_1: [u8; 20],
    pub d_street_2: [u8; 20],
    pub d_city: [u8; 20],
    pub d_state: [u8; 2],
    pub d_zip: [u8; 9],
    pub _pad: [u8; 7],
}

/// Not a spec table: per customer, the O_ID of its latest order (OrderStatus
/// reads it instead of scanning the district's orders). Written by NewOrder
/// and covered by the district's lock, which NewOrder holds exclusively to
/// take the O_ID anyway.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct CustomerLastOrder {
    pub o_id: u32,
    pub _pad: u32,
}

/// CUSTOMER without C_DATA.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct Customer {
    pub c_credit_lim: i64,
    pub c_balance: i64,
    pub c_ytd_payment: i64,
    pub c_since: u64,
    pub c_id: u32,
    pub c_d_id: u32,
    pub c_w_id: u32,
    pub c_discount: u32,
    pub c_payment_cnt: u32,
    pub c_delivery_cnt: u32,
    pub c_first: [u8; 16],
    pub c_middle: [u8; 2],
    pub c_last: [u8; 16],
    pub c_street_1: [u8; 20],
    pub c_street_2: [u8; 20],
    pub c_city: [u8; 20],
    pub c_state: [u8; 2],
    pub c_zip: [u8; 9],
    pub c_phone: [u8; 16],
    pub c_credit: [u8; 2],
    pub _pad: [u8; 5],
}

/// C_DATA, varchar(500).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct CustomerData {
    pub c_data: [u8; 500],
}

/// One entry of the customer last-name index: the district's customers sorted
/// by (C_LAST, C_FIRST). C_LAST and C_FIRST are never updated, so the index
/// is built at load and read-only afterwards.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct CustomerNameEntry {
    pub c_last: [u8; 16],
    pub c_first: [u8; 16],
    pub c_id: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct History {
    pub h_amount: i64,
    pub h_date: u64,
    pub h_c_id: u32,
    pub h_c_d_id: u32,
    pub h_c_w_id: u32,
    pub h_d_id: u32,
    pub h_w_id: u32,
    pub _pad: u32,
    pub h_data: [u8; 24],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct Order {
    pub o_entry_d: u64,
    pub o_id: u32,
    pub o_d_id: u32,
    pub o_w_id: u32,
    pub o_c_id: u32,
    /// 0 = NULL.
    pub o_carrier_id: u32,
    pub o_ol_cnt: u32,
    pub o_all_local: u32,
    pub _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct NewOrder {
    pub no_o_id: u32,
    pub no_d_id: u32,
    pub no_w_id: u32,
    pub _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct OrderLine {
    pub ol_amount: i64,
    /// 0 = NULL.
    pub ol_delivery_d: u64,
    pub ol_o_id: u32,
    pub ol_d_id: u32,
    pub ol_w_id: u32,
    pub ol_number: u32,
    pub ol_i_id: u32,
    pub ol_supply_w_id: u32,
    pub ol_quantity: u32,
    pub ol_dist_info: [u8; 24],
    pub _pad: [u8; 4],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct Item {
    pub i_price: i64,
    pub i_id: u32,
    pub i_im_id: u32,
    pub i_name: [u8; 24],
    pub i_data: [u8; 50],
    pub _pad: [u8; 6],
}

/// STOCK without S_DIST_01..10.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct Stock {
    pub s_i_id: u32,
    pub s_w_id: u32,
    pub s_quantity: u32,
    pub s_ytd: u32,
    pub s_order_cnt: u32,
    pub s_remote_cnt: u32,
    pub s_data: [u8; 50],
    pub _pad: [u8; 6],
}

/// S_DIST_01..S_DIST_10, char(24) each; NewOrder reads one.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct StockDist {
    pub s_dist: [[u8; 24]; 10],
}

/// The text of a fixed-width column: up to the first 0.
pub fn text(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    &bytes[..end]
}

/// Fills `dst` with `src`, truncated, zero-padded.
pub fn set_text(dst: &mut [u8], src: &[u8]) {
    let n = src.len().min(dst.len());
    dst[..n].copy_from_slice(&src[..n]);
    dst[n..].fill(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Row sizes drive the layout and the miss counts; changing one is a
    /// format change.
    #[test]
    fn row_sizes_are_stable() {
        assert_eq!(size_of::<Warehouse>(), 104);
        // 112 until D_NEXT_DELIVERY_O_ID (format version 3).
        assert_eq!(size_of::<District>(), 120);
        assert_eq!(size_of::<CustomerLastOrder>(), 8);
        assert_eq!(size_of::<Customer>(), 184);
        assert_eq!(size_of::<CustomerData>(), 500);
        assert_eq!(size_of::<CustomerNameEntry>(), 36);
        assert_eq!(size_of::<History>(), 64);
        assert_eq!(size_of::<Order>(), 40);
        assert_eq!(size_of::<NewOrder>(), 16);
        assert_eq!(size_of::<OrderLine>(), 72);
        assert_eq!(size_of::<Item>(), 96);
        assert_eq!(size_of::<Stock>(), 80);
        assert_eq!(size_of::<StockDist>(), 240);
    }

    #[test]
    fn text_round_trips() {
        let mut buf = [9u8; 6];
        set_text(&mut buf, b"abc");
        assert_eq!(text(&buf), b"abc");
        set_text(&mut buf, b"abcdefgh");
        assert_eq!(text(&buf), b"abcdef");
    }
}
