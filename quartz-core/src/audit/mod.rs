//! The ledger audit: checks the fire ledger against the triggers, for the
//! guarantees a ledger can show broken. One implementation, used by
//! `quartz audit`, the engine tests and the reliability suite.
//!
//! - **duplicate**: an attempt of a fire started after another attempt of the
//!   same fire had succeeded (guarantee 1);
//! - **missing**: a fire time a trigger has moved past with no ledger row,
//!   neither run nor recorded misfired or skipped (guarantee 2);
//! - **late**: a trigger's first attempt started later than the misfire
//!   threshold with no misfire record for its time;
//! - **stranded**: a retry or a late run (a pending fire) still not claimed
//!   more than the misfire threshold after it was due (guarantee 2);
//! - **beyond catch-up**: a trigger's own first attempt that started later
//!   than its catch-up window (and the threshold) after its fire time: a
//!   missed time the window should have skipped was made up for;
//! - **claimed on standby**: a fire claimed while the whole scheduler was on
//!   standby (from a `scheduler.pause` in the change log to the next
//!   `scheduler.resume`), later than the threshold after the pause (a claim
//!   already under way when the pause was made may end after it);
//! - **overlapped**: a trigger's own fire that started while another fire of
//!   its job was running, although its overlap policy (or its job, which
//!   disallows concurrency) forbids it;
//! - **over limit**: a fire of a job with a concurrency limit that started
//!   while its key already had as many fires running as the limit allows.
//!
//! Fixed-delay triggers have no grid to check gaps against, and triggers in
//! error are skipped. The audit starts no earlier than the purge horizon
//! ([`RetentionStore::purge_horizon`](crate::store::RetentionStore::purge_horizon)): before it, succeeded fires may have been purged
//! under the retention settings.
//!
//! ```no_run
//! # async fn check<S: quartz_core::store::Store>(store: &S) -> Result<(), quartz_core::store::StoreError> {
//! use quartz_core::audit::{AuditParams, audit};
//!
//! let now = store.now().await?;
//! let report = audit(store, &AuditParams::last_hour(now)).await?;
//! assert!(report.violations.is_empty(), "{:?}", report.violations);
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, HashMap};

use crate::store::{ChangeQuery, ExecuteState, FireQuery, FireRecord, FireState, JobDetail, Store, StoreError};
use crate::time::Timestamp;
use crate::trigger::Schedule;

mod overlap;

/// The most fire times one audit checks (a bound on a long range of a
/// frequent schedule).
pub const MAX_FIRE_TIMES: u64 = 10_000_000;

/// What to audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditParams {
    /// Fire times from this instant (moved to the purge horizon if earlier).
    pub since: Timestamp,
    /// Fire times before this instant (at most the database's now).
    pub until: Timestamp,
    /// The cluster's misfire threshold: a first attempt that started later
    /// than this needs a misfire record.
    pub misfire_threshold: std::time::Duration,
}

impl AuditParams {
    /// The hour before `now`, with the default misfire threshold.
    pub fn last_hour(now: Timestamp) -> AuditParams {
        AuditParams {
            since: now.saturating_add_millis(-3_600_000),
            until: now,
            misfire_threshold: crate::misfire::MisfireSettings::default().threshold,
        }
    }
}

/// The kinds of violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ViolationKind {
    /// An attempt started after another attempt of the same fire succeeded.
    Duplicate,
    /// A fire time the trigger moved past with no ledger row.
    Missing,
    /// A first attempt started past the misfire threshold with no misfire
    /// record.
    Late,
    /// A retry or late run not claimed by the misfire threshold after its due
    /// time.
    Stranded,
    /// A first attempt that started later than its trigger's catch-up
    /// window (and the misfire threshold) after its fire time.
    BeyondCatchUp,
    /// A fire claimed while the scheduler was on standby.
    ClaimedOnStandby,
    /// A fire that started while another fire of its job ran, against its
    /// trigger's overlap policy.
    Overlapped,
    /// A fire that started while its concurrency key was full.
    OverLimit,
}

