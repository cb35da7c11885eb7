//! The admin surface's side of the contract in memory: jobs, calendars and
//! history.

use crate::Timestamp;
use crate::calendar::CalendarDefinition;
use crate::store::rules::{self, CalendarSet};
use crate::store::{
    BackfillFire, Backfilled, CalendarRecord, CalendarStore, ChangeAction, Enqueued, ExecuteSpec, ExecuteState,
    FireRetry, FireState, Job, JobDetail, JobQuery, JobSpec, JobState, JobStore, MANUAL_EXECUTE, QueuedFire,
    StoreError, Work, backfill_attempt, check_backfill, check_name,
};
use async_trait::async_trait;

use super::db::{Change, Db};
use super::{MemoryStore, ms};

#[async_trait]
impl JobStore for MemoryStore {
    async fn create_job(&self, job: &JobSpec, executes: &[ExecuteSpec]) -> Result<Job, StoreError> {
        let scheduler = &*self.scheduler;
        check_name("scheduler name", scheduler)?;
        job.validate()?;
        let detail = format!("handler {}, {} trigger(s)", job.handler, executes.len());
        let change = self.change(ChangeAction::JobCreate, &job.name, &detail);
        self.step(|db, now| {
            let rows = db.new_rows(scheduler, executes, now)?;
            db.check_job_fits(scheduler, job, None)?;
            let id = db.id();
            let stored = Job {
                id,
                scheduler: scheduler.to_owned(),
                spec: job.clone(),
                state: JobState::Enabled,
                created_at: Timestamp::from_millis(now),
                updated_at: Timestamp::from_millis(now),
                version: 1,
            };
            db.jobs.insert(id, stored.clone());
            db.sched(scheduler).job_names.insert(job.name.clone(), id);
            db.insert_rows(scheduler, id, false, rows, now);
            db.changed(scheduler, now, change.on(id));
            Ok(stored)
        })
    }

