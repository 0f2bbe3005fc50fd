//! The twelve consistency conditions of TPC-C clause 3.3.2. Condition 11
//! (count(ORDER) - count(NEW_ORDER) = 2100) holds only before any Delivery;
//! it is checked in its general form: the orders without a NEW_ORDER row are
//! exactly those below the district's D_NEXT_DELIVERY_O_ID. Reads the pod
//! offline: no host may be running.
//!
//! Rows are found by scanning, not trusted from counters: an order slot is
//! present when its O_ID is set, and `CHECK_GAP_SCAN_MAX` slots past the last
//! order of each district are read to prove nothing lies beyond it. Every
//! value read is data: an id out of range is a violation, never a panic.

use std::fmt;

use bytemuck::Pod;
use serde::Serialize;

use crate::tpcc::keys;
use skiff_pod_memory::constants::CHECK_GAP_SCAN_MAX;
use skiff_pod_memory::memory::PodMemory;
use skiff_pod_memory::memory::layout::Array;
use skiff_pod_memory::tpcc::schema::*;

/// One condition's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct ConditionReport {
    /// 1..=12, the notes' numbering of clause 3.3.2.x.
    pub number: u8,
    pub description: &'static str,
    /// Warehouses, districts, orders or customers examined.
    pub checked: u64,
    pub violations: u64,
    pub first_violation: Option<String>,
}

/// Rows found by the scan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RowCounts {
    pub warehouse: u64,
    pub district: u64,
    pub customer: u64,
    pub history: u64,
    pub orders: u64,
    pub new_order: u64,
    pub order_line: u64,
    pub item: u64,
    pub stock: u64,
}

/// What [`crate::check`] found.
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    pub conditions: Vec<ConditionReport>,
    pub rows: RowCounts,
}

impl CheckReport {
    pub fn passed(&self) -> bool {
        self.conditions.iter().all(|c| c.violations == 0)
    }

    /// The condition numbered `n` (1..=12).
    pub fn condition(&self, n: u8) -> &ConditionReport {
        &self.conditions[n as usize - 1]
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.conditions {
            let verdict = if c.violations == 0 { "ok  " } else { "FAIL" };
            write!(
                f,
                "{verdict} {:>2}. {} ({} checked",
                c.number, c.description, c.checked
            )?;
            if c.violations > 0 {
                write!(f, ", {} violations", c.violations)?;
            }
            writeln!(f, ")")?;
            if let Some(v) = &c.first_violation {
                writeln!(f, "        first: {v}")?;
            }
        }
        let r = &self.rows;
        write!(
            f,
            "rows: warehouse {}, district {}, customer {}, history {}, order {}, new_order {}, \
             order_line {}, item {}, stock {}",
            r.warehouse,
            r.district,
            r.customer,
            r.history,
            r.orders,
            r.new_order,
            r.order_line,
            r.item,
            r.stock
        )
    }
}

const DESCRIPTIONS: [&str; 12] = [
    "W_YTD = sum(D_YTD)",
    "D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID)",
    "max(NO_O_ID) - min(NO_O_ID) + 1 = count(NEW_ORDER) per district",
    "sum(O_OL_CNT) = count(ORDER_LINE) per district",
    "O_CARRIER_ID is null iff a NEW_ORDER row exists",
    "O_OL_CNT = count(ORDER_LINE) per order",
    "OL_DELIVERY_D is null iff O_CARRIER_ID is null",
    "W_YTD = sum(H_AMOUNT) per warehouse",
    "D_YTD = sum(H_AMOUNT) per district",
    "C_BALANCE = sum(delivered OL_AMOUNT) - sum(H_AMOUNT)",
    "count(ORDER) - count(NEW_ORDER) = 2100 + delivered per district",
    "C_BALANCE + C_YTD_PAYMENT = sum(delivered OL_AMOUNT)",
];

/// Per-customer sums, indexed by `(w - 1) * 30,000 + customer index`.
struct Sums {
    h_by_customer: Vec<i64>,
    h_by_district: Vec<i64>,
    h_by_warehouse: Vec<i64>,
    delivered_by_customer: Vec<i64>,
}

struct Checker<'m> {
    mem: &'m PodMemory,
    conditions: Vec<ConditionReport>,
    rows: RowCounts,
    sums: Sums,
}

