//! The node's cost models (the SmartNIC paper's decision engine): random
//! forests (`smartcore`) that predict how long the node takes to run a
//! fragment, to encode the rows it keeps, and how long bytes take on the
//! network to the workers; trained on the node itself (`skiff memnode
//! calibrate`, see `calibration`), kept in a file, reloaded at start and
//! refitted when the times the node measures drift from them.
//!
//! A forest predicts no value outside the ones it was trained on, so each
//! model predicts a *rate* (nanoseconds per input row, per byte encoded,
//! per byte sent) from features that do not grow with the fragment's size
//! (operations per row, row width, the size's logarithm); the time is the
//! rate times the size. A fragment twice the size of any in the corpus is
//! then predicted at twice the time, not at the largest time seen.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use skiff_flight::protocol::FragmentCosts;
use smartcore::ensemble::random_forest_regressor::{
    RandomForestRegressor, RandomForestRegressorParameters,
};
use smartcore::linalg::basic::matrix::DenseMatrix;

use crate::limits::{COST_MODEL_SAMPLES, COST_MODEL_TREES};

/// What the models see of a fragment: its operation vector (the
/// estimator's, see `estimate`) and its sizes, estimated before it runs or
/// measured after.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shape {
    pub input_rows: f64,
    pub output_rows: f64,
    pub input_columns: usize,
    pub output_columns: usize,
    /// Bytes of the raw columns' chunks read (what a push back sends).
    pub input_bytes: f64,
    /// Bytes of the rows kept, encoded (what an offload sends).
    pub output_bytes: f64,
    pub operations: BTreeMap<String, f64>,
}

/// The operation vector's names grouped into the execution model's
/// features (kernels of one group cost about the same per row).
const GROUPS: [(&str, &[&str]); 7] = [
    (
        "comparisons",
        &[
            "equal",
            "not_equal",
            "less",
            "less_equal",
            "greater",
            "greater_equal",
            "between",
            "is_null",
        ],
    ),
    ("booleans", &["and_kleene", "or_kleene", "not"]),
    (
        "arithmetic",
        &["add", "subtract", "multiply", "divide", "modulo", "cast"],
    ),
    ("lists", &["in_list", "case"]),
    ("strings", &["like"]),
    ("rows", &["filter", "select", "project"]),
    ("aggregation", &["group", "aggregate"]),
];

impl Shape {
    /// The execution model's features on `threads` threads.
    fn execution_features(&self, threads: usize) -> Vec<f64> {
        let rows = self.input_rows.max(1.0);
        let mut grouped = [0.0; GROUPS.len() + 1];
        for (name, count) in &self.operations {
            if name == "table_rows" {
                continue;
            }
            let group = GROUPS
                .iter()
                .position(|(_, names)| names.contains(&name.as_str()))
                // Functions by name (upper, sqrt, ...): their own group.
                .unwrap_or(GROUPS.len());
            grouped[group] += count / rows;
        }
        let mut features = grouped.to_vec();
        features.extend([
            self.output_rows / rows,
            self.input_columns as f64,
            self.input_bytes / rows,
            rows.log2(),
            threads as f64,
        ]);
        features
    }

    fn serialization_features(&self) -> Vec<f64> {
        let rows = self.output_rows.max(1.0);
        vec![
            self.output_bytes / rows,
            self.output_columns as f64,
            rows.log2(),
        ]
    }
}

fn network_features(bytes: f64) -> Vec<f64> {
    vec![bytes.max(1.0).log2()]
}

/// One observation: features and the rate measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Sample {
    pub features: Vec<f64>,
    pub rate: f64,
}

type Forest = RandomForestRegressor<f64, f64, DenseMatrix<f64>, Vec<f64>>;

/// One model: its forest and what it was fitted on.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Model {
    forest: Forest,
    samples: Vec<Sample>,
}

