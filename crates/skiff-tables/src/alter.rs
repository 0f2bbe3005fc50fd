//! `ALTER TABLE t ADD COLUMN c type`: a new nullable column, one Delta
//! commit that changes only the schema. Rows written before it read NULL
//! there, which is why a column added with `NOT NULL` or a `DEFAULT` is
//! refused rather than left to say what its old rows do not hold.
//!
//! DataFusion's SQL planner has no `ALTER TABLE`, so the statement is
//! parsed here with sqlparser's PostgreSQL dialect, like `COPY`.

use arrow::datatypes::Field;
use datafusion::common::{Result, TableReference, not_impl_err, plan_err};
use datafusion::logical_expr::{DdlStatement, LogicalPlan};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{AlterTableOperation, ColumnDef, ColumnOption, Statement};

use crate::ManagedTable;
use crate::error::TableError;

/// `ALTER TABLE [IF EXISTS] table ADD [COLUMN] [IF NOT EXISTS] c type, ...`.
#[derive(Clone, Debug, PartialEq)]
pub struct AddColumns {
    pub table: TableReference,
    /// `IF EXISTS`: a missing table is no error.
    pub if_exists: bool,
    pub columns: Vec<NewColumn>,
}

/// One column `ADD COLUMN` names.
#[derive(Clone, Debug, PartialEq)]
pub struct NewColumn {
    /// The column as written: `c varchar(10)`.
    definition: ColumnDef,
    /// `IF NOT EXISTS`: an existing column of the name is no error.
    if_not_exists: bool,
}

impl AddColumns {
    /// Parse `sql` if it is an `ALTER TABLE`. `Ok(None)` for any other
    /// statement; an error for an `ALTER TABLE` that does more than add
    /// columns.
    pub fn parse(sql: &str) -> Result<Option<AddColumns>> {
        let Some(Statement::AlterTable(alter)) = crate::postgres::statement(sql, "alter") else {
            return Ok(None);
        };
        let mut columns = Vec::with_capacity(alter.operations.len());
        for operation in &alter.operations {
            let AlterTableOperation::AddColumn {
                if_not_exists,
                column_def,
                column_position: None,
                ..
            } = operation
            else {
                return not_impl_err!("ALTER TABLE supports ADD COLUMN only, not {operation}");
            };
            columns.push(NewColumn {
                definition: column_def.clone(),
                if_not_exists: *if_not_exists,
            });
        }
        let table =
            datafusion::sql::planner::object_name_to_table_reference(alter.name.clone(), true)?;
        Ok(Some(AddColumns {
            table,
            if_exists: alter.if_exists,
            columns,
        }))
    }

    /// Add the columns to the managed table, one commit.
    pub async fn run(&self, ctx: &SessionContext) -> Result<()> {
        let provider = match ctx.table_provider(self.table.clone()).await {
            Ok(provider) => provider,
            Err(_) if self.if_exists => return Ok(()),
            Err(e) => return Err(e),
        };
        let Some(table) = provider.downcast_ref::<ManagedTable>() else {
            return plan_err!(
                "ALTER TABLE changes managed tables only; \"{}\" is read from files",
                self.table
            );
        };
        let existing = table.schema_now().await?;
        let mut fields = Vec::with_capacity(self.columns.len());
        for column in &self.columns {
            let field = field_of(ctx, &column.definition).await?;
            let taken = existing.field_with_name(field.name()).is_ok()
                || fields.iter().any(|f: &Field| f.name() == field.name());
            match (taken, column.if_not_exists) {
                (true, true) => continue,
                (true, false) => {
                    return Err(TableError::BadInput(format!(
                        "column \"{}\" of relation \"{}\" already exists",
                        field.name(),
                        self.table
                    ))
                    .into());
                }
                (false, _) => fields.push(field),
            }
        }
        if fields.is_empty() {
            return Ok(());
        }
        table.add_columns(fields).await?;
        Ok(())
    }
}

/// The Arrow field a column definition makes, typed as `CREATE TABLE`
/// types it; only plain nullable columns.
async fn field_of(ctx: &SessionContext, column: &ColumnDef) -> Result<Field> {
    for option in &column.options {
        match &option.option {
            ColumnOption::Null => {}
            ColumnOption::NotNull => {
                return not_impl_err!(
                    "ADD COLUMN {} NOT NULL: the table's existing rows have no value for it; \
                     add it nullable",
                    column.name
                );
            }
            ColumnOption::Default(_) => {
                return not_impl_err!(
                    "ADD COLUMN {} DEFAULT: existing rows would read NULL, not the default; \
                     add the column, then UPDATE it",
                    column.name
                );
            }
            other => return not_impl_err!("ADD COLUMN option {other} is not supported"),
        }
    }
    // DataFusion's own mapping of SQL types, through the statement that
    // already uses it.
    let probe = format!("CREATE TABLE skiff_add_column ({column})");
    let plan = ctx.state().create_logical_plan(&probe).await?;
    let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) = plan else {
        return plan_err!("column definition {column} is not understood");
    };
    let schema = create.input.schema();
    let [field] = schema.fields().iter().collect::<Vec<_>>()[..] else {
        return plan_err!("column definition {column} is not understood");
    };
    Ok(field.as_ref().clone().with_nullable(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_add_column_is_taken() {
        let alter =
            AddColumns::parse("ALTER TABLE t ADD COLUMN c varchar, ADD IF NOT EXISTS d int")
                .unwrap()
                .unwrap();
        assert_eq!(alter.table, TableReference::bare("t"));
        assert_eq!(alter.columns.len(), 2);
        assert!(alter.columns[1].if_not_exists);
        assert!(AddColumns::parse("ALTER TABLE t DROP COLUMN c").is_err());
        assert!(AddColumns::parse("SELECT 1").unwrap().is_none());
    }
}
