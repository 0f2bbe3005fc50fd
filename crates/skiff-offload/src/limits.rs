//! The offload decision engine's limits, in one place.

/// A memory node's sketches of each column of each file it holds
/// (`sketches`): theta sketches keep 2^`SKETCH_THETA_LG_K` hashes
/// (a relative standard error of about 1/sqrt(4096), 1.6%, on distinct
/// counts), KLL sketches `SKETCH_KLL_K` (a rank error of about 0.4%, what
/// range selectivity is estimated with), frequent-items sketches track up
/// to `SKETCH_FREQUENT_ITEMS` heavy hitters (a power of two).
pub const SKETCH_THETA_LG_K: u8 = 12;
pub const SKETCH_KLL_K: u16 = 1000;
pub const SKETCH_FREQUENT_ITEMS: usize = 64;

/// Cost models (`costs`): trees per random forest, and the most
/// samples one keeps (the oldest go first when refits add the node's own
/// measurements).
pub const COST_MODEL_TREES: usize = 24;
pub const COST_MODEL_SAMPLES: usize = 4096;

/// A memory node refits its cost models when, over its last
/// `DRIFT_WINDOW` offloaded fragments, the median measured execution time
/// is off its prediction by more than `DRIFT_FACTOR` either way.
pub const DRIFT_WINDOW: usize = 16;
pub const DRIFT_FACTOR: f64 = 2.0;

/// Fragments `skiff memnode calibrate` runs by default, and the most rows
/// one reads.
pub const CALIBRATION_FRAGMENTS: usize = 240;
pub const CALIBRATION_ROWS: usize = 1 << 20;
