//! What a run's fire times became: the ledger's classes ([`Tally`]) and
//! what the run log checker found ([`Checked`]), shared by B1, B8 and B10.

use quartz_core::Timestamp;
use quartz_core::store::FireState;

/// What the run log checker found, summed over a run's schedulers.
#[derive(Debug, Default)]
pub(crate) struct Checked {
    /// Fire times with no run and no misfire record (or still open).
    pub(crate) lost: usize,
    /// Fire times started twice.
    pub(crate) run_twice: usize,
    /// Every other violation: early, late without a misfire record,
    /// started by a fenced node, the ledger disagreeing with the runs.
    pub(crate) other: usize,
    /// The first few violations, for stderr.
    pub(crate) examples: Vec<String>,
}

impl Checked {
    pub(crate) fn add(&mut self, report: &quartz_core::runlog::RunCheck) {
        use quartz_core::runlog::RunViolationKind as K;
        for v in &report.violations {
            match v.kind {
                K::Lost | K::Unsettled => self.lost += 1,
                K::RunTwice => self.run_twice += 1,
                _ => self.other += 1,
            }
            if self.examples.len() < 10 {
                self.examples.push(format!(
                    "run log: {} {} at {}: {}",
                    v.kind.as_str(),
                    v.job,
                    v.fire_time,
                    v.detail
                ));
            }
        }
    }
}

/// What became of each fire time a run expected, one class each, so that
/// the classes add up to what was expected and none is negative.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Fire times expected: every trigger's grid seconds in the run.
    pub(crate) expected: i64,
    /// Ran for its own time, on its first attempt (however late: the
    /// lateness columns say how late).
    pub(crate) on_time: i64,
    /// Ran by its misfire policy after it was found late (a later attempt
    /// of the same fire time).
    pub(crate) late_by_policy: i64,
    /// Recorded misfired or skipped, and not run.
    pub(crate) misfired: i64,
    /// No run and no misfire record: lost.
    pub(crate) missing: i64,
    /// Fire times run more than once (also counted once above).
    pub(crate) duplicated: i64,
}

impl Tally {
    /// Adds another run's classes (a scheduler's, of several).
    pub(crate) fn add(&mut self, other: Tally) {
        self.expected += other.expected;
        self.on_time += other.on_time;
        self.late_by_policy += other.late_by_policy;
        self.misfired += other.misfired;
        self.missing += other.missing;
        self.duplicated += other.duplicated;
    }

    /// The fire times `expected` holds, classified by the ledger's `rows`;
    /// `step_ms` is the trigger's spacing (a misfire record without an end
    /// covers `fire_count` steps from its fire time).
    pub(crate) fn of(
        expected: &std::collections::HashSet<(i64, i64)>,
        rows: &[quartz_core::store::FireRecord],
        step_ms: i64,
    ) -> Tally {
        use std::collections::HashMap;
        let mut first_runs: HashMap<(i64, i64), i64> = HashMap::new();
        let mut later_runs: HashMap<(i64, i64), i64> = HashMap::new();
        let mut recorded_misfired: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
        for row in rows {
            let key = (row.execute_id, row.fire_time.as_millis());
            match row.state {
                // A record covers its range up to `skipped_until` (its
                // count is a lower bound past a long outage, and a policy
                // that fired now moved the grid), as the audit reads it.
                FireState::Misfired | FireState::Skipped => {
                    let count = i64::try_from(row.fire_count.max(1)).unwrap_or(i64::MAX / 2);
                    let until = row
                        .skipped_until
                        .map_or(key.1 + (count - 1) * step_ms, Timestamp::as_millis);
                    recorded_misfired.entry(key.0).or_default().push((key.1, until));
                }
                FireState::Succeeded if row.attempt <= 1 => *first_runs.entry(key).or_default() += 1,
                FireState::Succeeded => *later_runs.entry(key).or_default() += 1,
                _ => {}
            }
        }
        let mut tally = Tally {
            expected: i64::try_from(expected.len()).unwrap_or(i64::MAX),
            ..Tally::default()
        };
        for key in expected {
            let runs = first_runs.get(key).copied().unwrap_or(0) + later_runs.get(key).copied().unwrap_or(0);
            if runs > 1 {
                tally.duplicated += 1;
            }
            if first_runs.contains_key(key) {
                tally.on_time += 1;
            } else if later_runs.contains_key(key) {
                tally.late_by_policy += 1;
            } else if recorded_misfired
                .get(&key.0)
                .is_some_and(|ranges| ranges.iter().any(|(from, to)| *from <= key.1 && key.1 <= *to))
            {
                tally.misfired += 1;
            } else {
                tally.missing += 1;
            }
        }
        tally
    }
}
