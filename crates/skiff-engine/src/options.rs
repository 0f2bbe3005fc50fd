//! Skiff's session settings: the `skiff` namespace of DataFusion's config,
//! so that `SET skiff.<name> = <value>` works in SQL.

use std::fmt;
use std::str::FromStr;

use datafusion::common::config::{ConfigExtension, ConfigField, Visit};
use datafusion::common::{DataFusionError, Result, extensions_options};

extensions_options! {
    /// Settings of Skiff's pipeline executor.
    pub struct SkiffOptions {
        /// Bytes of materialized pipeline outputs one query keeps in memory;
        /// outputs beyond it are written to spill files. Unlimited when unset
        /// (the memory pool limit still applies).
        pub store_memory_max: Option<usize>, default = None
        /// Test trigger: migrate the query to another worker right after
        /// this many pipelines finished (once; the moved query runs free).
        pub migrate_after_pipelines: Option<usize>, default = None
        /// Test trigger: suspend the query after this many pipelines; it
        /// waits for `skiff.resume(id)`.
        pub suspend_after_pipelines: Option<usize>, default = None
        /// Test trigger: the worker process dies right after this many
        /// pipelines finished (queries with snapshots resume elsewhere).
        pub kill_worker_after_pipelines: Option<usize>, default = None
        /// Snapshot the query's state to the state cache every this many
        /// finished pipelines; off when unset.
        pub snapshot_every_pipelines: Option<usize>, default = None
        /// When the worker running the query dies before any row reached
        /// the client and no snapshot can carry the query on, start it over
        /// on another worker (at most `WORKER_LOSSES_IN_A_ROW` times).
        pub retry_on_worker_loss: bool, default = true
        /// Snapshot the query's state at the first pipeline boundary after
        /// every this many seconds of running; off when unset.
        pub snapshot_every_seconds: Option<f64>, default = None
        /// Snapshot a query that runs long enough for a snapshot to cost at
        /// most `ADAPTIVE_SNAPSHOT_SHARE` (2%) of its running time, so that
        /// it keeps its progress when its worker dies (the worker's
        /// `snapshot_pace`); only with a memory node, and not beside the
        /// two settings above.
        pub adaptive_snapshots: bool, default = true
        /// Test trigger: every worker that runs the query (at first, after a
        /// continuation or a restart) dies once this many more pipelines
        /// finished there; unlike the other triggers it stays with the
        /// query (`REPEATING_HOOKS`).
        pub test_kill_every_worker_after_pipelines: Option<usize>, default = None
        /// Test trigger: hold the query after this many pipelines until an
        /// operation (migrate, suspend, drain) moves it; so that tests can
        /// act on a query that surely runs on its worker.
        pub test_hold_after_pipelines: Option<usize>, default = None
        /// Test trigger: hold a distributed query once its first rows
        /// arrived, until a vacate of one of its workers (`skiff.drain`,
        /// `skiff.remove_worker`) makes it run again without that worker,
        /// or `skiff.suspend` suspends it.
        pub test_hold_distributed: bool, default = false
        /// Compression of extracted state frames: `none`, `lz4` or `zstd`.
        /// None by default: the memory node sits on the cluster network,
        /// faster than lz4 compresses on one core.
        pub state_compression: StateCompression, default = StateCompression::None
        /// Whether a distributed query's stage outputs are committed to the
        /// memory node's store as their consumers read them
        /// (`skiff_node::checkpoints`): each consumer reads a producer's
        /// partition whole, commits it, and a later read of the same
        /// partition is served from the store exactly once. `all` commits
        /// every stage's output; `auto` only those whose consumer waits
        /// for all of it anyway (a hash join's build side, an aggregation,
        /// a sort); `off` none. An admin's setting ([`ADMIN_SETTINGS`]):
        /// it spends the memory node's store, which every query shares.
        pub stage_checkpoints: StageCheckpoints, default = StageCheckpoints::Off
        /// Under `skiff.stage_checkpoints = auto`, how long a query's task
        /// runs before its reads commit, in milliseconds: a worker lost
        /// sooner costs at most this much work run again from the start,
        /// less than committing every short query's outputs would cost
        /// (bench/README.md, "Faults"). An admin's setting.
        pub stage_checkpoints_after_ms: u64, default = 1000
        /// Test trigger: flip one byte of the state after extraction, so
        /// that the target must detect it and the query start over.
        pub test_corrupt_state: bool, default = false
        /// Put cut points (morsel gates, aggregation taps) into every
        /// pipeline that can be cut in the middle, so that a running
        /// pipeline can hand over its partial work (see `morsel`). Off by
        /// default until the cluster ships cut pipelines.
        pub mid_pipeline_cuts: bool, default = false
        /// Partial aggregation rows one pipeline's tap keeps for a cut, in
        /// bytes; beyond that a cut loses the pipeline's work (it starts
        /// over on the target, as after an immediate pause).
        pub cut_tap_max_bytes: usize, default = 64 * 1024 * 1024
        /// Test trigger: with `mid_pipeline_cuts`, cut the running
        /// pipelines once their gates let this many morsels through and
        /// migrate the query, partial work included.
        pub migrate_after_morsels: Option<u64>, default = None
        /// Read Parquet scans through the process's buffer pool (`buffer`);
        /// off reads every scan from storage, for comparisons.
        pub buffer_pool: bool, default = true
        /// Row groups a scan of a table in memory nodes asks for ahead of
        /// the one it reads (their transfer overlaps its work); 0 asks for
        /// each when it is read; at most `buffer::PREFETCH_DEPTH_MAX`.
        pub prefetch_depth: usize, default = 2
        /// Scans of tables in memory nodes, reading around the buffer pool
        /// and outside pipeline groups, send their predicates along: a
        /// node sends only the rows its chunks' min/max do not rule out.
        /// Off for comparisons; also off with `mid_pipeline_cuts`.
        pub chunk_pruning: bool, default = true
        /// Send a resize's moved partitions' buffered blocks to their new
        /// owners (buffer matching); read by `skiff.add_workers` and
        /// `skiff.remove_worker`, off for comparisons.
        pub buffer_matching: bool, default = true
        /// Test trigger: old owners pause this many milliseconds after each
        /// block they send in buffer matching, so that a test can act in
        /// the middle of a transfer; read like `buffer_matching`.
        pub test_matching_pause_ms: u64, default = 0
        /// Collect arriving queries this many milliseconds into one batch,
        /// run on one worker with their pipelines in pipeline groups
        /// (`grouping`); 0 (the default) sends each query on its own; at
        /// most 10 s (the server's `BATCH_WINDOW_MAX`).
        pub batch_window_ms: u64, default = 0
        /// A batch closes once it has this many queries, window or not
        /// (at most 64, the server's `BATCH_MAX_QUERIES_MAX`).
        pub batch_max_queries: usize, default = 16
        /// Whether queries run across the workers (`Distribute`).
        pub distribute: Distribute, default = Distribute::Auto
        /// Whether scans of tables in memory nodes, with their filters and
        /// projections, are offered to the node holding them to run there
        /// (`Offload`, `offload`).
        pub offload: Offload, default = Offload::Never
        /// Offered fragments take the aggregation above their scan along
        /// (its partial half: the node sends partial states); off offers
        /// the scan, filter and projection only (the SmartNIC paper's
        /// fragments, as `skiff bench offload` measures them).
        pub offload_aggregations: bool, default = true
    }
}

