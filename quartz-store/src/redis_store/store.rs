//! [`Store`] on Redis: jobs, history, the change log and calendars. The
//! computations (first fire times, a calendar's rescheduling) run here, on
//! rows read first; the script that writes checks that what they were
//! computed from is unchanged (the calendars' version, each row's fire
//! times) and otherwise answers "retry", and the call runs again.

use async_trait::async_trait;
use quartz_core::Timestamp;
use quartz_core::calendar::CalendarDefinition;
use quartz_core::store::{
    BackfillFire, Backfilled, CalendarRecord, CalendarStore, ChangeAction, Due, Enqueued, ExecuteSpec, FireRetry, Job,
    JobDetail, JobQuery, JobSpec, JobStore, QueuedFire, RejectedRow, SharedStore, Store, StoreError, Work, check_name,
    millis_of,
};
use serde_json::{Value, json};

use super::RedisStore;
use super::decode::{self, Rejected};
use super::script::{Record, flag, ms, num, opt};
use crate::common::{self, CalendarSet, NewExecute, by_name, truncate};

/// How many times a change computed on rows that moved meanwhile is tried.
pub(super) const TRIES: usize = 5;

/// What a script that changes a job or a calendar answers.
pub(super) enum Answer {
    Ok,
    Retry,
}

fn job_fields(job: &JobSpec) -> Value {
    let bit = |b: bool| Value::String(if b { "1" } else { "0" }.to_owned());
    json!({
        "name": job.name,
        "handler": job.handler,
        "payload": job.payload,
        "description": job.description,
        "requests_recovery": bit(job.requests_recovery),
        "allow_concurrent": bit(job.allow_concurrent),
        "timeout_ms": opt(job.timeout.map(millis_of)),
        "max_attempts": num(job.retry.max_attempts),
        "backoff_ms": num(millis_of(job.retry.backoff)),
        "backoff_max_ms": opt(job.retry.backoff_max.map(millis_of)),
        "parent_job": job.parent.clone().unwrap_or_default(),
        "concurrency_limit": job.limit.as_ref().map_or(String::new(), |l| l.max.to_string()),
        "concurrency_key": job.limit.as_ref().map_or(String::new(), |l| l.key.clone()),
        "limit_key": job.limit_key().unwrap_or_default(),
    })
}

fn execute_fields(new: &NewExecute) -> Value {
    let c = &new.columns;
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    json!({
        "kind": c.kind,
        "cron_expression": text(&c.cron_expression),
        "time_zone": text(&c.time_zone),
        "interval_ms": opt(c.interval_ms),
        "start_time": num(c.start_time),
        "end_time": opt(c.end_time),
        "repeat_limit": opt(c.repeat_limit),
        "misfire_policy": c.misfire_policy,
        "priority": num(new.priority),
        "schedule_sig": num(new.signature),
        "calendar": text(&c.calendar),
        "dst_skipped": text(&c.dst_skipped),
        "dst_repeated": text(&c.dst_repeated),
        "jitter_ms": opt(c.jitter_ms),
        "jitter_seed": opt(c.jitter_seed),
        "catch_up_ms": opt(c.catch_up_ms),
        "overlap": text(&c.overlap),
        "next_fire_time": ms(new.first),
    })
}

impl RedisStore {
    /// The change log's row of a change, as made by this handle's actor.
    pub(super) fn change(&self, action: ChangeAction, target: &str, detail: &str) -> Value {
        json!({
            "actor": &*self.actor,
            "action": action.as_str(),
            "target": target,
            "detail": truncate(detail),
        })
    }

