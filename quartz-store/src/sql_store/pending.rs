//! Pending fires: a retry waiting out its backoff, or a late run a misfire
//! policy promised, written in the same transaction that records the end of
//! the attempt before it, and claimed by compare-and-set like any fire.

use super::convert::Statement as _;
use quartz_core::Timestamp;
use quartz_core::store::{
    BackfillFire, Backfilled, ChangeAction, FireRecord, FireState, FollowUp, HandlerSpan, MANUAL_EXECUTE, NodeRef,
    PendingClaim, QueuedFire, StoreError, backfill_attempt, check_backfill,
};
use quartz_core::trigger::Overlap;
use sqlx::any::AnyQueryResult;
use sqlx::{Any, Row, Transaction};

use super::changes::Change;
use super::{SqlStore, db_error, decode_fire, is_unique_violation, truncate};

/// The next attempt of a fire as a pending row (binds: delay ms, fire id).
macro_rules! next_pending {
    ($extra:expr) => {
        concat!(
            "INSERT INTO quartz_fire (scheduler, execute_id, job_id, fire_time, attempt, node_id, incarnation, \
             state, claimed_at, due_at, fire_count) \
             SELECT f.scheduler, f.execute_id, f.job_id, f.fire_time, f.attempt + 1, NULL, 0, 'pending', {now}, \
             {now} + ?, 1 FROM quartz_fire f WHERE f.id = ?",
            $extra
        )
    };
}

/// No pending fire of the same execute and job yet.
macro_rules! none_pending {
    () => {
        " AND NOT EXISTS (SELECT 1 FROM quartz_fire p WHERE p.finished_at IS NULL AND p.due_at IS NOT NULL \
         AND p.execute_id = f.execute_id AND p.scheduler = f.scheduler AND p.state = 'pending' \
         AND p.job_id = f.job_id)"
    };
}

impl SqlStore {
    /// Inserts the pending next attempt of `fire_id`, due `due_in_ms` from
    /// now; `None` when it exists already (or, with `one_per_execute`, when a
    /// pending fire of the same execute and job does).
    async fn next_pending_in(
        &self,
        tx: &mut Transaction<'static, Any>,
        fire_id: i64,
        due_in_ms: i64,
        one_per_execute: bool,
    ) -> Result<Option<(i64, Timestamp)>, StoreError> {
        let backend = self.db.backend;
        let template = if one_per_execute {
            backend.pick(
                concat!(
                    next_pending!(none_pending!()),
                    " ON CONFLICT (execute_id, job_id, fire_time, attempt) DO NOTHING RETURNING id, due_at"
                ),
                next_pending!(none_pending!()),
            )
        } else {
            backend.pick(
                concat!(
                    next_pending!(""),
                    " ON CONFLICT (execute_id, job_id, fire_time, attempt) DO NOTHING RETURNING id, due_at"
                ),
                next_pending!(""),
            )
        };
        let q = self.query(template).bind(due_in_ms).bind(fire_id);
        let inserted = if backend.returns_rows() {
            q.fetch_optional(&mut **tx).await.and_then(|row| {
                row.map(|r| Ok((r.try_get::<i64, _>(0)?, Timestamp::from_millis(r.try_get::<i64, _>(1)?))))
                    .transpose()
            })
        } else {
            match q.execute(&mut **tx).await {
                Ok(done) => self.inserted_due(tx, &done).await,
                Err(e) => Err(e),
            }
        };
        match inserted {
            Ok(next) => Ok(next),
            Err(e) if is_unique_violation(&e) => Ok(None),
            Err(e) => Err(db_error(e)),
        }
    }

    /// MySQL: the row an insert added, with its due time.
    async fn inserted_due(
        &self,
        tx: &mut Transaction<'static, Any>,
        done: &AnyQueryResult,
    ) -> Result<Option<(i64, Timestamp)>, sqlx::Error> {
        let Some(id) = done.last_insert_id().filter(|_| done.rows_affected() == 1) else {
            return Ok(None);
        };
        let due: i64 = sqlx::query_scalar(self.db.sql("SELECT due_at FROM quartz_fire WHERE id = ?"))
            .bind(id)
            .fetch_one(&mut **tx)
            .await?;
        Ok(Some((id, Timestamp::from_millis(due))))
    }

