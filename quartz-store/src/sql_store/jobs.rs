//! Jobs and their executes: creation, edits, pause and delete, a fire by
//! hand, the scheduler's standby, each a change the nodes see at once
//! ([`JobStore`] for the SQL backends). The poll's reads and the compare-and-set on
//! an execute row are in `executes.rs`.

use super::convert::Statement as _;
use quartz_core::Timestamp;
use quartz_core::store::{
    ChangeAction, Enqueued, ExecuteSpec, ExecuteState, Job, JobDetail, JobQuery, JobSpec, JobState, MANUAL_EXECUTE,
    RejectedRow, StoreError, Work, check_name,
};
use sqlx::{Any, Transaction};

use super::filtered::Filtered;
use super::*;

/// Binds a job's own columns, as written on create and on edit: name,
/// handler, payload, description, recovery, concurrency, timeout, attempts,
/// backoff, backoff cap, parent. A macro, for queries of any sqlx database
/// (the store's and a service's own PostgreSQL transaction).
macro_rules! bind_job_spec {
    ($q:expr, $job:expr) => {{
        let job: &quartz_core::store::JobSpec = $job;
        $q.bind(job.name.clone())
            .bind(job.handler.clone())
            .bind(job.payload.clone())
            .bind(job.description.clone())
            .bind(i64::from(job.requests_recovery))
            .bind(i64::from(job.allow_concurrent))
            .bind(job.timeout.map(quartz_core::store::millis_of))
            .bind(i64::from(job.retry.max_attempts))
            .bind(quartz_core::store::millis_of(job.retry.backoff))
            .bind(job.retry.backoff_max.map(quartz_core::store::millis_of))
            .bind(job.parent.clone())
            .bind(job.limit.as_ref().map(|l| i64::from(l.max)))
            .bind(job.limit.as_ref().map(|l| l.key.clone()))
            .bind(job.limit_key())
    }};
}
#[cfg(feature = "postgres")]
pub(crate) use bind_job_spec;

/// A new job's row (binds: scheduler, then [`bind_job_spec`]'s).
pub(crate) const INSERT_JOB: &str = "INSERT INTO quartz_job (scheduler, name, handler, payload, description, state, \
     requests_recovery, allow_concurrent, timeout_ms, max_attempts, backoff_ms, backoff_max_ms, parent_job, \
     concurrency_limit, concurrency_key, limit_key, created_at, updated_at) \
     VALUES (?, ?, ?, ?, ?, 'enabled', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {now}, {now})";

/// A new trigger's row (binds: [`bind_new_execute`]'s).
pub(crate) const INSERT_EXECUTE: &str = "INSERT INTO quartz_execute (job_id, scheduler, kind, cron_expression, \
     time_zone, interval_ms, start_time, end_time, repeat_limit, times_triggered, misfire_policy, priority, state, \
     prev_fire_time, next_fire_time, schedule_sig, calendar, dst_skipped, dst_repeated, jitter_ms, jitter_seed, \
     catch_up_ms, overlap, updated_at) \
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, {now})";

/// Binds a new trigger's row for [`INSERT_EXECUTE`]: its job, scheduler,
/// columns, priority, state (paused or not) and first fire time.
macro_rules! bind_new_execute {
    ($q:expr, $job_id:expr, $scheduler:expr, $new:expr, $paused:expr) => {{
        let new: crate::common::NewExecute = $new;
        let state = new.state($paused);
        let c = new.columns;
        $q.bind($job_id)
            .bind($scheduler.to_owned())
            .bind(c.kind)
            .bind(c.cron_expression)
            .bind(c.time_zone)
            .bind(c.interval_ms)
            .bind(c.start_time)
            .bind(c.end_time)
            .bind(c.repeat_limit)
            .bind(c.misfire_policy)
            .bind(i64::from(new.priority))
            .bind(state.as_str())
            .bind(new.first.map(Timestamp::as_millis))
            .bind(new.signature)
            .bind(c.calendar)
            .bind(c.dst_skipped)
            .bind(c.dst_repeated)
            .bind(c.jitter_ms)
            .bind(c.jitter_seed)
            .bind(c.catch_up_ms)
            .bind(c.overlap)
    }};
}
#[cfg(feature = "postgres")]
pub(crate) use bind_new_execute;