    /// Maps a script's refusal to the store's error.
    pub(super) fn answer(scheduler: &str, name: &str, reply: &[String]) -> Result<Answer, StoreError> {
        let arg = || reply.get(1).cloned().unwrap_or_default();
        match reply.first().map(String::as_str) {
            Some("ok") => Ok(Answer::Ok),
            Some("retry") => Ok(Answer::Retry),
            Some("duplicate") => Err(StoreError::DuplicateJob {
                scheduler: scheduler.to_owned(),
                name: name.to_owned(),
            }),
            Some("calendar_exists") => Err(StoreError::DuplicateCalendar {
                scheduler: scheduler.to_owned(),
                name: name.to_owned(),
            }),
            Some("unknown_job") => Err(StoreError::UnknownJob {
                scheduler: scheduler.to_owned(),
                name: arg(),
            }),
            Some("stale") => {
                let number = |i: usize| reply.get(i).and_then(|v| v.parse::<i64>().ok());
                Err(StoreError::Stale {
                    kind: if arg() == "calendar" { "calendar" } else { "job" },
                    name: name.to_owned(),
                    expected: number(3).unwrap_or_default(),
                    current: number(2),
                })
            }
            Some("unknown_calendar") => Err(StoreError::UnknownCalendar {
                scheduler: scheduler.to_owned(),
                name: arg(),
            }),
            Some("in_use") => {
                let (mut jobs, mut calendars): (Vec<String>, Vec<String>) =
                    reply[1..].iter().cloned().partition(|u| u.starts_with("job "));
                jobs.sort();
                calendars.sort();
                jobs.extend(calendars);
                Err(StoreError::CalendarInUse {
                    name: name.to_owned(),
                    users: jobs,
                })
            }
            other => Err(StoreError::Database {
                reason: format!("unexpected answer from the Redis script: {other:?}"),
            }),
        }
    }

    /// New triggers' rows, computed now, with the calendars' version they
    /// were computed under.
    async fn new_rows(
        &self,
        scheduler: &str,
        executes: &[ExecuteSpec],
    ) -> Result<(Vec<Value>, Value, String), StoreError> {
        let named: Vec<&str> = executes.iter().filter_map(|e| e.trigger.calendar_name()).collect();
        let (set, version) = if named.is_empty() {
            (CalendarSet::default(), String::new())
        } else {
            let snapshot = self.calendar_snapshot(scheduler, false).await?;
            let definitions = by_name(snapshot.records);
            if let Some(missing) = named.iter().find(|n| !definitions.contains_key(**n)) {
                return Err(StoreError::UnknownCalendar {
                    scheduler: scheduler.to_owned(),
                    name: (*missing).to_owned(),
                });
            }
            (
                CalendarSet::resolve(&definitions, named.iter().copied()),
                snapshot.version,
            )
        };
        let now = self.clock().await?;
        let rows = common::new_executes(executes, &set, now)?;
        Ok((rows.iter().map(execute_fields).collect(), json!(named), version))
    }

    /// Runs a job change whose triggers are computed first, again while the
    /// calendars move under it.
    async fn job_change(
        &self,
        scheduler: &str,
        command: &str,
        name: &str,
        executes: Option<&[ExecuteSpec]>,
        mut args: Value,
    ) -> Result<(), StoreError> {
        for _ in 0..TRIES {
            if let Some(executes) = executes {
                let (rows, names, version) = self.new_rows(scheduler, executes).await?;
                args["executes"] = Value::Array(rows);
                args["calendars"] = names;
                args["calendars_version"] = Value::String(version);
            }
            let reply: Vec<String> = self.write(scheduler, command, &args).await?;
            if let Answer::Ok = Self::answer(scheduler, name, &reply)? {
                return Ok(());
            }
        }
        Err(StoreError::Conflict {
            reason: format!("the calendars of scheduler {scheduler:?} kept changing; try again"),
        })
    }

    async fn job_named(&self, scheduler: &str, name: &str) -> Result<Option<Job>, StoreError> {
        let records: Vec<Record> = self
            .run(scheduler, 0, "job", &json!({ "name": name, "executes": "" }))
            .await?;
        records.first().map(|r| decode::job(r, scheduler)).transpose()
    }

    pub(super) async fn require_job(&self, scheduler: &str, name: &str) -> Result<Job, StoreError> {
        self.job_named(scheduler, name)
            .await?
            .ok_or_else(|| StoreError::UnknownJob {
                scheduler: scheduler.to_owned(),
                name: name.to_owned(),
            })
    }

    /// Puts an execute back in the indexes its fields call for (the poll's
    /// due set, the running set, ...), after its hash ([`Keys::execute`](super::Keys::execute))
    /// was edited by hand, as an operator may edit a SQL row; `false` when
    /// there is no such execute.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when the server cannot be reached.
    pub async fn reindex_execute(&self, scheduler: &str, execute_id: i64) -> Result<bool, StoreError> {
        let reply: i64 = self
            .write(scheduler, "reindex_execute", &json!({ "id": num(execute_id) }))
            .await?;
        Ok(reply == 1)
    }

    fn jobs(records: &[Record], scheduler: &str) -> Result<Vec<Job>, StoreError> {
        records.iter().map(|r| decode::job(r, scheduler)).collect()
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.clock().await
    }

