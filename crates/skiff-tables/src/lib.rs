//! Managed tables: the tables Skiff owns, each a Delta Lake table (a
//! directory of Parquet files and a `_delta_log` of JSON commits) under
//! the data directory, a local directory or an `s3://` prefix.
//!
//! Owns: where the data directory is and how its object store is reached
//! ([`location`]), creating and dropping tables ([`TableStore`]), reading a snapshot
//! as a plain Parquet scan a worker can run ([`ManagedTable`]'s `scan`),
//! the writes (`INSERT`, `UPDATE`, `DELETE`, `TRUNCATE`, CTAS, `COPY ...
//! FROM` a file or a stream of text/CSV rows, see [`copy`]; bulk ingest of
//! Arrow batches, [`ingest`]; `ALTER TABLE ... ADD COLUMN`, [`alter`]), each
//! one Delta commit made by `deltalake-core`, and the commits' history
//! ([`history`]), and hash partitioning (`PARTITION BY HASH`, each row in
//! its partition's files, [`partition`]; joins of co-located tables
//! without a shuffle, [`co_location`]), and the check that an external
//! table's local files exist ([`CheckedLocation`]). Knows nothing of pipelines,
//! workers or clients: the engine and the coordinator register these
//! tables and hand their statements here.

pub mod alter;
pub mod co_location;
mod command;
pub mod copy;
pub mod error;
mod external;
pub mod history;
pub mod ingest;
pub mod location;
pub mod partition;
mod postgres;
mod scan;
mod store;
mod table;

pub use error::TableError;
pub use external::CheckedLocation;
pub use location::DataLocation;
pub use partition::{file_scan, is_declared};
pub use scan::{deal_files, group_by_partition};
pub use store::{DELTA_FORMAT, DeltaFactory, TableStore, is_delta_table};
pub use table::ManagedTable;