impl SqlStore {
    pub(super) async fn job_by_name(&self, scheduler: &str, name: &str) -> Result<Option<Job>, StoreError> {
        let row = self
            .query(concat!(
                "SELECT ",
                job_cols!(),
                " FROM quartz_job WHERE scheduler = ? AND name = ?"
            ))
            .bind(scheduler.to_owned())
            .bind(name.to_owned())
            .row(&self.db.pool)
            .await?;
        row.as_ref().map(decode_job).transpose()
    }

    pub(super) async fn require_job(&self, scheduler: &str, name: &str) -> Result<Job, StoreError> {
        self.job_by_name(scheduler, name)
            .await?
            .ok_or_else(|| StoreError::UnknownJob {
                scheduler: scheduler.to_owned(),
                name: name.to_owned(),
            })
    }

    pub(super) async fn insert_executes(
        &self,
        tx: &mut Transaction<'static, Any>,
        scheduler: &str,
        job_id: i64,
        executes: &[ExecuteSpec],
        paused: bool,
    ) -> Result<(), StoreError> {
        let now = self.now_in(tx).await?;
        let named: Vec<&str> = executes.iter().filter_map(|e| e.trigger.calendar_name()).collect();
        let calendars = self.calendars_in(tx, scheduler, &named).await?;
        for new in crate::common::new_executes(executes, &calendars, now)? {
            bind_new_execute!(self.query(INSERT_EXECUTE), job_id, scheduler, new, paused)
                .exec(&mut **tx)
                .await?;
        }
        Ok(())
    }

    pub(super) async fn executes_of(&self, job: Job) -> Result<JobDetail, StoreError> {
        let rows = self
            .query(concat!(
                "SELECT ",
                execute_cols!(),
                " FROM quartz_execute WHERE job_id = ? ORDER BY id"
            ))
            .bind(job.id)
            .rows(&self.db.pool)
            .await?;
        let calendars = self.calendars_for(&job.scheduler, &rows).await?;
        let mut detail = JobDetail {
            job,
            executes: Vec::with_capacity(rows.len()),
            broken: Vec::new(),
        };
        for row in &rows {
            match decode_execute(row, &calendars) {
                Ok(execute) => detail.executes.push(execute),
                Err(RowError { id, reason }) => detail.broken.push(RejectedRow { execute_id: id, reason }),
            }
        }
        Ok(detail)
    }

    async fn fire_now_once(&self, name: &str) -> Result<(i64, Timestamp), StoreError> {
        let scheduler = &*self.scheduler;
        let job = self.require_job(scheduler, name).await?;
        let mut tx = self.begin_change(scheduler).await?;
        let now = self.now_in(&mut tx).await?;
        // Two in one millisecond: the later a millisecond after the other
        // (the ledger holds one fire per job, execute, time and attempt).
        let last: Option<i64> = self
            .query(
                "SELECT MAX(fire_time) FROM quartz_fire WHERE execute_id = ? AND job_id = ? AND fire_time >= ? \
                 AND attempt = 1",
            )
            .bind(MANUAL_EXECUTE)
            .bind(job.id)
            .bind(now.as_millis())
            .fetch_one(&mut *tx)
            .await
            .and_then(|row| row.try_get(0))
            .map_err(db_error)?;
        let at = last.map_or(now.as_millis(), |t| t + 1);
        // Another fire now in the same millisecond: the retry reads it.
        let id = self
            .insert_pending_by_hand(&mut tx, scheduler, (MANUAL_EXECUTE, job.id, at, 1), at, || {
                format!("two fires of {name:?} asked for at once")
            })
            .await?;
        let detail = format!("fire {id} by hand, at {}", Timestamp::from_millis(at));
        self.changed_in(
            &mut tx,
            scheduler,
            Change::new(ChangeAction::JobTrigger, name, detail).of_job(job.id),
        )
        .await?;
        tx.commit().await.map_err(db_error)?;
        Ok((id, Timestamp::from_millis(at)))
    }

