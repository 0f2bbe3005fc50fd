//! Where managed tables live and how they are made and removed: one Delta
//! table per directory under the data directory (per prefix in an object
//! store), named as the table.

use std::path::Path;
use std::sync::Arc;

use arrow::datatypes::{Field, Schema};
use datafusion::catalog::{Session, TableProviderFactory};
use datafusion::common::{Result, TableReference};
use datafusion::datasource::TableProvider;
use datafusion::logical_expr::{
    CreateExternalTable, CreateMemoryTable, DdlStatement, DropTable, LogicalPlan,
};
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::prelude::SessionContext;
use datafusion::sql::unparser::expr_to_sql;
use deltalake_core::DeltaTableBuilder;
use deltalake_core::kernel::StructType;
use deltalake_core::kernel::engine::arrow_conversion::TryIntoKernel;
use deltalake_core::operations::write::WriteBuilder;
use deltalake_core::protocol::SaveMode;
use tracing::{info, warn};
use url::Url;

use crate::error::TableError;
use crate::location::{DataLocation, ObjectRoot};
use crate::partition::{HashPartitioning, PARTITION_COLUMN};
use crate::table::{DEFAULT_KEY, ManagedTable};

/// The catalog and schema managed tables are created in.
pub const CATALOG: &str = "skiff";
pub const SCHEMA: &str = "public";

/// Prefix of a dropped table's directory while it is being removed; hidden
/// (a leading `.`), so a crash mid-removal never shows a partial table.
const DROPPED_PREFIX: &str = ".dropped-";

/// The data directory managed tables are created in.
#[derive(Clone, Debug)]
pub struct TableStore {
    root: DataLocation,
    /// Held while a table is created or dropped: two sessions' `CREATE
    /// TABLE IF NOT EXISTS t` at once must not both get past the check.
    ddl: Arc<tokio::sync::Mutex<()>>,
}

/// True for a directory holding a Delta table (it has a `_delta_log`).
pub fn is_delta_table(dir: &Path) -> bool {
    dir.join("_delta_log").is_dir()
}

/// The object marking a table in an object store as being dropped: written
/// before its other objects are deleted and deleted last, so a crash
/// mid-removal never shows a partial table (there is no atomic rename).
const DROPPED_MARKER: &str = "_skiff_dropped";

