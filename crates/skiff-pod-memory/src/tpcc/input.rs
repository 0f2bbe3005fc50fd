//! Transaction inputs as the terminal of clause 2.4.1 / 2.5.1 generates them.

use crate::tpcc::random::{NurandConstants, Rng, last_name};
use crate::tpcc::schema::*;

#[derive(Clone, Copy, Debug, Default)]
pub struct OrderLineInput {
    pub i_id: u32,
    pub supply_w_id: u32,
    pub quantity: u32,
}

#[derive(Clone, Debug)]
pub struct NewOrderInput {
    pub w_id: u32,
    pub d_id: u32,
    pub c_id: u32,
    pub ol_cnt: u32,
    pub lines: [OrderLineInput; ORDER_LINES_PER_ORDER_MAX as usize],
}

impl NewOrderInput {
    pub fn lines(&self) -> &[OrderLineInput] {
        &self.lines[..self.ol_cnt as usize]
    }

    pub fn all_local(&self) -> bool {
        self.lines().iter().all(|l| l.supply_w_id == self.w_id)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CustomerKey {
    Id(u32),
    LastName([u8; 16]),
}

#[derive(Clone, Debug)]
pub struct PaymentInput {
    pub w_id: u32,
    pub d_id: u32,
    pub c_w_id: u32,
    pub c_d_id: u32,
    pub customer: CustomerKey,
    pub amount_cents: i64,
}

#[derive(Clone, Debug)]
pub struct OrderStatusInput {
    pub w_id: u32,
    pub d_id: u32,
    pub customer: CustomerKey,
}

#[derive(Clone, Copy, Debug)]
pub struct DeliveryInput {
    pub w_id: u32,
    pub o_carrier_id: u32,
}

#[derive(Clone, Copy, Debug)]
pub struct StockLevelInput {
    pub w_id: u32,
    pub d_id: u32,
    pub threshold: u32,
}

/// Generates inputs for one worker.
pub struct InputGen {
    pub warehouses: u32,
    pub line_remote_p: f64,
    pub payment_remote_p: f64,
    pub nurand: NurandConstants,
}

impl InputGen {
    /// A warehouse other than `home`, uniformly (the caller ensures W > 1).
    fn remote(&self, rng: &mut Rng, home: u32) -> u32 {
        let w = rng.uniform_u32(1, self.warehouses - 1);
        if w >= home { w + 1 } else { w }
    }

    /// Clause 2.4.1. 1% of orders end with an unused item id (rollback).
    pub fn new_order(&self, rng: &mut Rng, w_id: u32) -> NewOrderInput {
        let mut input = NewOrderInput {
            w_id,
            d_id: rng.uniform_u32(1, DISTRICTS_PER_WAREHOUSE),
            c_id: rng.nurand(1023, 1, CUSTOMERS_PER_DISTRICT, self.nurand.c_id),
            ol_cnt: rng.uniform_u32(ORDER_LINES_PER_ORDER_MIN, ORDER_LINES_PER_ORDER_MAX),
            lines: Default::default(),
        };
        let rollback = rng.uniform(1, 100) == 1;
        let n = input.ol_cnt as usize;
        for (i, line) in input.lines[..n].iter_mut().enumerate() {
            line.i_id = rng.nurand(8191, 1, ITEMS, self.nurand.ol_i_id);
            if rollback && i == n - 1 {
                line.i_id = ITEMS + 1;
            }
            line.supply_w_id = if self.warehouses > 1 && rng.chance(self.line_remote_p) {
                self.remote(rng, w_id)
            } else {
                w_id
            };
            line.quantity = rng.uniform_u32(1, 10);
        }
        input
    }

    /// Clause 2.5.1: 15% remote customer (scaled), 60% by last name.
    pub fn payment(&self, rng: &mut Rng, w_id: u32) -> PaymentInput {
        let d_id = rng.uniform_u32(1, DISTRICTS_PER_WAREHOUSE);
        let (c_w_id, c_d_id) = if self.warehouses > 1 && rng.chance(self.payment_remote_p) {
            (
                self.remote(rng, w_id),
                rng.uniform_u32(1, DISTRICTS_PER_WAREHOUSE),
            )
        } else {
            (w_id, d_id)
        };
        let customer = self.customer_key(rng);
        PaymentInput {
            w_id,
            d_id,
            c_w_id,
            c_d_id,
            customer,
            amount_cents: rng.uniform(100, 500_000) as i64,
        }
    }

    /// Clause 2.6.1: a customer of the home warehouse, by last name 60% of
    /// the time.
    pub fn order_status(&self, rng: &mut Rng, w_id: u32) -> OrderStatusInput {
        let d_id = rng.uniform_u32(1, DISTRICTS_PER_WAREHOUSE);
        OrderStatusInput {
            w_id,
            d_id,
            customer: self.customer_key(rng),
        }
    }

    /// Clause 2.7.1: a carrier of 1..=10.
    pub fn delivery(&self, rng: &mut Rng, w_id: u32) -> DeliveryInput {
        DeliveryInput {
            w_id,
            o_carrier_id: rng.uniform_u32(1, 10),
        }
    }

    /// Clause 2.8.1: a threshold of 10..=20. The spec fixes the district per
    /// terminal; a worker stands for all ten terminals of its warehouses.
    pub fn stock_level(&self, rng: &mut Rng, w_id: u32) -> StockLevelInput {
        StockLevelInput {
            w_id,
            d_id: rng.uniform_u32(1, DISTRICTS_PER_WAREHOUSE),
            threshold: rng.uniform_u32(10, 20),
        }
    }

    /// By last name (NURand(255, 0, 999)) 60% of the time, else by id.
    fn customer_key(&self, rng: &mut Rng) -> CustomerKey {
        if rng.uniform(1, 100) <= 60 {
            let mut name = [0u8; 16];
            last_name(rng.nurand(255, 0, 999, self.nurand.c_last_run), &mut name);
            CustomerKey::LastName(name)
        } else {
            CustomerKey::Id(rng.nurand(1023, 1, CUSTOMERS_PER_DISTRICT, self.nurand.c_id))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generator(warehouses: u32, pct: f64) -> InputGen {
        InputGen {
            warehouses,
            line_remote_p: 0.01 * pct / 10.0,
            payment_remote_p: 0.15 * pct / 10.0,
            nurand: NurandConstants::generate(&mut Rng::new(9)),
        }
    }

    #[test]
    fn new_order_mix_follows_the_spec() {
        let g = generator(4, 10.0);
        let mut rng = Rng::new(1);
        let (mut orders, mut rollbacks, mut lines, mut remote_lines, mut multi) = (0, 0, 0, 0, 0);
        for _ in 0..20_000 {
            let o = g.new_order(&mut rng, 2);
            orders += 1;
            assert!((5..=15).contains(&o.ol_cnt));
            rollbacks += (o.lines().last().unwrap().i_id == ITEMS + 1) as u32;
            for l in o.lines() {
                lines += 1;
                assert!((1..=10).contains(&l.quantity));
                if l.supply_w_id != 2 {
                    remote_lines += 1;
                    assert!((1..=4).contains(&l.supply_w_id));
                }
            }
            multi += !o.all_local() as u32;
        }
        let pct = |a: u32, b: u32| 100.0 * a as f64 / b as f64;
        assert!(
            (0.7..1.3).contains(&pct(rollbacks, orders)),
            "{}",
            pct(rollbacks, orders)
        );
        assert!((0.85..1.15).contains(&pct(remote_lines, lines)));
        // 1 - 0.99^10 = 9.6% of orders touch a remote warehouse.
        assert!(
            (8.5..10.5).contains(&pct(multi, orders)),
            "{}",
            pct(multi, orders)
        );
    }

    #[test]
    fn payment_mix_follows_the_spec_and_scales() {
        for (pct, want) in [(10.0, 15.0), (60.0, 90.0), (0.0, 0.0)] {
            let g = generator(3, pct);
            let mut rng = Rng::new(2);
            let (mut remote, mut by_name) = (0, 0);
            let n = 20_000;
            for _ in 0..n {
                let p = g.payment(&mut rng, 1);
                assert!((100..=500_000).contains(&p.amount_cents));
                remote += (p.c_w_id != 1) as u32;
                by_name += matches!(p.customer, CustomerKey::LastName(_)) as u32;
            }
            let remote_pct = 100.0 * remote as f64 / n as f64;
            assert!((remote_pct - want).abs() < 1.5, "{pct}: {remote_pct}");
            let name_pct = 100.0 * by_name as f64 / n as f64;
            assert!((name_pct - 60.0).abs() < 1.5, "{name_pct}");
        }
    }

    #[test]
    fn one_warehouse_is_never_remote() {
        let g = generator(1, 1000.0);
        let mut rng = Rng::new(3);
        for _ in 0..1000 {
            assert!(g.new_order(&mut rng, 1).all_local());
            assert_eq!(g.payment(&mut rng, 1).c_w_id, 1);
        }
    }
}