impl ViolationKind {
    /// Its name in reports: `duplicate`, `missing`, `late`, `stranded`,
    /// `beyond_catch_up`, `claimed_on_standby`, `overlapped`, `over_limit`.
    pub fn as_str(self) -> &'static str {
        match self {
            ViolationKind::Duplicate => "duplicate",
            ViolationKind::Missing => "missing",
            ViolationKind::Late => "late",
            ViolationKind::Stranded => "stranded",
            ViolationKind::BeyondCatchUp => "beyond_catch_up",
            ViolationKind::ClaimedOnStandby => "claimed_on_standby",
            ViolationKind::Overlapped => "overlapped",
            ViolationKind::OverLimit => "over_limit",
        }
    }
}

/// One thing the ledger and the triggers disagree on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// What kind.
    pub kind: ViolationKind,
    /// The job's name (`#id` for a job deleted since).
    pub job: String,
    /// The execute (trigger).
    pub execute_id: i64,
    /// The scheduled fire time.
    pub fire_time: Timestamp,
    /// What was found.
    pub detail: String,
}

/// What an audit found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditReport {
    /// The range checked: from (after the purge horizon) ...
    pub since: Timestamp,
    /// ... to.
    pub until: Timestamp,
    /// The purge horizon, if the ledger has been purged.
    pub purge_horizon: Option<Timestamp>,
    /// Ledger rows read.
    pub fires: usize,
    /// Scheduled fire times checked for gaps.
    pub fire_times_checked: u64,
    /// What disagrees.
    pub violations: Vec<Violation>,
}

/// Audits a scheduler's ledger over a range. See the [module docs](self).
///
/// # Errors
///
/// The store's errors; nothing is written.
pub async fn audit(store: &dyn Store, params: &AuditParams) -> Result<AuditReport, StoreError> {
    let now = store.now().await?;
    let until = params.until.min(now);
    let purge_horizon = store.purge_horizon().await?;
    let since = purge_horizon.map_or(params.since, |h| params.since.max(h));
    let fires = ledger(store, since, until).await?;
    let details = job_details(store).await?;
    let names: HashMap<i64, String> = details.iter().map(|d| (d.job.id, d.job.spec.name.clone())).collect();
    let name_of = |id: i64| names.get(&id).cloned().unwrap_or_else(|| format!("#{id}"));
    let mut violations = duplicates(&fires, &name_of);
    let threshold_ms = i64::try_from(params.misfire_threshold.as_millis()).unwrap_or(i64::MAX);
    violations.extend(late_starts(&fires, &details, threshold_ms, &name_of));
    let waiting = overlap::waiting(&fires, &overlap::limit_keys(&details));
    violations.extend(stranded(&fires, &waiting, until, threshold_ms, &name_of));
    violations.extend(overlap::overlapped(&fires, &details, &name_of));
    violations.extend(overlap::over_limit(&fires, &details, &name_of));
    let standbys = standbys(store, until).await?;
    violations.extend(claimed_on_standby(&fires, &standbys, threshold_ms, &name_of));
    let (gaps, fire_times_checked) = gaps(&fires, &details, since, until);
    violations.extend(gaps);
    Ok(AuditReport {
        since,
        until,
        purge_horizon,
        fires: fires.len(),
        fire_times_checked,
        violations,
    })
}

/// The ledger's rows whose fire time is in `[since, until]`, every page.
pub(crate) async fn ledger(
    store: &dyn Store,
    since: Timestamp,
    until: Timestamp,
) -> Result<Vec<FireRecord>, StoreError> {
    let mut query = FireQuery::new();
    query.since = Some(since);
    query.until = Some(until);
    query.limit = 1_000;
    let mut fires = Vec::new();
    loop {
        let page = store.fires(&query).await?;
        let Some(last) = page.last() else { break };
        query.before_id = Some(last.id);
        fires.extend(page);
    }
    Ok(fires)
}