impl TableStore {
    /// Tables under `root` (an existing directory). Finishes removing
    /// tables whose `DROP` a crash interrupted.
    pub fn open(root: &Path) -> Result<Self, TableError> {
        let root = root.canonicalize().map_err(|e| {
            TableError::Io(format!(
                "cannot open data directory {}: {e}",
                root.display()
            ))
        })?;
        if let Ok(entries) = std::fs::read_dir(&root) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                if name.to_string_lossy().starts_with(DROPPED_PREFIX) {
                    remove_dir(&entry.path());
                }
            }
        }
        Ok(Self {
            ddl: Arc::default(),
            root: DataLocation::Local(root),
        })
    }

    /// Tables under an object-store prefix (which must be reachable: its
    /// listing is the first request), with the managed tables found there
    /// and their locations. Finishes removing tables whose `DROP` a crash
    /// interrupted.
    pub async fn open_object(root: &ObjectRoot) -> Result<(Self, Vec<(String, Url)>), TableError> {
        let mut tables = Vec::new();
        for (name, dropped) in root.tables(DROPPED_MARKER).await? {
            if dropped {
                root.remove_table(&name, DROPPED_MARKER).await?;
                info!(table = %name, "finished dropping a table");
            } else {
                let url = root.table_url(&name);
                tables.push((name, url));
            }
        }
        let store = Self {
            ddl: Arc::default(),
            root: DataLocation::Object(root.clone()),
        };
        Ok((store, tables))
    }

    pub fn location(&self) -> &DataLocation {
        &self.root
    }

    /// Run `plan` if it creates or drops a managed table; false when it is
    /// not this store's to run. `partitioning` is the statement's `PARTITION
    /// BY HASH` (`partition::split_clause`), for a `CREATE TABLE` only.
    pub async fn execute_ddl(
        &self,
        ctx: &SessionContext,
        plan: &LogicalPlan,
        partitioning: Option<&HashPartitioning>,
    ) -> Result<bool> {
        match plan {
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) if !create.temporary => {
                self.create(ctx, create, partitioning).await?;
                Ok(true)
            }
            _ if partitioning.is_some() => Err(TableError::Unsupported(
                "PARTITION BY HASH is for CREATE TABLE of a table Skiff manages".into(),
            )
            .into()),
            LogicalPlan::Ddl(DdlStatement::DropTable(drop)) => self.drop(ctx, drop).await,
            _ => Ok(false),
        }
    }

    /// `CREATE TABLE` and `CREATE TABLE ... AS SELECT`: version 0 of a
    /// new Delta table holds the schema and, for CTAS, the rows, in one
    /// commit; with `partitioning`, each row in its partition.
    pub(crate) async fn create(
        &self,
        ctx: &SessionContext,
        create: &CreateMemoryTable,
        partitioning: Option<&HashPartitioning>,
    ) -> Result<()> {
        let _ddl = self.ddl.lock().await;
        self.create_locked(ctx, create, partitioning).await
    }

    async fn create_locked(
        &self,
        ctx: &SessionContext,
        create: &CreateMemoryTable,
        partitioning: Option<&HashPartitioning>,
    ) -> Result<()> {
        let name = managed_name(&create.name)?;
        if let Some(p) = partitioning {
            p.check_columns(&name, create.input.schema().as_arrow())?;
        }
        if ctx.table_exist(create.name.clone())? {
            if create.if_not_exists {
                return Ok(());
            }
            if !create.or_replace {
                return Err(TableError::Exists(name).into());
            }
            let drop = DropTable {
                name: create.name.clone(),
                if_exists: true,
                schema: Arc::clone(create.input.schema()),
            };
            if !self.drop_locked(ctx, &drop).await? {
                ctx.deregister_table(create.name.clone())?;
            }
        }
        let url = match &self.root {
            DataLocation::Local(root) => {
                let dir = root.join(&name);
                if is_delta_table(&dir) {
                    return Err(TableError::Exists(name).into());
                }
                std::fs::create_dir_all(&dir).map_err(|e| {
                    TableError::Io(format!(
                        "cannot create table directory {}: {e}",
                        dir.display()
                    ))
                })?;
                Url::from_directory_path(&dir).map_err(|()| {
                    TableError::Io(format!("{} is not an absolute path", dir.display()))
                })?
            }
            DataLocation::Object(root) => {
                if root.holds(&name, DROPPED_MARKER).await? {
                    root.remove_table(&name, DROPPED_MARKER).await?;
                }
                if root.holds_table(&name).await? {
                    return Err(TableError::Exists(name).into());
                }
                root.table_url(&name)
            }
        };
        // Not loaded: there is no log yet (loading one logs an error).
        let empty = DeltaTableBuilder::from_url(url.clone())
            .and_then(|builder| builder.build())
            .map_err(|e| TableError::delta(&name, e))?;
        let partition_columns: Vec<&str> =
            partitioning.map(|_| PARTITION_COLUMN).into_iter().collect();
        let made = if produces_no_rows(&create.input) {
            let mut schema = with_defaults(create)?.as_ref().clone();
            if let Some(p) = partitioning {
                let mut fields: Vec<Field> =
                    schema.fields().iter().map(|f| f.as_ref().clone()).collect();
                fields.push(p.field());
                schema = Schema::new_with_metadata(fields, schema.metadata().clone());
            }
            let kernel: StructType = (&schema)
                .try_into_kernel()
                .map_err(|e| TableError::Unsupported(format!("table \"{name}\": {e}")))?;
            empty
                .create()
                .with_columns(kernel.fields().cloned())
                .with_partition_columns(partition_columns)
                .with_table_name(name.clone())
                .with_save_mode(SaveMode::ErrorIfExists)
                .await
        } else {
            let input = match partitioning {
                Some(p) => p.add_to_plan(create.input.as_ref().clone())?,
                None => create.input.as_ref().clone(),
            };
            // deltalake plans the write in its own session (its nodes
            // need its planner); the input's tables are already resolved.
            // The files are written as this session's Parquet settings say.
            WriteBuilder::new(empty.log_store(), None)
                .with_writer_properties(writer_properties(ctx))
                .with_input_plan(input)
                .with_partition_columns(partition_columns)
                .with_save_mode(SaveMode::ErrorIfExists)
                .with_table_name(name.clone())
                .await
        };
        let table = match made {
            Ok(table) => table,
            Err(e) => {
                // Nothing was committed: leave no files behind.
                self.discard(&name).await;
                return Err(TableError::delta(&name, e).into());
            }
        };
        let managed = ManagedTable::from_table(&name, table)?;
        ctx.register_table(create.name.clone(), Arc::new(managed))?;
        info!(table = %name, "managed table created");
        Ok(())
    }

    /// `DROP TABLE` of a managed table: unregistered, then its directory
    /// renamed aside (atomic) and removed, or in an object store marked
    /// dropped and its objects deleted. False when it is not managed.
    async fn drop(&self, ctx: &SessionContext, drop: &DropTable) -> Result<bool> {
        let _ddl = self.ddl.lock().await;
        self.drop_locked(ctx, drop).await
    }

    async fn drop_locked(&self, ctx: &SessionContext, drop: &DropTable) -> Result<bool> {
        let Ok(provider) = ctx.table_provider(drop.name.clone()).await else {
            return Ok(false);
        };
        let Some(managed) = provider.downcast_ref::<ManagedTable>() else {
            return Ok(false);
        };
        if !managed.owned() {
            return Ok(false);
        }
        // Writes in flight finish first (committing into the table, which
        // then goes whole); later ones are refused.
        let mut closed = managed.close_for_drop().await;
        match &self.root {
            DataLocation::Local(root) => {
                let Ok(dir) = managed.url().to_file_path() else {
                    return Err(TableError::Unsupported(format!(
                        "cannot drop table \"{}\" stored at {}",
                        managed.name(),
                        managed.url()
                    ))
                    .into());
                };
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                let aside = root.join(format!("{DROPPED_PREFIX}{}-{nanos}", managed.name()));
                std::fs::rename(&dir, &aside).map_err(|e| {
                    TableError::Io(format!(
                        "cannot drop table directory {}: {e}",
                        dir.display()
                    ))
                })?;
                ctx.deregister_table(drop.name.clone())?;
                remove_dir(&aside);
            }
            DataLocation::Object(root) => {
                let name = managed.name();
                if managed.url() != &root.table_url(name) {
                    return Err(TableError::Unsupported(format!(
                        "cannot drop table \"{name}\" stored at {}",
                        managed.url()
                    ))
                    .into());
                }
                root.put_marker(name, DROPPED_MARKER).await?;
                ctx.deregister_table(drop.name.clone())?;
                if let Err(e) = root.remove_table(name, DROPPED_MARKER).await {
                    // The marker hides the table; the next start or a
                    // CREATE of the same name finishes the removal.
                    warn!(table = %name, error = %e, "cannot remove a dropped table's files");
                }
            }
        }
        *closed = true;
        info!(table = %managed.name(), "managed table dropped");
        Ok(true)
    }
}