    fn scheduler(&self) -> &str {
        &self.scheduler
    }

    fn scoped(&self, scheduler: &str) -> SharedStore {
        std::sync::Arc::new(RedisStore {
            scheduler: scheduler.into(),
            ..self.clone()
        })
    }

    fn acting_as(&self, actor: &str) -> SharedStore {
        std::sync::Arc::new(RedisStore {
            actor: common::actor_name(actor).into(),
            ..self.clone()
        })
    }
}

#[async_trait]
impl JobStore for RedisStore {
    async fn create_job(&self, job: &JobSpec, executes: &[ExecuteSpec]) -> Result<Job, StoreError> {
        let scheduler = self.scheduler();
        check_name("scheduler name", scheduler)?;
        self.keys(scheduler)?;
        job.validate()?;
        let detail = format!("handler {}, {} trigger(s)", job.handler, executes.len());
        let args = json!({
            "job": job_fields(job),
            "change": self.change(ChangeAction::JobCreate, &job.name, &detail),
        });
        self.job_change(scheduler, "job_create", &job.name, Some(executes), args)
            .await?;
        self.require_job(scheduler, &job.name).await
    }

    async fn get_job(&self, name: &str) -> Result<Option<JobDetail>, StoreError> {
        let scheduler = self.scheduler();
        let records: Vec<Record> = self
            .run(scheduler, 0, "job", &json!({ "name": name, "executes": "1" }))
            .await?;
        let Some((job, executes)) = records.split_first() else {
            return Ok(None);
        };
        let calendars = self.calendars_for(scheduler, executes).await?;
        let mut detail = JobDetail {
            job: decode::job(job, scheduler)?,
            executes: Vec::with_capacity(executes.len()),
            broken: Vec::new(),
        };
        for record in executes {
            match decode::execute(record, scheduler, &calendars) {
                Ok(execute) => detail.executes.push(execute),
                Err(Rejected { id, reason }) => detail.broken.push(RejectedRow { execute_id: id, reason }),
            }
        }
        Ok(Some(detail))
    }

    async fn jobs_by_id(&self, ids: &[i64]) -> Result<Vec<Job>, StoreError> {
        let scheduler = self.scheduler();
        let Some(number) = self.known_number(scheduler).await? else {
            return Ok(Vec::new());
        };
        let ids: Vec<Value> = ids
            .iter()
            .filter(|id| super::registry::number_of_id(**id) == number)
            .map(num)
            .collect();
        // A script holds the server, single-threaded, for its whole run: a
        // poll's 5,000 jobs in one took 55 ms, in which no node's claim or
        // start ran. A page of `JOBS_PAGE` takes a few.
        let mut records: Vec<Record> = Vec::with_capacity(ids.len());
        for page in ids.chunks(JOBS_PAGE) {
            let got: Vec<Record> = self.run(scheduler, 0, "jobs_by_id", &json!({ "ids": page })).await?;
            records.extend(got);
        }
        Self::jobs(&records, scheduler)
    }

    async fn list_jobs(&self) -> Result<Vec<Job>, StoreError> {
        let mut query = JobQuery::new();
        query.limit = u32::MAX;
        self.jobs_page(&query).await
    }

    async fn jobs_page(&self, query: &JobQuery) -> Result<Vec<Job>, StoreError> {
        let args = json!({
            "after": query.after.clone().unwrap_or_default(),
            "state": query.state.map(|s| s.as_str()).unwrap_or_default(),
            "handler": query.handler.clone().unwrap_or_default(),
            "search": query.search.as_deref().map(str::to_lowercase).unwrap_or_default(),
            "limit": num(query.limit),
        });
        let records: Vec<Record> = self.run(&self.scheduler, 0, "jobs_page", &args).await?;
        Self::jobs(&records, &self.scheduler)
    }

    async fn update_job(
        &self,
        name: &str,
        job: &JobSpec,
        executes: Option<&[ExecuteSpec]>,
        expected_version: Option<i64>,
    ) -> Result<Job, StoreError> {
        let scheduler = self.scheduler();
        job.validate()?;
        let before = self.get_job(name).await?.ok_or_else(|| StoreError::UnknownJob {
            scheduler: scheduler.to_owned(),
            name: name.to_owned(),
        })?;
        let detail = common::edit_detail(&before, job, executes);
        let args = json!({
            "name": name,
            "expected": opt(expected_version),
            "job": job_fields(job),
            "change": self.change(ChangeAction::JobEdit, &job.name, &detail),
        });
        self.job_change(scheduler, "job_update", &job.name, executes, args)
            .await?;
        self.require_job(scheduler, &job.name).await
    }

