//! `skiff memnode calibrate`: train this machine's offload cost models and
//! save them where memory nodes load them at start.

use std::path::PathBuf;

use datafusion::error::{DataFusionError, Result};
use skiff_memnode::calibrate::calibrate;
use skiff_offload::calibration::Calibration;

#[derive(clap::Args, Debug)]
pub struct CalibrateArgs {
    /// Where to save the models; memory nodes read the same default.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Fragments in the corpus.
    #[arg(long, default_value_t = skiff_offload::limits::CALIBRATION_FRAGMENTS)]
    pub fragments: usize,
    /// Rows of the corpus' largest file.
    #[arg(long, default_value_t = skiff_offload::limits::CALIBRATION_ROWS)]
    pub rows: usize,
    /// The memory nodes' --offload-threads.
    #[arg(long, default_value_t = skiff_memnode::limits::DEFAULT_OFFLOAD_THREADS)]
    pub offload_threads: usize,
    /// The memory nodes' --link-bandwidth, if they emulate one.
    #[arg(long, value_parser = skiff_memnode::parse_bandwidth)]
    pub link_bandwidth: Option<u64>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write every held-out prediction and every estimate as CSV
    /// (model, what, predicted, measured; times in nanoseconds).
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// Where offload cost models are kept by default.
pub fn default_models_path() -> PathBuf {
    crate::session::skiff_home().join("offload-models.json")
}

pub async fn run(args: &CalibrateArgs) -> Result<()> {
    if args.fragments < 10 {
        return Err(DataFusionError::Configuration(
            "--fragments: at least 10 (a fifth is held out to measure the models)".to_string(),
        ));
    }
    if args.rows < 1024 {
        return Err(DataFusionError::Configuration(
            "--rows: at least 1024".to_string(),
        ));
    }
    let out = args.out.clone().unwrap_or_else(default_models_path);
    let calibration = Calibration {
        fragments: args.fragments,
        rows: args.rows,
        threads: args.offload_threads.max(1),
        link_bits_per_second: args.link_bandwidth,
        seed: args.seed,
    };
    eprintln!(
        "calibrating: {} fragments over up to {} rows on 1 to {} threads, then the network{}",
        calibration.fragments,
        calibration.rows,
        calibration.threads,
        calibration
            .link_bits_per_second
            .map_or(String::new(), |b| format!(" (an emulated {b} bit/s link)")),
    );
    let bar =
        skiff_bench::stderr_bar("{spinner} [{elapsed_precise}] [{bar:30}] {pos}/{len} fragments");
    bar.set_length(calibration.fragments as u64);
    let (models, report) = calibrate(&calibration, &|done, _| bar.set_position(done as u64))
        .await
        .map_err(|e| DataFusionError::Execution(format!("calibration failed: {e}")))?;
    bar.finish_and_clear();
    models
        .save(&out)
        .map_err(|e| DataFusionError::Execution(format!("cannot save the models: {e}")))?;
    if let Some(path) = &args.report {
        std::fs::write(path, report.csv())
            .map_err(|e| DataFusionError::Execution(format!("{}: {e}", path.display())))?;
    }
    print!("{}", report.summary());
    println!(
        "models saved to {} ({:.1} s); memory nodes load them at start (--offload-models)",
        out.display(),
        report.elapsed.as_secs_f64()
    );
    Ok(())
}
