//! Section 5 of the migration summary: the cost model (paper §5.3) judged
//! against what the benchmark measured. At every boundary of experiment 1
//! both alternatives were run (migrate there, or restart: the time run so
//! far plus a whole run), so the faster one is known; the model is asked
//! what it would have chosen from the inputs the coordinator has at that
//! moment, and its choice is compared with the measured winner.

use skiff_state::decision::{Bandwidth, Choice, estimate};

use super::{Row, mean, median};

/// States below this measure latency, not bandwidth (as the server's own
/// bandwidth estimate ignores them).
const BANDWIDTH_MIN_BYTES: u64 = 64 * 1024;

/// The state bandwidth the server would have measured: the median over the
/// hand-offs of experiment 1 of bytes / (extract + store) time, read from
/// their decisions; the model's default when none is large enough.
pub(super) fn bandwidth(rows: &[&Row]) -> f64 {
    let measured: Vec<f64> = rows
        .iter()
        .filter_map(|r| {
            let (bytes, ms) = shipped(&r.decision)?;
            (bytes >= BANDWIDTH_MIN_BYTES).then(|| bytes as f64 / (ms.max(1) as f64 / 1000.0))
        })
        .collect();
    median(&measured).unwrap_or_else(|| Bandwidth::default().get())
}

/// `... : 1234 B of state, paused in 9 ms (extract 3 ms, store 5 ms)` ->
/// (1234, 8).
fn shipped(decision: &str) -> Option<(u64, u64)> {
    let number_before = |marker: &str| -> Option<u64> {
        let end = decision.find(marker)?;
        let start = decision[..end].rfind(' ').map_or(0, |i| i + 1);
        decision[start..end].parse().ok()
    };
    let number_after = |marker: &str| -> Option<u64> {
        let rest = &decision[decision.find(marker)? + marker.len()..];
        rest.split(' ').next()?.parse().ok()
    };
    Some((
        number_before(" B of state")?,
        number_after("(extract ")? + number_after("store ")?,
    ))
}

/// How far apart the measured alternatives must be for a choice to be
/// wrong: identical runs on this shared machine differ by up to about 15%.
const CLEAR: f64 = 0.15;

/// One boundary: the model's choice and what each choice measured.
struct Judged {
    migrate: bool,
    measured_ms: f64,
    restart_ms: f64,
    /// The model's predicted total runtime if migrated, against measured.
    predicted_migrate_ms: f64,
}

fn judge(row: &Row, bandwidth: f64) -> Option<Judged> {
    let total = row.pipelines_total.filter(|&t| t > 0)?;
    let elapsed = row.time_at_k_ms?;
    let progress = row.k? as f64 / total as f64;
    let e = estimate(progress, row.state_bytes?, elapsed, None, bandwidth);
    Some(Judged {
        migrate: e.choice == Choice::MigrateNow,
        measured_ms: row.measured_ms?,
        restart_ms: row.restart_ms?,
        predicted_migrate_ms: elapsed + e.migrate_ms,
    })
}

