//! Jobs and their executes: creation, edits, pause and delete (each a
//! change the nodes see at once), the poll's due executes, and the
//! compare-and-set on an execute row.

use quartz_core::Timestamp;
use quartz_core::store::{
    CHANGE_VISIBILITY_MS, ChangeAction, DueBatch, ExecuteCas, ExecuteSpec, ExecuteState, Job, JobDetail, JobQuery,
    JobSpec, JobState, RejectedRow, SkippedRecord, StoreError, TriggerColumns, check_name,
};
use sqlx::any::AnyRow;
use sqlx::{Any, Transaction};

use super::*;

/// Binds the state a compare-and-set writes: previous and next fire time,
/// times triggered, state, owner's node id and incarnation.
pub(super) fn bind_cas_set(q: AnyQuery, cas: &ExecuteCas) -> AnyQuery {
    q.bind(cas.set.prev_fire_time.map(Timestamp::as_millis))
        .bind(cas.set.next_fire_time.map(Timestamp::as_millis))
        .bind(count_to_i64(cas.set.times_triggered))
        .bind(cas.set_state.as_str())
        .bind(cas.set_owner.as_ref().map(|n| n.node_id.clone()))
        .bind(cas.set_owner.as_ref().map(|n| n.incarnation))
}

/// Binds what a compare-and-set expects: the execute, its state, its
/// previous and next fire time.
pub(super) fn bind_cas_expect(q: AnyQuery, cas: &ExecuteCas) -> AnyQuery {
    q.bind(cas.execute_id)
        .bind(cas.expect_state.as_str())
        .bind(cas.expect.prev_fire_time.map(Timestamp::as_millis))
        .bind(cas.expect.next_fire_time.map(Timestamp::as_millis))
}

