//! TPC-DS column names and types, as the specification (v3, section 2) defines
//! them. The order of each list is the order of the generator's DAT fields.
//!
//! Types: identifiers and integers are Int32; the order and ticket numbers of
//! the fact tables are Int64 (they exceed 2^31 at large scale factors);
//! `decimal(p,s)` is Decimal128(p,s); dates are Date32; `char(n)` and
//! `varchar(n)` are Utf8. Only primary-key columns (and the business keys
//! `*_id`) are NOT NULL, as in the specification.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

/// How one DAT field is typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Int32,
    Int64,
    Decimal(u8, i8),
    Date,
    Text,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Column {
    pub name: &'static str,
    pub kind: Kind,
    pub nullable: bool,
}

const fn col(name: &'static str, kind: Kind, nullable: bool) -> Column {
    Column {
        name,
        kind,
        nullable,
    }
}

/// Primary-key (or part of one) integer column.
const fn key(name: &'static str) -> Column {
    col(name, Kind::Int32, false)
}
const fn int(name: &'static str) -> Column {
    col(name, Kind::Int32, true)
}
const fn bigkey(name: &'static str) -> Column {
    col(name, Kind::Int64, false)
}
const fn dec(name: &'static str, precision: u8, scale: i8) -> Column {
    col(name, Kind::Decimal(precision, scale), true)
}
/// The money type of the fact tables and item prices.
const fn money(name: &'static str) -> Column {
    dec(name, 7, 2)
}
const fn date(name: &'static str) -> Column {
    col(name, Kind::Date, true)
}
/// Business key (`*_id`, `char(16)`).
const fn id(name: &'static str) -> Column {
    col(name, Kind::Text, false)
}
const fn text(name: &'static str) -> Column {
    col(name, Kind::Text, true)
}

pub(crate) const CALL_CENTER: &[Column] = &[
    key("cc_call_center_sk"),
    id("cc_call_center_id"),
    date("cc_rec_start_date"),
    date("cc_rec_end_date"),
    int("cc_closed_date_sk"),
    int("cc_open_date_sk"),
    text("cc_name"),
    text("cc_class"),
    int("cc_employees"),
    int("cc_sq_ft"),
    text("cc_hours"),
    text("cc_manager"),
    int("cc_mkt_id"),
    text("cc_mkt_class"),
    text("cc_mkt_desc"),
    text("cc_market_manager"),
    int("cc_division"),
    text("cc_division_name"),
    int("cc_company"),
    text("cc_company_name"),
    text("cc_street_number"),
    text("cc_street_name"),
    text("cc_street_type"),
    text("cc_suite_number"),
    text("cc_city"),
    text("cc_county"),
    text("cc_state"),
    text("cc_zip"),
    text("cc_country"),
    dec("cc_gmt_offset", 5, 2),
    dec("cc_tax_percentage", 5, 2),
];

pub(crate) const CATALOG_PAGE: &[Column] = &[
    key("cp_catalog_page_sk"),
    id("cp_catalog_page_id"),
    int("cp_start_date_sk"),
    int("cp_end_date_sk"),
    text("cp_department"),
    int("cp_catalog_number"),
    int("cp_catalog_page_number"),
    text("cp_description"),
    text("cp_type"),
];

pub(crate) const CATALOG_RETURNS: &[Column] = &[
    int("cr_returned_date_sk"),
    int("cr_returned_time_sk"),
    key("cr_item_sk"),
    int("cr_refunded_customer_sk"),
    int("cr_refunded_cdemo_sk"),
    int("cr_refunded_hdemo_sk"),
    int("cr_refunded_addr_sk"),
    int("cr_returning_customer_sk"),
    int("cr_returning_cdemo_sk"),
    int("cr_returning_hdemo_sk"),
    int("cr_returning_addr_sk"),
    int("cr_call_center_sk"),
    int("cr_catalog_page_sk"),
    int("cr_ship_mode_sk"),
    int("cr_warehouse_sk"),
    int("cr_reason_sk"),
    bigkey("cr_order_number"),
    int("cr_return_quantity"),
    money("cr_return_amount"),
    money("cr_return_tax"),
    money("cr_return_amt_inc_tax"),
    money("cr_fee"),
    money("cr_return_ship_cost"),
    money("cr_refunded_cash"),
    money("cr_reversed_charge"),
    money("cr_store_credit"),
    money("cr_net_loss"),
];

