//! PostgreSQL's system catalog, for the tools that read it: psql's `\d`
//! commands, SQLAlchemy and pandas, JDBC's `DatabaseMetaData`, DBeaver.
//!
//! The `pg_catalog` schema and its functions come from
//! `datafusion-pg-catalog`: live views over DataFusion's catalog (a table
//! created or dropped shows at the next scan). The crate's rewrites of the
//! queries those tools send (`OPERATOR(pg_catalog.~)`, `'t'::regclass`,
//! `pg_catalog.`-qualified functions, ...) apply to catalog queries only:
//! some approximate (a correlated subquery in a select list becomes NULL),
//! which a tool's metadata query tolerates and a user's query must never
//! see. Added here: a `version()` drivers accept as PostgreSQL's, the
//! description and function-signature lookups the crate lacks, and the
//! `SHOW` parameters drivers ask for at connect time.

use std::ops::ControlFlow;
use std::sync::Arc;

use arrow::datatypes::DataType;
use async_trait::async_trait;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement;
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, Query, SelectItem, SetExpr, TableFactor, Value, VisitMut, VisitorMut,
    visit_expressions, visit_expressions_mut, visit_relations,
};
use datafusion_pg_catalog::pg_catalog::context::{PgCatalogContextProvider, Role};
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;

use crate::auth::{self, Users};
use crate::session::Caller;
use skiff_node::error::{ServerError, SqlState};

/// Time zone timestamps with a zone are shown in; the `TimeZone` the server
/// reports at startup.
pub const TIME_ZONE: &str = "UTC";

/// The schema's name.
pub(crate) const SCHEMA: &str = "pg_catalog";

/// The PostgreSQL release Skiff answers as (startup parameter, `version()`,
/// `SHOW server_version`).
pub const SERVER_VERSION: &str = "16.6";
const SERVER_VERSION_NUM: &str = "160006";

/// Install `pg_catalog` and the PostgreSQL functions in `ctx` (the
/// coordinator's shared context, which every session copies).
pub(crate) fn install(ctx: &SessionContext, users: &Users) -> Result<(), ServerError> {
    let roles = Roles {
        users: users.clone(),
    };
    datafusion_pg_catalog::setup_pg_catalog(ctx, skiff_engine::catalog::DATABASE, roles)
        .map_err(|e| ServerError::internal(format!("cannot install pg_catalog: {e}")))?;
    let version = format!(
        "PostgreSQL {SERVER_VERSION} (Skiff {}, on Apache DataFusion {})",
        env!("CARGO_PKG_VERSION"),
        datafusion::DATAFUSION_VERSION
    );
    ctx.register_udf(Constant::udf("version", ScalarValue::Utf8(Some(version))));
    // Comments, sequences and JSON objects built from them: Skiff keeps no
    // comments and has no sequences, so there is never anything to build.
    for name in [
        "col_description",
        "obj_description",
        "shobj_description",
        "pg_get_serial_sequence",
        "json_build_object",
    ] {
        ctx.register_udf(Constant::udf(name, ScalarValue::Utf8(None)));
    }
    for name in [
        "pg_get_function_result",
        "pg_get_function_arguments",
        "pg_get_function_identity_arguments",
        "pg_get_indexdef",
        "pg_get_viewdef",
        "pg_get_triggerdef",
    ] {
        // Function signatures and definitions Skiff does not keep.
        ctx.register_udf(Constant::udf(name, ScalarValue::Utf8(Some(String::new()))));
    }
    ctx.register_udf(ScalarUDF::from(ToRegtype::new()));
    ctx.register_udf(ScalarUDF::from(SessionUser::new()));
    for name in [
        "pg_function_is_visible",
        "pg_type_is_visible",
        "pg_collation_is_visible",
        "pg_has_role",
    ] {
        ctx.register_udf(Constant::udf(name, ScalarValue::Boolean(Some(true))));
    }
    Ok(())
}

/// Users as PostgreSQL roles (`pg_roles`); admins are superusers.
#[derive(Clone, Debug)]
struct Roles {
    users: Users,
}

#[async_trait]
impl PgCatalogContextProvider for Roles {
    async fn roles(&self) -> Vec<String> {
        self.users.names()
    }

    async fn role(&self, name: &str) -> Option<Role> {
        let known = self.users.password(name).is_some();
        known.then(|| Role {
            name: name.to_string(),
            is_superuser: self.users.role(name) == auth::Role::Admin,
            can_login: true,
            can_create_db: false,
            can_create_role: false,
            can_create_user: false,
            can_replication: false,
            grants: Vec::new(),
            inherited_roles: Vec::new(),
        })
    }
}

/// Words besides `pg_...` that make a statement a catalog query.
const CATALOG_WORDS: [&str; 10] = [
    "regclass",
    "regtype",
    "regproc",
    "regnamespace",
    "regrole",
    "current_user",
    "session_user",
    "current_catalog",
    "current_schema",
    "current_schemas",
];

/// The catalog-query side: which statements are rewritten, and how.
pub(crate) struct CatalogSql {
    parser: PostgresCompatibilityParser,
}

