//! The decision's quality on a held-out set (the paper's evaluation of its
//! decision engine): random fragments over the particle table, unlike the
//! calibration corpus (its own table and templates), each run pushed back
//! (`never`), offloaded (`always`) and decided (`auto`). The oracle takes
//! the faster of the first two; a decision is right when the node chose
//! the oracle's path (most of the query's partitions, when they differ).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::models::median_p90;
use super::{Route, alike, first_row_numbers, last_record, query};
use crate::BenchError;
use crate::client::PgConn;
use crate::groups::{exec, median_after_warm_up};

/// One held-out fragment on one link.
pub(super) struct Decided {
    pub link: &'static str,
    pub predicate: String,
    /// Median ms end to end of each route (`Route::ALL`'s order).
    pub ms: [f64; 3],
    /// Partitions the node offloaded and pushed back under `auto`.
    pub offloaded: u64,
    pub pushed_back: u64,
    pub predicted_offload_ms: f64,
    pub predicted_push_back_ms: f64,
    /// Over the fragments the node ran (`always` and `auto` runs): its
    /// time estimating them, and running them.
    pub estimation_ms: f64,
    pub node_execution_ms: f64,
}

impl Decided {
    /// Estimating as a share of running, on the node (Figure 10's CPU).
    pub fn estimation_share(&self) -> Option<f64> {
        (self.node_execution_ms > 0.0).then(|| self.estimation_ms / self.node_execution_ms)
    }

    fn of(&self, route: Route) -> f64 {
        self.ms[Route::ALL.iter().position(|&r| r == route).unwrap_or(0)]
    }

    pub fn chose_offload(&self) -> bool {
        self.offloaded > self.pushed_back
    }

    pub fn oracle_offloads(&self) -> bool {
        self.of(Route::Offload) < self.of(Route::PushBack)
    }

    pub fn right(&self) -> bool {
        self.chose_offload() == self.oracle_offloads()
    }

    pub fn oracle_ms(&self) -> f64 {
        self.of(Route::Offload).min(self.of(Route::PushBack))
    }
}

/// A random predicate over the particles: boxes and ranges of every size,
/// equalities, speeds and masses, so that the share kept runs from almost
/// nothing to almost everything.
fn predicate(rng: &mut StdRng) -> String {
    let unit = |rng: &mut StdRng| rng.random::<f64>();
    match rng.random_range(0..5) {
        0 => {
            let side = rng.random_range(0.05..1.0f64);
            let at = |rng: &mut StdRng| unit(rng) * (1.0 - side);
            let (x, y, z) = (at(rng), at(rng), at(rng));
            format!(
                "x BETWEEN {x:.4} AND {:.4} AND y BETWEEN {y:.4} AND {:.4} \
                 AND z BETWEEN {z:.4} AND {:.4}",
                x + side,
                y + side,
                z + side
            )
        }
        1 => format!("x < {:.4}", unit(rng)),
        2 => format!(
            "charge = {} AND y >= {:.4}",
            rng.random_range(-1..=1),
            unit(rng)
        ),
        3 => format!("vx > {:.3}", rng.random_range(-3.0..3.0)),
        _ => format!("mass > {:.3}", 10f64.powf(rng.random_range(-1.0..2.0))),
    }
}