/// Binds a job's own columns, as written on create and on edit: name,
/// handler, payload, description, recovery, concurrency, timeout, attempts,
/// backoff, backoff cap, parent.
fn bind_job_spec(q: AnyQuery, job: &JobSpec) -> AnyQuery {
    q.bind(job.name.clone())
        .bind(job.handler.clone())
        .bind(job.payload.clone())
        .bind(job.description.clone())
        .bind(i64::from(job.requests_recovery))
        .bind(i64::from(job.allow_concurrent))
        .bind(job.timeout.map(millis))
        .bind(i64::from(job.retry.max_attempts))
        .bind(millis(job.retry.backoff))
        .bind(job.retry.backoff_max.map(millis))
        .bind(job.parent.clone())
}

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
            .fetch_optional(&self.db.pool)
            .await
            .map_err(db_error)?;
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
        let visible_at = now.saturating_add_millis(CHANGE_VISIBILITY_MS);
        for spec in executes {
            // No fire time earlier than the moment every node has seen it.
            let trigger = spec.trigger.visible_from(now, visible_at);
            let c = TriggerColumns::from_trigger(&trigger);
            let signature = c.signature();
            let first = TriggerState::initial(&trigger);
            let state = match (first.next_fire_time, paused) {
                (None, _) => ExecuteState::Complete,
                (Some(_), true) => ExecuteState::Paused,
                (Some(_), false) => ExecuteState::Waiting,
            };
            self.query(
                "INSERT INTO quartz_execute (job_id, scheduler, kind, cron_expression, time_zone, interval_ms, \
                 start_time, end_time, repeat_limit, times_triggered, misfire_policy, priority, state, \
                 prev_fire_time, next_fire_time, schedule_sig, updated_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, NULL, ?, ?, {now})",
            )
            .bind(job_id)
            .bind(scheduler.to_owned())
            .bind(c.kind)
            .bind(c.cron_expression)
            .bind(c.time_zone)
            .bind(c.interval_ms)
            .bind(c.start_time)
            .bind(c.end_time)
            .bind(c.repeat_limit)
            .bind(c.misfire_policy)
            .bind(i64::from(spec.priority))
            .bind(state.as_str())
            .bind(first.next_fire_time.map(Timestamp::as_millis))
            .bind(signature)
            .execute(&mut **tx)
            .await
            .map_err(db_error)?;
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
            .fetch_all(&self.db.pool)
            .await
            .map_err(db_error)?;
        let mut detail = JobDetail {
            job,
            executes: Vec::with_capacity(rows.len()),
            broken: Vec::new(),
        };
        for row in &rows {
            match decode_execute(row) {
                Ok(execute) => detail.executes.push(execute),
                Err(RowError { id, reason }) => detail.broken.push(RejectedRow { execute_id: id, reason }),
            }
        }
        Ok(detail)
    }

    /// Decodes execute rows; marks the ones that cannot be decoded as errors.
    pub(super) async fn serve(&self, rows: Vec<AnyRow>, batch: &mut DueBatch) -> Result<(), StoreError> {
        for row in rows {
            match decode_execute(&row) {
                Ok(execute) => batch.executes.push(execute),
                Err(RowError { id, reason }) => {
                    tracing::warn!(execute_id = id, %reason, "execute row cannot be understood; marked as an error");
                    self.query("UPDATE quartz_execute SET state = ?, error = ?, updated_at = {now} WHERE id = ?")
                        .bind(ExecuteState::Error.as_str())
                        .bind(truncate(&reason))
                        .bind(id)
                        .execute(&self.db.pool)
                        .await
                        .map_err(db_error)?;
                    batch.rejected.push(RejectedRow { execute_id: id, reason });
                }
            }
        }
        Ok(())
    }

    pub(super) async fn cas_execute(
        &self,
        tx: &mut Transaction<'static, Any>,
        cas: &ExecuteCas,
    ) -> Result<bool, StoreError> {
        let (set_start, set_limit) = match &cas.set_trigger {
            Some(t) => (
                Some(t.start().as_millis()),
                t.repeat_limit().map(|l| i64::try_from(l).unwrap_or(i64::MAX)),
            ),
            None => (None, None),
        };
        let reschedule = cas.set_trigger.is_some();
        let signature = cas
            .set_trigger
            .as_ref()
            .map(|t| TriggerColumns::from_trigger(t).signature())
            .or(cas.set_signature);
        let q = match (reschedule, cas.expect_owner.is_some()) {
            (false, false) => self.query(
                "UPDATE quartz_execute SET prev_fire_time = ?, next_fire_time = ?, times_triggered = ?, state = ?, \
                 node_id = ?, incarnation = ?, schedule_sig = COALESCE(?, schedule_sig), updated_at = {now} \
                 WHERE id = ? AND state = ? AND prev_fire_time {is} ? AND next_fire_time {is} ?",
            ),
            (false, true) => self.query(
                "UPDATE quartz_execute SET prev_fire_time = ?, next_fire_time = ?, times_triggered = ?, state = ?, \
                 node_id = ?, incarnation = ?, schedule_sig = COALESCE(?, schedule_sig), updated_at = {now} \
                 WHERE id = ? AND state = ? AND prev_fire_time {is} ? AND next_fire_time {is} ? \
                 AND node_id {is} ? AND incarnation {is} ?",
            ),
            (true, false) => self.query(
                "UPDATE quartz_execute SET prev_fire_time = ?, next_fire_time = ?, times_triggered = ?, state = ?, \
                 node_id = ?, incarnation = ?, schedule_sig = COALESCE(?, schedule_sig), updated_at = {now}, \
                 start_time = ?, repeat_limit = ? \
                 WHERE id = ? AND state = ? AND prev_fire_time {is} ? AND next_fire_time {is} ?",
            ),
            (true, true) => self.query(
                "UPDATE quartz_execute SET prev_fire_time = ?, next_fire_time = ?, times_triggered = ?, state = ?, \
                 node_id = ?, incarnation = ?, schedule_sig = COALESCE(?, schedule_sig), updated_at = {now}, \
                 start_time = ?, repeat_limit = ? \
                 WHERE id = ? AND state = ? AND prev_fire_time {is} ? AND next_fire_time {is} ? \
                 AND node_id {is} ? AND incarnation {is} ?",
            ),
        };
        let mut q = bind_cas_set(q, cas).bind(signature);
        if reschedule {
            q = q.bind(set_start).bind(set_limit);
        }
        q = bind_cas_expect(q, cas);
        if let Some(owner) = &cas.expect_owner {
            q = q.bind(owner.node_id.clone()).bind(owner.incarnation);
        }
        let done = q.execute(&mut **tx).await.map_err(db_error)?;
        Ok(done.rows_affected() == 1)
    }

    /// An execute's compare-and-set and, when it wins, its ledger records,
    /// inside a transaction.
    pub(super) async fn update_in(
        &self,
        tx: &mut Transaction<'static, Any>,
        cas: &ExecuteCas,
        records: &[SkippedRecord],
    ) -> Result<bool, StoreError> {
        if !self.cas_execute(tx, cas).await? {
            return Ok(false);
        }
        for record in records {
            self.insert_fire(
                tx,
                cas.execute_id,
                None,
                record.from,
                1,
                None,
                record.state,
                Some(&record.reason),
                Some((record.until, record.count)),
            )
            .await?;
        }
        Ok(true)
    }

    pub(super) async fn job_create(
        &self,
        scheduler: &str,
        job: &JobSpec,
        executes: &[ExecuteSpec],
    ) -> Result<Job, StoreError> {
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
        let insert = self
            .query(
                "INSERT INTO quartz_job (scheduler, name, handler, payload, description, state, requests_recovery, \
                 allow_concurrent, timeout_ms, max_attempts, backoff_ms, backoff_max_ms, parent_job, created_at, \
                 updated_at) \
                 VALUES (?, ?, ?, ?, ?, 'enabled', ?, ?, ?, ?, ?, ?, ?, {now}, {now})",
            )
            .bind(scheduler.to_owned());
        let inserted = bind_job_spec(insert, job).execute(&mut *tx).await;
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
            .fetch_one(&mut *tx)
            .await
            .map_err(db_error)?;
        let created = decode_job(&row)?;
        self.insert_executes(&mut tx, scheduler, created.id, executes, false)
            .await?;
        let detail = format!("handler {}, {} trigger(s)", job.handler, executes.len());
        self.changed_in(
            &mut tx,
            scheduler,
            Change::new(ChangeAction::JobCreate, &job.name, detail),
        )
        .await?;
        tx.commit().await.map_err(db_error)?;
        Ok(created)
    }

    pub(super) async fn job_add_executes(
        &self,
        scheduler: &str,
        name: &str,
        executes: &[ExecuteSpec],
    ) -> Result<(), StoreError> {
        let job = self.require_job(scheduler, name).await?;
        let mut tx = self.begin_change(scheduler).await?;
        self.insert_executes(&mut tx, scheduler, job.id, executes, job.state == JobState::Paused)
            .await?;
        let once = executes
            .iter()
            .all(|e| matches!(e.trigger.schedule(), quartz_core::trigger::Schedule::Once));
        let (action, detail) = if once && !executes.is_empty() {
            (
                ChangeAction::JobTrigger,
                format!("{} one-off trigger(s)", executes.len()),
            )
        } else {
            (
                ChangeAction::JobAddTriggers,
                format!("{} trigger(s) added", executes.len()),
            )
        };
        self.changed_in(&mut tx, scheduler, Change::new(action, name, detail))
            .await?;
        tx.commit().await.map_err(db_error)
    }

    pub(super) async fn job_update(
        &self,
        scheduler: &str,
        name: &str,
        job: &JobSpec,
        executes: Option<&[ExecuteSpec]>,
    ) -> Result<Job, StoreError> {
        job.validate()?;
        let existing = self.require_job(scheduler, name).await?;
        if let Some(parent) = &job.parent {
            self.require_job(scheduler, parent).await?;
        }
        let mut tx = self.begin_change(scheduler).await?;
        let update = self.query(
            "UPDATE quartz_job SET name = ?, handler = ?, payload = ?, description = ?, requests_recovery = ?, \
                 allow_concurrent = ?, timeout_ms = ?, max_attempts = ?, backoff_ms = ?, backoff_max_ms = ?, \
                 parent_job = ?, \
                 updated_at = {now} WHERE id = ?",
        );
        let updated = bind_job_spec(update, job).bind(existing.id).execute(&mut *tx).await;
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
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            let paused = existing.state == JobState::Paused;
            self.insert_executes(&mut tx, scheduler, existing.id, executes, paused)
                .await?;
        }
        let mut detail = Vec::new();
        if job.name != name {
            detail.push(format!("renamed from {name}"));
        }
        if let Some(executes) = executes {
            detail.push(format!("triggers replaced by {}", executes.len()));
        }
        let change = Change::new(ChangeAction::JobEdit, &job.name, detail.join("; "));
        self.changed_in(&mut tx, scheduler, change).await?;
        tx.commit().await.map_err(db_error)?;
        self.require_job(scheduler, &job.name).await
    }

    pub(super) async fn job_set_paused(&self, scheduler: &str, name: &str, paused: bool) -> Result<Job, StoreError> {
        let job = self.require_job(scheduler, name).await?;
        let (job_state, from, to) = if paused {
            (JobState::Paused, ExecuteState::Waiting, ExecuteState::Paused)
        } else {
            (JobState::Enabled, ExecuteState::Paused, ExecuteState::Waiting)
        };
        let mut tx = self.begin_change(scheduler).await?;
        self.query("UPDATE quartz_job SET state = ?, updated_at = {now} WHERE id = ?")
            .bind(job_state.as_str())
            .bind(job.id)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        self.query("UPDATE quartz_execute SET state = ?, updated_at = {now} WHERE job_id = ? AND state = ?")
            .bind(to.as_str())
            .bind(job.id)
            .bind(from.as_str())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let action = if paused {
            ChangeAction::JobPause
        } else {
            ChangeAction::JobResume
        };
        self.changed_in(&mut tx, scheduler, Change::new(action, name, String::new()))
            .await?;
        tx.commit().await.map_err(db_error)?;
        self.require_job(scheduler, name).await
    }

    pub(super) async fn job_delete(&self, scheduler: &str, name: &str) -> Result<(), StoreError> {
        let job = self.require_job(scheduler, name).await?;
        let mut tx = self.begin_change(scheduler).await?;
        for template in [
            "DELETE FROM quartz_execute WHERE job_id = ?",
            "DELETE FROM quartz_job WHERE id = ?",
        ] {
            self.query(template)
                .bind(job.id)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
        }
        let detail = format!("handler {}", job.spec.handler);
        self.changed_in(&mut tx, scheduler, Change::new(ChangeAction::JobDelete, name, detail))
            .await?;
        tx.commit().await.map_err(db_error)
    }

    pub(super) async fn jobs_read(&self, scheduler: &str, ids: &[i64]) -> Result<Vec<Job>, StoreError> {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let mut jobs = Vec::with_capacity(ids.len());
        // By id alone, the scheduler checked here: with the scheduler in the
        // statement, PostgreSQL's planner without statistics reads every job
        // of the scheduler through its index beside the ids.
        for chunk in ids.chunks(self.ids_per_statement()) {
            let q = self.query(concat!("SELECT ", job_cols!(), " FROM quartz_job WHERE {ids}"));
            let rows = self
                .bind_id_set(q, chunk)
                .fetch_all(&self.db.pool)
                .await
                .map_err(db_error)?;
            for row in &rows {
                let job = decode_job(row)?;
                if job.scheduler == scheduler {
                    jobs.push(job);
                }
            }
        }
        Ok(jobs)
    }

    pub(super) async fn jobs_list(&self, scheduler: &str) -> Result<Vec<Job>, StoreError> {
        let rows = self
            .query(concat!(
                "SELECT ",
                job_cols!(),
                " FROM quartz_job WHERE scheduler = ? ORDER BY name"
            ))
            .bind(scheduler.to_owned())
            .fetch_all(&self.db.pool)
            .await
            .map_err(db_error)?;
        rows.iter().map(decode_job).collect()
    }

    pub(super) async fn jobs_query(&self, query: &JobQuery) -> Result<Vec<Job>, StoreError> {
        // `!` escapes LIKE's wildcards the same way on the three backends.
        let pattern = query.search.as_ref().map(|text| {
            let mut escaped = String::with_capacity(text.len() + 2);
            escaped.push('%');
            for c in text.to_lowercase().chars() {
                if matches!(c, '!' | '%' | '_') {
                    escaped.push('!');
                }
                escaped.push(c);
            }
            escaped.push('%');
            escaped
        });
        let rows = self
            .query(concat!(
                "SELECT ",
                job_cols!(),
                " FROM quartz_job WHERE scheduler = ? AND (? IS NULL OR name > ?) AND (? IS NULL OR state = ?) \
                 AND (? IS NULL OR handler = ?) AND (? IS NULL OR LOWER(name) LIKE ? ESCAPE '!') \
                 ORDER BY name LIMIT ?"
            ))
            .bind(query.scheduler.clone())
            .bind(query.after.clone())
            .bind(query.after.clone())
            .bind(query.state.map(JobState::as_str))
            .bind(query.state.map(JobState::as_str))
            .bind(query.handler.clone())
            .bind(query.handler.clone())
            .bind(pattern.clone())
            .bind(pattern)
            .bind(i64::from(query.limit))
            .fetch_all(&self.db.pool)
            .await
            .map_err(db_error)?;
        rows.iter().map(decode_job).collect()
    }

    pub(super) async fn executes_due(
        &self,
        scheduler: &str,
        before: Timestamp,
        limit: u32,
    ) -> Result<DueBatch, StoreError> {
        let mut batch = DueBatch::default();
        let due = self
            .query(concat!(
                "SELECT ",
                execute_cols!(),
                " FROM quartz_execute WHERE scheduler = ? AND state = 'waiting' AND next_fire_time < ? \
                 ORDER BY next_fire_time, priority DESC LIMIT ?"
            ))
            .bind(scheduler.to_owned())
            .bind(before.as_millis())
            .bind(i64::from(limit))
            .fetch_all(&self.db.pool)
            .await
            .map_err(db_error)?;
        let room = u32::try_from(due.len()).map_or(0, |n| limit.saturating_sub(n));
        self.serve(due, &mut batch).await?;
        if room > 0 {
            let uninitialised = self
                .query(concat!(
                    "SELECT ",
                    execute_cols!(),
                    " FROM quartz_execute WHERE scheduler = ? AND state = 'waiting' AND next_fire_time IS NULL \
                     ORDER BY id LIMIT ?"
                ))
                .bind(scheduler.to_owned())
                .bind(i64::from(room))
                .fetch_all(&self.db.pool)
                .await
                .map_err(db_error)?;
            self.serve(uninitialised, &mut batch).await?;
        }
        Ok(batch)
    }

    pub(super) async fn executes_orphaned(&self, scheduler: &str, limit: u32) -> Result<DueBatch, StoreError> {
        let rows = self
            .query(concat!(
                "SELECT ",
                execute_cols!(),
                " FROM quartz_execute e WHERE e.scheduler = ? AND e.state = 'running' AND NOT EXISTS \
                 (SELECT 1 FROM quartz_node n WHERE n.scheduler = e.scheduler AND n.node_id = e.node_id \
                 AND n.incarnation = e.incarnation AND n.state = 'live') ORDER BY e.id LIMIT ?"
            ))
            .bind(scheduler.to_owned())
            .bind(i64::from(limit))
            .fetch_all(&self.db.pool)
            .await
            .map_err(db_error)?;
        let mut batch = DueBatch::default();
        self.serve(rows, &mut batch).await?;
        Ok(batch)
    }

    pub(super) async fn executes_update(
        &self,
        updates: &[(ExecuteCas, Vec<SkippedRecord>)],
    ) -> Result<Vec<bool>, StoreError> {
        let mut won = Vec::with_capacity(updates.len());
        if updates.is_empty() {
            return Ok(won);
        }
        // One lock order on every node: by row.
        let mut order: Vec<usize> = (0..updates.len()).collect();
        order.sort_by_key(|&i| updates[i].0.execute_id);
        won.resize(updates.len(), false);
        let mut tx = self.begin().await?;
        for i in order {
            let (cas, records) = &updates[i];
            won[i] = self.update_in(&mut tx, cas, records).await?;
        }
        tx.commit().await.map_err(db_error)?;
        Ok(won)
    }
}

/// A duration as stored: whole milliseconds.
fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
