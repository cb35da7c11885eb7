//! The run log checker: the fire times the triggers should have had, the
//! handler runs the nodes' own logs show, and the ledger's record of each
//! policy, matched.

use std::collections::HashMap;
use std::time::Duration;

use super::RunFile;
use crate::audit::{expected_times, job_details, ledger};
use crate::store::{FireRecord, FireState, Store, StoreError};
use crate::time::Timestamp;
use gather::{FireKey, Runs};

/// What to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckParams {
    /// Fire times from this instant (moved to the purge horizon if earlier).
    pub since: Timestamp,
    /// Fire times before this instant (at most the database's now). Leave
    /// the cluster time to settle first: a fire time whose fire is still on
    /// its way counts as lost.
    pub until: Timestamp,
    /// The cluster's misfire threshold: a first attempt that started later
    /// than this needs a misfire record.
    pub misfire_threshold: Duration,
    /// How far the nodes' estimates of database time may be off: a start
    /// counts as a fenced node's only when it is this much past the moment
    /// its incarnation was retired, and as early only when it is this much
    /// before its fire time (default 100 ms; each estimate is behind the
    /// database by a clock reading's round trip at most).
    pub clock_slack: Duration,
}

impl CheckParams {
    /// The hour before `now`, with the default misfire threshold.
    pub fn last_hour(now: Timestamp) -> CheckParams {
        CheckParams {
            since: now.saturating_add_millis(-3_600_000),
            until: now,
            misfire_threshold: crate::misfire::MisfireSettings::default().threshold,
            clock_slack: Duration::from_millis(100),
        }
    }
}

/// The kinds of violation the checker finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum RunViolationKind {
    /// A fire time with no handler run and no ledger record of its policy
    /// (misfired, skipped, abandoned, refused).
    Lost,
    /// A fire time with no run whose ledger rows are still claimed or
    /// running.
    Unsettled,
    /// Two starts of one fire time and attempt, or an attempt started after
    /// another attempt of the same fire time had succeeded.
    RunTwice,
    /// A start by an incarnation after it was declared dead or replaced.
    FencedStart,
    /// A start before the fire time (by more than the clock slack).
    Early,
    /// A trigger's first attempt started past the misfire threshold with no
    /// misfire record.
    Late,
    /// The ledger and the runs disagree: a run recorded that no handler
    /// start shows, a start of a fire recorded as not run, or a success
    /// recorded for a handler that failed.
    LedgerMismatch,
}

impl RunViolationKind {
    /// Its name in reports: `lost`, `unsettled`, `run_twice`,
    /// `fenced_start`, `early`, `late`, `ledger_mismatch`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunViolationKind::Lost => "lost",
            RunViolationKind::Unsettled => "unsettled",
            RunViolationKind::RunTwice => "run_twice",
            RunViolationKind::FencedStart => "fenced_start",
            RunViolationKind::Early => "early",
            RunViolationKind::Late => "late",
            RunViolationKind::LedgerMismatch => "ledger_mismatch",
        }
    }
}

/// One thing the runs, the triggers and the ledger disagree on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunViolation {
    /// What kind.
    pub kind: RunViolationKind,
    /// The job's name (`#id` for a job deleted since).
    pub job: String,
    /// The execute (trigger).
    pub execute_id: i64,
    /// The scheduled fire time.
    pub fire_time: Timestamp,
    /// What was found.
    pub detail: String,
}

/// How late handlers started after their fire times (a trigger's own first
/// attempts at their time), in ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lateness {
    /// How many starts.
    pub count: u64,
    /// The median.
    pub p50: i64,
    /// The 99th percentile.
    pub p99: i64,
    /// The largest.
    pub max: i64,
}

impl Lateness {
    /// The figures of a set of lateness values.
    pub fn of(mut values: Vec<i64>) -> Lateness {
        values.sort_unstable();
        let at = |q: f64| {
            if values.is_empty() {
                return 0;
            }
            // The nearest rank: the smallest value at least q of them reach.
            let rank = (q * values.len() as f64).ceil() as usize;
            values[rank.clamp(1, values.len()) - 1]
        };
        Lateness {
            count: values.len() as u64,
            p50: at(0.50),
            p99: at(0.99),
            max: values.last().copied().unwrap_or(0),
        }
    }
}