/// The table's name if it may be a managed table here: in the default
/// catalog and schema, and usable as a directory name.
fn managed_name(reference: &TableReference) -> Result<String, TableError> {
    if reference.schema().is_some_and(|s| s != SCHEMA)
        || reference.catalog().is_some_and(|c| c != CATALOG)
    {
        return Err(TableError::Unsupported(format!(
            "tables can be created only in schema {SCHEMA}, not as {reference}"
        )));
    }
    let name = reference.table();
    if name.is_empty() || name.starts_with('.') || name.contains(['/', '\\', '\0']) {
        return Err(TableError::Unsupported(format!(
            "\"{name}\" cannot name a table: it must not start with a dot or hold a slash"
        )));
    }
    Ok(name.to_string())
}

/// `CREATE TABLE` without `AS SELECT` plans an empty relation.
fn produces_no_rows(input: &LogicalPlan) -> bool {
    matches!(input, LogicalPlan::EmptyRelation(empty) if !empty.produce_one_row)
}

/// The new table's schema, each column's default kept in its metadata as
/// SQL text.
fn with_defaults(create: &CreateMemoryTable) -> Result<Arc<Schema>, TableError> {
    let schema = create.input.schema().as_arrow();
    let mut fields = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let mut field: Field = field.as_ref().clone();
        if let Some((_, expr)) = create
            .column_defaults
            .iter()
            .find(|(c, _)| c == field.name())
        {
            let sql = expr_to_sql(expr).map_err(|e| {
                TableError::Unsupported(format!(
                    "default of column \"{}\" cannot be stored: {e}",
                    field.name()
                ))
            })?;
            let mut metadata = field.metadata().clone();
            metadata.insert(DEFAULT_KEY.to_string(), sql.to_string());
            field = field.with_metadata(metadata);
        }
        fields.push(field);
    }
    Ok(Arc::new(Schema::new(fields)))
}