    /// Moves a job's version on, first in a change's transaction (locking
    /// its row until the commit, so writes of one job take turns): with
    /// `expected`, only from that version ([`StoreError::Stale`] otherwise);
    /// [`StoreError::UnknownJob`] when it went since it was read.
    async fn step_job_version(
        &self,
        tx: &mut Transaction<'static, Any>,
        job: &Job,
        expected: Option<i64>,
    ) -> Result<(), StoreError> {
        let step = match expected {
            Some(version) => self
                .query("UPDATE quartz_job SET version = version + 1 WHERE id = ? AND version = ?")
                .bind(job.id)
                .bind(version),
            None => self
                .query("UPDATE quartz_job SET version = version + 1 WHERE id = ?")
                .bind(job.id),
        };
        if step.exec(&mut **tx).await?.rows_affected() == 1 {
            return Ok(());
        }
        let current: Option<i64> = self
            .query("SELECT version FROM quartz_job WHERE id = ?")
            .bind(job.id)
            .row(&mut **tx)
            .await?
            .map(|row| row.try_get(0))
            .transpose()
            .map_err(db_error)?;
        Err(match expected {
            Some(expected) => StoreError::Stale {
                kind: "job",
                name: job.spec.name.clone(),
                expected,
                current,
            },
            None => StoreError::UnknownJob {
                scheduler: job.scheduler.clone(),
                name: job.spec.name.clone(),
            },
        })
    }

    /// Puts the scheduler on standby or takes it off, in a change's
    /// transaction: since when it is on standby, after the change.
    async fn set_standby_once(&self, on: bool) -> Result<Option<Timestamp>, StoreError> {
        let scheduler = &*self.scheduler;
        let mut tx = self.begin_change(scheduler).await?;
        self.query(
            "UPDATE quartz_scheduler SET paused_at = CASE WHEN ? = 1 THEN COALESCE(paused_at, {now}) ELSE NULL END \
             WHERE scheduler = ?",
        )
        .bind(i64::from(on))
        .bind(scheduler.to_owned())
        .exec(&mut *tx)
        .await?;
        let since: Option<i64> = sqlx::query_scalar(
            self.db
                .sql("SELECT paused_at FROM quartz_scheduler WHERE scheduler = ?"),
        )
        .bind(scheduler.to_owned())
        .fetch_one(&mut *tx)
        .await
        .map_err(db_error)?;
        let action = if on {
            ChangeAction::SchedulerPause
        } else {
            ChangeAction::SchedulerResume
        };
        self.changed_in(&mut tx, scheduler, Change::new(action, scheduler, String::new()))
            .await?;
        tx.commit().await.map_err(db_error)?;
        Ok(since.map(Timestamp::from_millis))
    }
}

/// The job half of the store contract: each call a statement or a change
/// transaction of this file (a retry by hand in `retry.rs`, a backfill in
/// `pending.rs`, where their fires' rows are written).
#[async_trait::async_trait]
impl JobStore for SqlStore {
    async fn create_job(&self, job: &JobSpec, executes: &[ExecuteSpec]) -> Result<Job, StoreError> {
        let scheduler = &*self.scheduler;
        check_name("scheduler name", scheduler)?;
        job.validate()?;
        if let Some(parent) = &job.parent {
            self.require_job(scheduler, parent).await?;
        }
        let duplicate = || StoreError::DuplicateJob {
            scheduler: scheduler.to_owned(),
            name: job.name.clone(),
        };
        let mut tx = self.begin_change(scheduler).await?;
        let insert = self.query(INSERT_JOB).bind(scheduler.to_owned());
        let inserted = bind_job_spec!(insert, job).execute(&mut *tx).await;
        match inserted {
            Ok(_) => {}
            Err(e) if is_unique_violation(&e) => return Err(duplicate()),
            Err(e) => return Err(db_error(e)),
        }
        let row = self
            .query(concat!(
                "SELECT ",
                job_cols!(),
                " FROM quartz_job WHERE scheduler = ? AND name = ?"
            ))
            .bind(scheduler.to_owned())
            .bind(job.name.clone())
            .one(&mut *tx)
            .await?;
        let created = decode_job(&row)?;
        self.insert_executes(&mut tx, scheduler, created.id, executes, false)
            .await?;
        let detail = format!("handler {}, {} trigger(s)", job.handler, executes.len());
        self.changed_in(
            &mut tx,
            scheduler,
            Change::new(ChangeAction::JobCreate, &job.name, detail).of_job(created.id),
        )
        .await?;
        tx.commit().await.map_err(db_error)?;
        Ok(created)
    }