/// What the checker found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCheck {
    /// The range checked: from (after the purge horizon) ...
    pub since: Timestamp,
    /// ... to.
    pub until: Timestamp,
    /// Run log files read.
    pub files: usize,
    /// Lines that could not be read.
    pub unreadable: usize,
    /// Fire times the triggers should have had.
    pub fire_times_checked: u64,
    /// Of those, the ones some handler ran.
    pub fire_times_run: u64,
    /// Of those, the ones the ledger records as ended by policy without a
    /// run (misfired, skipped, abandoned, refused).
    pub fire_times_by_policy: u64,
    /// Of those, the ones a node without a run log ran, by the ledger: the
    /// checker cannot witness them.
    pub fire_times_unwitnessed: u64,
    /// Handler starts in the range.
    pub starts: u64,
    /// Handler ends in the range.
    pub ends: u64,
    /// Attempts of one fire time that ran at once: a retry or a recovery's
    /// re-run that started before the attempt before it ended (its node
    /// frozen or cut off, its handler still running). Not a violation by
    /// itself: at-least-once allows it; fencing keeps it short.
    pub overlapping_attempts: u64,
    /// Recovery re-runs of a fire time whose earlier attempt had
    /// succeeded, as its handler's end shows, but whose success the ledger
    /// never recorded: its node stopped or was cut off between the
    /// handler's return and the record, and was declared dead. The job
    /// requests recovery, so it ran again (at-least-once); not a violation.
    pub rerun_after_unrecorded_success: u64,
    /// Lateness by the handlers' own starts.
    pub lateness: Lateness,
    /// Lateness by the ledger's `started_at` of the same fires.
    pub ledger_lateness: Lateness,
    /// How far the ledger's start and the handler's own differ, for the
    /// same fires: the largest difference, in ms.
    pub ledger_start_gap_max: i64,
    /// What disagrees.
    pub violations: Vec<RunViolation>,
}

impl RunCheck {
    /// How many violations of a kind.
    pub fn count(&self, kind: RunViolationKind) -> usize {
        self.violations.iter().filter(|v| v.kind == kind).count()
    }
}

/// Checks a scheduler's runs, as its nodes' run logs show them, against its
/// triggers and its ledger over a range. See the [module docs](super).
///
/// # Errors
///
/// The store's errors; nothing is written.
pub async fn check(store: &dyn Store, files: &[RunFile], params: &CheckParams) -> Result<RunCheck, StoreError> {
    let now = store.now().await?;
    let until = params.until.min(now);
    let purge_horizon = store.purge_horizon().await?;
    let since = purge_horizon.map_or(params.since, |h| params.since.max(h));
    let fires = ledger(store, since, until).await?;
    let details = job_details(store).await?;
    Ok(judge(files, &fires, &details, since, until, params))
}