    async fn set_paused(&self, name: &str, paused: bool, expected_version: Option<i64>) -> Result<Job, StoreError> {
        let scheduler = self.scheduler();
        let action = if paused {
            ChangeAction::JobPause
        } else {
            ChangeAction::JobResume
        };
        let args = json!({
            "name": name,
            "paused": flag(paused),
            "expected": opt(expected_version),
            "change": self.change(action, name, ""),
        });
        self.job_change(scheduler, "job_pause", name, None, args).await?;
        self.require_job(scheduler, name).await
    }

    async fn fire_now(&self, name: &str) -> Result<(i64, Timestamp), StoreError> {
        let scheduler = self.scheduler();
        let args = json!({
            "name": name,
            "change": self.change(ChangeAction::JobTrigger, name, "by hand"),
        });
        let reply: Vec<String> = self.write(scheduler, "job_fire_now", &args).await?;
        Self::answer(scheduler, name, &reply)?;
        let number = |i: usize| reply.get(i).and_then(|v| v.parse::<i64>().ok());
        match (number(1), number(2)) {
            (Some(id), Some(at)) => Ok((id, Timestamp::from_millis(at))),
            _ => Err(StoreError::Database {
                reason: format!("unexpected answer from the Redis script: {reply:?}"),
            }),
        }
    }

    async fn enqueue(&self, work: &Work) -> Result<Enqueued, StoreError> {
        let scheduler = self.scheduler();
        work.validate()?;
        let (at, after) = match work.due {
            Due::Now => (None, None),
            Due::At(at) => (Some(at.as_millis()), None),
            Due::After(delay) => (None, Some(millis_of(delay))),
        };
        let unique = work.unique.as_ref();
        let args = json!({
            "name": work.job,
            "payload": work.payload.clone().unwrap_or_default(),
            "trace_parent": work.trace_parent.clone().unwrap_or_default(),
            "at": opt(at),
            "after": opt(after),
            "key": unique.map(|u| u.key.clone()).unwrap_or_default(),
            "window": opt(unique.and_then(|u| u.window).map(millis_of)),
        });
        let reply: Vec<String> = self.write(scheduler, "job_enqueue", &args).await?;
        let number = |i: usize| reply.get(i).and_then(|v| v.parse::<i64>().ok());
        if reply.first().map(String::as_str) == Some("duplicate_work") {
            return Ok(Enqueued::Duplicate {
                key: unique.map(|u| u.key.clone()).unwrap_or_default(),
                work_id: number(1),
                due_at: number(2).map(Timestamp::from_millis),
            });
        }
        Self::answer(scheduler, &work.job, &reply)?;
        match (number(1), number(2), number(3)) {
            (Some(work_id), Some(fire_id), Some(due)) => Ok(Enqueued::Queued {
                work_id,
                fire_id,
                due_at: Timestamp::from_millis(due),
            }),
            _ => Err(StoreError::Database {
                reason: format!("unexpected answer from the Redis script: {reply:?}"),
            }),
        }
    }

    async fn delete_job(&self, name: &str, expected_version: Option<i64>) -> Result<(), StoreError> {
        let scheduler = self.scheduler();
        let Some(job) = self.job_named(scheduler, name).await? else {
            return Err(StoreError::UnknownJob {
                scheduler: scheduler.to_owned(),
                name: name.to_owned(),
            });
        };
        let detail = format!("handler {}", job.spec.handler);
        let args = json!({
            "name": name,
            "expected": opt(expected_version),
            "change": self.change(ChangeAction::JobDelete, name, &detail),
        });
        self.job_change(scheduler, "job_delete", name, None, args).await
    }

    async fn retry_fire(&self, fire_id: i64) -> Result<FireRetry, StoreError> {
        let scheduler = self.scheduler();
        let args = json!({
            "fire": num(fire_id),
            "change": self.change(ChangeAction::FireRetry, "", ""),
        });
        let reply: Vec<String> = self.write(scheduler, "fire_retry", &args).await?;
        let at = |i: usize| reply.get(i).map(String::as_str).unwrap_or_default();
        Ok(match at(0) {
            "ok" => FireRetry::Pending {
                fire_id: at(1).parse().unwrap_or_default(),
                attempt: at(2).parse().unwrap_or_default(),
            },
            "not_found" => FireRetry::NotFound,
            _ => FireRetry::Refused(at(1).to_owned()),
        })
    }

