//! TPC-DS tables from `tpcdsgen`, typed per the specification.

mod convert;
mod schema;

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use tpcdsgen::config::{Session, SessionBuilder, Table};
use tpcdsgen::row::{
    CallCenterRowGenerator, CatalogPageRowGenerator, CatalogReturnsRowGenerator,
    CatalogSalesRowGenerator, CustomerAddressRowGenerator, CustomerDemographicsRowGenerator,
    CustomerRowGenerator, DateDimRowGenerator, HouseholdDemographicsRowGenerator,
    IncomeBandRowGenerator, InventoryRowGenerator, ItemRowGenerator, PromotionRowGenerator,
    ReasonRowGenerator, ShipModeRowGenerator, StoreReturnsRowGenerator, StoreRowGenerator,
    StoreSalesRowGenerator, TimeDimRowGenerator, WarehouseRowGenerator, WebPageRowGenerator,
    WebReturnsRowGenerator, WebSalesRowGenerator, WebSiteRowGenerator,
};

use self::convert::DatBatches;
use self::schema::Column;
use crate::GenError;
use crate::run::{BATCH_ROWS, Job, Plan, part_count};
use crate::write::Batches;

/// The 24 tables of the specification; `dbgen_version` (generator metadata)
/// is left out.
pub(crate) const TABLES: &[&str] = &[
    "call_center",
    "catalog_page",
    "catalog_returns",
    "catalog_sales",
    "customer",
    "customer_address",
    "customer_demographics",
    "date_dim",
    "household_demographics",
    "income_band",
    "inventory",
    "item",
    "promotion",
    "reason",
    "ship_mode",
    "store",
    "store_returns",
    "store_sales",
    "time_dim",
    "warehouse",
    "web_page",
    "web_returns",
    "web_sales",
    "web_site",
];

/// Source rows `first..=last` of a table, as record batches.
type MakePart = fn(&PartInput) -> Batches;

struct PartInput {
    session: Session,
    spec: &'static TableSpec,
    schema: SchemaRef,
    /// Source rows of the whole table, which the generator needs to place
    /// its random streams.
    source_rows: u64,
    first: u64,
    last: u64,
}

struct TableSpec {
    name: &'static str,
    /// The table whose rows drive the generator. Sales tables are generated
    /// per order and returns tables by replaying the sales, so both are
    /// split by the sales table's orders.
    source: Table,
    /// Output rows per source row, for part sizing and progress only.
    rows_per_source_row: f64,
    columns: &'static [Column],
    /// This table's DAT output prints NULL as the literal `NULL`.
    null_literal: bool,
    make: MakePart,
}

/// A [`MakePart`] for a tpcdsgen row generator type; all of them share the
/// `new` / `set_source_row_range` / `Iterator` shape but no trait.
macro_rules! part_of {
    ($generator:ty) => {
        |input: &PartInput| -> Batches {
            let mut rows = <$generator>::new(input.session.clone(), input.source_rows);
            rows.set_source_row_range(input.first, input.last);
            Box::new(DatBatches::new(
                rows,
                input.spec.name,
                input.spec.columns,
                Arc::clone(&input.schema),
                input.spec.null_literal,
                BATCH_ROWS,
            ))
        }
    };
}

const fn spec(
    name: &'static str,
    source: Table,
    columns: &'static [Column],
    make: MakePart,
) -> TableSpec {
    TableSpec {
        name,
        source,
        rows_per_source_row: 1.0,
        columns,
        null_literal: false,
        make,
    }
}

/// A sales or returns table: several rows per order (measured at SF 1).
const fn per_order(
    name: &'static str,
    source: Table,
    rows_per_order: f64,
    columns: &'static [Column],
    make: MakePart,
) -> TableSpec {
    TableSpec {
        rows_per_source_row: rows_per_order,
        ..spec(name, source, columns, make)
    }
}

const fn null_literal(spec: TableSpec) -> TableSpec {
    TableSpec {
        null_literal: true,
        ..spec
    }
}

use self::schema as s;