/// Settings that inject faults or act on a query at a chosen point, for
/// tests and benches. Each query hook fires once: a query that continues
/// or restarts runs without them, except [`REPEATING_HOOKS`]
/// (`test_matching_pause_ms` instead holds, like `buffer_matching`, from
/// one `skiff.add_workers` / `skiff.remove_worker` call to the next). A
/// server refuses them unless it was started with `--fault-injection`.
pub const TEST_HOOKS: [&str; 9] = [
    "skiff.test_hold_after_pipelines",
    "skiff.test_hold_distributed",
    "skiff.migrate_after_pipelines",
    "skiff.migrate_after_morsels",
    "skiff.suspend_after_pipelines",
    "skiff.kill_worker_after_pipelines",
    "skiff.test_corrupt_state",
    "skiff.test_matching_pause_ms",
    "skiff.test_kill_every_worker_after_pipelines",
];

/// Settings only an admin may change: they spend what every session
/// shares (the memory node's store).
pub const ADMIN_SETTINGS: [&str; 2] = [
    "skiff.stage_checkpoints",
    "skiff.stage_checkpoints_after_ms",
];

/// The test hooks a continued or restarted query keeps: they act on every
/// worker that runs it.
pub const REPEATING_HOOKS: [&str; 1] = ["skiff.test_kill_every_worker_after_pipelines"];

impl ConfigExtension for SkiffOptions {
    const PREFIX: &'static str = "skiff";
}