    async fn get_job(&self, name: &str) -> Result<Option<JobDetail>, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.read(|db| db.job_named(scheduler, name).ok().map(|job| db.detail(job))))
    }

    async fn jobs_by_id(&self, ids: &[i64]) -> Result<Vec<Job>, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.read(|db| {
            ids.iter()
                .filter_map(|id| db.jobs.get(id))
                .filter(|j| j.scheduler == scheduler)
                .cloned()
                .collect()
        }))
    }

    async fn list_jobs(&self) -> Result<Vec<Job>, StoreError> {
        let mut query = JobQuery::new();
        query.limit = u32::MAX;
        self.jobs_page(&query).await
    }

    async fn jobs_page(&self, query: &JobQuery) -> Result<Vec<Job>, StoreError> {
        let search = query.search.as_deref().map(str::to_lowercase);
        Ok(self.read(|db| {
            let Some(sched) = db.sched_ref(&self.scheduler) else {
                return Vec::new();
            };
            sched
                .job_names
                .iter()
                .filter(|(name, _)| query.after.as_ref().is_none_or(|a| name.as_str() > a.as_str()))
                .filter_map(|(_, id)| db.jobs.get(id))
                .filter(|j| query.state.is_none_or(|s| j.state == s))
                .filter(|j| query.handler.as_ref().is_none_or(|h| &j.spec.handler == h))
                .filter(|j| {
                    search
                        .as_ref()
                        .is_none_or(|s| j.spec.name.to_lowercase().contains(s.as_str()))
                })
                .take(query.limit as usize)
                .cloned()
                .collect()
        }))
    }

    async fn update_job(
        &self,
        name: &str,
        job: &JobSpec,
        executes: Option<&[ExecuteSpec]>,
        expected_version: Option<i64>,
    ) -> Result<Job, StoreError> {
        let scheduler = &*self.scheduler;
        job.validate()?;
        let before = self
            .get_job(name)
            .await?
            .ok_or_else(|| Db::unknown_job(scheduler, name))?;
        let detail = rules::edit_detail(&before, job, executes);
        let change = self.change(ChangeAction::JobEdit, &job.name, &detail);
        self.step(|db, now| {
            let id = db.job_as_read(scheduler, name, expected_version)?;
            db.check_job_fits(scheduler, job, Some(name))?;
            let rows = executes.map(|e| db.new_rows(scheduler, e, now)).transpose()?;
            let stored = db.jobs.get_mut(&id).ok_or_else(|| Db::unknown_job(scheduler, name))?;
            stored.spec = job.clone();
            stored.version += 1;
            stored.updated_at = Timestamp::from_millis(now);
            let stored = stored.clone();
            let names = &mut db.sched(scheduler).job_names;
            names.remove(name);
            names.insert(job.name.clone(), id);
            if let Some(rows) = rows {
                db.executes.retain(|_, r| r.job_id != id);
                db.insert_rows(scheduler, id, stored.state == JobState::Paused, rows, now);
            }
            db.changed(scheduler, now, change.on(id));
            Ok(stored)
        })
    }

    async fn set_paused(&self, name: &str, paused: bool, expected_version: Option<i64>) -> Result<Job, StoreError> {
        let scheduler = &*self.scheduler;
        let action = if paused {
            ChangeAction::JobPause
        } else {
            ChangeAction::JobResume
        };
        let change = self.change(action, name, "");
        self.step(|db, now| {
            let id = db.job_as_read(scheduler, name, expected_version)?;
            let (from, to, state) = if paused {
                (ExecuteState::Waiting, ExecuteState::Paused, JobState::Paused)
            } else {
                (ExecuteState::Paused, ExecuteState::Waiting, JobState::Enabled)
            };
            let stored = db.jobs.get_mut(&id).ok_or_else(|| Db::unknown_job(scheduler, name))?;
            stored.state = state;
            stored.version += 1;
            stored.updated_at = Timestamp::from_millis(now);
            let stored = stored.clone();
            for row in db
                .executes
                .values_mut()
                .filter(|r| r.job_id == id && r.state == from.as_str())
            {
                row.state = to.as_str().to_owned();
                row.updated_at = now;
            }
            db.changed(scheduler, now, change.on(id));
            Ok(stored)
        })
    }

    async fn fire_now(&self, name: &str) -> Result<(i64, Timestamp), StoreError> {
        let scheduler = &*self.scheduler;
        let change = self.change(ChangeAction::JobTrigger, name, "by hand");
        self.step(|db, now| {
            let job = db.job_as_read(scheduler, name, None)?;
            let mut at = now;
            let fire = loop {
                match db.insert_pending(scheduler, MANUAL_EXECUTE, job, at, 1, at, now) {
                    Some(fire) => break fire,
                    None => at += 1,
                }
            };
            let detail = format!("fire {fire} by hand");
            db.changed(
                scheduler,
                now,
                Change {
                    target_id: Some(job),
                    detail,
                    ..change
                },
            );
            Ok((fire, Timestamp::from_millis(at)))
        })
    }

    async fn enqueue(&self, work: &Work) -> Result<Enqueued, StoreError> {
        let scheduler = &*self.scheduler;
        self.step(|db, now| db.enqueue(scheduler, work, now))
    }

    async fn delete_job(&self, name: &str, expected_version: Option<i64>) -> Result<(), StoreError> {
        let scheduler = &*self.scheduler;
        let handler = self.read(|db| db.job_named(scheduler, name).map(|j| j.spec.handler.clone()))?;
        let change = self.change(ChangeAction::JobDelete, name, &format!("handler {handler}"));
        self.step(|db, now| {
            let id = db.job_as_read(scheduler, name, expected_version)?;
            db.executes.retain(|_, r| r.job_id != id);
            db.jobs.remove(&id);
            db.sched(scheduler).job_names.remove(name);
            db.changed(scheduler, now, change.on(id));
            Ok(())
        })
    }

    async fn retry_fire(&self, fire_id: i64) -> Result<FireRetry, StoreError> {
        let scheduler = &*self.scheduler;
        let change = self.change(ChangeAction::FireRetry, "", "");
        Ok(self.step(|db, now| {
            let Some(fire) = db.fires.get(&fire_id).filter(|f| f.scheduler == scheduler).cloned() else {
                return FireRetry::NotFound;
            };
            let r = &fire.record;
            if let Some(why) = rules::unretryable(fire_id, r.state.as_str()) {
                return FireRetry::Refused(why);
            }
            let Some(job) = db.jobs.get(&r.job_id).cloned() else {
                return FireRetry::Refused("its job was deleted".to_owned());
            };
            if job.state == JobState::Paused {
                return FireRetry::Refused(format!(
                    "job \"{}\" is paused: resume it first, or fire it now",
                    job.spec.name
                ));
            }
            let time = r.fire_time.as_millis();
            let mut attempt = r.attempt;
            while let Some(id) = db.fire_keys.get(&(r.execute_id, r.job_id, time, attempt + 1)).copied() {
                let state = db.fires.get(&id).map_or(FireState::Failed, |f| f.record.state);
                if let Some(why) = rules::blocks_retry(id, state.as_str()) {
                    return FireRetry::Refused(why);
                }
                attempt += 1;
            }
            let Some(id) = db.insert_pending(scheduler, r.execute_id, r.job_id, time, attempt + 1, now, now) else {
                return FireRetry::Refused("an attempt of this fire exists".to_owned());
            };
            let detail = format!("fire {fire_id} ({}): attempt {} is fire {id}", r.state, attempt + 1);
            db.changed(
                scheduler,
                now,
                Change {
                    target: job.spec.name.clone(),
                    target_id: Some(job.id),
                    detail,
                    ..change
                },
            );
            FireRetry::Pending {
                fire_id: id,
                attempt: attempt + 1,
            }
        }))
    }

    async fn set_standby(&self, on: bool) -> Result<Option<Timestamp>, StoreError> {
        let scheduler = &*self.scheduler;
        let action = if on {
            ChangeAction::SchedulerPause
        } else {
            ChangeAction::SchedulerResume
        };
        let change = self.change(action, scheduler, "");
        Ok(self.step(|db, now| {
            let sched = db.sched(scheduler);
            sched.paused_at = if on { sched.paused_at.or(Some(now)) } else { None };
            let since = sched.paused_at;
            db.changed(scheduler, now, change);
            since.map(Timestamp::from_millis)
        }))
    }

    async fn backfill(&self, name: &str, fires: &[BackfillFire]) -> Result<Backfilled, StoreError> {
        let scheduler = &*self.scheduler;
        let change = self.change(ChangeAction::JobBackfill, name, "");
        self.step(|db, now| {
            let job = db.job_as_read(scheduler, name, None)?;
            let executes: Vec<i64> = db.executes.values().filter(|r| r.job_id == job).map(|r| r.id).collect();
            check_backfill(name, fires, &executes)?;
            let mut done = Backfilled::default();
            for f in fires {
                let time = f.fire_time.as_millis();
                let rows = (1..)
                    .map_while(|attempt| {
                        let id = db.fire_keys.get(&(f.execute_id, job, time, attempt))?;
                        Some((attempt, db.fires.get(id)?.record.state))
                    })
                    .collect::<Vec<_>>();
                let Some(attempt) = backfill_attempt(rows) else {
                    done.already += 1;
                    continue;
                };
                let Some(fire_id) =
                    db.insert_pending(scheduler, f.execute_id, job, time, attempt, f.due_at.as_millis(), now)
                else {
                    done.already += 1;
                    continue;
                };
                done.queued.push(QueuedFire {
                    fire_id,
                    execute_id: f.execute_id,
                    fire_time: f.fire_time,
                    attempt,
                });
            }
            let detail = done.detail(fires);
            db.changed(
                scheduler,
                now,
                Change {
                    target_id: Some(job),
                    detail,
                    ..change
                },
            );
            Ok(done)
        })
    }

    async fn standby(&self) -> Result<Option<Timestamp>, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.read(|db| {
            db.sched_ref(scheduler)
                .and_then(|s| s.paused_at)
                .map(Timestamp::from_millis)
        }))
    }
}