pub(crate) const CATALOG_SALES: &[Column] = &[
    int("cs_sold_date_sk"),
    int("cs_sold_time_sk"),
    int("cs_ship_date_sk"),
    int("cs_bill_customer_sk"),
    int("cs_bill_cdemo_sk"),
    int("cs_bill_hdemo_sk"),
    int("cs_bill_addr_sk"),
    int("cs_ship_customer_sk"),
    int("cs_ship_cdemo_sk"),
    int("cs_ship_hdemo_sk"),
    int("cs_ship_addr_sk"),
    int("cs_call_center_sk"),
    int("cs_catalog_page_sk"),
    int("cs_ship_mode_sk"),
    int("cs_warehouse_sk"),
    key("cs_item_sk"),
    int("cs_promo_sk"),
    bigkey("cs_order_number"),
    int("cs_quantity"),
    money("cs_wholesale_cost"),
    money("cs_list_price"),
    money("cs_sales_price"),
    money("cs_ext_discount_amt"),
    money("cs_ext_sales_price"),
    money("cs_ext_wholesale_cost"),
    money("cs_ext_list_price"),
    money("cs_ext_tax"),
    money("cs_coupon_amt"),
    money("cs_ext_ship_cost"),
    money("cs_net_paid"),
    money("cs_net_paid_inc_tax"),
    money("cs_net_paid_inc_ship"),
    money("cs_net_paid_inc_ship_tax"),
    money("cs_net_profit"),
];

pub(crate) const CUSTOMER: &[Column] = &[
    key("c_customer_sk"),
    id("c_customer_id"),
    int("c_current_cdemo_sk"),
    int("c_current_hdemo_sk"),
    int("c_current_addr_sk"),
    int("c_first_shipto_date_sk"),
    int("c_first_sales_date_sk"),
    text("c_salutation"),
    text("c_first_name"),
    text("c_last_name"),
    text("c_preferred_cust_flag"),
    int("c_birth_day"),
    int("c_birth_month"),
    int("c_birth_year"),
    text("c_birth_country"),
    text("c_login"),
    text("c_email_address"),
    int("c_last_review_date_sk"),
];

pub(crate) const CUSTOMER_ADDRESS: &[Column] = &[
    key("ca_address_sk"),
    id("ca_address_id"),
    text("ca_street_number"),
    text("ca_street_name"),
    text("ca_street_type"),
    text("ca_suite_number"),
    text("ca_city"),
    text("ca_county"),
    text("ca_state"),
    text("ca_zip"),
    text("ca_country"),
    dec("ca_gmt_offset", 5, 2),
    text("ca_location_type"),
];

pub(crate) const CUSTOMER_DEMOGRAPHICS: &[Column] = &[
    key("cd_demo_sk"),
    text("cd_gender"),
    text("cd_marital_status"),
    text("cd_education_status"),
    int("cd_purchase_estimate"),
    text("cd_credit_rating"),
    int("cd_dep_count"),
    int("cd_dep_employed_count"),
    int("cd_dep_college_count"),
];

pub(crate) const DATE_DIM: &[Column] = &[
    key("d_date_sk"),
    id("d_date_id"),
    date("d_date"),
    int("d_month_seq"),
    int("d_week_seq"),
    int("d_quarter_seq"),
    int("d_year"),
    int("d_dow"),
    int("d_moy"),
    int("d_dom"),
    int("d_qoy"),
    int("d_fy_year"),
    int("d_fy_quarter_seq"),
    int("d_fy_week_seq"),
    text("d_day_name"),
    text("d_quarter_name"),
    text("d_holiday"),
    text("d_weekend"),
    text("d_following_holiday"),
    int("d_first_dom"),
    int("d_last_dom"),
    int("d_same_day_ly"),
    int("d_same_day_lq"),
    text("d_current_day"),
    text("d_current_week"),
    text("d_current_month"),
    text("d_current_quarter"),
    text("d_current_year"),
];

pub(crate) const HOUSEHOLD_DEMOGRAPHICS: &[Column] = &[
    key("hd_demo_sk"),
    int("hd_income_band_sk"),
    text("hd_buy_potential"),
    int("hd_dep_count"),
    int("hd_vehicle_count"),
];

pub(crate) const INCOME_BAND: &[Column] = &[
    key("ib_income_band_sk"),
    int("ib_lower_bound"),
    int("ib_upper_bound"),
];

pub(crate) const INVENTORY: &[Column] = &[
    key("inv_date_sk"),
    key("inv_item_sk"),
    key("inv_warehouse_sk"),
    int("inv_quantity_on_hand"),
];

pub(crate) const ITEM: &[Column] = &[
    key("i_item_sk"),
    id("i_item_id"),
    date("i_rec_start_date"),
    date("i_rec_end_date"),
    text("i_item_desc"),
    money("i_current_price"),
    money("i_wholesale_cost"),
    int("i_brand_id"),
    text("i_brand"),
    int("i_class_id"),
    text("i_class"),
    int("i_category_id"),
    text("i_category"),
    int("i_manufact_id"),
    text("i_manufact"),
    text("i_size"),
    text("i_formulation"),
    text("i_color"),
    text("i_units"),
    text("i_container"),
    int("i_manager_id"),
    text("i_product_name"),
];