    async fn get_job(&self, name: &str) -> Result<Option<JobDetail>, StoreError> {
        match self.job_by_name(&self.scheduler, name).await? {
            Some(job) => Ok(Some(self.executes_of(job).await?)),
            None => Ok(None),
        }
    }

    async fn jobs_by_id(&self, ids: &[i64]) -> Result<Vec<Job>, StoreError> {
        let scheduler = &*self.scheduler;
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let mut jobs = Vec::with_capacity(ids.len());
        // By id alone, the scheduler checked here: with the scheduler in the
        // statement, PostgreSQL's planner without statistics reads every job
        // of the scheduler through its index beside the ids.
        for chunk in ids.chunks(self.ids_per_statement()) {
            let q = self.query(concat!("SELECT ", job_cols!(), " FROM quartz_job WHERE {ids}"));
            let rows = self.bind_id_set(q, chunk).rows(&self.db.pool).await?;
            for row in &rows {
                let job = decode_job(row)?;
                if job.scheduler == scheduler {
                    jobs.push(job);
                }
            }
        }
        Ok(jobs)
    }

    async fn list_jobs(&self) -> Result<Vec<Job>, StoreError> {
        let scheduler = &*self.scheduler;
        let rows = self
            .query(concat!(
                "SELECT ",
                job_cols!(),
                " FROM quartz_job WHERE scheduler = ? ORDER BY name"
            ))
            .bind(scheduler.to_owned())
            .rows(&self.db.pool)
            .await?;
        rows.iter().map(decode_job).collect()
    }

    /// A page of the job list, by name, read by the conditions the query
    /// sets (`Filtered`).
    async fn jobs_page(&self, query: &JobQuery) -> Result<Vec<Job>, StoreError> {
        let mut read = Filtered::new(concat!("SELECT ", job_cols!(), " FROM quartz_job"), &self.scheduler);
        read.and("name > ?", query.after.clone())
            .and("state = ?", query.state.map(JobState::as_str))
            .and("handler = ?", query.handler.clone())
            // `!` escapes LIKE's wildcards the same way on the three backends.
            .and(
                "LOWER(name) LIKE ? ESCAPE '!'",
                query.search.as_deref().map(crate::common::like_pattern),
            );
        let rows = read
            .query(self, "ORDER BY name", query.limit)
            .rows(&self.db.pool)
            .await?;
        rows.iter().map(decode_job).collect()
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
        let before = quartz_core::store::JobStore::get_job(self, name)
            .await?
            .ok_or_else(|| StoreError::UnknownJob {
                scheduler: scheduler.to_owned(),
                name: name.to_owned(),
            })?;
        let existing = before.job.clone();
        if let Some(parent) = &job.parent {
            self.require_job(scheduler, parent).await?;
        }
        let mut tx = self.begin_change(scheduler).await?;
        self.step_job_version(&mut tx, &existing, expected_version).await?;
        let update = self.query(
            "UPDATE quartz_job SET name = ?, handler = ?, payload = ?, description = ?, requests_recovery = ?, \
                 allow_concurrent = ?, timeout_ms = ?, max_attempts = ?, backoff_ms = ?, backoff_max_ms = ?, \
                 parent_job = ?, concurrency_limit = ?, concurrency_key = ?, limit_key = ?, \
                 updated_at = {now} WHERE id = ?",
        );
        let updated = bind_job_spec!(update, job).bind(existing.id).execute(&mut *tx).await;
        match updated {
            Ok(_) => {}
            Err(e) if is_unique_violation(&e) => {
                return Err(StoreError::DuplicateJob {
                    scheduler: scheduler.to_owned(),
                    name: job.name.clone(),
                });
            }
            Err(e) => return Err(db_error(e)),
        }
        if let Some(executes) = executes {
            self.query("DELETE FROM quartz_execute WHERE job_id = ?")
                .bind(existing.id)
                .exec(&mut *tx)
                .await?;
            let paused = existing.state == JobState::Paused;
            self.insert_executes(&mut tx, scheduler, existing.id, executes, paused)
                .await?;
        }
        let change = Change::new(
            ChangeAction::JobEdit,
            &job.name,
            crate::common::edit_detail(&before, job, executes),
        )
        .of_job(existing.id);
        self.changed_in(&mut tx, scheduler, change).await?;
        tx.commit().await.map_err(db_error)?;
        self.require_job(scheduler, &job.name).await
    }