    /// Records an attempt's end (a fenced single-row transition, binds: the
    /// text, with `ran` the handler's run ([`ran_cols`](super::ran::ran_cols)),
    /// then fire id, node id, incarnation) and its pending follow-up in one
    /// transaction.
    async fn end_with_follow_up(
        &self,
        (template, ran): (&'static str, Option<Option<HandlerSpan>>),
        fire_id: i64,
        node: &NodeRef,
        text: &str,
        due_in_ms: i64,
        one_per_execute: bool,
    ) -> Result<FollowUp, StoreError> {
        let mut tx = self.begin().await?;
        let mut q = self.query(template).bind(truncate(text));
        if let Some(ran) = ran {
            q = super::ran::bind_ran(q, ran);
        }
        let ended = q
            .bind(fire_id)
            .bind(node.node_id.clone())
            .bind(node.incarnation)
            .exec(&mut *tx)
            .await?;
        if ended.rows_affected() != 1 {
            return Ok(FollowUp::NotOwned);
        }
        let next = self
            .next_pending_in(&mut tx, fire_id, due_in_ms.max(0), one_per_execute)
            .await?;
        tx.commit().await.map_err(db_error)?;
        Ok(match next {
            Some((fire_id, due_at)) => FollowUp::Pending { fire_id, due_at },
            None => FollowUp::Recorded,
        })
    }

    pub(super) async fn fail_and_retry(
        &self,
        fire_id: i64,
        node: &NodeRef,
        error: &str,
        retry_in_ms: i64,
        ran: Option<HandlerSpan>,
    ) -> Result<FollowUp, StoreError> {
        self.end_with_follow_up(
            (
                concat!(
                    "UPDATE quartz_fire SET state = 'failed', error = ?, ",
                    super::ran::ran_cols!(),
                    " WHERE id = ? AND state = 'running' AND node_id = ? AND incarnation = ?"
                ),
                Some(ran),
            ),
            fire_id,
            node,
            error,
            retry_in_ms,
            false,
        )
        .await
    }

    pub(super) async fn misfire_and_run_late(
        &self,
        fire_id: i64,
        node: &NodeRef,
        reason: &str,
        one_per_execute: bool,
    ) -> Result<FollowUp, StoreError> {
        self.end_with_follow_up(
            (
                "UPDATE quartz_fire SET state = 'misfired', error = ?, started_at = NULL, finished_at = {now} \
                 WHERE id = ? AND state IN ('claimed', 'running') AND node_id = ? AND incarnation = ?",
                None,
            ),
            fire_id,
            node,
            reason,
            0,
            one_per_execute,
        )
        .await
    }

    pub(super) async fn pending_due(
        &self,
        scheduler: &str,
        before: Timestamp,
        limit: u32,
    ) -> Result<Vec<FireRecord>, StoreError> {
        let rows = self
            .query(concat!(
                "SELECT ",
                fire_cols!(),
                " FROM quartz_fire WHERE scheduler = ? AND finished_at IS NULL AND state = 'pending' AND due_at < ? \
                 ORDER BY due_at LIMIT ?"
            ))
            .bind(scheduler.to_owned())
            .bind(before.as_millis())
            .bind(i64::from(limit))
            .rows(&self.db.pool)
            .await?;
        Ok(crate::common::decode_each(&rows, "fire", decode_fire))
    }

    pub(super) async fn claim_pending(
        &self,
        fire_id: i64,
        node: &NodeRef,
        exclusive: bool,
    ) -> Result<PendingClaim, StoreError> {
        // The fire's job, its trigger's overlap policy (a trigger with one
        // makes its pending fires exclusive too) and the job's concurrency
        // limit, read before the transaction: on MySQL a transaction's
        // first plain read fixes the snapshot its later plain reads see,
        // which must come after the job's and the key's locks. The claim
        // itself checks that the fire is still pending.
        let row = self
            .query(
                "SELECT f.job_id, f.execute_id, f.fire_time, e.overlap, j.limit_key, j.concurrency_limit, \
                 (SELECT MIN(k.id) FROM quartz_job k WHERE k.scheduler = j.scheduler AND k.limit_key = j.limit_key), \
                 e.id FROM quartz_fire f LEFT JOIN quartz_execute e ON e.id = f.execute_id \
                 LEFT JOIN quartz_job j ON j.id = f.job_id WHERE f.id = ? AND f.state = 'pending'",
            )
            .bind(fire_id)
            .row(&self.db.pool)
            .await?;
        let Some(row) = row else {
            return Ok(PendingClaim::Gone);
        };
        let get = |i: usize| row.try_get::<i64, _>(i).map_err(db_error);
        let (job, execute_id, fire_time) = (get(0)?, get(1)?, get(2)?);
        let overlap = row
            .try_get::<Option<String>, _>(3)
            .map_err(db_error)?
            .and_then(|o| o.parse::<Overlap>().ok());
        let limit = super::overlap::limit_of_row(&row, 4)?;
        // A fire of a trigger an edit replaced (or deleted) waits for the
        // job's open fires: the overlap policy that held it is gone with
        // its trigger, so it is held as strictly as any could.
        let trigger_gone = row.try_get::<Option<i64>, _>(7).map_err(db_error)?.is_none() && execute_id > MANUAL_EXECUTE;
        let checks_job = exclusive || trigger_gone || overlap.is_some_and(|o| o != Overlap::Allow);
        let mut tx = self.begin().await?;
        if checks_job || limit.is_some() {
            // The job's row first, then its key's, as every exclusive claim
            // takes them: claims of one job, and of one key, are serialised.
            let locked = self.lock_job(&mut tx, job, limit.as_ref()).await?;
            if (locked.open.is_some() && checks_job) || locked.full.is_some() {
                return Ok(PendingClaim::Blocked);
            }
            // Fires waiting under an overlap policy or a limit run in the
            // order of their fire times. The due time's bound is `+due_at`,
            // which no index serves, so that SQLite reads the trigger's
            // waiting fires by fire time rather than every pending fire due
            // by now.
            if overlap.is_some_and(Overlap::waits) || limit.is_some() {
                let older = self
                    .query(
                        "SELECT id FROM quartz_fire WHERE scheduler = ? AND finished_at IS NULL \
                         AND due_at IS NOT NULL AND execute_id = ? AND state = 'pending' AND attempt = 1 \
                         AND fire_time < ? AND +due_at <= {now} AND job_id = ? LIMIT 1",
                    )
                    .bind(self.scheduler.to_string())
                    .bind(execute_id)
                    .bind(fire_time)
                    .bind(job)
                    .row(&mut *tx)
                    .await?;
                if older.is_some() {
                    return Ok(PendingClaim::Blocked);
                }
            }
        }
        // The whole scheduler on standby: a node that has not seen it yet
        // claims nothing either.
        let paused = self
            .query("SELECT 1 FROM quartz_scheduler WHERE scheduler = ? AND paused_at IS NOT NULL")
            .bind(self.scheduler.to_string())
            .row(&mut *tx)
            .await?;
        if paused.is_some() {
            return Ok(PendingClaim::Blocked);
        }
        let claimed = self
            .query(
                "UPDATE quartz_fire SET state = 'claimed', node_id = ?, incarnation = ?, claimed_at = {now} \
                 WHERE id = ? AND state = 'pending' AND EXISTS (SELECT 1 FROM quartz_node n \
                 WHERE n.scheduler = quartz_fire.scheduler AND n.node_id = ? AND n.incarnation = ? \
                 AND n.state = 'live')",
            )
            .bind(node.node_id.clone())
            .bind(node.incarnation)
            .bind(fire_id)
            .bind(node.node_id.clone())
            .bind(node.incarnation)
            .exec(&mut *tx)
            .await?;
        if claimed.rows_affected() != 1 {
            return Ok(PendingClaim::Gone);
        }
        tx.commit().await.map_err(db_error)?;
        Ok(PendingClaim::Won)
    }

    /// Inserts a pending fire asked for by hand (a fire now, a retry), due
    /// at `due_at`, and answers its id. Two at once of one fire and attempt:
    /// [`StoreError::Conflict`] (`clash` says what), so that the retry of
    /// the whole change reads the other.
    pub(super) async fn insert_pending_by_hand(
        &self,
        tx: &mut Transaction<'static, Any>,
        scheduler: &str,
        key: (i64, i64, i64, i64),
        due_at: i64,
        clash: impl FnOnce() -> String,
    ) -> Result<i64, StoreError> {
        let (execute_id, job_id, fire_time, attempt) = key;
        let inserted = self
            .query(
                "INSERT INTO quartz_fire (scheduler, execute_id, job_id, fire_time, attempt, node_id, incarnation, \
                 state, claimed_at, due_at, fire_count) VALUES (?, ?, ?, ?, ?, NULL, 0, 'pending', {now}, ?, 1)",
            )
            .bind(scheduler.to_owned())
            .bind(execute_id)
            .bind(job_id)
            .bind(fire_time)
            .bind(attempt)
            .bind(due_at)
            .execute(&mut **tx)
            .await;
        match inserted {
            Ok(_) => {}
            Err(e) if is_unique_violation(&e) => return Err(StoreError::Conflict { reason: clash() }),
            Err(e) => return Err(db_error(e)),
        }
        self.query("SELECT id FROM quartz_fire WHERE execute_id = ? AND job_id = ? AND fire_time = ? AND attempt = ?")
            .bind(execute_id)
            .bind(job_id)
            .bind(fire_time)
            .bind(attempt)
            .fetch_one(&mut **tx)
            .await
            .and_then(|row| row.try_get(0))
            .map_err(db_error)
    }

    /// Backfills a job (see [`JobStore::backfill`](quartz_core::store::JobStore::backfill)):
    /// each fire time's ledger rows read, and the attempt the rule gives
    /// inserted pending, in one change.
    pub(super) async fn job_backfill(
        &self,
        scheduler: &str,
        name: &str,
        fires: &[BackfillFire],
    ) -> Result<Backfilled, StoreError> {
        let job = self.require_job(scheduler, name).await?;
        let mut tx = self.begin_change(scheduler).await?;
        let executes: Vec<i64> = self
            .query("SELECT id FROM quartz_execute WHERE job_id = ?")
            .bind(job.id)
            .rows(&mut *tx)
            .await?
            .iter()
            .map(|row| row.try_get(0))
            .collect::<Result<_, _>>()
            .map_err(db_error)?;
        check_backfill(name, fires, &executes)?;
        let mut done = Backfilled::default();
        for f in fires {
            let rows = self
                .query("SELECT attempt, state FROM quartz_fire WHERE execute_id = ? AND job_id = ? AND fire_time = ?")
                .bind(f.execute_id)
                .bind(job.id)
                .bind(f.fire_time.as_millis())
                .rows(&mut *tx)
                .await?;
            let mut seen = Vec::with_capacity(rows.len());
            for row in &rows {
                let attempt: i64 = row.try_get(0).map_err(db_error)?;
                let state: String = row.try_get(1).map_err(db_error)?;
                let state = FireState::parse(&state).map_err(StoreError::Invalid)?;
                seen.push((u32::try_from(attempt).unwrap_or(u32::MAX), state));
            }
            let Some(attempt) = backfill_attempt(seen) else {
                done.already += 1;
                continue;
            };
            let key = (f.execute_id, job.id, f.fire_time.as_millis(), i64::from(attempt));
            let fire_id = self
                .insert_pending_by_hand(&mut tx, scheduler, key, f.due_at.as_millis(), || {
                    format!("two backfills of {name:?} at once")
                })
                .await?;
            done.queued.push(QueuedFire {
                fire_id,
                execute_id: f.execute_id,
                fire_time: f.fire_time,
                attempt,
            });
        }
        let detail = done.detail(fires);
        self.changed_in(
            &mut tx,
            scheduler,
            Change::new(ChangeAction::JobBackfill, name, detail).of_job(job.id),
        )
        .await?;
        tx.commit().await.map_err(db_error)?;
        Ok(done)
    }
}
