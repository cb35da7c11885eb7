//! The audit's overlap checks: fires that ran beside another fire of their
//! job against their trigger's overlap policy, and the pending fires that
//! wait, rightly, for one to end.

use std::collections::{HashMap, HashSet};

use super::{Violation, ViolationKind};
use crate::store::{FireRecord, FireState, JobDetail};
use crate::trigger::Overlap;

/// A trigger's own fires that started while another fire of their job was
/// running (from its start to its end), where the trigger's overlap policy,
/// or its job's rule, forbids it. The other fire may be any of the job's
/// (by hand, of another trigger); a fire started at the instant another
/// ended does not overlap it.
pub(super) fn overlapped(
    fires: &[FireRecord],
    details: &[JobDetail],
    name_of: &dyn Fn(i64) -> String,
) -> Vec<Violation> {
    overlapped_runs(fires, &exclusive_executes(details), name_of)
}

/// The executes whose fires must not run beside another fire of their job:
/// by id, their job's id and the rule's name.
fn exclusive_executes(details: &[JobDetail]) -> HashMap<i64, (i64, String)> {
    let mut exclusive: HashMap<i64, (i64, String)> = HashMap::new();
    for d in details {
        for e in &d.executes {
            match Overlap::effective(e.trigger.overlap(), d.job.spec.allow_concurrent) {
                Some(Overlap::Allow) => {}
                None => {
                    exclusive.insert(e.id, (d.job.id, "the job disallows concurrency".to_owned()));
                }
                Some(policy) => {
                    exclusive.insert(e.id, (d.job.id, format!("the trigger's overlap policy is {policy}")));
                }
            }
        }
    }
    exclusive
}

/// How far one fire's recorded finish may pass the next one's start
/// without an overlap: both are the running nodes' estimates of database
/// time, each behind it by up to a clock reading's round trip, so two nodes'
/// may disagree by a few milliseconds about fires that ran one after the
/// other. (The run log checker judges overlaps by the handlers' runs.)
const CLOCK_SLACK_MS: i64 = 25;

/// The fires of `exclusive` executes that started while another fire of
/// their job ran.
fn overlapped_runs(
    fires: &[FireRecord],
    exclusive: &HashMap<i64, (i64, String)>,
    name_of: &dyn Fn(i64) -> String,
) -> Vec<Violation> {
    let mut runs_of: HashMap<i64, Vec<&FireRecord>> = HashMap::new();
    for f in fires.iter().filter(|f| f.started_at.is_some()) {
        runs_of.entry(f.job_id).or_default().push(f);
    }
    let mut violations = Vec::new();
    for f in fires {
        let (Some(started), Some((job_id, rule))) = (f.started_at, exclusive.get(&f.execute_id)) else {
            continue;
        };
        if f.job_id != *job_id {
            continue; // a chained child's fire, under the child's own rule
        }
        let beside = runs_of.get(job_id).into_iter().flatten().find(|g| {
            g.id != f.id
                && g.started_at.is_some_and(|s| s <= started)
                && g.finished_at
                    .is_none_or(|end| end.as_millis() > started.as_millis() + CLOCK_SLACK_MS)
                && (g.started_at != Some(started) || g.id < f.id)
        });
        if let Some(g) = beside {
            violations.push(Violation {
                kind: ViolationKind::Overlapped,
                job: name_of(f.job_id),
                execute_id: f.execute_id,
                fire_time: f.fire_time,
                detail: format!(
                    "fire {} started at {started} while fire {} of the job ran (from {}{}), though {rule}",
                    f.id,
                    g.id,
                    g.started_at.map(|s| s.to_string()).unwrap_or_default(),
                    g.finished_at.map(|e| format!(" to {e}")).unwrap_or_default(),
                ),
            });
        }
    }
    violations
}

