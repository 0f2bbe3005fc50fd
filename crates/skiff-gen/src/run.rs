//! Runs a benchmark's generator parts on all cores and publishes each table
//! when its last part is written.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arrow::datatypes::SchemaRef;

use crate::options::{GenOptions, GenProgress, GenSummary};
use crate::write::{self, Batches};
use crate::{GenError, output};

/// Target rows per generator part, and so per Parquet file. Fixed (never
/// derived from the core count) so the files are the same on every machine.
pub(crate) const PART_ROWS_TARGET: u64 = 1_000_000;

/// Rows per record batch handed from a generator to the Parquet writer.
pub(crate) const BATCH_ROWS: usize = 8192;

/// Builds the batch iterator of one part. Called on the worker thread that
/// writes the part, so the iterator itself need not be `Send`.
pub(crate) type MakeBatches = Box<dyn Fn() -> Result<Batches, GenError> + Send + Sync>;

/// One part of one table: written to one file by one thread.
pub(crate) struct Job {
    pub table: &'static str,
    pub part: usize,
    pub parts: usize,
    pub rows_estimate: u64,
    pub schema: SchemaRef,
    pub batches: MakeBatches,
}

/// Everything a benchmark generates: its tables (in summary order) and the
/// parts that make them up.
pub(crate) struct Plan {
    pub tables: &'static [&'static str],
    pub jobs: Vec<Job>,
}

/// Number of parts so each holds about [`PART_ROWS_TARGET`] rows, at least
/// one (an empty table still gets a file carrying its schema) and at most one
/// per source row.
pub(crate) fn part_count(rows_estimate: u64, source_rows: u64) -> usize {
    let parts = rows_estimate
        .div_ceil(PART_ROWS_TARGET)
        .clamp(1, source_rows.max(1));
    usize::try_from(parts).unwrap_or(usize::MAX)
}

/// Per-table progress shared by the workers.
struct TableState {
    parts_left: AtomicUsize,
    rows: AtomicU64,
    bytes: AtomicU64,
    published: AtomicBool,
}

struct Shared<'a> {
    out: &'a Path,
    plan: &'a Plan,
    /// `job_tables[i]` is the index in `plan.tables` of `plan.jobs[i].table`.
    job_tables: Vec<usize>,
    tables: Vec<TableState>,
    next_job: AtomicUsize,
    cancel: AtomicBool,
    first_error: Mutex<Option<GenError>>,
    progress: &'a dyn GenProgress,
}

pub(crate) fn execute(
    mut plan: Plan,
    opts: &GenOptions,
    progress: &dyn GenProgress,
) -> Result<GenSummary, GenError> {
    output::check_overwrite(&opts.out, plan.tables, opts.force)?;
    output::prepare(&opts.out, plan.tables)?;
    debug_assert!(
        plan.tables
            .iter()
            .all(|t| plan.jobs.iter().any(|j| j.table == *t)),
        "every table needs at least one part, or it would never be published"
    );
    // Biggest parts first, so the last part to finish is a small one.
    plan.jobs
        .sort_by_key(|job| std::cmp::Reverse(job.rows_estimate));
    let job_tables = plan
        .jobs
        .iter()
        .map(|job| {
            plan.tables
                .iter()
                .position(|t| *t == job.table)
                .ok_or_else(|| GenError::Generator {
                    table: job.table.to_string(),
                    message: "internal error: part of a table outside the plan".to_string(),
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    progress.start(plan.jobs.iter().map(|j| j.rows_estimate).sum());

    let shared = Shared {
        out: &opts.out,
        plan: &plan,
        job_tables,
        tables: plan
            .tables
            .iter()
            .map(|table| TableState {
                parts_left: AtomicUsize::new(
                    plan.jobs.iter().filter(|j| j.table == *table).count(),
                ),
                rows: AtomicU64::new(0),
                bytes: AtomicU64::new(0),
                published: AtomicBool::new(false),
            })
            .collect(),
        next_job: AtomicUsize::new(0),
        cancel: AtomicBool::new(false),
        first_error: Mutex::new(None),
        progress,
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(plan.jobs.len())
        .max(1);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| shared.work());
        }
    });
    shared.finish()
}

impl Shared<'_> {
    fn work(&self) {
        while !self.cancel.load(Ordering::Relaxed) {
            let index = self.next_job.fetch_add(1, Ordering::Relaxed);
            let (Some(job), Some(&table)) = (self.plan.jobs.get(index), self.job_tables.get(index))
            else {
                return;
            };
            let result =
                catch_unwind(AssertUnwindSafe(|| self.run(job, table))).unwrap_or_else(|_| {
                    Err(GenError::Panicked {
                        table: job.table.to_string(),
                    })
                });
            if let Err(error) = result {
                self.fail(error);
            }
        }
    }

    fn run(&self, job: &Job, table: usize) -> Result<(), GenError> {
        let path = output::staging_dir(self.out, job.table)
            .join(output::part_file_name(job.part, job.parts));
        let batches = (job.batches)()?;
        let on_batch = |rows| self.progress.advance(job.table, rows);
        let written = write::write_part(
            &path,
            Arc::clone(&job.schema),
            batches,
            &self.cancel,
            &on_batch,
        )?;
        let Some(stats) = written else {
            return Ok(()); // cancelled because another part failed
        };
        let state = &self.tables[table];
        state.rows.fetch_add(stats.rows, Ordering::Relaxed);
        state.bytes.fetch_add(stats.bytes, Ordering::Relaxed);
        // AcqRel: the worker finishing the last part must see the others'
        // row and byte counts and their completed files.
        if state.parts_left.fetch_sub(1, Ordering::AcqRel) == 1 {
            output::publish(self.out, job.table)?;
            state.published.store(true, Ordering::Release);
        }
        Ok(())
    }

    fn fail(&self, error: GenError) {
        self.cancel.store(true, Ordering::Relaxed);
        let mut first = self
            .first_error
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        first.get_or_insert(error);
    }

    fn finish(self) -> Result<GenSummary, GenError> {
        let error = self
            .first_error
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(error) = error {
            for (table, state) in self.plan.tables.iter().zip(&self.tables) {
                if !state.published.load(Ordering::Acquire) {
                    output::discard(self.out, table);
                }
            }
            return Err(error);
        }
        let tables = self
            .plan
            .tables
            .iter()
            .zip(&self.tables)
            .map(|(table, state)| {
                (
                    table.to_string(),
                    state.rows.load(Ordering::Relaxed),
                    state.bytes.load(Ordering::Relaxed),
                )
            })
            .collect();
        Ok(GenSummary { tables })
    }
}