/// The section's text over the rows of experiment 1.
pub(super) fn section(symmetric: &[&Row]) -> String {
    let bandwidth = bandwidth(symmetric);
    let judged: Vec<Judged> = symmetric
        .iter()
        .filter_map(|r| judge(r, bandwidth))
        .collect();
    let mut t = String::from(
        "\n5. The cost model's choice (migrate now or restart) at every boundary of 1,\n   \
         from the inputs the coordinator has there, against the faster measured one\n",
    );
    if judged.is_empty() {
        t.push_str("  no boundary with both alternatives measured\n");
        return t;
    }
    let n = judged.len();
    let agree = judged
        .iter()
        .filter(|j| j.migrate == (j.measured_ms < j.restart_ms))
        .count();
    // Where the alternatives measured within noise of each other, either
    // choice is right.
    let clear: Vec<&Judged> = judged
        .iter()
        .filter(|j| (j.measured_ms - j.restart_ms).abs() > CLEAR * j.measured_ms.min(j.restart_ms))
        .collect();
    let clear_agree = clear
        .iter()
        .filter(|j| j.migrate == (j.measured_ms < j.restart_ms))
        .count();
    let chose_restart = judged.iter().filter(|j| !j.migrate).count();
    let total = |pick: &dyn Fn(&Judged) -> f64| judged.iter().map(pick).sum::<f64>();
    let best = total(&|j| j.measured_ms.min(j.restart_ms));
    let policies: [(&str, f64); 3] = [
        (
            "the model",
            total(&|j| {
                if j.migrate {
                    j.measured_ms
                } else {
                    j.restart_ms
                }
            }),
        ),
        ("always migrate", total(&|j| j.measured_ms)),
        ("always restart", total(&|j| j.restart_ms)),
    ];
    t.push_str(&format!(
        "  bandwidth assumed {:.0} MB/s (median of the measured hand-offs)\n  \
         the model chose the faster alternative at {agree} of {n} boundaries \
         ({:.0}%); it chose restart at {chose_restart}\n  \
         where the two differ by more than {:.0}%: at {clear_agree} of {}\n",
        bandwidth / 1e6,
        100.0 * agree as f64 / n as f64,
        CLEAR * 100.0,
        clear.len()
    ));
    t.push_str("  total runtime over all boundaries, against always picking the faster:\n");
    for (policy, ms) in policies {
        t.push_str(&format!(
            "    {policy:<15} {ms:>10.0} ms  {:.3}\n",
            ms / best.max(1e-9)
        ));
    }
    let errors: Vec<f64> = judged
        .iter()
        .map(|j| 100.0 * (j.predicted_migrate_ms - j.measured_ms).abs() / j.measured_ms.max(1e-9))
        .collect();
    t.push_str(&format!(
        "  predicted runtime if migrated: median error {}%, mean {}%\n",
        median(&errors).map_or("-".into(), |e| format!("{e:.0}")),
        mean(errors.iter().copied()).map_or("-".into(), |e| format!("{e:.0}")),
    ));
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Boundary `k` of 4; the hand-off shipped `state` in `ship_ms`.
    fn boundary(k: usize, state: u64, ship_ms: u64, at: f64, migrated: f64, restart: f64) -> Row {
        Row {
            kind: "symmetric",
            query: "q".into(),
            k: Some(k),
            pipelines_total: Some(4),
            state_bytes: Some(state),
            time_at_k_ms: Some(at),
            measured_ms: Some(migrated),
            restart_ms: Some(restart),
            decision: format!(
                "migrated after {k}/4 pipelines at {at} ms: {state} B of state, paused in 20 ms \
                 (extract 5 ms, store {} ms)",
                ship_ms - 5
            ),
            ..Row::default()
        }
    }

    #[test]
    fn shipped_bytes_and_time_come_from_the_decision() {
        let row = boundary(1, 5_000_000, 10, 10.0, 1.0, 1.0);
        assert_eq!(shipped(&row.decision), Some((5_000_000, 10)));
        assert_eq!(shipped("started over: gone"), None);
    }

    #[test]
    fn the_model_is_judged_against_the_faster_measured_choice() {
        // Both shipped at 500 MB/s.
        let late_small = boundary(3, 5_000_000, 10, 900.0, 1000.0, 1900.0);
        // Early, with a state that takes 10 s to ship: the model restarts,
        // and here restarting was indeed faster.
        let early_huge = boundary(1, 5_000_000_000, 10_000, 10.0, 30_000.0, 1010.0);
        let rows = [&late_small, &early_huge];
        assert!((bandwidth(&rows) / 5e8 - 1.0).abs() < 1e-9);
        let text = section(&rows);
        assert!(
            text.contains("at 2 of 2 boundaries (100%); it chose restart at 1"),
            "{text}"
        );
        let line = |policy: &str| -> Vec<String> {
            let line = text
                .lines()
                .find(|l| l.starts_with("    ") && l.trim_start().starts_with(policy));
            line.map_or(Vec::new(), |l| {
                l.split_whitespace().map(String::from).collect()
            })
        };
        // The model picked the faster both times; always migrating pays
        // for the huge state.
        assert_eq!(line("the model")[2..], ["2010", "ms", "1.000"], "{text}");
        assert_eq!(
            line("always migrate")[2..],
            ["31000", "ms", "15.423"],
            "{text}"
        );
        assert_eq!(
            line("always restart")[2..],
            ["2910", "ms", "1.448"],
            "{text}"
        );
    }
}