/// Checks all twelve conditions over the whole pod.
pub(crate) fn check_pod(mem: &PodMemory) -> CheckReport {
    let w_count = mem.params().warehouses as usize;
    let customers = CUSTOMERS_PER_DISTRICT as usize * DISTRICTS_PER_WAREHOUSE as usize;
    let mut c = Checker {
        mem,
        conditions: (0..12)
            .map(|i| ConditionReport {
                number: i as u8 + 1,
                description: DESCRIPTIONS[i],
                checked: 0,
                violations: 0,
                first_violation: None,
            })
            .collect(),
        rows: RowCounts::default(),
        sums: Sums {
            h_by_customer: vec![0; w_count * customers],
            h_by_district: vec![0; w_count * DISTRICTS_PER_WAREHOUSE as usize],
            h_by_warehouse: vec![0; w_count],
            delivered_by_customer: vec![0; w_count * customers],
        },
    };
    for w in 1..=w_count as u32 {
        for d in 1..=DISTRICTS_PER_WAREHOUSE {
            c.scan_history(w, d);
        }
    }
    for w in 1..=w_count as u32 {
        c.check_warehouse(w);
        for d in 1..=DISTRICTS_PER_WAREHOUSE {
            c.check_district(w, d);
        }
    }
    for w in 1..=w_count as u32 {
        c.check_customers(w);
    }
    c.count_static();
    CheckReport {
        conditions: c.conditions,
        rows: c.rows,
    }
}