impl std::fmt::Debug for CatalogSql {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatalogSql").finish_non_exhaustive()
    }
}

impl CatalogSql {
    pub(crate) fn new() -> Self {
        Self {
            parser: PostgresCompatibilityParser::new(),
        }
    }

    /// A query a tool sends to read the catalog: outside quotes and
    /// comments it names a `pg_` object or an OID type, or asks who or
    /// where the session is. PostgreSQL reserves the `pg_` prefix for its
    /// catalog, so a user's own query does not match.
    pub(crate) fn is_catalog_query(sql: &str) -> bool {
        skiff_engine::statement::any_word(sql, |word| {
            word.get(..3).is_some_and(|p| p.eq_ignore_ascii_case("pg_"))
                || CATALOG_WORDS.iter().any(|w| word.eq_ignore_ascii_case(w))
        })
    }

    /// Parse and rewrite one catalog query.
    pub(crate) fn parse(&self, sql: &str) -> Result<Statement, ServerError> {
        let syntax = |message: String| ServerError::new(SqlState::SyntaxError, message);
        let mut statements = self.parser.parse(sql).map_err(|e| syntax(e.to_string()))?;
        if statements.len() != 1 {
            return Err(syntax(format!(
                "expected one statement, found {}",
                statements.len()
            )));
        }
        let mut statement = statements.remove(0);
        let _ = statement.visit(&mut NullNestedCorrelatedSubqueries);
        Ok(Statement::Statement(Box::new(statement)))
    }
}

/// DataFusion plans no correlated scalar subquery that is not aggregated.
/// The crate's rule makes such a subquery NULL when it is a whole item of
/// a select list; this one also where it sits inside an item (a CASE, a
/// comparison), as in SQLAlchemy's column query (a default, an identity, a
/// collation: none of which Skiff has).
struct NullNestedCorrelatedSubqueries;

impl VisitorMut for NullNestedCorrelatedSubqueries {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        let SetExpr::Select(select) = query.body.as_mut() else {
            return ControlFlow::Continue(());
        };
        for item in &mut select.projection {
            let (SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. }) = item
            else {
                continue;
            };
            let _ = visit_expressions_mut(expr, |e| {
                if let SqlExpr::Subquery(subquery) = e
                    && correlated(subquery)
                {
                    *e = SqlExpr::Value(Value::Null.with_empty_span());
                }
                ControlFlow::<()>::Continue(())
            });
        }
        ControlFlow::Continue(())
    }
}

/// Whether `query` names a column of a table it does not read itself.
fn correlated(query: &Query) -> bool {
    let mut names: Vec<String> = Vec::new();
    let _ = visit_relations(query, |name| {
        if let Some(last) = name.0.last().and_then(|part| part.as_ident()) {
            names.push(last.value.to_ascii_lowercase());
        }
        ControlFlow::<()>::Continue(())
    });
    if let SetExpr::Select(select) = query.body.as_ref() {
        for from in &select.from {
            let factors =
                std::iter::once(&from.relation).chain(from.joins.iter().map(|j| &j.relation));
            for factor in factors {
                if let TableFactor::Table {
                    alias: Some(alias), ..
                } = factor
                {
                    names.push(alias.name.value.to_ascii_lowercase());
                }
            }
        }
    }
    let outer = visit_expressions(query, |e| match e {
        SqlExpr::CompoundIdentifier(parts) if parts.len() >= 2 => {
            let table = parts[parts.len() - 2].value.to_ascii_lowercase();
            if names.contains(&table) {
                ControlFlow::Continue(())
            } else {
                ControlFlow::Break(())
            }
        }
        _ => ControlFlow::Continue(()),
    });
    outer.is_break()
}

/// `SHOW name` of a PostgreSQL parameter drivers ask for, as the
/// equivalent `SELECT` (one row, one column named after the parameter);
/// `None` for anything else (DataFusion's own settings show as before).
pub(crate) fn show_as_select(sql: &str) -> Option<String> {
    let words: Vec<String> = sql
        .trim()
        .trim_end_matches(';')
        .split_whitespace()
        .map(|w| w.to_ascii_lowercase())
        .collect();
    let (first, name) = words.split_first()?;
    if first != "show" {
        return None;
    }
    let name = name.join(" ");
    let (column, value) = match name.as_str() {
        "standard_conforming_strings" => ("standard_conforming_strings", "on"),
        "transaction isolation level" | "transaction_isolation" => {
            ("transaction_isolation", "read committed")
        }
        "default_transaction_isolation" => ("default_transaction_isolation", "read committed"),
        "transaction_read_only" => ("transaction_read_only", "off"),
        "default_transaction_read_only" => ("default_transaction_read_only", "off"),
        "server_version" => ("server_version", SERVER_VERSION),
        "server_version_num" => ("server_version_num", SERVER_VERSION_NUM),
        "server_encoding" => ("server_encoding", "UTF8"),
        "client_encoding" => ("client_encoding", "UTF8"),
        "datestyle" => ("DateStyle", "ISO, MDY"),
        "intervalstyle" => ("IntervalStyle", "postgres"),
        "timezone" | "time zone" => ("TimeZone", TIME_ZONE),
        "integer_datetimes" => ("integer_datetimes", "on"),
        "search_path" => ("search_path", "\"$user\", public"),
        "max_identifier_length" => ("max_identifier_length", "63"),
        "lc_collate" => ("lc_collate", "C"),
        "lc_ctype" => ("lc_ctype", "C"),
        "bytea_output" => ("bytea_output", "hex"),
        "extra_float_digits" => ("extra_float_digits", "1"),
        "application_name" => ("application_name", ""),
        _ => return None,
    };
    Some(format!("SELECT '{value}' AS \"{column}\""))
}