impl Model {
    /// A forest fitted on `samples` (at least two, of one width).
    pub(crate) fn fit(mut samples: Vec<Sample>, seed: u64) -> Result<Self, String> {
        if samples.len() > COST_MODEL_SAMPLES {
            // The newest observations matter most: the oldest go.
            samples.drain(..samples.len() - COST_MODEL_SAMPLES);
        }
        let width = samples.first().map_or(0, |s| s.features.len());
        if samples.len() < 2 || samples.iter().any(|s| s.features.len() != width) {
            return Err(format!(
                "cannot fit a model on {} samples of mixed widths",
                samples.len()
            ));
        }
        let rows: Vec<Vec<f64>> = samples.iter().map(|s| s.features.clone()).collect();
        let x = DenseMatrix::from_2d_vec(&rows).map_err(|e| e.to_string())?;
        let y: Vec<f64> = samples.iter().map(|s| s.rate).collect();
        let parameters = RandomForestRegressorParameters::default()
            .with_n_trees(COST_MODEL_TREES)
            .with_min_samples_leaf(2)
            .with_seed(seed);
        let forest = Forest::fit(&x, &y, parameters).map_err(|e| e.to_string())?;
        Ok(Self { forest, samples })
    }

    fn rate(&self, features: Vec<f64>) -> f64 {
        DenseMatrix::from_2d_vec(&vec![features])
            .ok()
            .and_then(|x| self.forest.predict(&x).ok())
            .and_then(|y| y.first().copied())
            .filter(|r| r.is_finite())
            .map_or(0.0, |r| r.max(0.0))
    }
}

/// The three models, and what the node was when they were trained.
#[derive(Debug, Serialize, Deserialize)]
pub struct CostModels {
    pub(crate) execution: Model,
    pub(crate) serialization: Model,
    pub(crate) network: Model,
    /// The node's offload threads at calibration.
    pub threads: usize,
    /// The emulated link's bandwidth at calibration (0: none).
    pub link_bits_per_second: u64,
}

impl CostModels {
    /// Read models a calibration wrote.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_slice(&text)
            .map_err(|e| format!("{}: not a cost model file: {e}", path.display()))
    }

    /// Why these models cannot serve this build's features (a file
    /// calibrated by a Skiff whose models saw other features), if so.
    pub fn stale(&self) -> Option<String> {
        let wanted = [
            Shape::default().execution_features(1).len(),
            Shape::default().serialization_features().len(),
            network_features(1.0).len(),
        ];
        let models = [&self.execution, &self.serialization, &self.network];
        let got: Vec<usize> = models
            .iter()
            .map(|m| m.samples.first().map_or(0, |s| s.features.len()))
            .collect();
        (got != wanted).then(|| {
            format!(
                "the cost models see {got:?} features, this Skiff {wanted:?}: \
                 run `skiff memnode calibrate` again"
            )
        })
    }

    /// Write them, atomically: a crash leaves the old file or the new one.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_vec(self).map_err(|e| e.to_string())?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let temporary = path.with_extension("json.tmp");
        let written = std::fs::write(&temporary, &text)
            .and_then(|()| std::fs::File::open(&temporary)?.sync_all())
            .and_then(|()| std::fs::rename(&temporary, path));
        written.map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The node running `shape` on `threads` threads.
    pub(crate) fn execution(&self, shape: &Shape, threads: usize) -> Duration {
        let rate = self.execution.rate(shape.execution_features(threads));
        nanos(rate * shape.input_rows)
    }

    /// Encoding `shape`'s rows kept.
    pub(crate) fn serialization(&self, shape: &Shape) -> Duration {
        if shape.output_rows < 1.0 {
            return Duration::ZERO;
        }
        let rate = self.serialization.rate(shape.serialization_features());
        nanos(rate * shape.output_bytes)
    }

    /// `bytes` over the network to a worker.
    pub fn network(&self, bytes: f64) -> Duration {
        if bytes < 1.0 {
            return Duration::ZERO;
        }
        nanos(self.network.rate(network_features(bytes)) * bytes)
    }

    /// Both paths of `shape` predicted. `load` fragments already share
    /// the node's `threads` threads, which makes this one's execution as
    /// many times slower again, and its link: whichever path they take,
    /// their bytes cross it with this one's, so both paths' network times
    /// are as many times longer (a query's partitions are offered at
    /// once: pushed back together, their raw chunks queue on the link as
    /// offloaded ones queue for the threads). The push back runs on one
    /// thread of a worker, taken to be as fast as one of the node's.
    pub fn predict(&self, shape: &Shape, threads: usize, load: usize) -> FragmentCosts {
        let share = 1 + load as u32;
        FragmentCosts {
            execution_nanos: as_nanos(self.execution(shape, threads) * share),
            serialization_nanos: as_nanos(self.serialization(shape)),
            network_nanos: as_nanos(self.network(shape.output_bytes) * share),
            push_back_network_nanos: as_nanos(self.network(shape.input_bytes) * share),
            push_back_execution_nanos: as_nanos(self.execution(shape, 1)),
            output_bytes: shape.output_bytes.round() as u64,
            input_bytes: shape.input_bytes.round() as u64,
        }
    }

    /// Refit execution and serialization with `observed` added (the
    /// node's measurements of fragments it ran): the drift's remedy.
    pub fn refit(&self, observed: &Observed, seed: u64) -> Result<Self, String> {
        let mut execution = self.execution.samples.clone();
        execution.extend(observed.execution.iter().cloned());
        let mut serialization = self.serialization.samples.clone();
        serialization.extend(observed.serialization.iter().cloned());
        Ok(Self {
            execution: Model::fit(execution, seed)?,
            serialization: Model::fit(serialization, seed)?,
            network: Model::fit(self.network.samples.clone(), seed)?,
            threads: self.threads,
            link_bits_per_second: self.link_bits_per_second,
        })
    }
}