pub(crate) const PROMOTION: &[Column] = &[
    key("p_promo_sk"),
    id("p_promo_id"),
    int("p_start_date_sk"),
    int("p_end_date_sk"),
    int("p_item_sk"),
    dec("p_cost", 15, 2),
    int("p_response_target"),
    text("p_promo_name"),
    text("p_channel_dmail"),
    text("p_channel_email"),
    text("p_channel_catalog"),
    text("p_channel_tv"),
    text("p_channel_radio"),
    text("p_channel_press"),
    text("p_channel_event"),
    text("p_channel_demo"),
    text("p_channel_details"),
    text("p_purpose"),
    text("p_discount_active"),
];

pub(crate) const REASON: &[Column] =
    &[key("r_reason_sk"), id("r_reason_id"), text("r_reason_desc")];

pub(crate) const SHIP_MODE: &[Column] = &[
    key("sm_ship_mode_sk"),
    id("sm_ship_mode_id"),
    text("sm_type"),
    text("sm_code"),
    text("sm_carrier"),
    text("sm_contract"),
];

pub(crate) const STORE: &[Column] = &[
    key("s_store_sk"),
    id("s_store_id"),
    date("s_rec_start_date"),
    date("s_rec_end_date"),
    int("s_closed_date_sk"),
    text("s_store_name"),
    int("s_number_employees"),
    int("s_floor_space"),
    text("s_hours"),
    text("s_manager"),
    int("s_market_id"),
    text("s_geography_class"),
    text("s_market_desc"),
    text("s_market_manager"),
    int("s_division_id"),
    text("s_division_name"),
    int("s_company_id"),
    text("s_company_name"),
    text("s_street_number"),
    text("s_street_name"),
    text("s_street_type"),
    text("s_suite_number"),
    text("s_city"),
    text("s_county"),
    text("s_state"),
    text("s_zip"),
    text("s_country"),
    dec("s_gmt_offset", 5, 2),
    // Misspelt in the specification itself; the queries use this spelling.
    dec("s_tax_precentage", 5, 2),
];

pub(crate) const STORE_RETURNS: &[Column] = &[
    int("sr_returned_date_sk"),
    int("sr_return_time_sk"),
    key("sr_item_sk"),
    int("sr_customer_sk"),
    int("sr_cdemo_sk"),
    int("sr_hdemo_sk"),
    int("sr_addr_sk"),
    int("sr_store_sk"),
    int("sr_reason_sk"),
    bigkey("sr_ticket_number"),
    int("sr_return_quantity"),
    money("sr_return_amt"),
    money("sr_return_tax"),
    money("sr_return_amt_inc_tax"),
    money("sr_fee"),
    money("sr_return_ship_cost"),
    money("sr_refunded_cash"),
    money("sr_reversed_charge"),
    money("sr_store_credit"),
    money("sr_net_loss"),
];

pub(crate) const STORE_SALES: &[Column] = &[
    int("ss_sold_date_sk"),
    int("ss_sold_time_sk"),
    key("ss_item_sk"),
    int("ss_customer_sk"),
    int("ss_cdemo_sk"),
    int("ss_hdemo_sk"),
    int("ss_addr_sk"),
    int("ss_store_sk"),
    int("ss_promo_sk"),
    bigkey("ss_ticket_number"),
    int("ss_quantity"),
    money("ss_wholesale_cost"),
    money("ss_list_price"),
    money("ss_sales_price"),
    money("ss_ext_discount_amt"),
    money("ss_ext_sales_price"),
    money("ss_ext_wholesale_cost"),
    money("ss_ext_list_price"),
    money("ss_ext_tax"),
    money("ss_coupon_amt"),
    money("ss_net_paid"),
    money("ss_net_paid_inc_tax"),
    money("ss_net_profit"),
];

pub(crate) const TIME_DIM: &[Column] = &[
    key("t_time_sk"),
    id("t_time_id"),
    int("t_time"),
    int("t_hour"),
    int("t_minute"),
    int("t_second"),
    text("t_am_pm"),
    text("t_shift"),
    text("t_sub_shift"),
    text("t_meal_time"),
];

pub(crate) const WAREHOUSE: &[Column] = &[
    key("w_warehouse_sk"),
    id("w_warehouse_id"),
    text("w_warehouse_name"),
    int("w_warehouse_sq_ft"),
    text("w_street_number"),
    text("w_street_name"),
    text("w_street_type"),
    text("w_suite_number"),
    text("w_city"),
    text("w_county"),
    text("w_state"),
    text("w_zip"),
    text("w_country"),
    dec("w_gmt_offset", 5, 2),
];

