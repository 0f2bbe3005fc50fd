//! TPC-H tables from `tpchgen`, converted by `tpchgen-arrow` (whose column
//! names and types are kept as they are).

use arrow::datatypes::SchemaRef;
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow, RegionArrow,
    SupplierArrow,
};

use crate::GenError;
use crate::run::{BATCH_ROWS, Job, Plan, part_count};
use crate::write::Batches;

pub(crate) const TABLES: &[&str] = &[
    "customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier",
];

/// lineitem has 1 to 7 lines per order, 4 on average.
const LINES_PER_ORDER: u64 = 4;

struct TableSpec {
    name: &'static str,
    schema: fn() -> SchemaRef,
    /// Approximate rows at a scale factor.
    rows: fn(f64) -> u64,
    /// The batches of part `part` (1-based) of `parts`.
    batches: fn(f64, i32, i32) -> Batches,
}

fn rows(count: i64) -> u64 {
    u64::try_from(count).unwrap_or(0)
}

/// Adapts a tpchgen-arrow reader to this crate's batch iterator.
fn boxed<I>(table: &'static str, reader: I) -> Batches
where
    I: Iterator<Item = Result<arrow::array::RecordBatch, arrow::error::ArrowError>> + 'static,
{
    Box::new(reader.map(move |batch| {
        batch.map_err(|error| GenError::Arrow {
            table: table.to_string(),
            error,
        })
    }))
}

const SPECS: &[TableSpec] = &[
    TableSpec {
        name: "customer",
        schema: CustomerArrow::schema_ref,
        rows: |sf| rows(CustomerGenerator::calculate_row_count(sf, 1, 1)),
        batches: |sf, part, parts| {
            let reader = CustomerArrow::new(CustomerGenerator::new(sf, part, parts));
            boxed("customer", reader.with_batch_size(BATCH_ROWS))
        },
    },
    TableSpec {
        name: "lineitem",
        schema: LineItemArrow::schema_ref,
        rows: |sf| rows(OrderGenerator::calculate_row_count(sf, 1, 1)) * LINES_PER_ORDER,
        batches: |sf, part, parts| {
            let reader = LineItemArrow::new(LineItemGenerator::new(sf, part, parts));
            boxed("lineitem", reader.with_batch_size(BATCH_ROWS))
        },
    },
    TableSpec {
        name: "nation",
        schema: NationArrow::schema_ref,
        rows: |_| 25,
        batches: |sf, part, parts| {
            let reader = NationArrow::new(NationGenerator::new(sf, part, parts));
            boxed("nation", reader.with_batch_size(BATCH_ROWS))
        },
    },
    TableSpec {
        name: "orders",
        schema: OrderArrow::schema_ref,
        rows: |sf| rows(OrderGenerator::calculate_row_count(sf, 1, 1)),
        batches: |sf, part, parts| {
            let reader = OrderArrow::new(OrderGenerator::new(sf, part, parts));
            boxed("orders", reader.with_batch_size(BATCH_ROWS))
        },
    },
    TableSpec {
        name: "part",
        schema: PartArrow::schema_ref,
        rows: |sf| rows(PartGenerator::calculate_row_count(sf, 1, 1)),
        batches: |sf, part, parts| {
            let reader = PartArrow::new(PartGenerator::new(sf, part, parts));
            boxed("part", reader.with_batch_size(BATCH_ROWS))
        },
    },
    TableSpec {
        name: "partsupp",
        schema: PartSuppArrow::schema_ref,
        rows: |sf| rows(PartSuppGenerator::calculate_row_count(sf, 1, 1)),
        batches: |sf, part, parts| {
            let reader = PartSuppArrow::new(PartSuppGenerator::new(sf, part, parts));
            boxed("partsupp", reader.with_batch_size(BATCH_ROWS))
        },
    },
    TableSpec {
        name: "region",
        schema: RegionArrow::schema_ref,
        rows: |_| 5,
        batches: |sf, part, parts| {
            let reader = RegionArrow::new(RegionGenerator::new(sf, part, parts));
            boxed("region", reader.with_batch_size(BATCH_ROWS))
        },
    },
    TableSpec {
        name: "supplier",
        schema: SupplierArrow::schema_ref,
        rows: |sf| rows(SupplierGenerator::calculate_row_count(sf, 1, 1)),
        batches: |sf, part, parts| {
            let reader = SupplierArrow::new(SupplierGenerator::new(sf, part, parts));
            boxed("supplier", reader.with_batch_size(BATCH_ROWS))
        },
    },
];

pub(crate) fn plan(sf: f64) -> Plan {
    let mut jobs = Vec::new();
    for spec in SPECS {
        let rows_estimate = (spec.rows)(sf);
        // nation and region ignore parts: they are fixed 25 and 5 rows.
        let parts = part_count(rows_estimate, rows_estimate);
        // tpchgen numbers parts from 1 as i32; more parts than that would mean
        // over two quadrillion rows, far past any scale factor tpchgen accepts.
        let parts_i32 = i32::try_from(parts).unwrap_or(i32::MAX);
        for part in 0..parts {
            let make = spec.batches;
            let part_i32 = i32::try_from(part + 1).unwrap_or(i32::MAX);
            jobs.push(Job {
                table: spec.name,
                part,
                parts,
                rows_estimate: rows_estimate / parts as u64,
                schema: (spec.schema)(),
                batches: Box::new(move || Ok(make(sf, part_i32, parts_i32))),
            });
        }
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
    fn specs_follow_the_table_list() {
        let names: Vec<_> = SPECS.iter().map(|s| s.name).collect();
        assert_eq!(names, TABLES);
    }

    #[test]
    fn big_tables_are_split_into_parts() {
        let plan = plan(1.0);
        let lineitem_parts = plan.jobs.iter().filter(|j| j.table == "lineitem").count();
        assert_eq!(lineitem_parts, 6);
        let nation_parts = plan.jobs.iter().filter(|j| j.table == "nation").count();
        assert_eq!(nation_parts, 1);
    }
}