/// `to_regtype(name)`: the OID of a built-in type by its name, NULL for
/// any other (psycopg asks for `hstore` at connect; Skiff has no
/// extension types).
#[derive(Debug, PartialEq, Eq, Hash)]
struct ToRegtype {
    signature: Signature,
}

impl ToRegtype {
    fn new() -> Self {
        Self {
            signature: Signature::exact(vec![DataType::Utf8], Volatility::Stable),
        }
    }

    fn oid(name: &str) -> Option<i32> {
        use pgwire::api::Type;
        let builtin = [
            Type::BOOL,
            Type::BYTEA,
            Type::CHAR,
            Type::NAME,
            Type::INT8,
            Type::INT2,
            Type::INT4,
            Type::TEXT,
            Type::OID,
            Type::JSON,
            Type::FLOAT4,
            Type::FLOAT8,
            Type::BPCHAR,
            Type::VARCHAR,
            Type::DATE,
            Type::TIME,
            Type::TIMESTAMP,
            Type::TIMESTAMPTZ,
            Type::INTERVAL,
            Type::NUMERIC,
            Type::UUID,
            Type::JSONB,
        ];
        let name = name.trim().trim_start_matches("pg_catalog.");
        builtin
            .iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
            .and_then(|t| i32::try_from(t.oid()).ok())
    }
}

impl ScalarUDFImpl for ToRegtype {
    fn name(&self) -> &str {
        "to_regtype"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let names = args.args[0].to_array(args.number_rows)?;
        let names = datafusion::common::cast::as_string_array(&names)?;
        let oids: arrow::array::Int32Array = names.iter().map(|n| n.and_then(Self::oid)).collect();
        Ok(ColumnarValue::Array(Arc::new(oids)))
    }
}

/// A function of any arguments that answers one constant.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Constant {
    name: &'static str,
    value: ScalarValue,
    signature: Signature,
}

impl Constant {
    fn udf(name: &'static str, value: ScalarValue) -> ScalarUDF {
        ScalarUDF::from(Self {
            name,
            value,
            signature: Signature::one_of(
                vec![TypeSignature::Nullary, TypeSignature::VariadicAny],
                Volatility::Stable,
            ),
        })
    }
}

impl ScalarUDFImpl for Constant {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(self.value.data_type())
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(self.value.clone()))
    }
}

/// `session_user` (and `current_user`, which the rewrites turn into it):
/// the connected user, read from the statement's caller.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SessionUser {
    signature: Signature,
}

impl SessionUser {
    fn new() -> Self {
        Self {
            signature: Signature::nullary(Volatility::Stable),
        }
    }
}

impl ScalarUDFImpl for SessionUser {
    fn name(&self) -> &str {
        "session_user"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let caller = Caller::of(&args.config_options);
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(caller.user))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_queries_are_told_from_user_queries() {
        assert!(CatalogSql::is_catalog_query(
            "SELECT c.relname FROM pg_catalog.pg_class c"
        ));
        assert!(CatalogSql::is_catalog_query("select 'items'::regclass"));
        assert!(CatalogSql::is_catalog_query("select current_schema()"));
        assert!(!CatalogSql::is_catalog_query(
            "SELECT (SELECT max(x) FROM t WHERE t.k = u.k) FROM u"
        ));
        assert!(!CatalogSql::is_catalog_query(
            "SELECT (SELECT max(x) FROM t WHERE t.k = u.k) FROM u WHERE u.name = 'pg_x'"
        ));
    }

    #[test]
    fn builtin_type_names_have_their_oids() {
        assert_eq!(ToRegtype::oid("int4"), Some(23));
        assert_eq!(ToRegtype::oid("pg_catalog.text"), Some(25));
        assert_eq!(ToRegtype::oid("hstore"), None);
    }

    #[test]
    fn show_of_driver_parameters_becomes_a_select() {
        assert_eq!(
            show_as_select("SHOW standard_conforming_strings").as_deref(),
            Some("SELECT 'on' AS \"standard_conforming_strings\"")
        );
        assert_eq!(
            show_as_select("show transaction isolation level;").as_deref(),
            Some("SELECT 'read committed' AS \"transaction_isolation\"")
        );
        assert_eq!(show_as_select("SHOW datafusion.execution.batch_size"), None);
        assert_eq!(show_as_select("SELECT 1"), None);
    }
}