/// A fragment the node ran, as training samples: its measured rates.
#[derive(Debug, Default)]
pub struct Observed {
    pub(crate) execution: Vec<Sample>,
    pub(crate) serialization: Vec<Sample>,
}

impl Observed {
    /// The samples of `shape` (sizes as measured) run on `threads`
    /// threads in `measured`.
    pub fn add(&mut self, shape: &Shape, threads: usize, measured: &FragmentCosts) {
        if shape.input_rows >= 1.0 {
            self.execution.push(Sample {
                features: shape.execution_features(threads),
                rate: measured.execution_nanos as f64 / shape.input_rows,
            });
        }
        if shape.output_rows >= 1.0 && shape.output_bytes >= 1.0 {
            self.serialization.push(Sample {
                features: shape.serialization_features(),
                rate: measured.serialization_nanos as f64 / shape.output_bytes,
            });
        }
        // A node that never drifts keeps only its latest measurements.
        for samples in [&mut self.execution, &mut self.serialization] {
            if samples.len() > COST_MODEL_SAMPLES {
                samples.drain(..samples.len() - COST_MODEL_SAMPLES);
            }
        }
    }

    /// A transfer of `bytes` that took `took`.
    pub(crate) fn network(bytes: f64, took: Duration) -> Sample {
        Sample {
            features: network_features(bytes),
            rate: took.as_nanos() as f64 / bytes.max(1.0),
        }
    }
}

/// Whether `predicted` says offload: strictly faster (a tie pushes back,
/// which spares the node's few threads).
pub fn offload_is_faster(predicted: &FragmentCosts) -> bool {
    predicted.offload_nanos() < predicted.push_back_nanos()
}

fn nanos(n: f64) -> Duration {
    Duration::from_nanos(if n.is_finite() && n > 0.0 {
        n.min(u64::MAX as f64) as u64
    } else {
        0
    })
}