/// Every job of the scheduler with its executes.
pub(crate) async fn job_details(store: &dyn Store) -> Result<Vec<JobDetail>, StoreError> {
    let mut details = Vec::new();
    for job in store.list_jobs().await? {
        if let Some(d) = store.get_job(&job.spec.name).await? {
            details.push(d);
        }
    }
    Ok(details)
}

/// Calls `each` with every fire time in `[since, until)` that a trigger has
/// moved past (up to its last claimed fire), trigger by trigger, at most
/// [`MAX_FIRE_TIMES`] in all; returns how many. Fixed-delay triggers (no
/// grid) and triggers in error are left out, and so are times before a
/// trigger's start and its checkpoints.
pub(crate) fn expected_times(
    details: &[JobDetail],
    since: Timestamp,
    until: Timestamp,
    mut each: impl FnMut(&JobDetail, &crate::store::Execute, Timestamp),
) -> u64 {
    let mut checked = 0u64;
    for d in details {
        for e in &d.executes {
            if matches!(e.trigger.schedule(), Schedule::FixedDelay { .. }) || e.state == ExecuteState::Error {
                continue;
            }
            let Some(last) = e.fire_state.prev_fire_time else {
                continue;
            };
            let mut t = e.trigger.fire_time_after(since.saturating_add_millis(-1));
            while let Some(at) = t {
                // Up to the execute's last fire, and before `until`: the
                // ledger was read before it too.
                if at > last || at >= until || checked >= MAX_FIRE_TIMES {
                    break;
                }
                if at >= e.trigger.start() && !e.trigger.is_checkpoint(at) {
                    checked += 1;
                    each(d, e, at);
                }
                t = e.trigger.fire_time_after(at);
            }
        }
    }
    checked
}

/// The ledger's rows by fire: (execute, job, fire time).
fn by_fire(fires: &[FireRecord]) -> BTreeMap<(i64, i64, Timestamp), Vec<&FireRecord>> {
    let mut by_fire: BTreeMap<(i64, i64, Timestamp), Vec<&FireRecord>> = BTreeMap::new();
    for f in fires {
        by_fire
            .entry((f.execute_id, f.job_id, f.fire_time))
            .or_default()
            .push(f);
    }
    for rows in by_fire.values_mut() {
        rows.sort_by_key(|f| f.attempt);
    }
    by_fire
}

/// Attempts that started after an earlier attempt of the same fire succeeded.
fn duplicates(fires: &[FireRecord], name_of: &dyn Fn(i64) -> String) -> Vec<Violation> {
    let mut violations = Vec::new();
    for ((execute_id, job_id, fire_time), rows) in by_fire(fires) {
        let mut succeeded: Option<u32> = None;
        for f in rows {
            if let Some(first) = succeeded
                && f.started_at.is_some()
            {
                violations.push(Violation {
                    kind: ViolationKind::Duplicate,
                    job: name_of(job_id),
                    execute_id,
                    fire_time,
                    detail: format!("attempt {} ran after attempt {first} had succeeded", f.attempt),
                });
            }
            if f.state == FireState::Succeeded && succeeded.is_none() {
                succeeded = Some(f.attempt);
            }
        }
    }
    violations
}

