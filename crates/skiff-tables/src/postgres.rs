//! Statements DataFusion's SQL lacks (`COPY ... FROM`, `ALTER TABLE`),
//! read with sqlparser's PostgreSQL dialect.

use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// `sql` as one PostgreSQL statement if it starts with `keyword`; `None`
/// for other statements and for text PostgreSQL's grammar does not read
/// (DataFusion then plans it, or reports its own error).
pub(crate) fn statement(sql: &str, keyword: &str) -> Option<Statement> {
    let starts = sql
        .trim_start()
        .get(..keyword.len())
        .is_some_and(|w| w.eq_ignore_ascii_case(keyword));
    if !starts {
        return None;
    }
    let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).ok()?;
    if statements.len() != 1 {
        return None;
    }
    statements.pop()
}