impl Checker<'_> {
    /// Reads a row where it is now (moved tuples in their slot). A broken
    /// forward reads as a zeroed row, which the conditions and row counts
    /// then report.
    fn read<T: Pod>(&self, array: Array, w: u32, idx: u64) -> T {
        match self.mem.resolve_row(array, w, idx) {
            Some(loc) => self.mem.mapping_of(loc, 0).read(loc.off),
            None => T::zeroed(),
        }
    }

    fn verdict(&mut self, n: u8, ok: bool, what: impl FnOnce() -> String) {
        let c = &mut self.conditions[n as usize - 1];
        c.checked += 1;
        if !ok {
            c.violations += 1;
            if c.first_violation.is_none() {
                c.first_violation = Some(what());
            }
        }
    }

    fn cap(&self) -> u32 {
        self.mem.params().orders_per_district
    }

    fn customer_slot(&self, w: u32, d: u32, c: u32) -> Option<usize> {
        let ok = (1..=self.mem.params().warehouses).contains(&w)
            && (1..=DISTRICTS_PER_WAREHOUSE).contains(&d)
            && (1..=CUSTOMERS_PER_DISTRICT).contains(&c);
        let per_w = (CUSTOMERS_PER_DISTRICT * DISTRICTS_PER_WAREHOUSE) as usize;
        ok.then(|| (w as usize - 1) * per_w + keys::customer(d, c) as usize)
    }

    /// HISTORY rows of district (w, d): a prefix of present slots, then empty.
    fn scan_history(&mut self, w: u32, d: u32) {
        let cap = self.cap();
        let mut slot = 0;
        while slot < cap {
            let h: History = self.read(Array::History, w, keys::history(cap, d, slot));
            if h.h_c_id == 0 {
                break;
            }
            self.rows.history += 1;
            slot += 1;
            let (hw, hd) = (h.h_w_id, h.h_d_id);
            let home_ok = (1..=self.mem.params().warehouses).contains(&hw)
                && (1..=DISTRICTS_PER_WAREHOUSE).contains(&hd);
            if home_ok {
                self.sums.h_by_warehouse[hw as usize - 1] += h.h_amount;
                self.sums.h_by_district[(hw as usize - 1) * 10 + hd as usize - 1] += h.h_amount;
            } else {
                self.verdict(8, false, || {
                    format!("history row {w}/{d}#{slot} has H_W_ID {hw}, H_D_ID {hd}")
                });
            }
            match self.customer_slot(h.h_c_w_id, h.h_c_d_id, h.h_c_id) {
                Some(i) => self.sums.h_by_customer[i] += h.h_amount,
                None => self.verdict(10, false, || {
                    format!("history row {w}/{d}#{slot} names a customer out of range")
                }),
            }
        }
        for gap in slot..(slot + CHECK_GAP_SCAN_MAX).min(cap) {
            let h: History = self.read(Array::History, w, keys::history(cap, d, gap));
            if h.h_c_id != 0 {
                self.verdict(9, false, || {
                    format!("stray history row {w}/{d}#{gap} after the last one ({slot})")
                });
            }
        }
    }

    fn check_warehouse(&mut self, w: u32) {
        let wh: Warehouse = self.read(Array::Warehouse, w, 0);
        self.rows.warehouse += (wh.w_id == w) as u64;
        let mut sum = 0i64;
        for d in 1..=DISTRICTS_PER_WAREHOUSE {
            let dist: District = self.read(Array::District, w, keys::district(d));
            sum = sum.wrapping_add(dist.d_ytd);
        }
        self.verdict(1, wh.w_ytd == sum, || {
            format!("warehouse {w}: W_YTD {} but sum(D_YTD) {sum}", wh.w_ytd)
        });
        let h = self.sums.h_by_warehouse[w as usize - 1];
        self.verdict(8, wh.w_ytd == h, || {
            format!("warehouse {w}: W_YTD {} but sum(H_AMOUNT) {h}", wh.w_ytd)
        });
    }

    fn check_district(&mut self, w: u32, d: u32) {
        let dist: District = self.read(Array::District, w, keys::district(d));
        self.rows.district += (dist.d_id == d && dist.d_w_id == w) as u64;
        let h = self.sums.h_by_district[(w as usize - 1) * 10 + d as usize - 1];
        self.verdict(9, dist.d_ytd == h, || {
            format!(
                "district {w}/{d}: D_YTD {} but sum(H_AMOUNT) {h}",
                dist.d_ytd
            )
        });

        let orders = self.scan_orders(w, d);
        let (no_count, no_min, no_max) =
            self.scan_new_orders(w, d, orders.last.max(dist.d_next_o_id.saturating_sub(1)));
        let next = dist.d_next_o_id;
        // With every order delivered there is no max(NO_O_ID) to compare.
        let ok2 = next >= 1 && next - 1 == orders.last && (no_count == 0 || orders.last == no_max);
        self.verdict(2, ok2, || {
            format!(
                "district {w}/{d}: D_NEXT_O_ID {next}, max(O_ID) {}, max(NO_O_ID) {no_max}",
                orders.last
            )
        });
        let ok3 = no_count == 0 || no_max - no_min + 1 == no_count;
        self.verdict(3, ok3, || {
            format!("district {w}/{d}: NO_O_ID {no_min}..={no_max} but {no_count} rows")
        });
        self.verdict(4, orders.ol_cnt_sum == orders.lines, || {
            format!(
                "district {w}/{d}: sum(O_OL_CNT) {} but {} order lines",
                orders.ol_cnt_sum, orders.lines
            )
        });
        // Clause 3.3.2.11 holds only before any Delivery (2,100 delivered
        // at load); in general the orders without a NEW_ORDER row are
        // exactly those below D_NEXT_DELIVERY_O_ID, the oldest undelivered.
        let delivered = orders.count.wrapping_sub(no_count as u64);
        let want = dist.d_next_delivery_o_id.saturating_sub(1) as u64;
        let ok11 = delivered == want && (no_count == 0 || no_min == dist.d_next_delivery_o_id);
        self.verdict(11, ok11, || {
            format!(
                "district {w}/{d}: {} orders - {no_count} new orders = {delivered}, \
                 min(NO_O_ID) {no_min}, but D_NEXT_DELIVERY_O_ID {}",
                orders.count, dist.d_next_delivery_o_id
            )
        });
    }

    /// ORDER and ORDER_LINE rows of a district, with conditions 5..7 per order.
    fn scan_orders(&mut self, w: u32, d: u32) -> OrderScan {
        let cap = self.cap();
        let mut s = OrderScan::default();
        let mut o_id = 1;
        while o_id <= cap {
            let slot = keys::order(cap, d, o_id);
            let order: Order = self.read(Array::Order, w, slot);
            if order.o_id == 0 {
                break;
            }
            if order.o_id != o_id {
                self.verdict(2, false, || {
                    format!("order slot {w}/{d}#{o_id} holds O_ID {}", order.o_id)
                });
            }
            s.count += 1;
            s.last = o_id;
            s.ol_cnt_sum += order.o_ol_cnt as u64;
            self.check_order(w, d, o_id, slot, &order, &mut s);
            o_id += 1;
        }
        self.rows.orders += s.count;
        for gap in o_id..(o_id + CHECK_GAP_SCAN_MAX).min(cap + 1) {
            let slot = keys::order(cap, d, gap);
            let order: Order = self.read(Array::Order, w, slot);
            let lines = self.count_lines(w, slot, None).0;
            if order.o_id != 0 || lines != 0 {
                self.verdict(2, false, || {
                    format!("stray order or lines at {w}/{d}#{gap} after the last order")
                });
            }
        }
        s
    }

    fn check_order(
        &mut self,
        w: u32,
        d: u32,
        o_id: u32,
        slot: u64,
        order: &Order,
        s: &mut OrderScan,
    ) {
        let no: NewOrder = self.read(Array::NewOrder, w, slot);
        let carrier_null = order.o_carrier_id == 0;
        self.verdict(5, carrier_null == (no.no_o_id != 0), || {
            format!(
                "order {w}/{d}/{o_id}: O_CARRIER_ID {} but new-order row present: {}",
                order.o_carrier_id,
                no.no_o_id != 0
            )
        });
        let (lines, delivery_mismatch, delivered_sum) =
            self.count_lines(w, slot, Some(carrier_null));
        s.lines += lines;
        self.verdict(6, lines == order.o_ol_cnt as u64, || {
            format!(
                "order {w}/{d}/{o_id}: O_OL_CNT {} but {lines} lines",
                order.o_ol_cnt
            )
        });
        self.verdict(7, delivery_mismatch == 0, || {
            format!(
                "order {w}/{d}/{o_id}: {delivery_mismatch} lines disagree with O_CARRIER_ID {}",
                order.o_carrier_id
            )
        });
        if delivered_sum != 0 {
            match self.customer_slot(w, d, order.o_c_id) {
                Some(i) => self.sums.delivered_by_customer[i] += delivered_sum,
                None => self.verdict(10, false, || {
                    format!("order {w}/{d}/{o_id}: O_C_ID {} out of range", order.o_c_id)
                }),
            }
        }
    }

    /// Present lines of an order slot; with `carrier_null`, also the lines
    /// whose OL_DELIVERY_D disagrees and the sum of delivered amounts.
    fn count_lines(&mut self, w: u32, slot: u64, carrier_null: Option<bool>) -> (u64, u64, i64) {
        let (mut lines, mut mismatch, mut delivered) = (0, 0, 0i64);
        for n in 1..=ORDER_LINES_PER_ORDER_MAX {
            let ol: OrderLine = self.read(Array::OrderLine, w, keys::order_line(slot, n));
            if ol.ol_o_id == 0 {
                continue;
            }
            lines += 1;
            if let Some(null) = carrier_null {
                mismatch += ((ol.ol_delivery_d == 0) != null) as u64;
            }
            if ol.ol_delivery_d != 0 {
                delivered = delivered.wrapping_add(ol.ol_amount);
            }
        }
        self.rows.order_line += lines * carrier_null.is_some() as u64;
        (lines, mismatch, delivered)
    }

    /// NEW_ORDER rows of a district up to `last` plus the gap: (count, min, max).
    fn scan_new_orders(&mut self, w: u32, d: u32, last: u32) -> (u32, u32, u32) {
        let cap = self.cap();
        let (mut count, mut min, mut max) = (0u32, u32::MAX, 0u32);
        for o_id in 1..=(last.saturating_add(CHECK_GAP_SCAN_MAX)).min(cap) {
            let no: NewOrder = self.read(Array::NewOrder, w, keys::order(cap, d, o_id));
            if no.no_o_id == 0 {
                continue;
            }
            if no.no_o_id != o_id || no.no_d_id != d || no.no_w_id != w {
                self.verdict(3, false, || {
                    format!(
                        "new-order slot {w}/{d}#{o_id} holds {}/{}/{}",
                        no.no_w_id, no.no_d_id, no.no_o_id
                    )
                });
            }
            count += 1;
            min = min.min(o_id);
            max = max.max(o_id);
        }
        self.rows.new_order += count as u64;
        (count, if count == 0 { 0 } else { min }, max)
    }

    fn check_customers(&mut self, w: u32) {
        for d in 1..=DISTRICTS_PER_WAREHOUSE {
            for c_id in 1..=CUSTOMERS_PER_DISTRICT {
                let c: Customer = self.read(Array::Customer, w, keys::customer(d, c_id));
                self.rows.customer += (c.c_id == c_id) as u64;
                let i = self
                    .customer_slot(w, d, c_id)
                    .expect("in range by construction");
                let (h, delivered) = (
                    self.sums.h_by_customer[i],
                    self.sums.delivered_by_customer[i],
                );
                let who = || format!("customer {w}/{d}/{c_id}: C_BALANCE {}", c.c_balance);
                self.verdict(10, c.c_balance == delivered.wrapping_sub(h), || {
                    format!("{} but delivered {delivered} - paid {h}", who())
                });
                let sum = c.c_balance.wrapping_add(c.c_ytd_payment);
                self.verdict(12, sum == delivered, || {
                    let ytd = c.c_ytd_payment;
                    format!("{} + C_YTD_PAYMENT {ytd} but delivered {delivered}", who())
                });
            }
        }
    }

    /// ITEM and STOCK rows (no condition; the loader test wants the counts).
    fn count_static(&mut self) {
        for i_id in 1..=ITEMS {
            let item: Item = self.read(Array::Item, 1, keys::item(i_id));
            self.rows.item += (item.i_id == i_id) as u64;
        }
        for w in 1..=self.mem.params().warehouses {
            for i_id in 1..=STOCK_PER_WAREHOUSE {
                let s: Stock = self.read(Array::Stock, w, keys::stock(i_id));
                self.rows.stock += (s.s_i_id == i_id && s.s_w_id == w) as u64;
            }
        }
    }
}

#[derive(Default)]
struct OrderScan {
    count: u64,
    /// Highest O_ID of the present prefix (0 if none).
    last: u32,
    ol_cnt_sum: u64,
    lines: u64,
}
