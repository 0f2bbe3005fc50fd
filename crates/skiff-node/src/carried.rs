//! The session settings a distributed query's tasks run with on the
//! workers. datafusion-distributed starts each task's session from
//! DataFusion's defaults (`shared/notes/datafusion-distributed.md` §2e):
//! what was planned is baked into the plan, but the settings read while
//! running (batch size, spilling, partial aggregation) would be the
//! worker's defaults, not the `SET` values of the query's session. The
//! coordinator sends those ([`CARRIED`]) as headers of the task requests
//! ([`headers`]); the worker's session builder sets them ([`apply`]).

use datafusion::common::{DataFusionError, Result};
use datafusion::config::ConfigOptions;
use datafusion::config::{ConfigExtension, ExtensionOptions};
use skiff_engine::SkiffOptions;
use tonic::codegen::http::{HeaderMap, HeaderName, HeaderValue};

/// The settings that matter while a task runs, each by its full name.
pub(crate) const CARRIED: [&str; 14] = [
    "datafusion.execution.batch_size",
    "datafusion.execution.coalesce_batches",
    "datafusion.execution.enforce_batch_size_in_joins",
    "datafusion.execution.sort_spill_reservation_bytes",
    "datafusion.execution.sort_in_place_threshold_bytes",
    "datafusion.execution.spill_compression",
    "datafusion.execution.skip_partial_aggregation_probe_rows_threshold",
    "datafusion.execution.skip_partial_aggregation_probe_ratio_threshold",
    "datafusion.execution.time_zone",
    // Read where a task's scans are wrapped (`buffer::wrap_scans`).
    "skiff.buffer_pool",
    "skiff.prefetch_depth",
    "skiff.chunk_pruning",
    // Read where a task's session is built (`checkpoints`).
    "skiff.stage_checkpoints",
    "skiff.state_compression",
];

/// What each carried setting's header is named after; the library's own
/// headers start otherwise (`x-datafusion-distributed-config-`).
const HEADER_PREFIX: &str = "x-skiff-set-";

/// The headers that carry `options`' values of [`CARRIED`].
pub fn headers(options: &ConfigOptions) -> Result<HeaderMap> {
    let mut headers = HeaderMap::new();
    // Extensions list their entries without their prefix.
    let skiff = options
        .extensions
        .get::<SkiffOptions>()
        .map(|o| o.entries())
        .unwrap_or_default()
        .into_iter()
        .map(|mut entry| {
            entry.key = format!("{}.{}", SkiffOptions::PREFIX, entry.key);
            entry
        });
    for entry in options.entries().into_iter().chain(skiff) {
        if !CARRIED.contains(&entry.key.as_str()) {
            continue;
        }
        let Some(value) = entry.value else {
            continue;
        };
        // The worker reads header values as ASCII.
        if !value.is_ascii() {
            return Err(DataFusionError::Configuration(format!(
                "{} = {value:?} cannot be sent to the workers: not ASCII",
                entry.key
            )));
        }
        let name = HeaderName::try_from(format!("{HEADER_PREFIX}{}", entry.key))
            .map_err(|e| DataFusionError::Internal(format!("{}: {e}", entry.key)))?;
        let value = HeaderValue::try_from(value.as_str()).map_err(|e| {
            DataFusionError::Configuration(format!("{} cannot travel: {e}", entry.key))
        })?;
        headers.insert(name, value);
    }
    Ok(headers)
}

/// Set the carried values of `headers` in `options`. Only [`CARRIED`]
/// settings are taken; any other header is not a setting of ours.
pub fn apply(headers: &HeaderMap, options: &mut ConfigOptions) -> Result<()> {
    // A task's session starts from DataFusion's defaults, without Skiff's.
    if options.extensions.get::<SkiffOptions>().is_none() {
        options.extensions.insert(SkiffOptions::default());
    }
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix(HEADER_PREFIX) else {
            continue;
        };
        if !CARRIED.contains(&key) {
            continue;
        }
        let value = value
            .to_str()
            .map_err(|e| DataFusionError::Configuration(format!("{key}: {e}")))?;
        options.set(key, value)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_carried_setting_exists() {
        let defaults = ConfigOptions::default().with_extensions({
            let mut extensions = datafusion::config::Extensions::new();
            extensions.insert(SkiffOptions::default());
            extensions
        });
        let keys: Vec<String> = defaults
            .entries()
            .into_iter()
            .map(|e| e.key)
            .chain(
                SkiffOptions::default()
                    .entries()
                    .into_iter()
                    .map(|e| format!("skiff.{}", e.key)),
            )
            .collect();
        for key in CARRIED {
            assert!(keys.iter().any(|k| k == key), "{key} is not a setting");
        }
    }

    #[test]
    fn set_values_reach_the_worker_and_nothing_else() {
        let mut coordinator = ConfigOptions::default();
        coordinator.extensions.insert(SkiffOptions::default());
        coordinator
            .set("datafusion.execution.batch_size", "100")
            .unwrap();
        coordinator.set("skiff.buffer_pool", "false").unwrap();
        coordinator
            .set("datafusion.execution.time_zone", "+02:00")
            .unwrap();
        coordinator
            .set("datafusion.optimizer.max_passes", "7")
            .unwrap();
        let mut sent = headers(&coordinator).unwrap();
        // A header that names another setting is not one of ours.
        sent.insert(
            HeaderName::from_static("x-skiff-set-datafusion.optimizer.max_passes"),
            HeaderValue::from_static("9"),
        );
        let mut worker = ConfigOptions::default();
        apply(&sent, &mut worker).unwrap();
        let session = datafusion::prelude::SessionConfig::from(worker.clone());
        assert_eq!(session.batch_size(), 100);
        assert_eq!(worker.execution.time_zone.as_deref(), Some("+02:00"));
        let skiff = worker.extensions.get::<SkiffOptions>().unwrap();
        assert!(!skiff.buffer_pool);
        assert_eq!(
            worker.optimizer.max_passes,
            ConfigOptions::default().optimizer.max_passes
        );
    }
}