impl MemoryStore {
    /// Adds or replaces a calendar (with `only_new`, adds it only) and, in
    /// the same step, moves the triggers that use it.
    fn calendar_write(
        &self,
        scheduler: &str,
        name: &str,
        definition: &CalendarDefinition,
        only_new: bool,
        expected: Option<i64>,
    ) -> Result<CalendarRecord, StoreError> {
        rules::calendar_text(scheduler, name, definition)?;
        let change = self.change(ChangeAction::CalendarPut, name, "");
        self.step(|db, now| {
            let current = db.sched_ref(scheduler).and_then(|s| s.calendars.get(name)).cloned();
            let version = current.as_ref().map(|c| c.version);
            if only_new && current.is_some() {
                return Err(StoreError::DuplicateCalendar {
                    scheduler: scheduler.to_owned(),
                    name: name.to_owned(),
                });
            }
            if let Some(expected) = expected.filter(|e| version != Some(*e)) {
                return Err(StoreError::Stale {
                    kind: "calendar",
                    name: name.to_owned(),
                    expected,
                    current: version,
                });
            }
            let mut definitions = db.definitions(scheduler);
            definitions.insert(name.to_owned(), definition.clone());
            let users = rules::changed_calendars(&definitions, name)?;
            let set = CalendarSet::resolve(&definitions, users.iter().map(String::as_str));
            let mut moves = Vec::new();
            for row in db.executes.values().filter(|r| {
                r.scheduler == scheduler
                    && r.columns.calendar.as_ref().is_some_and(|c| users.contains(c))
                    && ["waiting", "paused", "complete"].contains(&r.state.as_str())
            }) {
                // A row that cannot be read is left to the poll, which marks it.
                let Ok(execute) = row.decode(&set) else { continue };
                let paused = db.jobs.get(&row.job_id).is_some_and(|j| j.state == JobState::Paused);
                if let Some(moved) = rules::recalendared(&execute, paused, Timestamp::from_millis(now)) {
                    moves.push((row.id, moved));
                }
            }
            for (id, (state, next)) in &moves {
                if let Some(row) = db.executes.get_mut(id) {
                    row.state = state.as_str().to_owned();
                    row.next = ms(*next);
                    row.calendar_stamp += 1;
                    row.updated_at = now;
                }
            }
            let record = CalendarRecord {
                name: name.to_owned(),
                definition: definition.clone(),
                created_at: current.as_ref().map_or(Timestamp::from_millis(now), |c| c.created_at),
                updated_at: Timestamp::from_millis(now),
                version: version.map_or(1, |v| v + 1),
            };
            db.sched(scheduler).calendars.insert(name.to_owned(), record.clone());
            let detail = rules::calendar_detail(current.is_some(), definition, moves.len());
            db.changed(scheduler, now, Change { detail, ..change });
            Ok(record)
        })
    }
}

