//! The particle table of the SmartNIC paper's experiments
//! (`../shared/papers/opportunistic-query-execution-smartnics.txt` §VI):
//! 6,177,731 rows at scale factor 1, nine fields, generated from a fixed
//! seed per part so the rows are the same on every machine.
//!
//! - `id` (Int64): the row's number, from 0;
//! - `x`, `y`, `z` (Float64): a position, each uniform in [0, 1), so a
//!   bounding box's selectivity is the product of its sides (the paper's
//!   CQ1, `x >= 0.7 AND y < 0.3 AND z <= 0.1`, keeps 0.9%);
//! - `vx`, `vy`, `vz` (Float64): a velocity, each about normal with mean 0
//!   and deviation 1 (the sum of twelve uniforms, less 6);
//! - `mass` (Float64): log-uniform in [0.1, 10);
//! - `charge` (Int8): -1 or 1 for 40% of the rows each, 0 for 20%.

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int8Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::GenError;
use crate::run::{BATCH_ROWS, Job, Plan, part_count};
use crate::write::Batches;

pub(crate) const TABLES: &[&str] = &["particles"];

/// Rows at scale factor 1: the paper's data set.
pub const ROWS_AT_SF1: u64 = 6_177_731;

pub(crate) fn schema() -> SchemaRef {
    let float = |name: &str| Field::new(name, DataType::Float64, false);
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        float("x"),
        float("y"),
        float("z"),
        float("vx"),
        float("vy"),
        float("vz"),
        float("mass"),
        Field::new("charge", DataType::Int8, false),
    ]))
}

/// A small, fast, seeded generator (splitmix64): the same rows from the
/// same seed on every machine.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn normal(&mut self) -> f64 {
        (0..12).map(|_| self.uniform()).sum::<f64>() - 6.0
    }
}

/// Rows `first..first + rows` in batches, from the part's own seed.
fn batches(first: u64, rows: u64, seed: u64) -> Batches {
    let mut random = Random(seed);
    let mut next = first;
    let end = first + rows;
    let schema = schema();
    Box::new(std::iter::from_fn(move || {
        if next >= end {
            return None;
        }
        let n = (end - next).min(BATCH_ROWS as u64) as usize;
        let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(
            (next..next + n as u64).map(|i| i as i64),
        ));
        let mut column = |f: &mut dyn FnMut(&mut Random) -> f64| -> ArrayRef {
            Arc::new(Float64Array::from_iter_values(
                (0..n).map(|_| f(&mut random)),
            ))
        };
        let x = column(&mut Random::uniform);
        let y = column(&mut Random::uniform);
        let z = column(&mut Random::uniform);
        let vx = column(&mut Random::normal);
        let vy = column(&mut Random::normal);
        let vz = column(&mut Random::normal);
        let mass = column(&mut |r| 0.1 * 100f64.powf(r.uniform()));
        let charge: ArrayRef =
            Arc::new(Int8Array::from_iter_values((0..n).map(
                |_| match random.uniform() {
                    u if u < 0.4 => -1,
                    u if u < 0.6 => 0,
                    _ => 1,
                },
            )));
        next += n as u64;
        let columns = vec![ids, x, y, z, vx, vy, vz, mass, charge];
        Some(
            RecordBatch::try_new(Arc::clone(&schema), columns).map_err(|error| GenError::Arrow {
                table: "particles".to_string(),
                error,
            }),
        )
    }))
}

pub(crate) fn plan(sf: f64) -> Plan {
    let rows = (ROWS_AT_SF1 as f64 * sf).round().max(1.0) as u64;
    let parts = part_count(rows, rows);
    let each = rows.div_ceil(parts as u64);
    let mut jobs = Vec::with_capacity(parts);
    for part in 0..parts {
        let first = each * part as u64;
        let count = each.min(rows.saturating_sub(first));
        jobs.push(Job {
            table: "particles",
            part,
            parts,
            rows_estimate: count,
            schema: schema(),
            batches: Box::new(move || Ok(batches(first, count, 0x5eed_0000 + part as u64))),
        });
    }
    Plan {
        tables: TABLES,
        jobs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paper_s_rows_in_parts_of_a_million_the_same_every_time() {
        let plan = plan(1.0);
        assert_eq!(plan.jobs.len(), 7);
        let total: u64 = plan.jobs.iter().map(|j| j.rows_estimate).sum();
        assert_eq!(total, ROWS_AT_SF1);
        let first = |job: &Job| (job.batches)().unwrap().next().unwrap().unwrap();
        let (a, b) = (first(&plan.jobs[3]), first(&plan.jobs[3]));
        assert_eq!(a, b, "seeded");
        assert_ne!(
            first(&plan.jobs[2]).column(1),
            a.column(1),
            "a seed per part"
        );
        let ids = a.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(ids.value(0), 3 * (ROWS_AT_SF1.div_ceil(7)) as i64);
    }

    #[test]
    fn a_bounding_box_keeps_the_product_of_its_sides() {
        let batch: Vec<RecordBatch> = batches(0, 200_000, 7).map(Result::unwrap).collect();
        let value = |b: &RecordBatch, c: usize, r: usize| {
            b.column(c)
                .as_any()
                .downcast_ref::<Float64Array>()
                .unwrap()
                .value(r)
        };
        let mut kept = 0;
        for b in &batch {
            for r in 0..b.num_rows() {
                if value(b, 1, r) >= 0.7 && value(b, 2, r) < 0.3 && value(b, 3, r) <= 0.1 {
                    kept += 1;
                }
            }
        }
        let share = kept as f64 / 200_000.0;
        assert!((share - 0.009).abs() < 0.001, "CQ1 keeps {share}");
    }
}