impl TableStore {
    /// Remove what a failed `CREATE` left: files written before its commit.
    /// A failed create committed nothing, so a Delta log there now is
    /// another writer's (who won the race for version 0): then nothing is
    /// removed, and the unreferenced files stay, as any failed write's do.
    async fn discard(&self, name: &str) {
        match &self.root {
            DataLocation::Local(root) => {
                let dir = root.join(name);
                let committed = std::fs::read_dir(dir.join("_delta_log"))
                    .is_ok_and(|mut entries| entries.next().is_some());
                if !committed {
                    remove_dir(&dir);
                }
            }
            DataLocation::Object(root) => {
                if matches!(root.holds_table(name).await, Ok(false))
                    && let Err(e) = root.remove_table(name, DROPPED_MARKER).await
                {
                    warn!(table = %name, error = %e, "cannot remove a failed table's files");
                }
            }
        }
    }
}

fn remove_dir(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir) {
        warn!(dir = %dir.display(), error = %e, "cannot remove a dropped table's files");
    }
}

/// The `STORED AS` name of Delta tables in `CREATE EXTERNAL TABLE`.
pub const DELTA_FORMAT: &str = "DELTA";

/// `CREATE EXTERNAL TABLE t STORED AS DELTA LOCATION 'dir'`: a Delta table
/// another writer made, read (and written) as a managed table is, but
/// never deleted by `DROP TABLE`.
#[derive(Debug, Default)]
pub struct DeltaFactory;

#[async_trait::async_trait]
impl TableProviderFactory for DeltaFactory {
    async fn create(
        &self,
        _state: &dyn Session,
        cmd: &CreateExternalTable,
    ) -> Result<Arc<dyn TableProvider>> {
        let [location] = cmd.locations.as_slice() else {
            return Err(TableError::Unsupported(format!(
                "a Delta table has one location, not {}",
                cmd.locations.len()
            ))
            .into());
        };
        if location.starts_with("s3://") {
            let url = Url::parse(location)
                .map_err(|e| TableError::Io(format!("{location} is not a valid URL: {e}")))?;
            crate::location::install();
            let table = ManagedTable::open_external(cmd.name.table(), url).await?;
            return Ok(Arc::new(table));
        }
        let dir = std::fs::canonicalize(location)
            .map_err(|e| TableError::Io(format!("cannot open Delta table at {location}: {e}")))?;
        if !is_delta_table(&dir) {
            return Err(TableError::Io(format!(
                "{location} is not a Delta table (it has no _delta_log)"
            ))
            .into());
        }
        let url = Url::from_directory_path(&dir)
            .map_err(|()| TableError::Io(format!("{} is not an absolute path", dir.display())))?;
        let table = ManagedTable::open_external(cmd.name.table(), url).await?;
        Ok(Arc::new(table))
    }
}

/// How a managed table's files are written: as deltalake writes them by
/// default (Snappy, the Parquet crate's defaults otherwise), in row groups
/// of the session's `datafusion.execution.parquet.max_row_group_size`
/// rows (by default the same 1 Mi rows).
pub(crate) fn writer_properties(ctx: &SessionContext) -> WriterProperties {
    let rows = ctx
        .state()
        .config_options()
        .execution
        .parquet
        .max_row_group_size;
    WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(rows.max(1)))
        .build()
}