    async fn set_standby(&self, on: bool) -> Result<Option<Timestamp>, StoreError> {
        let scheduler = self.scheduler();
        let action = if on {
            ChangeAction::SchedulerPause
        } else {
            ChangeAction::SchedulerResume
        };
        let args = json!({
            "on": flag(on),
            "change": self.change(action, scheduler, ""),
        });
        let since: String = self.write(scheduler, "standby_set", &args).await?;
        Ok(since.parse().ok().map(Timestamp::from_millis))
    }

    async fn backfill(&self, name: &str, fires: &[BackfillFire]) -> Result<Backfilled, StoreError> {
        let scheduler = self.scheduler();
        if fires.len() > quartz_core::store::MAX_BACKFILL {
            quartz_core::store::check_backfill(name, fires, &[])?;
        }
        let span = quartz_core::store::backfill_span(fires);
        let args = json!({
            "name": name,
            "span": span,
            "fires": fires.iter().map(|f| json!({
                "execute": num(f.execute_id),
                "fire_time": num(f.fire_time.as_millis()),
                "due": num(f.due_at.as_millis()),
            })).collect::<Vec<_>>(),
            "change": self.change(ChangeAction::JobBackfill, name, ""),
        });
        let reply: Vec<String> = self.write(scheduler, "job_backfill", &args).await?;
        if reply.first().map(String::as_str) == Some("invalid") {
            let reason = reply.get(1).cloned().unwrap_or_default();
            return Err(StoreError::Invalid(quartz_core::Error::InvalidJob { reason }));
        }
        Self::answer(scheduler, name, &reply)?;
        let mut done = Backfilled::default();
        for (f, pair) in fires.iter().zip(reply.get(1..).unwrap_or_default().chunks(2)) {
            match pair {
                [id, attempt] if attempt != "0" => done.queued.push(QueuedFire {
                    fire_id: id.parse().unwrap_or_default(),
                    execute_id: f.execute_id,
                    fire_time: f.fire_time,
                    attempt: attempt.parse().unwrap_or(1),
                }),
                _ => done.already += 1,
            }
        }
        Ok(done)
    }

    async fn standby(&self) -> Result<Option<Timestamp>, StoreError> {
        let scheduler = self.scheduler();
        let since: String = self.run(scheduler, 0, "standby", &json!({})).await?;
        Ok(since.parse().ok().map(Timestamp::from_millis))
    }
}

#[async_trait]
impl CalendarStore for RedisStore {
    async fn put_calendar(
        &self,
        name: &str,
        definition: &CalendarDefinition,
        expected_version: Option<i64>,
    ) -> Result<CalendarRecord, StoreError> {
        let scheduler = self.scheduler();
        self.calendar_write(scheduler, name, definition, false, expected_version)
            .await
    }

    async fn add_calendar(&self, name: &str, definition: &CalendarDefinition) -> Result<CalendarRecord, StoreError> {
        let scheduler = self.scheduler();
        self.calendar_write(scheduler, name, definition, true, None).await
    }

    async fn get_calendar(&self, name: &str) -> Result<Option<CalendarRecord>, StoreError> {
        let scheduler = self.scheduler();
        let snapshot = self.calendar_snapshot(scheduler, false).await?;
        Ok(snapshot.records.into_iter().find(|r| r.name == name))
    }

    async fn list_calendars(&self) -> Result<Vec<CalendarRecord>, StoreError> {
        let scheduler = self.scheduler();
        Ok(self.calendar_snapshot(scheduler, false).await?.records)
    }

    async fn delete_calendar(&self, name: &str, expected_version: Option<i64>) -> Result<(), StoreError> {
        let scheduler = self.scheduler();
        let args = json!({
            "name": name,
            "expected": opt(expected_version),
            "change": self.change(ChangeAction::CalendarDelete, name, ""),
        });
        let reply: Vec<String> = self.write(scheduler, "calendar_delete", &args).await?;
        Self::answer(scheduler, name, &reply).map(|_| ())
    }
}

/// The most jobs one script reads (`jobs_by_id`).
const JOBS_PAGE: usize = 500;