/// Fires of jobs with a concurrency limit that started while their key had
/// as many fires running as their job's limit (a chained child's fire,
/// claimed with its parent's success, is not held to it, but counts).
pub(super) fn over_limit(
    fires: &[FireRecord],
    details: &[JobDetail],
    name_of: &dyn Fn(i64) -> String,
) -> Vec<Violation> {
    let mut limit_of: HashMap<i64, (String, u32)> = HashMap::new();
    let mut own_executes: HashMap<i64, i64> = HashMap::new();
    for d in details {
        if let (Some(key), Some(limit)) = (d.job.spec.limit_key(), &d.job.spec.limit) {
            limit_of.insert(d.job.id, (key, limit.max));
        }
        for e in &d.executes {
            own_executes.insert(e.id, d.job.id);
        }
    }
    over_limit_runs(fires, &limit_of, &own_executes, name_of)
}

/// [`over_limit`] on the jobs' resolved keys and limits, by job id, and the
/// executes' jobs.
fn over_limit_runs(
    fires: &[FireRecord],
    limit_of: &HashMap<i64, (String, u32)>,
    own_executes: &HashMap<i64, i64>,
    name_of: &dyn Fn(i64) -> String,
) -> Vec<Violation> {
    let mut runs_of: HashMap<&str, Vec<&FireRecord>> = HashMap::new();
    for f in fires.iter().filter(|f| f.started_at.is_some()) {
        if let Some((key, _)) = limit_of.get(&f.job_id) {
            runs_of.entry(key.as_str()).or_default().push(f);
        }
    }
    let mut violations = Vec::new();
    for f in fires {
        let (Some(started), Some((key, max))) = (f.started_at, limit_of.get(&f.job_id)) else {
            continue;
        };
        let child = !f.by_hand() && own_executes.get(&f.execute_id).is_some_and(|job| *job != f.job_id);
        if child {
            continue;
        }
        let beside: Vec<i64> = runs_of[key.as_str()]
            .iter()
            .filter(|g| {
                g.id != f.id
                    && g.started_at
                        .is_some_and(|s| s < started || (s == started && g.id < f.id))
                    && g.finished_at
                        .is_none_or(|end| end.as_millis() > started.as_millis() + CLOCK_SLACK_MS)
            })
            .map(|g| g.id)
            .collect();
        if beside.len() >= *max as usize {
            violations.push(Violation {
                kind: ViolationKind::OverLimit,
                job: name_of(f.job_id),
                execute_id: f.execute_id,
                fire_time: f.fire_time,
                detail: format!(
                    "fire {} started at {started} while {} fires of concurrency key {key:?} ran ({beside:?}); its limit is {max}",
                    f.id,
                    beside.len()
                ),
            });
        }
    }
    violations
}

/// The resolved concurrency keys of the jobs that have one, by job id.
pub(super) fn limit_keys(details: &[JobDetail]) -> HashMap<i64, String> {
    details
        .iter()
        .filter_map(|d| Some((d.job.id, d.job.spec.limit_key()?)))
        .collect()
}