/// The checker's judgement on what was read.
fn judge(
    files: &[RunFile],
    fires: &[FireRecord],
    details: &[crate::store::JobDetail],
    since: Timestamp,
    until: Timestamp,
    params: &CheckParams,
) -> RunCheck {
    let runs = Runs::of(files);
    let names: HashMap<i64, &str> = details.iter().map(|d| (d.job.id, d.job.spec.name.as_str())).collect();
    let name_of = |id: i64| names.get(&id).map_or_else(|| format!("#{id}"), |n| (*n).to_owned());
    let own_job: HashMap<i64, i64> = details
        .iter()
        .flat_map(|d| d.executes.iter().map(|e| (e.id, e.job_id)))
        .collect();
    let threshold = i64::try_from(params.misfire_threshold.as_millis()).unwrap_or(i64::MAX);
    let slack = i64::try_from(params.clock_slack.as_millis()).unwrap_or(i64::MAX);
    let in_range = |t: i64| t >= since.as_millis() && t < until.as_millis();

    let mut ledger_of: HashMap<FireKey, Vec<&FireRecord>> = HashMap::new();
    let mut by_id: HashMap<i64, &FireRecord> = HashMap::new();
    let mut ranges: HashMap<(i64, i64), Vec<(i64, i64)>> = HashMap::new();
    for f in fires {
        ledger_of
            .entry((f.execute_id, f.job_id, f.fire_time.as_millis()))
            .or_default()
            .push(f);
        by_id.insert(f.id, f);
        if let Some(to) = f.skipped_until {
            ranges
                .entry((f.execute_id, f.job_id))
                .or_default()
                .push((f.fire_time.as_millis(), to.as_millis()));
        }
    }

    let mut report = RunCheck {
        since,
        until,
        files: files.len(),
        unreadable: runs.unreadable,
        fire_times_checked: 0,
        fire_times_run: 0,
        fire_times_by_policy: 0,
        fire_times_unwitnessed: 0,
        starts: 0,
        ends: 0,
        overlapping_attempts: 0,
        rerun_after_unrecorded_success: 0,
        lateness: Lateness::default(),
        ledger_lateness: Lateness::default(),
        ledger_start_gap_max: 0,
        violations: Vec::new(),
    };
    let mut violation = |kind, job_id: i64, execute_id: i64, fire_time: i64, detail: String| {
        report.violations.push(RunViolation {
            kind,
            job: name_of(job_id),
            execute_id,
            fire_time: Timestamp::from_millis(fire_time),
            detail,
        });
    };

    // Every start: twice, fenced, early, late, and what the ledger says of it.
    let mut late = Vec::new();
    let mut ledger_late = Vec::new();
    let mut gap_max = 0i64;
    let (mut starts, mut ends) = (0u64, 0u64);
    let mut overlapping = 0u64;
    let mut recovered = 0u64;
    for (&(execute_id, job_id, fire_time), attempts) in &runs.starts {
        if !in_range(fire_time) {
            continue;
        }
        let mut flag = |kind, detail: String| violation(kind, job_id, execute_id, fire_time, detail);
        let rows = ledger_of.get(&(execute_id, job_id, fire_time));
        let misfired = rows.is_some_and(|rows| rows.iter().any(|f| f.state == FireState::Misfired));
        let mut succeeded_at: Option<(u32, i64, i64)> = None;
        let mut previous_end: Option<i64> = None;
        for (&attempt, list) in attempts {
            starts += list.len() as u64;
            if list.len() > 1 {
                let by: Vec<String> = list
                    .iter()
                    .map(|s| format!("{} (incarnation {}) at {}", s.node, s.incarnation, s.db_ms))
                    .collect();
                flag(
                    RunViolationKind::RunTwice,
                    format!("attempt {attempt} started {} times: {}", list.len(), by.join(", ")),
                );
            }
            for s in list {
                // A recovery's re-run of an attempt whose success never
                // reached the ledger (its node stopped, or was cut off,
                // between the handler's return and the record, and was
                // declared dead): at-least-once, as the job asked.
                let unrecorded = |first_id: i64| by_id.get(&first_id).is_some_and(|f| f.state != FireState::Succeeded);
                if let Some((_, ok_at, first_id)) = succeeded_at
                    && s.db_ms >= ok_at
                    && s.kind == "recovery"
                    && unrecorded(first_id)
                {
                    recovered += 1;
                } else if let Some((first, ok_at, _)) = succeeded_at
                    && s.db_ms >= ok_at
                {
                    flag(
                        RunViolationKind::RunTwice,
                        format!(
                            "attempt {attempt} started on {} at {} after attempt {first} had succeeded at {ok_at}",
                            s.node, s.db_ms
                        ),
                    );
                }
                if previous_end.is_some_and(|ended| s.db_ms < ended) {
                    overlapping += 1;
                }
                if let Some(&at) = runs.fenced_at.get(&(s.node.as_str(), s.incarnation))
                    && s.db_ms > at.saturating_add(slack)
                {
                    flag(
                        RunViolationKind::FencedStart,
                        format!(
                            "attempt {attempt} started on {} (incarnation {}) at {}, {} ms after the incarnation was retired",
                            s.node,
                            s.incarnation,
                            s.db_ms,
                            s.db_ms - at
                        ),
                    );
                }
                // The start lies in [db_ms, db_ms + db_spread_ms]: early
                // only when even its latest is before the fire time.
                let latest = s.db_ms.saturating_add(s.db_spread_ms.max(0));
                if latest.saturating_add(slack) < fire_time {
                    flag(
                        RunViolationKind::Early,
                        format!(
                            "attempt {attempt} started on {} {} ms before its time (its clock estimate \
                             behind by {} ms at most)",
                            s.node,
                            fire_time - s.db_ms,
                            s.db_spread_ms
                        ),
                    );
                }
                let row = by_id.get(&s.fire_id).copied();
                let waited = row.is_some_and(|f| f.by_backfill() || f.by_overlap());
                let own = own_job.get(&execute_id) == Some(&job_id);
                if own && attempt == 1 && s.kind == "scheduled" && !waited {
                    let lateness = s.db_ms - fire_time;
                    late.push(lateness);
                    if let Some(started) = row.and_then(|f| f.started_at) {
                        let recorded = started.as_millis() - fire_time;
                        ledger_late.push(recorded);
                        gap_max = gap_max.max((recorded - lateness).abs());
                    }
                    if lateness > threshold && !misfired {
                        flag(
                            RunViolationKind::Late,
                            format!(
                                "attempt 1 started on {} {lateness} ms after its time, with no misfire record",
                                s.node
                            ),
                        );
                    }
                }
                if let Some(f) = row
                    && matches!(f.state, FireState::Misfired | FireState::Skipped)
                {
                    flag(
                        RunViolationKind::LedgerMismatch,
                        format!(
                            "attempt {attempt} started on {}, but the ledger records fire {} {}",
                            s.node,
                            f.id,
                            f.state.as_str()
                        ),
                    );
                }
                let end = runs.end_of(s);
                if let Some(end) = end {
                    ends += 1;
                    if row.is_some_and(|f| f.state == FireState::Succeeded) && !end.succeeded() {
                        flag(
                            RunViolationKind::LedgerMismatch,
                            format!(
                                "the ledger records fire {} succeeded; its handler on {} ended {}",
                                s.fire_id, s.node, end.outcome
                            ),
                        );
                    }
                    if end.succeeded() && succeeded_at.is_none() {
                        succeeded_at = Some((attempt, end.db_ms, s.fire_id));
                    }
                    previous_end = Some(end.db_ms);
                } else {
                    // Still running, or its process ended with it: the
                    // next attempt overlaps only if it shows an end.
                    previous_end = None;
                }
            }
        }
    }

    // Every run the ledger records that a logged incarnation should have
    // written a start for.
    for f in fires {
        let ran = matches!(f.state, FireState::Succeeded | FireState::Failed) && f.started_at.is_some();
        let Some(owner) = f.owner.as_ref().filter(|_| ran) else {
            continue;
        };
        if !in_range(f.fire_time.as_millis()) || !runs.logged.contains(&(owner.node_id.as_str(), owner.incarnation)) {
            continue;
        }
        let key = (f.execute_id, f.job_id, f.fire_time.as_millis());
        let started = runs
            .starts
            .get(&key)
            .and_then(|a| a.get(&f.attempt))
            .is_some_and(|list| list.iter().any(|s| s.fire_id == f.id));
        // A fire whose node died after its fenced start and before its
        // handler began was marked running with no handler to show it.
        let died =
            f.state == FireState::Failed && f.error.as_deref().is_some_and(|e| e.starts_with("node died mid-run"));
        if !started && !died {
            violation(
                RunViolationKind::LedgerMismatch,
                f.job_id,
                f.execute_id,
                f.fire_time.as_millis(),
                format!(
                    "the ledger records fire {} (attempt {}) {} on {}, and no handler start shows it",
                    f.id,
                    f.attempt,
                    f.state.as_str(),
                    owner.node_id
                ),
            );
        }
    }

    // Every fire time the triggers should have had.
    let mut run = 0u64;
    let mut by_policy = 0u64;
    let mut unwitnessed = 0u64;
    let mut missing: Vec<(i64, i64, i64, String, RunViolationKind)> = Vec::new();
    let checked = expected_times(details, since, until, |d, e, at| {
        let key = (e.id, d.job.id, at.as_millis());
        if runs.starts.get(&key).is_some_and(|a| !a.is_empty()) {
            run += 1;
            return;
        }
        let rows = ledger_of.get(&key).map_or(&[][..], Vec::as_slice);
        let in_a_range = ranges
            .get(&(e.id, d.job.id))
            .is_some_and(|r| r.iter().any(|(from, to)| *from <= key.2 && key.2 <= *to));
        let policy = in_a_range
            || rows.iter().any(|f| {
                matches!(f.state, FireState::Misfired | FireState::Skipped | FireState::Abandoned)
                    || (f.state == FireState::Failed && f.started_at.is_none())
            });
        if policy {
            by_policy += 1;
            return;
        }
        let ran_unlogged = rows.iter().any(|f| {
            f.started_at.is_some()
                && f.owner
                    .as_ref()
                    .is_some_and(|o| !runs.logged.contains(&(o.node_id.as_str(), o.incarnation)))
        });
        if ran_unlogged {
            unwitnessed += 1;
            return;
        }
        let open: Vec<String> = rows
            .iter()
            .filter(|f| !f.state.is_ended())
            .map(|f| format!("fire {} attempt {} {}", f.id, f.attempt, f.state.as_str()))
            .collect();
        let (kind, detail) = if open.is_empty() {
            let rows: Vec<String> = rows
                .iter()
                .map(|f| format!("fire {} attempt {} {}", f.id, f.attempt, f.state.as_str()))
                .collect();
            let detail = if rows.is_empty() {
                "no handler ran it and the ledger has no row for it".to_owned()
            } else {
                format!("no handler ran it; the ledger has {}", rows.join(", "))
            };
            (RunViolationKind::Lost, detail)
        } else {
            (
                RunViolationKind::Unsettled,
                format!("no handler ran it; the ledger still has {}", open.join(", ")),
            )
        };
        missing.push((d.job.id, e.id, at.as_millis(), detail, kind));
    });
    for (job_id, execute_id, at, detail, kind) in missing {
        violation(kind, job_id, execute_id, at, detail);
    }

    report.fire_times_checked = checked;
    report.fire_times_run = run;
    report.fire_times_by_policy = by_policy;
    report.fire_times_unwitnessed = unwitnessed;
    report.starts = starts;
    report.ends = ends;
    report.overlapping_attempts = overlapping;
    report.rerun_after_unrecorded_success = recovered;
    report.lateness = Lateness::of(late);
    report.ledger_lateness = Lateness::of(ledger_late);
    report.ledger_start_gap_max = gap_max;
    report.violations.sort_by_key(|v| (v.kind, v.fire_time, v.execute_id));
    report
}

mod gather;
#[cfg(test)]
mod tests;