static SPECS: &[TableSpec] = &[
    null_literal(spec(
        "call_center",
        Table::CallCenter,
        s::CALL_CENTER,
        part_of!(CallCenterRowGenerator),
    )),
    spec(
        "catalog_page",
        Table::CatalogPage,
        s::CATALOG_PAGE,
        part_of!(CatalogPageRowGenerator),
    ),
    per_order(
        "catalog_returns",
        Table::CatalogSales,
        0.9,
        s::CATALOG_RETURNS,
        part_of!(CatalogReturnsRowGenerator),
    ),
    per_order(
        "catalog_sales",
        Table::CatalogSales,
        9.0,
        s::CATALOG_SALES,
        part_of!(CatalogSalesRowGenerator),
    ),
    spec(
        "customer",
        Table::Customer,
        s::CUSTOMER,
        part_of!(CustomerRowGenerator),
    ),
    spec(
        "customer_address",
        Table::CustomerAddress,
        s::CUSTOMER_ADDRESS,
        part_of!(CustomerAddressRowGenerator),
    ),
    spec(
        "customer_demographics",
        Table::CustomerDemographics,
        s::CUSTOMER_DEMOGRAPHICS,
        part_of!(CustomerDemographicsRowGenerator),
    ),
    spec(
        "date_dim",
        Table::DateDim,
        s::DATE_DIM,
        part_of!(DateDimRowGenerator),
    ),
    null_literal(spec(
        "household_demographics",
        Table::HouseholdDemographics,
        s::HOUSEHOLD_DEMOGRAPHICS,
        part_of!(HouseholdDemographicsRowGenerator),
    )),
    spec(
        "income_band",
        Table::IncomeBand,
        s::INCOME_BAND,
        part_of!(IncomeBandRowGenerator),
    ),
    spec(
        "inventory",
        Table::Inventory,
        s::INVENTORY,
        part_of!(InventoryRowGenerator),
    ),
    spec("item", Table::Item, s::ITEM, part_of!(ItemRowGenerator)),
    spec(
        "promotion",
        Table::Promotion,
        s::PROMOTION,
        part_of!(PromotionRowGenerator),
    ),
    spec(
        "reason",
        Table::Reason,
        s::REASON,
        part_of!(ReasonRowGenerator),
    ),
    spec(
        "ship_mode",
        Table::ShipMode,
        s::SHIP_MODE,
        part_of!(ShipModeRowGenerator),
    ),
    spec("store", Table::Store, s::STORE, part_of!(StoreRowGenerator)),
    per_order(
        "store_returns",
        Table::StoreSales,
        1.2,
        s::STORE_RETURNS,
        part_of!(StoreReturnsRowGenerator),
    ),
    per_order(
        "store_sales",
        Table::StoreSales,
        12.0,
        s::STORE_SALES,
        part_of!(StoreSalesRowGenerator),
    ),
    spec(
        "time_dim",
        Table::TimeDim,
        s::TIME_DIM,
        part_of!(TimeDimRowGenerator),
    ),
    spec(
        "warehouse",
        Table::Warehouse,
        s::WAREHOUSE,
        part_of!(WarehouseRowGenerator),
    ),
    spec(
        "web_page",
        Table::WebPage,
        s::WEB_PAGE,
        part_of!(WebPageRowGenerator),
    ),
    per_order(
        "web_returns",
        Table::WebSales,
        1.2,
        s::WEB_RETURNS,
        part_of!(WebReturnsRowGenerator),
    ),
    per_order(
        "web_sales",
        Table::WebSales,
        12.0,
        s::WEB_SALES,
        part_of!(WebSalesRowGenerator),
    ),
    spec(
        "web_site",
        Table::WebSite,
        s::WEB_SITE,
        part_of!(WebSiteRowGenerator),
    ),
];

pub(crate) fn plan(sf: f64) -> Result<Plan, GenError> {
    let session = SessionBuilder::new()
        .with_scale_factor(sf)
        .build()
        .map_err(|e| GenError::Generator {
            table: "(all)".to_string(),
            message: e.to_string(),
        })?;
    let mut jobs = Vec::new();
    for spec in SPECS {
        let source_rows = session.get_scaling().get_row_count(spec.source);
        let rows_estimate = (source_rows as f64 * spec.rows_per_source_row).ceil() as u64;
        let parts = part_count(rows_estimate, source_rows);
        let schema = schema::arrow_schema(spec.columns);
        for (part, (first, last)) in split(source_rows, parts).enumerate() {
            let input = PartInput {
                session: session.clone(),
                spec,
                schema: Arc::clone(&schema),
                source_rows,
                first,
                last,
            };
            jobs.push(Job {
                table: spec.name,
                part,
                parts,
                rows_estimate: rows_estimate / parts as u64,
                schema: Arc::clone(&schema),
                batches: Box::new(move || Ok((input.spec.make)(&input))),
            });
        }
    }
    Ok(Plan {
        tables: TABLES,
        jobs,
    })
}

/// Splits source rows `1..=rows` into `parts` contiguous 1-based inclusive
/// ranges whose sizes differ by at most one. With no rows, the one range is
/// empty (`1..=0`), which the generators accept.
fn split(rows: u64, parts: usize) -> impl Iterator<Item = (u64, u64)> {
    let parts = parts.max(1) as u64;
    let (base, extra) = (rows / parts, rows % parts);
    (0..parts).map(move |k| {
        let first = 1 + k * base + k.min(extra);
        let len = base + u64::from(k < extra);
        (first, first + len - 1)
    })
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
    fn split_covers_every_row_once() {
        assert_eq!(split(0, 1).collect::<Vec<_>>(), vec![(1, 0)]);
        assert_eq!(
            split(10, 3).collect::<Vec<_>>(),
            vec![(1, 4), (5, 7), (8, 10)]
        );
        assert_eq!(split(2, 2).collect::<Vec<_>>(), vec![(1, 1), (2, 2)]);
    }

    #[test]
    fn schemas_match_the_generator_headers() {
        use tpcdsgen::csv::*;
        let headers = [
            CallCenterCsv::header(),
            CatalogPageCsv::header(),
            CatalogReturnsCsv::header(),
            CatalogSalesCsv::header(),
            CustomerCsv::header(),
            CustomerAddressCsv::header(),
            CustomerDemographicsCsv::header(),
            DateDimCsv::header(),
            HouseholdDemographicsCsv::header(),
            IncomeBandCsv::header(),
            InventoryCsv::header(),
            ItemCsv::header(),
            PromotionCsv::header(),
            ReasonCsv::header(),
            ShipModeCsv::header(),
            StoreCsv::header(),
            StoreReturnsCsv::header(),
            StoreSalesCsv::header(),
            TimeDimCsv::header(),
            WarehouseCsv::header(),
            WebPageCsv::header(),
            WebReturnsCsv::header(),
            WebSalesCsv::header(),
            WebSiteCsv::header(),
        ];
        for (spec, header) in SPECS.iter().zip(headers) {
            let names: Vec<_> = spec.columns.iter().map(|c| c.name).collect();
            assert_eq!(names.join(","), header, "{}", spec.name);
        }
    }
}