/// Run `count` held-out fragments on `conn`'s cluster (behind `link`).
pub(super) async fn held_out(
    conn: &PgConn,
    link: &'static str,
    count: usize,
    runs: u32,
    seed: u64,
) -> Result<Vec<Decided>, BenchError> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut decided = Vec::with_capacity(count);
    for n in 0..count {
        let predicate = predicate(&mut rng);
        let sql = query(&predicate);
        let mut ms = [0.0; 3];
        let mut answers = Vec::new();
        let mut seen = 0;
        let before = last_record(conn).await?;
        for (i, route) in Route::ALL.into_iter().enumerate() {
            for set in route.settings() {
                exec(conn, &set).await?;
            }
            seen = last_record(conn).await?;
            let mut timed = Vec::new();
            for run in 0..runs.max(2) {
                let started = std::time::Instant::now();
                let rows = conn
                    .rows(&sql)
                    .await
                    .map_err(|e| BenchError::Data(format!("{sql}: {e}")))?;
                timed.push(started.elapsed().as_secs_f64() * 1e3);
                if run == 0 {
                    answers.push(rows);
                }
            }
            ms[i] = median_after_warm_up(&timed).unwrap_or(0.0);
        }
        if answers.windows(2).any(|w| !alike(&w[0], &w[1])) {
            return Err(BenchError::Data(format!(
                "{predicate}: answers differ between routes: {answers:?}"
            )));
        }
        // The `auto` runs' records (the last route run).
        let recorded = first_row_numbers(
            conn,
            &format!(
                "SELECT count(*) FILTER (WHERE offloaded), count(*) FILTER (WHERE NOT offloaded), \
                 coalesce(sum(predicted_offload_ms), 0), coalesce(sum(predicted_push_back_ms), 0) \
                 FROM skiff.memory_fragments WHERE seq > {seen} AND mode = 'auto'"
            ),
        )
        .await?;
        let cell = |i: usize| recorded.get(i).copied().unwrap_or(0.0);
        // Every run the node did itself, in all three routes.
        let spent = first_row_numbers(
            conn,
            &format!(
                "SELECT coalesce(sum(estimation_ms), 0), coalesce(sum(measured_execution_ms), 0) \
                 FROM skiff.memory_fragments WHERE seq > {before} AND offloaded"
            ),
        )
        .await?;
        let ran = |i: usize| spent.get(i).copied().unwrap_or(0.0);
        let runs_of_auto = f64::from(runs.max(2));
        let one = Decided {
            link,
            predicate,
            ms,
            offloaded: cell(0) as u64,
            pushed_back: cell(1) as u64,
            predicted_offload_ms: cell(2) / runs_of_auto,
            predicted_push_back_ms: cell(3) / runs_of_auto,
            estimation_ms: ran(0),
            node_execution_ms: ran(1),
        };
        eprintln!(
            "link {link}: held-out {}/{count}: pushed back {:.1} ms, offloaded {:.1} ms, \
             decided {:.1} ms ({}, {})",
            n + 1,
            one.ms[0],
            one.ms[1],
            one.ms[2],
            if one.chose_offload() {
                "offloaded"
            } else {
                "pushed back"
            },
            if one.right() { "right" } else { "wrong" },
        );
        decided.push(one);
    }
    Ok(decided)
}

/// Per link: right decisions, and each policy's total time.
pub(super) fn summary(decided: &[Decided], links: &[&'static str]) -> String {
    let mut text = String::from(
        "\nDecisions on held-out fragments: right against the oracle, total ms of each policy\n",
    );
    text.push_str(&format!(
        "{:>8} {:>10} {:>12} {:>12} {:>12} {:>12} {:>14}\n",
        "link", "right", "decided", "always", "never", "oracle", "decided/oracle"
    ));
    for &link in links {
        let on: Vec<&Decided> = decided.iter().filter(|d| d.link == link).collect();
        if on.is_empty() {
            continue;
        }
        let total = |f: &dyn Fn(&Decided) -> f64| on.iter().map(|d| f(d)).sum::<f64>();
        let right = on.iter().filter(|d| d.right()).count();
        let decided_ms = total(&|d| d.of(Route::Auto));
        let oracle = total(&|d| d.oracle_ms());
        text.push_str(&format!(
            "{link:>8} {:>10} {decided_ms:>12.0} {:>12.0} {:>12.0} {oracle:>12.0} {:>13.2}x\n",
            format!("{right}/{}", on.len()),
            total(&|d| d.of(Route::Offload)),
            total(&|d| d.of(Route::PushBack)),
            decided_ms / oracle.max(1e-9),
        ));
    }
    text.push_str(
        "\nEstimating on the node as a share of running the fragment (held out, per fragment)\n",
    );
    for &link in links {
        let shares: Vec<f64> = decided
            .iter()
            .filter(|d| d.link == link)
            .filter_map(Decided::estimation_share)
            .map(|s| s * 100.0)
            .collect();
        if shares.is_empty() {
            continue;
        }
        let (median, p90) = median_p90(shares);
        text.push_str(&format!("{link:>8}: median {median:.2}%, p90 {p90:.2}%\n"));
    }
    text
}

pub(super) fn csv(decided: &[Decided]) -> String {
    let mut text = String::from(
        "link,predicate,pushed_back_ms,offloaded_ms,decided_ms,offloaded_partitions,\
         pushed_back_partitions,predicted_offload_ms,predicted_push_back_ms,right,\
         estimation_ms,node_execution_ms\n",
    );
    for d in decided {
        text.push_str(&format!(
            "{},\"{}\",{:.3},{:.3},{:.3},{},{},{:.3},{:.3},{},{:.3},{:.3}\n",
            d.link,
            d.predicate,
            d.ms[0],
            d.ms[1],
            d.ms[2],
            d.offloaded,
            d.pushed_back,
            d.predicted_offload_ms,
            d.predicted_push_back_ms,
            d.right(),
            d.estimation_ms,
            d.node_execution_ms
        ));
    }
    text
}
