//! Enqueued work in memory: its rows, the unique key's rule and its purge.

use crate::Timestamp;
use crate::store::{Enqueued, StoreError, Work, work_execute};

use super::db::Db;

/// A piece of enqueued work: what its fires share.
#[derive(Debug, Clone)]
pub(super) struct WorkRow {
    pub(super) scheduler: String,
    pub(super) job_id: i64,
    pub(super) payload: Option<String>,
    pub(super) trace_parent: Option<String>,
    pub(super) unique_key: Option<String>,
    pub(super) unique_until: Option<i64>,
    pub(super) created_at: i64,
}

impl Db {
    /// Enqueues `work` (see [`JobStore::enqueue`](crate::store::JobStore::enqueue)).
    pub(super) fn enqueue(&mut self, scheduler: &str, work: &Work, now: i64) -> Result<Enqueued, StoreError> {
        work.validate()?;
        let job_id = self.job_named(scheduler, &work.job)?.id;
        let now_at = Timestamp::from_millis(now);
        if let Some(unique) = &work.unique {
            let holder = self
                .work
                .iter()
                .find(|(_, w)| {
                    w.scheduler == scheduler && w.job_id == job_id && w.unique_key.as_ref() == Some(&unique.key)
                })
                .map(|(id, w)| (*id, w.unique_until));
            if let Some((holder, until)) = holder {
                let fires: Vec<_> = self
                    .fires
                    .values()
                    .filter(|f| f.record.execute_id == work_execute(holder))
                    .map(|f| (f.record.finished_at.is_none(), f.record.fire_time))
                    .collect();
                if fires.iter().any(|(open, _)| *open) || until.is_some_and(|u| u > now) {
                    return Ok(Enqueued::Duplicate {
                        key: unique.key.clone(),
                        work_id: Some(holder),
                        due_at: fires.first().map(|(_, t)| *t),
                    });
                }
                if let Some(w) = self.work.get_mut(&holder) {
                    w.unique_key = None;
                }
            }
        }
        let due = work.due.resolve(now_at).as_millis();
        let work_id = self.id();
        self.work.insert(
            work_id,
            WorkRow {
                scheduler: scheduler.to_owned(),
                job_id,
                payload: work.payload.clone(),
                trace_parent: work.trace_parent.clone(),
                unique_key: work.unique.as_ref().map(|u| u.key.clone()),
                unique_until: work.unique_until(now_at),
                created_at: now,
            },
        );
        let fire_id = self
            .insert_pending(scheduler, work_execute(work_id), job_id, due, 1, due, now)
            .expect("a new work's execute id has no fire yet");
        self.bump(scheduler);
        Ok(Enqueued::Queued {
            work_id,
            fire_id,
            due_at: Timestamp::from_millis(due),
        })
    }

    /// Deletes at most `limit` pieces of work enqueued before `before` whose
    /// fires have all ended and whose unique window has passed.
    pub(super) fn work_purge(&mut self, scheduler: &str, before: i64, now: i64, limit: usize) -> usize {
        let open: std::collections::HashSet<i64> = self
            .fires
            .values()
            .filter(|f| f.record.execute_id < 0 && f.record.finished_at.is_none())
            .map(|f| f.record.execute_id)
            .collect();
        let chosen: Vec<i64> = self
            .work
            .iter()
            .filter(|(id, w)| {
                w.scheduler == scheduler
                    && w.created_at < before
                    && w.unique_until.is_none_or(|u| u <= now)
                    && !open.contains(&work_execute(**id))
            })
            .map(|(id, _)| *id)
            .take(limit)
            .collect();
        for id in &chosen {
            self.work.remove(id);
        }
        chosen.len()
    }
}