/// A setting that takes one of a few words: the enum, its parser (case
/// and surrounding blanks ignored; an unknown word names the choices), its
/// display, and its place in DataFusion's config.
macro_rules! choice_setting {
    ($(#[$doc:meta])* $name:ident, $key:literal, { $($variant:ident = $word:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub enum $name {
            #[default]
            $($variant),+
        }

        impl FromStr for $name {
            type Err = DataFusionError;

            fn from_str(s: &str) -> Result<Self> {
                match s.trim().to_ascii_lowercase().as_str() {
                    $($word => Ok(Self::$variant),)+
                    other => Err(DataFusionError::Configuration(format!(
                        "{}: '{other}' is not one of {}",
                        $key,
                        [$($word),+].join(", ")
                    ))),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(match self {
                    $(Self::$variant => $word),+
                })
            }
        }

        impl ConfigField for $name {
            fn visit<V: Visit>(&self, v: &mut V, key: &str, description: &'static str) {
                v.some(key, self, description)
            }

            fn set(&mut self, _: &str, value: &str) -> Result<()> {
                *self = value.parse()?;
                Ok(())
            }

            fn reset(&mut self, _: &str) -> Result<()> {
                *self = Self::default();
                Ok(())
            }
        }
    };
}

choice_setting!(
    /// How extracted state frames are compressed (`skiff.state_compression`).
    StateCompression, "skiff.state_compression", { None = "none", Lz4 = "lz4", Zstd = "zstd" }
);

choice_setting!(
    /// Whether stage outputs are committed (`skiff.stage_checkpoints`).
    StageCheckpoints, "skiff.stage_checkpoints", { Off = "off", Auto = "auto", All = "all" }
);

choice_setting!(
    /// Whether a query runs across the workers (`skiff.distribute`): `auto`
    /// when it reads a partitioned table whose partitions several workers
    /// own, `on` always (a plan with no stage boundary still runs on one
    /// worker), `off` never. A query on one worker keeps every state
    /// separation feature; a distributed one only runs again from the
    /// start when it loses a worker, is vacated or is resumed.
    Distribute, "skiff.distribute", { Auto = "auto", On = "on", Off = "off" }
);

choice_setting!(
    /// Whether a query's fragments run in the memory nodes holding their
    /// data (`skiff.offload`, see `offload`): `never` reads the raw chunks
    /// and runs everything on the worker; `always` has the node run each
    /// fragment it can (a fragment it cannot run, or a node lost, falls
    /// back to the worker); `auto` lets the node choose the path its cost
    /// models predict faster.
    Offload, "skiff.offload", { Never = "never", Always = "always", Auto = "auto" }
);

/// Parse a byte size such as `512M`, `4G`, `1.5GiB` or `1000000`.
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size like 512M or 4G"))?;
    let multiplier = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1u64,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        other => return Err(format!("unknown size unit '{other}' (use K, M, G or T)")),
    };
    let bytes = number * multiplier as f64;
    if !bytes.is_finite() || bytes < 1.0 {
        return Err(format!("'{text}' is not a positive size"));
    }
    Ok(bytes as usize)
}

#[cfg(test)]
mod tests {
    use datafusion::common::config::ExtensionOptions;

    use super::*;

    #[test]
    fn every_test_hook_and_admin_setting_is_a_setting() {
        let options = SkiffOptions::default();
        let keys: Vec<String> = options.entries().into_iter().map(|e| e.key).collect();
        for hook in TEST_HOOKS {
            let name = hook.strip_prefix("skiff.").expect(hook);
            assert!(
                keys.iter().any(|k| k == name),
                "{hook} is not a skiff setting"
            );
        }
        for setting in ADMIN_SETTINGS {
            let name = setting.strip_prefix("skiff.").expect(setting);
            assert!(
                keys.iter().any(|k| k == name),
                "{setting} is not a skiff setting"
            );
        }
        // A repeating hook is a test hook: a server without
        // `--fault-injection` refuses it too.
        for hook in REPEATING_HOOKS {
            assert!(TEST_HOOKS.contains(&hook), "{hook} is not a test hook");
        }
    }

    #[test]
    fn state_compression_parses_its_three_names_and_refuses_others() {
        for name in ["none", "lz4", "zstd"] {
            let parsed: StateCompression = name.parse().expect(name);
            assert_eq!(parsed.to_string(), name);
        }
        assert_eq!(
            "LZ4".parse::<StateCompression>().ok(),
            Some(StateCompression::Lz4)
        );
        let err = "snappy".parse::<StateCompression>().expect_err("unknown");
        assert!(err.to_string().contains("none, lz4, zstd"), "{err}");
    }

    #[test]
    fn distribute_parses_auto_on_off() {
        let mut options = SkiffOptions::default();
        assert_eq!(options.distribute, Distribute::Auto);
        ExtensionOptions::set(&mut options, "distribute", " ON ").expect("on");
        assert_eq!(options.distribute, Distribute::On);
        let err = ExtensionOptions::set(&mut options, "distribute", "always").expect_err("unknown");
        assert!(err.to_string().contains("auto, on, off"), "{err}");
    }

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_bytes("1024"), Ok(1024));
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("1.5GiB"), Ok(3 << 29));
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("5X").is_err());
        assert!(parse_bytes("0").is_err());
    }
}