/// The pending fires that wait under an overlap policy or a concurrency
/// limit while their job, or their job's key, has a fire claimed or
/// running, or behind an older waiting fire of their trigger: not
/// stranded, however long they wait.
pub(super) fn waiting(fires: &[FireRecord], keys: &HashMap<i64, String>) -> HashSet<i64> {
    let open = || {
        fires
            .iter()
            .filter(|f| matches!(f.state, FireState::Claimed | FireState::Running))
    };
    let busy: HashSet<i64> = open().map(|f| f.job_id).collect();
    let busy_keys: HashSet<&String> = open().filter_map(|f| keys.get(&f.job_id)).collect();
    let mut oldest: HashMap<i64, (crate::time::Timestamp, i64)> = HashMap::new();
    for f in fires.iter().filter(|f| f.state == FireState::Pending && f.by_overlap()) {
        let entry = oldest.entry(f.execute_id).or_insert((f.fire_time, f.id));
        *entry = (*entry).min((f.fire_time, f.id));
    }
    fires
        .iter()
        .filter(|f| f.state == FireState::Pending && f.by_overlap())
        .filter(|f| {
            busy.contains(&f.job_id)
                || keys.get(&f.job_id).is_some_and(|k| busy_keys.contains(k))
                || oldest.get(&f.execute_id) != Some(&(f.fire_time, f.id))
        })
        .map(|f| f.id)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;

    fn run(id: i64, execute_id: i64, started: i64, finished: Option<i64>) -> FireRecord {
        FireRecord {
            id,
            execute_id,
            job_id: 3,
            fire_time: Timestamp::from_millis(started),
            attempt: 1,
            owner: None,
            state: if finished.is_some() {
                FireState::Succeeded
            } else {
                FireState::Running
            },
            claimed_at: Timestamp::from_millis(started),
            started_at: Some(Timestamp::from_millis(started)),
            finished_at: finished.map(Timestamp::from_millis),
            timed_out_at: None,
            due_at: None,
            error: None,
            skipped_until: None,
            fire_count: 1,
        }
    }

    #[test]
    fn a_fire_that_starts_while_its_job_runs_overlaps_unless_its_trigger_allows_it() {
        let name = |id: i64| format!("#{id}");
        // Execute 7 skips overlaps; execute 8 (the same job) allows them.
        let exclusive = HashMap::from([(7, (3, "the trigger's overlap policy is skip".to_owned()))]);
        let apart = [run(1, 7, 1_000, Some(2_000)), run(2, 7, 2_000, Some(3_000))];
        assert!(
            overlapped_runs(&apart, &exclusive, &name).is_empty(),
            "one after the other"
        );
        let beside = [run(1, 8, 1_000, None), run(2, 7, 1_500, Some(3_000))];
        let found = overlapped_runs(&beside, &exclusive, &name);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, ViolationKind::Overlapped);
        assert!(
            found[0].detail.contains("while fire 1 of the job ran"),
            "{}",
            found[0].detail
        );
        let allowed = [run(1, 7, 1_000, Some(3_000)), run(2, 8, 1_500, Some(2_000))];
        assert!(
            overlapped_runs(&allowed, &exclusive, &name).is_empty(),
            "the allowing trigger's fire"
        );
    }

    #[test]
    fn a_fire_that_starts_with_its_key_full_is_over_the_limit() {
        let name = |id: i64| format!("#{id}");
        let mut other = run(2, 8, 1_200, Some(2_500));
        other.job_id = 4;
        let limits = HashMap::from([(3, ("tenant:a".to_owned(), 2)), (4, ("tenant:a".to_owned(), 2))]);
        let executes = HashMap::from([(7, 3), (8, 4)]);
        let two = [run(1, 7, 1_000, Some(2_000)), other.clone()];
        assert!(
            over_limit_runs(&two, &limits, &executes, &name).is_empty(),
            "two of two"
        );
        let three = [run(1, 7, 1_000, Some(2_000)), other, run(3, 7, 1_500, Some(1_600))];
        let found = over_limit_runs(&three, &limits, &executes, &name);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, ViolationKind::OverLimit);
        assert!(found[0].detail.starts_with("fire 3 "), "{}", found[0].detail);
    }

    #[test]
    fn a_fire_waiting_behind_a_running_one_is_not_stranded() {
        let mut first = run(5, 7, 1_000, None);
        first.state = FireState::Pending;
        first.started_at = None;
        first.due_at = Some(first.fire_time);
        let mut next = first.clone();
        next.id = 6;
        next.fire_time = Timestamp::from_millis(2_000);
        next.due_at = Some(next.fire_time);
        let running = run(4, 9, 500, None);
        let all = [running, first.clone(), next.clone()];
        let none = HashMap::new();
        assert_eq!(waiting(&all, &none).len(), 2);
        // Nothing runs: the oldest should have started; the next waits behind it.
        assert_eq!(waiting(&[first.clone(), next.clone()], &none), HashSet::from([6]));
        // Another job of its concurrency key runs.
        let mut other = run(8, 11, 500, None);
        other.job_id = 9;
        let keys = HashMap::from([(3, "k".to_owned()), (9, "k".to_owned())]);
        assert_eq!(waiting(&[first, next, other], &keys).len(), 2);
    }
}