/// `d` in whole nanoseconds (saturating).
pub fn as_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Models trained on a known cost, for the tests here and in the memory
/// node (the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use super::*;

    pub fn shape(rows: f64, kept: f64) -> Shape {
        Shape {
            input_rows: rows,
            output_rows: kept,
            input_columns: 3,
            output_columns: 3,
            input_bytes: rows * 24.0,
            output_bytes: kept * 24.0,
            operations: [
                ("greater_equal".to_string(), rows),
                ("less".to_string(), rows),
                ("and_kleene".to_string(), rows),
                ("filter".to_string(), rows),
                ("select".to_string(), kept),
            ]
            .into_iter()
            .collect(),
        }
    }

    /// Models trained on a known cost: 10 ns per row and operation per
    /// row, halved by a second thread; 1 ns per byte encoded; 8 ns per
    /// byte sent (1 Gbit/s).
    pub fn trained() -> CostModels {
        let mut execution = Vec::new();
        let mut serialization = Vec::new();
        let mut network = Vec::new();
        for rows in [1e4, 3e4, 1e5, 3e5, 1e6] {
            for share in [0.01, 0.1, 0.5, 1.0] {
                for threads in [1, 2] {
                    let s = shape(rows, rows * share);
                    let ops: f64 = s.operations.values().sum::<f64>() / rows;
                    execution.push(Sample {
                        features: s.execution_features(threads),
                        rate: 10.0 * ops / threads as f64,
                    });
                }
                let s = shape(rows, rows * share);
                serialization.push(Sample {
                    features: s.serialization_features(),
                    rate: 1.0,
                });
            }
            network.push(Observed::network(rows * 24.0, nanos(8.0 * rows * 24.0)));
        }
        CostModels {
            execution: Model::fit(execution, 1).unwrap(),
            serialization: Model::fit(serialization, 1).unwrap(),
            network: Model::fit(network, 1).unwrap(),
            threads: 2,
            link_bits_per_second: 1_000_000_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{shape, trained};
    use super::*;

    #[test]
    fn selective_fragments_are_offloaded_and_others_pushed_back() {
        let models = trained();
        // 1% kept: sending 240 KB instead of 24 MB saves far more than the
        // node's slower run costs.
        let selective = models.predict(&shape(1e6, 1e4), 2, 0);
        assert!(offload_is_faster(&selective), "{selective:?}");
        // Everything kept: the same bytes cross either way, and the node
        // adds its execution and encoding.
        let everything = models.predict(&shape(1e6, 1e6), 2, 0);
        assert!(!offload_is_faster(&everything), "{everything:?}");
        assert!(everything.network_nanos > 0 && everything.push_back_network_nanos > 0);
        // A rate times the size: twice the rows, about twice the time.
        let small = models.execution(&shape(3e5, 3e3), 2).as_secs_f64();
        let large = models.execution(&shape(6e5, 6e3), 2).as_secs_f64();
        assert!((large / small - 2.0).abs() < 0.5, "{small} {large}");
    }

    #[test]
    fn a_busy_node_pushes_back() {
        let models = trained();
        // A narrow column: its execution costs more than its bytes.
        let mut fragment = shape(1e6, 2e5);
        fragment.input_bytes = 1e6;
        fragment.output_bytes = 2e5;
        let idle = models.predict(&fragment, 2, 0);
        assert!(offload_is_faster(&idle), "{idle:?}");
        let busy = models.predict(&fragment, 2, 64);
        assert!(busy.execution_nanos > 10 * idle.execution_nanos);
        assert!(!offload_is_faster(&busy), "{busy:?}");
        // The link is shared too: pushed back, the fragments' raw bytes
        // queue on it together.
        assert!(busy.push_back_network_nanos > 10 * idle.push_back_network_nanos);
    }

    #[test]
    fn models_survive_a_round_trip_through_their_file() {
        let models = trained();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("models").join("offload.json");
        models.save(&path).unwrap();
        let loaded = CostModels::load(&path).unwrap();
        let fragment = shape(5e5, 5e3);
        assert_eq!(
            models.predict(&fragment, 2, 0),
            loaded.predict(&fragment, 2, 0)
        );
        assert_eq!(loaded.stale(), None);
        // Models whose samples another build's features made are stale.
        let mut old = trained();
        let narrower: Vec<Sample> = old
            .execution
            .samples
            .iter()
            .map(|s| Sample {
                features: s.features[1..].to_vec(),
                rate: s.rate,
            })
            .collect();
        old.execution = Model::fit(narrower, 1).unwrap();
        let why = old.stale().unwrap();
        assert!(why.contains("calibrate"), "{why}");
        std::fs::write(&path, b"{\"execution\": 3}").unwrap();
        let err = CostModels::load(&path).unwrap_err();
        assert!(err.contains("not a cost model file"), "{err}");
    }

    #[test]
    fn refitting_on_slower_observations_raises_the_prediction() {
        let models = trained();
        let fragment = shape(1e6, 1e4);
        let before = models.execution(&fragment, 2);
        let mut observed = Observed::default();
        for _ in 0..40 {
            let measured = FragmentCosts {
                execution_nanos: as_nanos(before * 4),
                ..FragmentCosts::default()
            };
            observed.add(&fragment, 2, &measured);
        }
        let after = models.refit(&observed, 1).unwrap().execution(&fragment, 2);
        assert!(after > before * 2, "{before:?} -> {after:?}");
    }
}