/// A trigger's own first attempts that started past the threshold with no
/// misfire record for their time, or past its catch-up window.
fn late_starts(
    fires: &[FireRecord],
    details: &[JobDetail],
    threshold_ms: i64,
    name_of: &dyn Fn(i64) -> String,
) -> Vec<Violation> {
    let job_of_execute: HashMap<i64, i64> = details
        .iter()
        .flat_map(|d| d.executes.iter().map(|e| (e.id, e.job_id)))
        .collect();
    let catch_up_of: HashMap<i64, i64> = details
        .iter()
        .flat_map(|d| d.executes.iter())
        .filter_map(|e| Some((e.id, crate::store::millis_of(e.trigger.catch_up()?))))
        .collect();
    let mut violations = Vec::new();
    for ((execute_id, job_id, fire_time), rows) in by_fire(fires) {
        let own = job_of_execute.get(&execute_id) == Some(&job_id);
        let misfired = rows.iter().any(|f| f.state == FireState::Misfired);
        for f in rows {
            let Some(started) = f.started_at else { continue };
            // A backfill's first attempt runs when it is due, not at its
            // fire time; one that waited under an overlap policy when its
            // job's fire ended. A fire whose node died mid-run has a start
            // its handler may never have reached (recorded by a statement
            // that committed while the database's commits hung, its node
            // gone since): the run log tells whether it ran.
            let died = f.state == FireState::Abandoned
                || (f.state == FireState::Failed
                    && f.error.as_deref().is_some_and(|e| e.starts_with("node died mid-run")));
            if f.by_backfill() || f.by_overlap() || died {
                continue;
            }
            let late = started.as_millis() - f.fire_time.as_millis();
            if own && f.attempt == 1 && late > threshold_ms && !misfired {
                violations.push(Violation {
                    kind: ViolationKind::Late,
                    job: name_of(job_id),
                    execute_id,
                    fire_time,
                    detail: format!("fire {} started {late} ms late with no misfire record", f.id),
                });
            }
            if let Some(window) = catch_up_of.get(&execute_id).filter(|_| own && f.attempt == 1)
                && late > window.saturating_add(threshold_ms)
            {
                violations.push(Violation {
                    kind: ViolationKind::BeyondCatchUp,
                    job: name_of(job_id),
                    execute_id,
                    fire_time,
                    detail: format!(
                        "fire {} started {late} ms after its time, past the trigger's catch-up window of {window} ms",
                        f.id
                    ),
                });
            }
        }
    }
    violations
}

/// Pending fires (retries, late runs) still unclaimed past their due time and
/// the threshold.
fn stranded(
    fires: &[FireRecord],
    waiting: &std::collections::HashSet<i64>,
    until: Timestamp,
    threshold_ms: i64,
    name_of: &dyn Fn(i64) -> String,
) -> Vec<Violation> {
    fires
        .iter()
        .filter(|f| f.state == FireState::Pending && !waiting.contains(&f.id))
        .filter_map(|f| {
            let due = f.due_at?;
            let overdue = until.as_millis() - due.as_millis();
            (overdue > threshold_ms).then(|| Violation {
                kind: ViolationKind::Stranded,
                job: name_of(f.job_id),
                execute_id: f.execute_id,
                fire_time: f.fire_time,
                detail: format!(
                    "attempt {} (fire {}) was due {overdue} ms ago and never ran",
                    f.attempt, f.id
                ),
            })
        })
        .collect()
}

/// The scheduler's standby periods as its change log records them, oldest
/// first: from a pause to the next resume (or `until`).
async fn standbys(store: &dyn Store, until: Timestamp) -> Result<Vec<(Timestamp, Timestamp)>, StoreError> {
    let mut query = ChangeQuery::new();
    query.target = Some(store.scheduler().to_owned());
    query.limit = 1_000;
    let mut changes = Vec::new();
    loop {
        let page = store.change_log(&query).await?;
        let Some(last) = page.last() else { break };
        query.before_id = Some(last.id);
        changes.extend(page);
    }
    changes.reverse();
    let mut periods = Vec::new();
    let mut since: Option<Timestamp> = None;
    for c in changes {
        match c.action.as_str() {
            "scheduler.pause" => since = since.or(Some(c.at)),
            "scheduler.resume" => {
                if let Some(from) = since.take() {
                    periods.push((from, c.at));
                }
            }
            _ => {}
        }
    }
    if let Some(from) = since {
        periods.push((from, until));
    }
    Ok(periods)
}