    async fn set_paused(&self, name: &str, paused: bool, expected_version: Option<i64>) -> Result<Job, StoreError> {
        let scheduler = &*self.scheduler;
        let job = self.require_job(scheduler, name).await?;
        let (job_state, from, to) = if paused {
            (JobState::Paused, ExecuteState::Waiting, ExecuteState::Paused)
        } else {
            (JobState::Enabled, ExecuteState::Paused, ExecuteState::Waiting)
        };
        let mut tx = self.begin_change(scheduler).await?;
        self.step_job_version(&mut tx, &job, expected_version).await?;
        self.query("UPDATE quartz_job SET state = ?, updated_at = {now} WHERE id = ?")
            .bind(job_state.as_str())
            .bind(job.id)
            .exec(&mut *tx)
            .await?;
        self.query("UPDATE quartz_execute SET state = ?, updated_at = {now} WHERE job_id = ? AND state = ?")
            .bind(to.as_str())
            .bind(job.id)
            .bind(from.as_str())
            .exec(&mut *tx)
            .await?;
        let action = if paused {
            ChangeAction::JobPause
        } else {
            ChangeAction::JobResume
        };
        self.changed_in(
            &mut tx,
            scheduler,
            Change::new(action, name, String::new()).of_job(job.id),
        )
        .await?;
        tx.commit().await.map_err(db_error)?;
        self.require_job(scheduler, name).await
    }

    async fn fire_now(&self, name: &str) -> Result<(i64, Timestamp), StoreError> {
        retry_conflicts(|| self.fire_now_once(name)).await
    }

    async fn enqueue(&self, work: &Work) -> Result<Enqueued, StoreError> {
        let scheduler = &*self.scheduler;
        self.ensure_scheduler_row(scheduler).await?;
        retry_conflicts(|| async {
            let mut tx = self.begin().await?;
            let enqueued =
                crate::work::enqueue_on!(&mut *tx, |t| self.query(t), self.db.backend, scheduler, work).await?;
            tx.commit().await.map_err(db_error)?;
            Ok(enqueued)
        })
        .await
    }

    async fn delete_job(&self, name: &str, expected_version: Option<i64>) -> Result<(), StoreError> {
        let scheduler = &*self.scheduler;
        let job = self.require_job(scheduler, name).await?;
        let mut tx = self.begin_change(scheduler).await?;
        self.step_job_version(&mut tx, &job, expected_version).await?;
        for template in [
            "DELETE FROM quartz_execute WHERE job_id = ?",
            "DELETE FROM quartz_job WHERE id = ?",
        ] {
            self.query(template).bind(job.id).exec(&mut *tx).await?;
        }
        let detail = format!("handler {}", job.spec.handler);
        self.changed_in(
            &mut tx,
            scheduler,
            Change::new(ChangeAction::JobDelete, name, detail).of_job(job.id),
        )
        .await?;
        tx.commit().await.map_err(db_error)
    }

    async fn retry_fire(&self, fire_id: i64) -> Result<FireRetry, StoreError> {
        retry_conflicts(|| self.fire_retry_by_hand(&self.scheduler, fire_id)).await
    }

    async fn set_standby(&self, on: bool) -> Result<Option<Timestamp>, StoreError> {
        retry_conflicts(|| self.set_standby_once(on)).await
    }

    /// Since when the scheduler is on standby, if it is.
    async fn standby(&self) -> Result<Option<Timestamp>, StoreError> {
        let scheduler = &*self.scheduler;
        let since: Option<Option<i64>> = sqlx::query_scalar(
            self.db
                .sql("SELECT paused_at FROM quartz_scheduler WHERE scheduler = ?"),
        )
        .bind(scheduler.to_owned())
        .fetch_optional(&self.db.pool)
        .await
        .map_err(db_error)?;
        Ok(since.flatten().map(Timestamp::from_millis))
    }

    async fn backfill(
        &self,
        name: &str,
        fires: &[quartz_core::store::BackfillFire],
    ) -> Result<quartz_core::store::Backfilled, StoreError> {
        retry_conflicts(|| self.job_backfill(&self.scheduler, name, fires)).await
    }
}
