//! `CREATE EXTERNAL TABLE` over Parquet, CSV or JSON files: a local
//! `LOCATION` that names nothing is an error when the table is created.
//! DataFusion's listing table lists its files only when a query scans it,
//! so with the columns given a mistyped path made a table that answered
//! every query with no rows.

use std::path::Path;
use std::sync::Arc;

use datafusion::catalog::{Session, TableProviderFactory};
use datafusion::common::{Result, plan_err};
use datafusion::datasource::TableProvider;
use datafusion::logical_expr::CreateExternalTable;

/// DataFusion's factory for a file format, with the location checked
/// first.
#[derive(Debug)]
pub struct CheckedLocation(pub Arc<dyn TableProviderFactory>);

#[async_trait::async_trait]
impl TableProviderFactory for CheckedLocation {
    async fn create(
        &self,
        state: &dyn Session,
        cmd: &CreateExternalTable,
    ) -> Result<Arc<dyn TableProvider>> {
        for location in &cmd.locations {
            if let Some(path) = local_path(location)
                && !path.exists()
            {
                return plan_err!("LOCATION '{location}': no such file or directory");
            }
        }
        self.0.create(state, cmd).await
    }
}

/// The path a local location names, when it names one without patterns
/// (a glob may match files that come later).
fn local_path(location: &str) -> Option<&Path> {
    let path = match location.strip_prefix("file://") {
        Some(path) => path,
        None if location.contains("://") => return None,
        None => location,
    };
    let pattern = path.contains(['*', '?', '[', '{']);
    (!pattern).then(|| Path::new(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_local_paths_are_checked() {
        assert_eq!(local_path("data/t.csv"), Some(Path::new("data/t.csv")));
        assert_eq!(local_path("file:///d/t.csv"), Some(Path::new("/d/t.csv")));
        assert_eq!(local_path("s3://bucket/t/"), None);
        assert_eq!(local_path("data/*.parquet"), None);
    }
}