#[async_trait]
impl CalendarStore for MemoryStore {
    async fn put_calendar(
        &self,
        name: &str,
        definition: &CalendarDefinition,
        expected_version: Option<i64>,
    ) -> Result<CalendarRecord, StoreError> {
        let scheduler = &*self.scheduler;
        self.calendar_write(scheduler, name, definition, false, expected_version)
    }

    async fn add_calendar(&self, name: &str, definition: &CalendarDefinition) -> Result<CalendarRecord, StoreError> {
        let scheduler = &*self.scheduler;
        self.calendar_write(scheduler, name, definition, true, None)
    }

    async fn get_calendar(&self, name: &str) -> Result<Option<CalendarRecord>, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.read(|db| db.sched_ref(scheduler).and_then(|s| s.calendars.get(name)).cloned()))
    }

    async fn list_calendars(&self) -> Result<Vec<CalendarRecord>, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.read(|db| {
            db.sched_ref(scheduler)
                .map(|s| s.calendars.values().cloned().collect())
                .unwrap_or_default()
        }))
    }

    async fn delete_calendar(&self, name: &str, expected_version: Option<i64>) -> Result<(), StoreError> {
        let scheduler = &*self.scheduler;
        let change = self.change(ChangeAction::CalendarDelete, name, "");
        self.step(|db, now| {
            let Some(current) = db.sched_ref(scheduler).and_then(|s| s.calendars.get(name)).cloned() else {
                return Err(StoreError::UnknownCalendar {
                    scheduler: scheduler.to_owned(),
                    name: name.to_owned(),
                });
            };
            if let Some(expected) = expected_version.filter(|e| *e != current.version) {
                return Err(StoreError::Stale {
                    kind: "calendar",
                    name: name.to_owned(),
                    expected,
                    current: Some(current.version),
                });
            }
            let mut users: Vec<String> = db
                .executes
                .values()
                .filter(|r| r.scheduler == scheduler && r.columns.calendar.as_deref() == Some(name))
                .filter_map(|r| db.jobs.get(&r.job_id))
                .map(|j| format!("job {}", j.spec.name))
                .collect();
            users.sort();
            users.dedup();
            let built_on = db.sched_ref(scheduler).map(|s| {
                s.calendars
                    .values()
                    .filter(|c| c.definition.base.as_deref() == Some(name))
                    .map(|c| format!("calendar {}", c.name))
                    .collect::<Vec<_>>()
            });
            users.extend(built_on.unwrap_or_default());
            if !users.is_empty() {
                return Err(StoreError::CalendarInUse {
                    name: name.to_owned(),
                    users,
                });
            }
            db.sched(scheduler).calendars.remove(name);
            db.changed(scheduler, now, change);
            Ok(())
        })
    }
}