/// Fires claimed on standby, later than `grace_ms` after the pause.
fn claimed_on_standby(
    fires: &[FireRecord],
    standbys: &[(Timestamp, Timestamp)],
    grace_ms: i64,
    name_of: &dyn Fn(i64) -> String,
) -> Vec<Violation> {
    fires
        .iter()
        .filter(|f| !matches!(f.state, FireState::Misfired | FireState::Pending))
        .filter_map(|f| {
            let (from, to) = standbys
                .iter()
                .find(|(from, to)| f.claimed_at > from.saturating_add_millis(grace_ms) && f.claimed_at < *to)?;
            Some(Violation {
                kind: ViolationKind::ClaimedOnStandby,
                job: name_of(f.job_id),
                execute_id: f.execute_id,
                fire_time: f.fire_time,
                detail: format!(
                    "fire {} (attempt {}) was claimed at {} while the scheduler was on standby from {from} to {to}",
                    f.id, f.attempt, f.claimed_at
                ),
            })
        })
        .collect()
}

/// Fire times a trigger has moved past (up to its last claimed fire, each of
/// which was claimed or recorded skipped in the transaction that moved the
/// row) with no ledger row; and how many times were checked.
fn gaps(fires: &[FireRecord], details: &[JobDetail], since: Timestamp, until: Timestamp) -> (Vec<Violation>, u64) {
    let mut covered: HashMap<i64, Vec<(Timestamp, Timestamp)>> = HashMap::new();
    for f in fires {
        covered
            .entry(f.execute_id)
            .or_default()
            .push((f.fire_time, f.skipped_until.unwrap_or(f.fire_time)));
    }
    let mut violations = Vec::new();
    let checked = expected_times(details, since, until, |d, e, at| {
        let covered = covered.get(&e.id).map_or(&[][..], Vec::as_slice);
        if !covered.iter().any(|(from, to)| *from <= at && at <= *to) {
            violations.push(Violation {
                kind: ViolationKind::Missing,
                job: d.job.spec.name.clone(),
                execute_id: e.id,
                fire_time: at,
                detail: "a scheduled fire time with no ledger row".to_owned(),
            });
        }
    });
    (violations, checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fire(id: i64, attempt: u32, state: FireState, started: Option<i64>) -> FireRecord {
        FireRecord {
            id,
            execute_id: 7,
            job_id: 3,
            fire_time: Timestamp::from_millis(1_000),
            attempt,
            owner: None,
            state,
            claimed_at: Timestamp::from_millis(900),
            started_at: started.map(Timestamp::from_millis),
            finished_at: None,
            timed_out_at: None,
            due_at: None,
            error: None,
            skipped_until: None,
            fire_count: 1,
        }
    }

    #[test]
    fn an_attempt_started_after_a_success_is_a_duplicate() {
        let name = |id: i64| format!("#{id}");
        let retried = [
            fire(1, 1, FireState::Failed, Some(1_000)),
            fire(2, 2, FireState::Succeeded, Some(1_100)),
        ];
        assert!(
            duplicates(&retried, &name).is_empty(),
            "a retry after a failure is no duplicate"
        );
        let twice = [
            fire(1, 1, FireState::Succeeded, Some(1_000)),
            fire(2, 2, FireState::Succeeded, Some(1_100)),
            fire(3, 3, FireState::Misfired, None),
        ];
        let found = duplicates(&twice, &name);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, ViolationKind::Duplicate);
        assert!(found[0].detail.contains("attempt 2"), "{}", found[0].detail);
    }

    #[test]
    fn a_retry_never_claimed_is_stranded() {
        let name = |id: i64| format!("#{id}");
        let mut retry = fire(2, 2, FireState::Pending, None);
        retry.due_at = Some(Timestamp::from_millis(10_000));
        let at = |ms| Timestamp::from_millis(ms);
        assert!(
            stranded(&[retry.clone()], &Default::default(), at(14_000), 5_000, &name).is_empty(),
            "not yet"
        );
        let found = stranded(&[retry], &Default::default(), at(16_000), 5_000, &name);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].kind, ViolationKind::Stranded);
    }
}