pub(crate) const WEB_PAGE: &[Column] = &[
    key("wp_web_page_sk"),
    id("wp_web_page_id"),
    date("wp_rec_start_date"),
    date("wp_rec_end_date"),
    int("wp_creation_date_sk"),
    int("wp_access_date_sk"),
    text("wp_autogen_flag"),
    int("wp_customer_sk"),
    text("wp_url"),
    text("wp_type"),
    int("wp_char_count"),
    int("wp_link_count"),
    int("wp_image_count"),
    int("wp_max_ad_count"),
];

pub(crate) const WEB_RETURNS: &[Column] = &[
    int("wr_returned_date_sk"),
    int("wr_returned_time_sk"),
    key("wr_item_sk"),
    int("wr_refunded_customer_sk"),
    int("wr_refunded_cdemo_sk"),
    int("wr_refunded_hdemo_sk"),
    int("wr_refunded_addr_sk"),
    int("wr_returning_customer_sk"),
    int("wr_returning_cdemo_sk"),
    int("wr_returning_hdemo_sk"),
    int("wr_returning_addr_sk"),
    int("wr_web_page_sk"),
    int("wr_reason_sk"),
    bigkey("wr_order_number"),
    int("wr_return_quantity"),
    money("wr_return_amt"),
    money("wr_return_tax"),
    money("wr_return_amt_inc_tax"),
    money("wr_fee"),
    money("wr_return_ship_cost"),
    money("wr_refunded_cash"),
    money("wr_reversed_charge"),
    money("wr_account_credit"),
    money("wr_net_loss"),
];

pub(crate) const WEB_SALES: &[Column] = &[
    int("ws_sold_date_sk"),
    int("ws_sold_time_sk"),
    int("ws_ship_date_sk"),
    key("ws_item_sk"),
    int("ws_bill_customer_sk"),
    int("ws_bill_cdemo_sk"),
    int("ws_bill_hdemo_sk"),
    int("ws_bill_addr_sk"),
    int("ws_ship_customer_sk"),
    int("ws_ship_cdemo_sk"),
    int("ws_ship_hdemo_sk"),
    int("ws_ship_addr_sk"),
    int("ws_web_page_sk"),
    int("ws_web_site_sk"),
    int("ws_ship_mode_sk"),
    int("ws_warehouse_sk"),
    int("ws_promo_sk"),
    bigkey("ws_order_number"),
    int("ws_quantity"),
    money("ws_wholesale_cost"),
    money("ws_list_price"),
    money("ws_sales_price"),
    money("ws_ext_discount_amt"),
    money("ws_ext_sales_price"),
    money("ws_ext_wholesale_cost"),
    money("ws_ext_list_price"),
    money("ws_ext_tax"),
    money("ws_coupon_amt"),
    money("ws_ext_ship_cost"),
    money("ws_net_paid"),
    money("ws_net_paid_inc_tax"),
    money("ws_net_paid_inc_ship"),
    money("ws_net_paid_inc_ship_tax"),
    money("ws_net_profit"),
];

pub(crate) const WEB_SITE: &[Column] = &[
    key("web_site_sk"),
    id("web_site_id"),
    date("web_rec_start_date"),
    date("web_rec_end_date"),
    text("web_name"),
    int("web_open_date_sk"),
    int("web_close_date_sk"),
    text("web_class"),
    text("web_manager"),
    int("web_mkt_id"),
    text("web_mkt_class"),
    text("web_mkt_desc"),
    text("web_market_manager"),
    int("web_company_id"),
    text("web_company_name"),
    text("web_street_number"),
    text("web_street_name"),
    text("web_street_type"),
    text("web_suite_number"),
    text("web_city"),
    text("web_county"),
    text("web_state"),
    text("web_zip"),
    text("web_country"),
    dec("web_gmt_offset", 5, 2),
    dec("web_tax_percentage", 5, 2),
];

impl Kind {
    pub(crate) fn data_type(self) -> DataType {
        match self {
            Kind::Int32 => DataType::Int32,
            Kind::Int64 => DataType::Int64,
            Kind::Decimal(precision, scale) => DataType::Decimal128(precision, scale),
            Kind::Date => DataType::Date32,
            Kind::Text => DataType::Utf8,
        }
    }
}

pub(crate) fn arrow_schema(columns: &[Column]) -> SchemaRef {
    let fields: Vec<Field> = columns
        .iter()
        .map(|c| Field::new(c.name, c.kind.data_type(), c.nullable))
        .collect();
    Arc::new(Schema::new(fields))
}
