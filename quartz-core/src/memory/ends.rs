//! How a fire ends in memory: one [`FireEnd`], fenced to its node, with
//! what follows it (a pending retry or late run, a chain).

use crate::Timestamp;
use crate::store::rules;
use crate::store::{ChainedFire, FireEnd, FireState, FollowUp, JobState, LateRun, NodeRef};

use super::db::{Db, Fire, OPEN};

impl Db {
    /// The next attempt of a fire, pending from `due`; none when it exists
    /// (or, with `one_per_execute`, when a pending fire of the same execute
    /// and job does).
    fn next_pending(&mut self, fire: &Fire, due: i64, one_per_execute: bool, now: i64) -> FollowUp {
        let r = &fire.record;
        let pending_of_same = self.fires.values().any(|f| {
            f.record.state == FireState::Pending && f.record.execute_id == r.execute_id && f.record.job_id == r.job_id
        });
        if one_per_execute && pending_of_same {
            return FollowUp::Recorded;
        }
        let time = r.fire_time.as_millis();
        match self.insert_pending(&fire.scheduler, r.execute_id, r.job_id, time, r.attempt + 1, due, now) {
            Some(fire_id) => FollowUp::Pending {
                fire_id,
                due_at: Timestamp::from_millis(due),
            },
            None => FollowUp::Recorded,
        }
    }

    /// The fires of an execute claimed and not started whose time is after
    /// `now`, deleted: the row took an edited schedule (see
    /// [`ExecuteCas::recomputes`](crate::store::ExecuteCas::recomputes)).
    pub(super) fn unclaim_ahead(&mut self, execute_id: i64, now: i64) {
        let ahead: Vec<i64> = self
            .fires
            .values()
            .map(|f| &f.record)
            .filter(|r| r.execute_id == execute_id && r.state == FireState::Claimed && r.fire_time.as_millis() > now)
            .map(|r| r.id)
            .collect();
        for id in ahead {
            self.delete_fire(id);
        }
    }

    /// One fire's end (see [`FireEnd`]), fenced to `node`.
    pub(super) fn end_one(&mut self, id: i64, node: &NodeRef, end: &FireEnd, now: i64) -> FollowUp {
        let (from, to): (&[FireState], Option<FireState>) = match end {
            FireEnd::Succeeded { .. } => (&[FireState::Running], Some(FireState::Succeeded)),
            FireEnd::Failed { .. } => (&[FireState::Running], Some(FireState::Failed)),
            FireEnd::Misfired { .. } => (OPEN, Some(FireState::Misfired)),
            FireEnd::Skipped { .. } => (&[FireState::Claimed], Some(FireState::Skipped)),
            FireEnd::Refused { .. } => (&[FireState::Claimed], Some(FireState::Failed)),
            FireEnd::Released => (&[FireState::Claimed], None),
        };
        let Some(fire) = self.held(id, from, Some(node)) else {
            return FollowUp::NotOwned;
        };
        let r = &mut fire.record;
        let Some(to) = to else {
            r.owner = None;
            return FollowUp::Recorded;
        };
        r.state = to;
        r.finished_at = Some(Timestamp::from_millis(now));
        r.error = match end {
            FireEnd::Failed { error, .. } => Some(rules::truncate(error)),
            FireEnd::Misfired { reason, .. } | FireEnd::Skipped { reason } | FireEnd::Refused { reason } => {
                Some(rules::truncate(reason))
            }
            _ => None,
        };
        if matches!(end, FireEnd::Misfired { .. }) {
            r.started_at = None;
        }
        // The handler's own start and finish, as its node saw them.
        if let FireEnd::Succeeded { ran: Some(ran), .. } | FireEnd::Failed { ran: Some(ran), .. } = end {
            r.started_at = Some(ran.started_at);
            r.finished_at = Some(ran.finished_at);
        }
        let fire = fire.clone();
        match end {
            FireEnd::Failed {
                retry_in: Some(after), ..
            } => {
                let due = now.saturating_add(i64::try_from(after.as_millis()).unwrap_or(i64::MAX));
                self.next_pending(&fire, due, false, now)
            }
            FireEnd::Misfired {
                run_late: Some(late), ..
            } => self.next_pending(&fire, now, *late == LateRun::OnePerExecute, now),
            FireEnd::Succeeded { .. }
                if crate::mutants::on("retry-after-success")
                    && self
                        .jobs
                        .get(&fire.record.job_id)
                        .is_some_and(|j| j.spec.retry.max_attempts > fire.record.attempt) =>
            {
                self.next_pending(&fire, now, false, now)
            }
            FireEnd::Succeeded { chain: true, .. } => FollowUp::Chained(self.chain(&fire, node, now)),
            _ => FollowUp::Recorded,
        }
    }

    /// A succeeded fire's chain: one fire of each child job, claimed by
    /// `node`, pending due at the fire time when the child waits for room
    /// (it disallows concurrency or shares a limit), or recorded skipped
    /// when the child is paused.
    fn chain(&mut self, parent: &Fire, node: &NodeRef, now: i64) -> Vec<ChainedFire> {
        let r = &parent.record;
        let Some(name) = self.jobs.get(&r.job_id).map(|j| j.spec.name.clone()) else {
            return Vec::new();
        };
        let children: Vec<(i64, JobState, bool)> = self
            .jobs
            .values()
            .filter(|j| j.scheduler == parent.scheduler && j.spec.parent.as_deref() == Some(name.as_str()))
            .map(|j| (j.id, j.state, !j.spec.allow_concurrent || j.spec.limit_key().is_some()))
            .collect();
        let time = r.fire_time.as_millis();
        let mut chained = Vec::new();
        for (child, state, waits) in children {
            let key = (r.execute_id, child, time, 1);
            if state == JobState::Enabled && waits {
                if self
                    .insert_pending(&parent.scheduler, r.execute_id, child, time, 1, time, now)
                    .is_some()
                    && let Some(id) = self.fire_keys.get(&key).copied()
                {
                    chained.push(ChainedFire {
                        fire_id: id,
                        job_id: child,
                        waits_from: Some(r.fire_time),
                    });
                }
                continue;
            }
            let as_state = if state == JobState::Enabled {
                FireState::Claimed
            } else {
                FireState::Skipped
            };
            if let Some(id) = self.insert_fire(
                &parent.scheduler,
                r.execute_id,
                child,
                time,
                1,
                Some(node),
                as_state,
                now,
            ) && as_state == FireState::Skipped
                && let Some(f) = self.fires.get_mut(&id)
            {
                f.record.error = Some("the child job is paused".to_owned());
                f.record.finished_at = Some(Timestamp::from_millis(now));
            }
            if let Some(id) = self.fire_keys.get(&key).copied()
                && self.held(id, &[FireState::Claimed], Some(node)).is_some()
            {
                chained.push(ChainedFire {
                    fire_id: id,
                    job_id: child,
                    waits_from: None,
                });
            }
        }
        chained.sort_by_key(|c| c.fire_id);
        chained
    }
}
