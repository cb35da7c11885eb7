//! [`SqlStore`]: the [`Store`] on sqlx, one implementation for the three
//! backends, their differences confined to [`crate::connect`].

use std::collections::HashSet;
use std::sync::LazyLock;

use quartz_core::Timestamp;
use quartz_core::store::{
    CHANGE_VISIBILITY_MS, ChainedFire, Claim, DueBatch, Execute, ExecuteCas, ExecuteSpec, ExecuteState, FireQuery,
    FireRecord, FireState, FollowUp, Job, JobDetail, JobSpec, JobState, MAX_ERROR_BYTES, Node, NodeRef,
    NodeRegistration, NodeState, Outcome, PendingClaim, RejectedRow, RetryPolicy, SkippedRecord, Store, StoreError,
    TriggerColumns, check_name,
};
use quartz_core::trigger::TriggerState;
use sqlx::any::{AnyQueryResult, AnyRow};
use sqlx::{Any, Row, Transaction};

use crate::connect::{Backend, Db, StoreOptions};

mod changes;
mod retention;

pub use changes::CHANGE_POLL;
pub(crate) use changes::ChangeSignal;

/// The children's ledger rows of a succeeded fire (binds: node id,
/// incarnation, the parent's fire id); each backend adds its own "do nothing
/// on a duplicate".
macro_rules! chain_insert {
    () => {
        "INSERT INTO quartz_fire (scheduler, execute_id, job_id, fire_time, attempt, node_id, incarnation, \
         state, claimed_at, error, fire_count) \
         SELECT f.scheduler, f.execute_id, k.id, f.fire_time, 1, ?, ?, \
         CASE WHEN k.state = 'enabled' THEN 'claimed' ELSE 'skipped' END, {now}, \
         CASE WHEN k.state = 'enabled' THEN NULL ELSE 'the child job is paused' END, 1 \
         FROM quartz_fire f JOIN quartz_job p ON p.id = f.job_id \
         JOIN quartz_job k ON k.scheduler = p.scheduler AND k.parent_job = p.name \
         WHERE f.id = ?"
    };
}

/// How many fires one batched start names: the store's atomic batch.
const FIRES_PER_STATEMENT: usize = quartz_core::store::FIRES_PER_BATCH;

/// `?, ?, …` for [`FIRES_PER_STATEMENT`] ids.
fn fire_id_list() -> String {
    vec!["?"; FIRES_PER_STATEMENT].join(", ")
}

/// The fenced start of many claimed fires (binds: the ids, then node id and
/// incarnation twice).
static MARK_RUNNING: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE quartz_fire SET state = 'running', started_at = {{now}} \
         WHERE id IN ({}) AND state = 'claimed' AND node_id = ? AND incarnation = ? AND EXISTS \
         (SELECT 1 FROM quartz_node n WHERE n.scheduler = quartz_fire.scheduler AND n.node_id = ? \
         AND n.incarnation = ? AND n.state = 'live')",
        fire_id_list()
    )
});

/// [`MARK_RUNNING`], returning the started ids (PostgreSQL, SQLite).
static MARK_RUNNING_RETURNING: LazyLock<String> = LazyLock::new(|| format!("{} RETURNING id", *MARK_RUNNING));

/// The success of many running fires (binds: the ids, node id, incarnation).
static SUCCEED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE quartz_fire SET state = 'succeeded', error = NULL, finished_at = {{now}}, \
         duration_ms = {{now}} - started_at \
         WHERE id IN ({}) AND state = 'running' AND node_id = ? AND incarnation = ?",
        fire_id_list()
    )
});

/// [`SUCCEED`], returning the recorded ids (PostgreSQL, SQLite).
static SUCCEED_RETURNING: LazyLock<String> = LazyLock::new(|| format!("{} RETURNING id", *SUCCEED));

/// Which of the named fires are in a state under an incarnation, locked
/// (MySQL, around a batched transition; binds: the ids, state, node id,
/// incarnation).
static IN_STATE_OF: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT id FROM quartz_fire WHERE id IN ({}) AND state = ? AND node_id = ? AND incarnation = ? FOR UPDATE",
        fire_id_list()
    )
});

macro_rules! node_cols {
    () => {
        "scheduler, node_id, host, pid, weight, state, incarnation, registered_at, heartbeat_at, busy, handlers"
    };
}
/// The ids one `jobs_by_id` statement looks up.
const JOBS_PER_QUERY: usize = 32;

macro_rules! job_cols {
    () => {
        "id, scheduler, name, handler, payload, description, state, requests_recovery, allow_concurrent, \
         timeout_ms, max_attempts, backoff_ms, backoff_max_ms, parent_job, created_at, updated_at"
    };
}
macro_rules! execute_cols {
    () => {
        "id, job_id, scheduler, kind, cron_expression, time_zone, interval_ms, start_time, end_time, \
         repeat_limit, times_triggered, misfire_policy, priority, state, prev_fire_time, next_fire_time, \
         node_id, incarnation, error, schedule_sig"
    };
}
macro_rules! fire_cols {
    () => {
        "id, execute_id, job_id, fire_time, attempt, node_id, incarnation, state, claimed_at, started_at, \
         finished_at, timed_out_at, error, skipped_until, fire_count, due_at"
    };
}

// After the column lists, which it uses.
mod pending;

/// A [`Store`] on SQLite, PostgreSQL or MySQL/MariaDB, chosen by URL.
///
/// Cheap to clone: clones share one connection pool.
#[derive(Debug, Clone)]
pub struct SqlStore {
    db: Db,
}

impl SqlStore {
    /// Connects with default options, creating or upgrading the schema.
    ///
    /// URLs: `sqlite://quartz.db` (a file, created if missing, in WAL mode),
    /// `sqlite::memory:`, `postgres://user@host/db`, `mysql://user@host/db`
    /// (`mariadb://` is accepted too).
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidUrl`], [`StoreError::Unavailable`] when the server
    /// cannot be reached, [`StoreError::Migration`].
    pub async fn connect(url: &str) -> Result<SqlStore, StoreError> {
        SqlStore::connect_with(url, &StoreOptions::default()).await
    }

    /// Connects with the given options.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_with(url: &str, options: &StoreOptions) -> Result<SqlStore, StoreError> {
        Ok(SqlStore {
            db: Db::connect(url, options).await?,
        })
    }

    /// Creates or upgrades the schema; idempotent, and safe when several nodes
    /// run it at once.
    ///
    /// # Errors
    ///
    /// [`StoreError::Migration`].
    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.db.migrate().await
    }

    /// The connection pool, for plain SQL beside the store (operators' tools,
    /// tests). Writes here bypass the store's validation.
    pub fn pool(&self) -> &sqlx::AnyPool {
        &self.db.pool
    }

    /// Which database this is.
    pub fn backend(&self) -> Backend {
        self.db.backend
    }

    /// Closes the pool, waiting for connections in use to be returned.
    pub async fn close(&self) {
        self.db.pool.close().await;
    }

    async fn begin(&self) -> Result<Transaction<'static, Any>, StoreError> {
        let tx = match self.db.backend {
            // Take the write lock up front: a deferred transaction that reads
            // and then writes can fail at once instead of waiting.
            Backend::Sqlite => self.db.pool.begin_with("BEGIN IMMEDIATE").await,
            Backend::Postgres | Backend::MySql => self.db.pool.begin().await,
        };
        tx.map_err(db_error)
    }

    fn query(&self, template: &'static str) -> sqlx::query::Query<'static, Any, sqlx::any::AnyArguments> {
        sqlx::query(self.db.sql(template))
    }

    async fn job_by_name(&self, scheduler: &str, name: &str) -> Result<Option<Job>, StoreError> {
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

    async fn require_job(&self, scheduler: &str, name: &str) -> Result<Job, StoreError> {
        self.job_by_name(scheduler, name)
            .await?
            .ok_or_else(|| StoreError::UnknownJob {
                scheduler: scheduler.to_owned(),
                name: name.to_owned(),
            })
    }

    async fn insert_executes(
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

    /// The database clock, read inside a transaction.
    async fn now_in(&self, tx: &mut Transaction<'static, Any>) -> Result<Timestamp, StoreError> {
        let ms: i64 = sqlx::query_scalar(self.db.sql("SELECT {now}"))
            .fetch_one(&mut **tx)
            .await
            .map_err(db_error)?;
        Ok(Timestamp::from_millis(ms))
    }

    async fn executes_of(&self, job: Job) -> Result<JobDetail, StoreError> {
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
    async fn serve(&self, rows: Vec<AnyRow>, batch: &mut DueBatch) -> Result<(), StoreError> {
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

    async fn cas_execute(&self, tx: &mut Transaction<'static, Any>, cas: &ExecuteCas) -> Result<bool, StoreError> {
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
        let mut q = q
            .bind(cas.set.prev_fire_time.map(Timestamp::as_millis))
            .bind(cas.set.next_fire_time.map(Timestamp::as_millis))
            .bind(count_to_i64(cas.set.times_triggered))
            .bind(cas.set_state.as_str())
            .bind(cas.set_owner.as_ref().map(|n| n.node_id.clone()))
            .bind(cas.set_owner.as_ref().map(|n| n.incarnation))
            .bind(signature);
        if reschedule {
            q = q.bind(set_start).bind(set_limit);
        }
        q = q
            .bind(cas.execute_id)
            .bind(cas.expect_state.as_str())
            .bind(cas.expect.prev_fire_time.map(Timestamp::as_millis))
            .bind(cas.expect.next_fire_time.map(Timestamp::as_millis));
        if let Some(owner) = &cas.expect_owner {
            q = q.bind(owner.node_id.clone()).bind(owner.incarnation);
        }
        let done = q.execute(&mut **tx).await.map_err(db_error)?;
        Ok(done.rows_affected() == 1)
    }

    /// Inserts a ledger row for an execute, taking its scheduler from the
    /// execute row and its job from it too unless `job_id` names one (a chained
    /// child's fire); returns the new id, or `None` when the unique key says
    /// the fire exists already.
    #[allow(clippy::too_many_arguments)]
    async fn insert_fire(
        &self,
        tx: &mut Transaction<'static, Any>,
        execute_id: i64,
        job_id: Option<i64>,
        fire_time: Timestamp,
        attempt: i64,
        owner: Option<&NodeRef>,
        state: FireState,
        error: Option<&str>,
        skipped: Option<(Timestamp, u64)>,
    ) -> Result<Option<i64>, StoreError> {
        let sql = match self.db.backend {
            Backend::Postgres | Backend::Sqlite => self.query(
                "INSERT INTO quartz_fire (scheduler, execute_id, job_id, fire_time, attempt, node_id, incarnation, \
                 state, claimed_at, error, skipped_until, fire_count) \
                 SELECT scheduler, id, COALESCE(?, job_id), ?, ?, ?, ?, ?, {now}, ?, ?, ? FROM quartz_execute \
                 WHERE id = ? ON CONFLICT (execute_id, job_id, fire_time, attempt) DO NOTHING RETURNING id",
            ),
            Backend::MySql => self.query(
                "INSERT INTO quartz_fire (scheduler, execute_id, job_id, fire_time, attempt, node_id, incarnation, \
                 state, claimed_at, error, skipped_until, fire_count) \
                 SELECT scheduler, id, COALESCE(?, job_id), ?, ?, ?, ?, ?, {now}, ?, ?, ? FROM quartz_execute \
                 WHERE id = ?",
            ),
        };
        let q = sql
            .bind(job_id)
            .bind(fire_time.as_millis())
            .bind(attempt)
            .bind(owner.map(|n| n.node_id.clone()))
            .bind(owner.map_or(0, |n| n.incarnation))
            .bind(state.as_str())
            .bind(error.map(truncate))
            .bind(skipped.map(|(until, _)| until.as_millis()))
            .bind(skipped.map_or(1, |(_, count)| count_to_i64(count)))
            .bind(execute_id);
        let result = match self.db.backend {
            Backend::Postgres | Backend::Sqlite => q
                .fetch_optional(&mut **tx)
                .await
                .and_then(|row| row.map(|r| r.try_get::<i64, _>(0)).transpose()),
            Backend::MySql => q
                .execute(&mut **tx)
                .await
                .map(|done: AnyQueryResult| (done.rows_affected() == 1).then(|| done.last_insert_id()).flatten()),
        };
        match result {
            Ok(id) => Ok(id),
            Err(e) if is_unique_violation(&e) => Ok(None),
            Err(e) => Err(db_error(e)),
        }
    }

    /// Runs a statement on the pool; whether it changed exactly one row (a
    /// compare-and-set won).
    async fn changed_one(
        &self,
        q: sqlx::query::Query<'static, Any, sqlx::any::AnyArguments>,
    ) -> Result<bool, StoreError> {
        Ok(q.execute(&self.db.pool).await.map_err(db_error)?.rows_affected() == 1)
    }

    /// A single-fire statement fenced by the owner and its live incarnation
    /// (binds: the fire, then node id and incarnation twice); whether it won.
    async fn fenced_while_live(
        &self,
        template: &'static str,
        fire_id: i64,
        node: &NodeRef,
    ) -> Result<bool, StoreError> {
        self.changed_one(
            self.query(template)
                .bind(fire_id)
                .bind(node.node_id.clone())
                .bind(node.incarnation)
                .bind(node.node_id.clone())
                .bind(node.incarnation),
        )
        .await
    }

    async fn fire_transition(
        &self,
        template: &'static str,
        fire_id: i64,
        node: &NodeRef,
        extra: Option<String>,
    ) -> Result<bool, StoreError> {
        let mut q = self.query(template);
        if let Some(extra) = extra {
            q = q.bind(extra);
        }
        self.changed_one(q.bind(fire_id).bind(node.node_id.clone()).bind(node.incarnation))
            .await
    }

    async fn claim_in(&self, tx: &mut Transaction<'static, Any>, claim: &Claim) -> Result<Claimed, StoreError> {
        if claim.exclusive && self.job_has_open_fire(tx, claim.cas.execute_id).await? {
            return Ok(Claimed::Lost);
        }
        if self.db.backend == Backend::Postgres
            && !claim.exclusive
            && claim.cas.expect_owner.is_none()
            && claim.cas.set_trigger.is_none()
            && claim.cas.set_signature.is_none()
        {
            return self.claim_statement(&mut **tx, claim).await;
        }
        if !self.cas_execute(tx, &claim.cas).await? {
            return Ok(Claimed::Lost);
        }
        let id = self
            .insert_fire(
                tx,
                claim.cas.execute_id,
                None,
                claim.fire_time,
                i64::from(claim.attempt),
                Some(&claim.node),
                FireState::Claimed,
                None,
                None,
            )
            .await?;
        Ok(id.map_or(Claimed::Conflict, Claimed::Won))
    }
}

impl SqlStore {
    /// Claims in one transaction; a ledger conflict sends them one by one.
    async fn claim_together(&self, claims: &[Claim]) -> Result<Vec<Option<i64>>, StoreError> {
        let mut tx = self.begin().await?;
        let mut won = Vec::with_capacity(claims.len());
        for claim in claims {
            match self.claim_in(&mut tx, claim).await? {
                Claimed::Won(id) => won.push(Some(id)),
                Claimed::Lost => won.push(None),
                Claimed::Conflict => {
                    // A ledger row exists for a fire whose compare-and-set won
                    // (a row moved back by hand): undo everything and claim one
                    // by one, so that only that claim is refused.
                    drop(tx);
                    let mut one_by_one = Vec::with_capacity(claims.len());
                    for claim in claims {
                        one_by_one.push(self.claim(claim).await?);
                    }
                    return Ok(one_by_one);
                }
            }
        }
        tx.commit().await.map_err(db_error)?;
        Ok(won)
    }

    /// One fenced transition of many fires, [`FIRES_PER_STATEMENT`] per
    /// statement (binds: the ids, node id and incarnation, and again when
    /// `node_twice`), from the first state of the pair to the second; returns
    /// the ids it moved, read from `RETURNING` or, on MySQL, from which were
    /// in the first state before and are in the second after.
    async fn transition_all(
        &self,
        fire_ids: &[i64],
        node: &NodeRef,
        plain: &'static str,
        returning: &'static str,
        node_twice: bool,
        (from_state, to_state): (&'static str, &'static str),
    ) -> Result<Vec<i64>, StoreError> {
        let mut moved = Vec::with_capacity(fire_ids.len());
        // One prepared text per statement: short chunks repeat their last id.
        for chunk in fire_ids.chunks(FIRES_PER_STATEMENT) {
            let ids = (0..FIRES_PER_STATEMENT).map(|i| chunk.get(i).or(chunk.last()).copied().unwrap_or(0));
            let has_returning = self.db.backend != Backend::MySql;
            let mut q = self.query(if has_returning { returning } else { plain });
            for id in ids.clone() {
                q = q.bind(id);
            }
            q = q.bind(node.node_id.clone()).bind(node.incarnation);
            if node_twice {
                q = q.bind(node.node_id.clone()).bind(node.incarnation);
            }
            if has_returning {
                for row in q.fetch_all(&self.db.pool).await.map_err(db_error)? {
                    moved.push(row.try_get::<i64, _>(0).map_err(db_error)?);
                }
                continue;
            }
            // MySQL: in one transaction, lock which are in the state they
            // move from, move them, and read which moved.
            let mut tx = self.begin().await?;
            let in_state = |state: &'static str| {
                let mut check = self.query(&IN_STATE_OF);
                for id in ids.clone() {
                    check = check.bind(id);
                }
                check.bind(state).bind(node.node_id.clone()).bind(node.incarnation)
            };
            let before: HashSet<i64> = in_state(from_state)
                .fetch_all(&mut *tx)
                .await
                .map_err(db_error)?
                .iter()
                .map(|row| row.try_get::<i64, _>(0))
                .collect::<Result<_, _>>()
                .map_err(db_error)?;
            q.execute(&mut *tx).await.map_err(db_error)?;
            for row in in_state(to_state).fetch_all(&mut *tx).await.map_err(db_error)? {
                let id = row.try_get::<i64, _>(0).map_err(db_error)?;
                if before.contains(&id) {
                    moved.push(id);
                }
            }
            tx.commit().await.map_err(db_error)?;
        }
        Ok(moved)
    }

    /// For a job that disallows concurrency: locks the job's row (so that two
    /// claims of its executes are serialised, whichever nodes make them) and
    /// says whether a fire of the job is claimed or running.
    async fn job_has_open_fire(&self, tx: &mut Transaction<'static, Any>, execute_id: i64) -> Result<bool, StoreError> {
        // The job's id by a plain read first (an execute never changes job):
        // a subquery in the UPDATE would lock the execute row before the
        // job's on MySQL, where another claim of the job takes the job's row
        // first, then its own execute's, and the two would deadlock.
        let Some(job) = self
            .query("SELECT job_id FROM quartz_execute WHERE id = ?")
            .bind(execute_id)
            .fetch_optional(&mut **tx)
            .await
            .map_err(db_error)?
        else {
            return Ok(false);
        };
        let job_id: i64 = job.try_get(0).map_err(db_error)?;
        self.query("UPDATE quartz_job SET updated_at = updated_at WHERE id = ?")
            .bind(job_id)
            .execute(&mut **tx)
            .await
            .map_err(db_error)?;
        // Any open fire of the job counts, whatever its execute's state (the
        // last fire of a trigger leaves it complete while it runs). The open
        // fires are few and indexed by (scheduler, state). A locking read sees
        // the latest committed state on every backend.
        let check = match self.db.backend {
            Backend::Sqlite => self.query(
                "SELECT f.id FROM quartz_fire f JOIN quartz_execute e ON f.scheduler = e.scheduler \
                 AND f.job_id = e.job_id WHERE e.id = ? AND f.state IN ('claimed', 'running') LIMIT 1",
            ),
            Backend::Postgres | Backend::MySql => self.query(
                "SELECT f.id FROM quartz_fire f JOIN quartz_execute e ON f.scheduler = e.scheduler \
                 AND f.job_id = e.job_id WHERE e.id = ? AND f.state IN ('claimed', 'running') LIMIT 1 FOR UPDATE",
            ),
        };
        let row = check
            .bind(execute_id)
            .fetch_optional(&mut **tx)
            .await
            .map_err(db_error)?;
        Ok(row.is_some())
    }

    /// [`Store::register_node`]'s transaction: one upsert (a new node's row,
    /// or a returning node's next incarnation), then the row as stored. A new
    /// row's first incarnation is the database's now in milliseconds, not 1:
    /// a node whose row the retention purged and that comes back is still
    /// newer than every incarnation it had, so fencing holds across purges.
    async fn register_node_once(&self, node: &NodeRegistration) -> Result<Node, StoreError> {
        let mut tx = self.begin().await?;
        let upsert = match self.db.backend {
            Backend::MySql => {
                "INSERT INTO quartz_node (scheduler, node_id, host, pid, weight, handlers, state, incarnation, \
                 registered_at, heartbeat_at) VALUES (?, ?, ?, ?, ?, ?, 'live', {now}, {now}, {now}) \
                 ON DUPLICATE KEY UPDATE host = VALUES(host), pid = VALUES(pid), weight = VALUES(weight), \
                 handlers = VALUES(handlers), state = 'live', incarnation = incarnation + 1, registered_at = VALUES(registered_at), \
                 heartbeat_at = VALUES(heartbeat_at)"
            }
            Backend::Postgres | Backend::Sqlite => {
                "INSERT INTO quartz_node (scheduler, node_id, host, pid, weight, handlers, state, incarnation, \
                 registered_at, heartbeat_at) VALUES (?, ?, ?, ?, ?, ?, 'live', {now}, {now}, {now}) \
                 ON CONFLICT (scheduler, node_id) DO UPDATE SET host = excluded.host, pid = excluded.pid, \
                 weight = excluded.weight, handlers = excluded.handlers, state = 'live', incarnation = quartz_node.incarnation + 1, \
                 registered_at = excluded.registered_at, heartbeat_at = excluded.heartbeat_at"
            }
        };
        self.query(upsert)
            .bind(node.scheduler.clone())
            .bind(node.node_id.clone())
            .bind(node.host.clone())
            .bind(i64::from(node.pid))
            .bind(i64::from(node.weight.max(1)))
            .bind(serde_json::to_string(&node.handlers).map_err(|e| StoreError::Database {
                reason: format!("handler names cannot be encoded: {e}"),
            })?)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let row = self
            .query(concat!(
                "SELECT ",
                node_cols!(),
                " FROM quartz_node WHERE scheduler = ? AND node_id = ?"
            ))
            .bind(node.scheduler.clone())
            .bind(node.node_id.clone())
            .fetch_one(&mut *tx)
            .await
            .map_err(db_error)?;
        let registered = decode_node(&row)?;
        tx.commit().await.map_err(db_error)?;
        Ok(registered)
    }

    /// PostgreSQL: the claim as one statement, the compare-and-set in a
    /// data-modifying CTE feeding the ledger insert. Atomic on its own, so a
    /// single claim needs no transaction around it: one round trip, one commit.
    /// When the ledger already holds the fire (a row moved back by hand) the
    /// row still advances past it, which loses nothing: that fire is recorded.
    async fn claim_statement<'e, E>(&self, executor: E, claim: &Claim) -> Result<Claimed, StoreError>
    where
        E: sqlx::Executor<'e, Database = Any>,
    {
        let cas = &claim.cas;
        let row = self
            .query(
                "WITH won AS (UPDATE quartz_execute SET prev_fire_time = ?, next_fire_time = ?, times_triggered = ?, \
                 state = ?, node_id = ?, incarnation = ?, updated_at = {now} \
                 WHERE id = ? AND state = ? AND prev_fire_time {is} ? AND next_fire_time {is} ? \
                 RETURNING scheduler, id, job_id) \
                 INSERT INTO quartz_fire (scheduler, execute_id, job_id, fire_time, attempt, node_id, incarnation, \
                 state, claimed_at, fire_count) \
                 SELECT scheduler, id, job_id, ?, ?, ?, ?, 'claimed', {now}, 1 FROM won \
                 ON CONFLICT (execute_id, job_id, fire_time, attempt) DO NOTHING RETURNING id",
            )
            .bind(cas.set.prev_fire_time.map(Timestamp::as_millis))
            .bind(cas.set.next_fire_time.map(Timestamp::as_millis))
            .bind(count_to_i64(cas.set.times_triggered))
            .bind(cas.set_state.as_str())
            .bind(cas.set_owner.as_ref().map(|n| n.node_id.clone()))
            .bind(cas.set_owner.as_ref().map(|n| n.incarnation))
            .bind(cas.execute_id)
            .bind(cas.expect_state.as_str())
            .bind(cas.expect.prev_fire_time.map(Timestamp::as_millis))
            .bind(cas.expect.next_fire_time.map(Timestamp::as_millis))
            .bind(claim.fire_time.as_millis())
            .bind(i64::from(claim.attempt))
            .bind(claim.node.node_id.clone())
            .bind(claim.node.incarnation)
            .fetch_optional(executor)
            .await
            .map_err(db_error)?;
        match row {
            Some(row) => Ok(Claimed::Won(row.try_get::<i64, _>(0).map_err(db_error)?)),
            None => Ok(Claimed::Lost),
        }
    }
}

/// What one claim inside a transaction came to.
enum Claimed {
    /// Won: the ledger row's id.
    Won(i64),
    /// The compare-and-set matched nothing: another node won.
    Lost,
    /// The compare-and-set matched but the ledger already holds the fire.
    Conflict,
}

impl Store for SqlStore {
    async fn now(&self) -> Result<Timestamp, StoreError> {
        let row = self
            .query("SELECT {now}")
            .fetch_one(&self.db.pool)
            .await
            .map_err(db_error)?;
        Ok(Timestamp::from_millis(row.try_get::<i64, _>(0).map_err(db_error)?))
    }

    async fn register_node(&self, node: &NodeRegistration) -> Result<Node, StoreError> {
        check_name("scheduler name", &node.scheduler)?;
        check_name("node id", &node.node_id)?;
        // Nodes starting together take gap locks on MySQL (the UPDATE of a
        // row not there yet) before they insert, and deadlock: again.
        retry_conflicts(|| self.register_node_once(node)).await
    }

    async fn heartbeat(&self, scheduler: &str, node: &NodeRef, busy: u64) -> Result<bool, StoreError> {
        self.changed_one(
            self.query(
                "UPDATE quartz_node SET heartbeat_at = {now}, busy = ? \
                 WHERE scheduler = ? AND node_id = ? AND incarnation = ? AND state = 'live'",
            )
            .bind(count_to_i64(busy))
            .bind(scheduler.to_owned())
            .bind(node.node_id.clone())
            .bind(node.incarnation),
        )
        .await
    }

    async fn list_nodes(&self, scheduler: &str) -> Result<Vec<Node>, StoreError> {
        let rows = self
            .query(concat!(
                "SELECT ",
                node_cols!(),
                " FROM quartz_node WHERE scheduler = ? ORDER BY node_id"
            ))
            .bind(scheduler.to_owned())
            .fetch_all(&self.db.pool)
            .await
            .map_err(db_error)?;
        rows.iter().map(decode_node).collect()
    }

    async fn retire_node(&self, scheduler: &str, node: &NodeRef, dead_after_ms: i64) -> Result<bool, StoreError> {
        self.changed_one(
            self.query(
                "UPDATE quartz_node SET state = 'dead' \
                 WHERE scheduler = ? AND node_id = ? AND incarnation = ? AND state = 'live' AND heartbeat_at < {now} - ?",
            )
            .bind(scheduler.to_owned())
            .bind(node.node_id.clone())
            .bind(node.incarnation)
            .bind(dead_after_ms),
        )
        .await
    }

    async fn leave(&self, scheduler: &str, node: &NodeRef) -> Result<bool, StoreError> {
        self.changed_one(
            self.query(
                "UPDATE quartz_node SET state = 'gone' \
                 WHERE scheduler = ? AND node_id = ? AND incarnation = ? AND state = 'live'",
            )
            .bind(scheduler.to_owned())
            .bind(node.node_id.clone())
            .bind(node.incarnation),
        )
        .await
    }

    async fn add_executes(&self, scheduler: &str, name: &str, executes: &[ExecuteSpec]) -> Result<(), StoreError> {
        let job = self.require_job(scheduler, name).await?;
        let mut tx = self.begin_change(scheduler).await?;
        self.insert_executes(&mut tx, scheduler, job.id, executes, job.state == JobState::Paused)
            .await?;
        self.changed_in(&mut tx, scheduler).await?;
        tx.commit().await.map_err(db_error)
    }

    async fn create_job(&self, scheduler: &str, job: &JobSpec, executes: &[ExecuteSpec]) -> Result<Job, StoreError> {
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
        let inserted = self
            .query(
                "INSERT INTO quartz_job (scheduler, name, handler, payload, description, state, requests_recovery, \
                 allow_concurrent, timeout_ms, max_attempts, backoff_ms, backoff_max_ms, parent_job, created_at, \
                 updated_at) \
                 VALUES (?, ?, ?, ?, ?, 'enabled', ?, ?, ?, ?, ?, ?, ?, {now}, {now})",
            )
            .bind(scheduler.to_owned())
            .bind(job.name.clone())
            .bind(job.handler.clone())
            .bind(job.payload.clone())
            .bind(job.description.clone())
            .bind(i64::from(job.requests_recovery))
            .bind(i64::from(job.allow_concurrent))
            .bind(job.timeout_ms)
            .bind(i64::from(job.retry.max_attempts))
            .bind(job.retry.backoff_ms)
            .bind(job.retry.backoff_max_ms)
            .bind(job.parent.clone())
            .execute(&mut *tx)
            .await;
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
        self.changed_in(&mut tx, scheduler).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(created)
    }

    async fn get_job(&self, scheduler: &str, name: &str) -> Result<Option<JobDetail>, StoreError> {
        match self.job_by_name(scheduler, name).await? {
            Some(job) => Ok(Some(self.executes_of(job).await?)),
            None => Ok(None),
        }
    }

    async fn jobs_by_id(&self, scheduler: &str, ids: &[i64]) -> Result<Vec<Job>, StoreError> {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let mut jobs = Vec::with_capacity(ids.len());
        // One prepared text for every chunk: short chunks repeat their last id.
        for chunk in ids.chunks(JOBS_PER_QUERY) {
            let mut q = self
                .query(concat!(
                    "SELECT ",
                    job_cols!(),
                    " FROM quartz_job WHERE scheduler = ? AND id IN (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ))
                .bind(scheduler.to_owned());
            for i in 0..JOBS_PER_QUERY {
                q = q.bind(chunk.get(i).or(chunk.last()).copied().unwrap_or(0));
            }
            let rows = q.fetch_all(&self.db.pool).await.map_err(db_error)?;
            for row in &rows {
                jobs.push(decode_job(row)?);
            }
        }
        Ok(jobs)
    }

    async fn list_jobs(&self, scheduler: &str) -> Result<Vec<Job>, StoreError> {
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

    async fn update_job(
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
        let updated = self
            .query(
                "UPDATE quartz_job SET name = ?, handler = ?, payload = ?, description = ?, requests_recovery = ?, \
                 allow_concurrent = ?, timeout_ms = ?, max_attempts = ?, backoff_ms = ?, backoff_max_ms = ?, \
                 parent_job = ?, \
                 updated_at = {now} WHERE id = ?",
            )
            .bind(job.name.clone())
            .bind(job.handler.clone())
            .bind(job.payload.clone())
            .bind(job.description.clone())
            .bind(i64::from(job.requests_recovery))
            .bind(i64::from(job.allow_concurrent))
            .bind(job.timeout_ms)
            .bind(i64::from(job.retry.max_attempts))
            .bind(job.retry.backoff_ms)
            .bind(job.retry.backoff_max_ms)
            .bind(job.parent.clone())
            .bind(existing.id)
            .execute(&mut *tx)
            .await;
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
        self.changed_in(&mut tx, scheduler).await?;
        tx.commit().await.map_err(db_error)?;
        self.require_job(scheduler, &job.name).await
    }

    async fn set_paused(&self, scheduler: &str, name: &str, paused: bool) -> Result<Job, StoreError> {
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
        self.changed_in(&mut tx, scheduler).await?;
        tx.commit().await.map_err(db_error)?;
        self.require_job(scheduler, name).await
    }

    async fn delete_job(&self, scheduler: &str, name: &str) -> Result<(), StoreError> {
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
        self.changed_in(&mut tx, scheduler).await?;
        tx.commit().await.map_err(db_error)
    }

    async fn due_executes(&self, scheduler: &str, before: Timestamp, limit: u32) -> Result<DueBatch, StoreError> {
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

    async fn orphaned_executes(&self, scheduler: &str, limit: u32) -> Result<DueBatch, StoreError> {
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

    async fn update_execute(&self, cas: &ExecuteCas, records: &[SkippedRecord]) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        if !self.cas_execute(&mut tx, cas).await? {
            return Ok(false);
        }
        for record in records {
            self.insert_fire(
                &mut tx,
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
        tx.commit().await.map_err(db_error)?;
        Ok(true)
    }

    async fn claim(&self, claim: &Claim) -> Result<Option<i64>, StoreError> {
        if self.db.backend == Backend::Postgres
            && !claim.exclusive
            && claim.cas.expect_owner.is_none()
            && claim.cas.set_trigger.is_none()
            && claim.cas.set_signature.is_none()
        {
            return match self.claim_statement(&self.db.pool, claim).await? {
                Claimed::Won(id) => Ok(Some(id)),
                Claimed::Lost | Claimed::Conflict => Ok(None),
            };
        }
        let mut tx = self.begin().await?;
        match self.claim_in(&mut tx, claim).await? {
            Claimed::Won(id) => {
                tx.commit().await.map_err(db_error)?;
                Ok(Some(id))
            }
            // Dropping the transaction rolls the compare-and-set back.
            Claimed::Lost | Claimed::Conflict => Ok(None),
        }
    }

    async fn claim_batch(&self, claims: &[Claim]) -> Result<Vec<Option<i64>>, StoreError> {
        // Exclusive claims lock a job row before the execute's: each gets a
        // transaction of its own, so that a batch never holds execute rows
        // while it waits for a job row (two nodes would deadlock).
        if claims.iter().any(|c| c.exclusive) {
            let shared: Vec<Claim> = claims.iter().filter(|c| !c.exclusive).cloned().collect();
            let mut shared_won = if shared.is_empty() {
                Vec::new()
            } else {
                self.claim_together(&shared).await?
            }
            .into_iter();
            // The shared claims are committed: from here no error may hide
            // them from the caller. An exclusive claim that fails was rolled
            // back; it counts as not won, and the next poll offers it again.
            let mut won = Vec::with_capacity(claims.len());
            for claim in claims {
                won.push(if claim.exclusive {
                    match retry_conflicts(|| self.claim(claim)).await {
                        Ok(won) => won,
                        Err(e) => {
                            tracing::warn!(execute_id = claim.cas.execute_id, error = %e,
                                "exclusive claim failed; the next poll offers it again");
                            None
                        }
                    }
                } else {
                    shared_won.next().flatten()
                });
            }
            return Ok(won);
        }
        self.claim_together(claims).await
    }

    async fn mark_running(&self, fire_id: i64, node: &NodeRef) -> Result<bool, StoreError> {
        self.fenced_while_live(
            "UPDATE quartz_fire SET state = 'running', started_at = {now} \
             WHERE id = ? AND state = 'claimed' AND node_id = ? AND incarnation = ? AND EXISTS \
             (SELECT 1 FROM quartz_node n WHERE n.scheduler = quartz_fire.scheduler AND n.node_id = ? \
             AND n.incarnation = ? AND n.state = 'live')",
            fire_id,
            node,
        )
        .await
    }

    async fn mark_running_all(&self, fire_ids: &[i64], node: &NodeRef) -> Result<Vec<i64>, StoreError> {
        self.transition_all(
            fire_ids,
            node,
            &MARK_RUNNING,
            &MARK_RUNNING_RETURNING,
            true,
            ("claimed", "running"),
        )
        .await
    }

    async fn confirm_start(&self, fire_id: i64, node: &NodeRef) -> Result<bool, StoreError> {
        self.fenced_while_live(
            "UPDATE quartz_fire SET started_at = {now} \
             WHERE id = ? AND state = 'running' AND node_id = ? AND incarnation = ? AND EXISTS \
             (SELECT 1 FROM quartz_node n WHERE n.scheduler = quartz_fire.scheduler AND n.node_id = ? \
             AND n.incarnation = ? AND n.state = 'live')",
            fire_id,
            node,
        )
        .await
    }

    async fn succeed_all(&self, fire_ids: &[i64], node: &NodeRef) -> Result<Vec<i64>, StoreError> {
        self.transition_all(
            fire_ids,
            node,
            &SUCCEED,
            &SUCCEED_RETURNING,
            false,
            ("running", "succeeded"),
        )
        .await
    }

    async fn finish(&self, fire_id: i64, node: &NodeRef, outcome: &Outcome) -> Result<bool, StoreError> {
        let (state, error) = match outcome {
            Outcome::Succeeded => (FireState::Succeeded, None),
            Outcome::Failed { error } => (FireState::Failed, Some(truncate(error))),
        };
        self.changed_one(
            self.query(
                "UPDATE quartz_fire SET state = ?, error = ?, finished_at = {now}, \
                 duration_ms = {now} - started_at \
                 WHERE id = ? AND state = 'running' AND node_id = ? AND incarnation = ?",
            )
            .bind(state.as_str())
            .bind(error)
            .bind(fire_id)
            .bind(node.node_id.clone())
            .bind(node.incarnation),
        )
        .await
    }

    async fn succeed_and_chain(&self, fire_id: i64, node: &NodeRef) -> Result<Option<Vec<ChainedFire>>, StoreError> {
        let mut tx = self.begin().await?;
        let done = self
            .query(
                "UPDATE quartz_fire SET state = 'succeeded', error = NULL, finished_at = {now}, \
                 duration_ms = {now} - started_at \
                 WHERE id = ? AND state = 'running' AND node_id = ? AND incarnation = ?",
            )
            .bind(fire_id)
            .bind(node.node_id.clone())
            .bind(node.incarnation)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        if done.rows_affected() != 1 {
            return Ok(None);
        }
        // One row per child: claimed by this node, or skipped when paused. A
        // child that has its row already (a cycle coming round) gets nothing.
        let insert = match self.db.backend {
            Backend::Postgres | Backend::Sqlite => self.query(concat!(
                chain_insert!(),
                " ON CONFLICT (execute_id, job_id, fire_time, attempt) DO NOTHING"
            )),
            Backend::MySql => self.query(concat!(
                chain_insert!(),
                " ON DUPLICATE KEY UPDATE quartz_fire.attempt = quartz_fire.attempt"
            )),
        };
        insert
            .bind(node.node_id.clone())
            .bind(node.incarnation)
            .bind(fire_id)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let rows = self
            .query(
                "SELECT c.id, c.job_id FROM quartz_fire f JOIN quartz_fire c \
                 ON c.execute_id = f.execute_id AND c.fire_time = f.fire_time \
                 JOIN quartz_job p ON p.id = f.job_id \
                 JOIN quartz_job k ON k.id = c.job_id AND k.scheduler = p.scheduler AND k.parent_job = p.name \
                 WHERE f.id = ? AND c.attempt = 1 AND c.state = 'claimed' AND c.node_id = ? AND c.incarnation = ? \
                 ORDER BY c.id",
            )
            .bind(fire_id)
            .bind(node.node_id.clone())
            .bind(node.incarnation)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        rows.iter()
            .map(|row| {
                Ok(ChainedFire {
                    fire_id: row.try_get(0).map_err(db_error)?,
                    job_id: row.try_get(1).map_err(db_error)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()
            .map(Some)
    }

    async fn chain_parents(&self, scheduler: &str) -> Result<Vec<i64>, StoreError> {
        let rows = self
            .query(
                "SELECT DISTINCT p.id FROM quartz_job p JOIN quartz_job k \
                 ON k.scheduler = p.scheduler AND k.parent_job = p.name WHERE p.scheduler = ?",
            )
            .bind(scheduler.to_owned())
            .fetch_all(&self.db.pool)
            .await
            .map_err(db_error)?;
        rows.iter().map(|row| row.try_get(0).map_err(db_error)).collect()
    }

    async fn misfire_claimed(&self, fire_id: i64, node: &NodeRef, reason: &str) -> Result<bool, StoreError> {
        self.fire_transition(
            "UPDATE quartz_fire SET state = 'misfired', error = ?, started_at = NULL, finished_at = {now} \
             WHERE id = ? AND state IN ('claimed', 'running') AND node_id = ? AND incarnation = ?",
            fire_id,
            node,
            Some(truncate(reason)),
        )
        .await
    }

    async fn skip_claimed(&self, fire_id: i64, node: &NodeRef, reason: &str) -> Result<bool, StoreError> {
        self.fire_transition(
            "UPDATE quartz_fire SET state = 'skipped', error = ?, finished_at = {now} \
             WHERE id = ? AND state = 'claimed' AND node_id = ? AND incarnation = ?",
            fire_id,
            node,
            Some(truncate(reason)),
        )
        .await
    }

    async fn fail_claimed(&self, fire_id: i64, node: &NodeRef, reason: &str) -> Result<bool, StoreError> {
        self.fire_transition(
            "UPDATE quartz_fire SET state = 'failed', error = ?, finished_at = {now} \
             WHERE id = ? AND state = 'claimed' AND node_id = ? AND incarnation = ?",
            fire_id,
            node,
            Some(truncate(reason)),
        )
        .await
    }

    async fn release_fire(&self, fire_id: i64, node: &NodeRef) -> Result<bool, StoreError> {
        self.fire_transition(
            "UPDATE quartz_fire SET node_id = NULL, incarnation = 0 \
             WHERE id = ? AND state = 'claimed' AND node_id = ? AND incarnation = ?",
            fire_id,
            node,
            None,
        )
        .await
    }

    async fn orphaned_fires(&self, scheduler: &str, limit: u32) -> Result<Vec<FireRecord>, StoreError> {
        let rows = self
            .query(concat!(
                "SELECT ",
                fire_cols!(),
                " FROM quartz_fire f WHERE f.scheduler = ? AND f.state IN ('claimed', 'running') AND NOT EXISTS \
                 (SELECT 1 FROM quartz_node n WHERE n.scheduler = f.scheduler AND n.node_id = f.node_id \
                 AND n.incarnation = f.incarnation AND n.state = 'live') ORDER BY f.fire_time, f.id LIMIT ?"
            ))
            .bind(scheduler.to_owned())
            .bind(i64::from(limit))
            .fetch_all(&self.db.pool)
            .await
            .map_err(db_error)?;
        rows.iter().map(decode_fire).collect()
    }

    async fn claimed_by(
        &self,
        scheduler: &str,
        node: &NodeRef,
        before: Timestamp,
        limit: u32,
    ) -> Result<Vec<FireRecord>, StoreError> {
        let rows = self
            .query(concat!(
                "SELECT ",
                fire_cols!(),
                " FROM quartz_fire WHERE scheduler = ? AND state = 'claimed' AND node_id = ? AND incarnation = ? \
                 AND fire_time < ? AND claimed_at < ? ORDER BY fire_time, id LIMIT ?"
            ))
            .bind(scheduler.to_owned())
            .bind(node.node_id.clone())
            .bind(node.incarnation)
            .bind(before.as_millis())
            .bind(before.as_millis())
            .bind(i64::from(limit))
            .fetch_all(&self.db.pool)
            .await
            .map_err(db_error)?;
        rows.iter().map(decode_fire).collect()
    }

    async fn take_over(&self, fire: &FireRecord, node: &NodeRef) -> Result<bool, StoreError> {
        self.changed_one(
            self.query(
                "UPDATE quartz_fire SET node_id = ?, incarnation = ?, claimed_at = {now} \
                 WHERE id = ? AND state = 'claimed' AND node_id {is} ? AND incarnation = ?",
            )
            .bind(node.node_id.clone())
            .bind(node.incarnation)
            .bind(fire.id)
            .bind(fire.owner.as_ref().map(|o| o.node_id.clone()))
            .bind(fire.owner.as_ref().map_or(0, |o| o.incarnation)),
        )
        .await
    }

    async fn rerun(&self, fire: &FireRecord, node: &NodeRef) -> Result<Option<i64>, StoreError> {
        let mut tx = self.begin().await?;
        let attempt = i64::from(fire.attempt) + 1;
        let closed = self
            .query(
                "UPDATE quartz_fire SET state = 'failed', finished_at = {now}, error = ? \
                 WHERE id = ? AND state = 'running' AND node_id {is} ? AND incarnation = ?",
            )
            .bind(format!("node died mid-run; recovered as attempt {attempt}"))
            .bind(fire.id)
            .bind(fire.owner.as_ref().map(|o| o.node_id.clone()))
            .bind(fire.owner.as_ref().map_or(0, |o| o.incarnation))
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        if closed.rows_affected() != 1 {
            return Ok(None);
        }
        let id = self
            .insert_fire(
                &mut tx,
                fire.execute_id,
                Some(fire.job_id),
                fire.fire_time,
                attempt,
                Some(node),
                FireState::Claimed,
                None,
                None,
            )
            .await?;
        if id.is_some() {
            tx.commit().await.map_err(db_error)?;
        }
        Ok(id)
    }

    async fn abandon(&self, fire: &FireRecord) -> Result<bool, StoreError> {
        self.changed_one(
            self.query(
                "UPDATE quartz_fire SET state = 'abandoned', finished_at = {now}, \
                 error = 'node died mid-run; the job does not request recovery' \
                 WHERE id = ? AND state = 'running' AND node_id {is} ? AND incarnation = ?",
            )
            .bind(fire.id)
            .bind(fire.owner.as_ref().map(|o| o.node_id.clone()))
            .bind(fire.owner.as_ref().map_or(0, |o| o.incarnation)),
        )
        .await
    }

    async fn fire_time_out(&self, fire_id: i64, node: &NodeRef, error: &str) -> Result<bool, StoreError> {
        self.fire_transition(
            "UPDATE quartz_fire SET timed_out_at = {now}, error = ? \
             WHERE id = ? AND state = 'running' AND node_id = ? AND incarnation = ?",
            fire_id,
            node,
            Some(truncate(error)),
        )
        .await
    }

    async fn fire_fail_and_retry(
        &self,
        fire_id: i64,
        node: &NodeRef,
        error: &str,
        retry_in_ms: i64,
    ) -> Result<FollowUp, StoreError> {
        self.fail_and_retry(fire_id, node, error, retry_in_ms).await
    }

    async fn fire_misfire_and_run_late(
        &self,
        fire_id: i64,
        node: &NodeRef,
        reason: &str,
        one_per_execute: bool,
    ) -> Result<FollowUp, StoreError> {
        self.misfire_and_run_late(fire_id, node, reason, one_per_execute).await
    }

    async fn fires_pending(
        &self,
        scheduler: &str,
        before: Timestamp,
        limit: u32,
    ) -> Result<Vec<FireRecord>, StoreError> {
        self.pending_due(scheduler, before, limit).await
    }

    async fn pending_claim(&self, fire_id: i64, node: &NodeRef, exclusive: bool) -> Result<PendingClaim, StoreError> {
        self.claim_pending(fire_id, node, exclusive).await
    }

    async fn changes(&self, scheduler: &str) -> Result<i64, StoreError> {
        self.changes_read(scheduler).await
    }

    async fn change_wait(&self, scheduler: &str, seen: i64, max_wait: std::time::Duration) -> Result<i64, StoreError> {
        self.changes_wait(scheduler, seen, max_wait).await
    }

    async fn purge_turn(&self, scheduler: &str, every_ms: i64) -> Result<bool, StoreError> {
        self.purge_turn_take(scheduler, every_ms).await
    }

    async fn purge_horizon(&self, scheduler: &str) -> Result<Option<Timestamp>, StoreError> {
        self.purge_horizon_read(scheduler).await
    }

    async fn purge_horizon_advance(&self, scheduler: &str, before: Timestamp) -> Result<(), StoreError> {
        self.purge_horizon_move(scheduler, before).await
    }

    async fn fires_purge(
        &self,
        scheduler: &str,
        state: FireState,
        before: Timestamp,
        keep_last: u32,
        limit: u32,
    ) -> Result<u64, StoreError> {
        self.fires_delete(scheduler, state, before, keep_last, limit).await
    }

    async fn nodes_purge(&self, scheduler: &str, before: Timestamp) -> Result<u64, StoreError> {
        self.nodes_delete(scheduler, before).await
    }

    async fn executes_purge(&self, scheduler: &str, before: Timestamp, limit: u32) -> Result<u64, StoreError> {
        self.executes_delete(scheduler, before, limit).await
    }

    async fn fires(&self, query: &FireQuery) -> Result<Vec<FireRecord>, StoreError> {
        let job_id = match &query.job {
            Some(name) => Some(self.require_job(&query.scheduler, name).await?.id),
            None => None,
        };
        let rows = self
            .query(concat!(
                "SELECT ",
                fire_cols!(),
                " FROM quartz_fire WHERE scheduler = ? AND (? IS NULL OR job_id = ?) AND (? IS NULL OR state = ?) \
                 AND (? IS NULL OR fire_time >= ?) AND (? IS NULL OR fire_time < ?) AND (? IS NULL OR id < ?) \
                 ORDER BY id DESC LIMIT ?"
            ))
            .bind(query.scheduler.clone())
            .bind(job_id)
            .bind(job_id)
            .bind(query.state.map(FireState::as_str))
            .bind(query.state.map(FireState::as_str))
            .bind(query.since.map(Timestamp::as_millis))
            .bind(query.since.map(Timestamp::as_millis))
            .bind(query.until.map(Timestamp::as_millis))
            .bind(query.until.map(Timestamp::as_millis))
            .bind(query.before_id)
            .bind(query.before_id)
            .bind(i64::from(query.limit))
            .fetch_all(&self.db.pool)
            .await
            .map_err(db_error)?;
        rows.iter().map(decode_fire).collect()
    }
}

// ---- decoding ----

struct RowError {
    id: i64,
    reason: String,
}

fn decode_execute(row: &AnyRow) -> Result<Execute, RowError> {
    let id: i64 = row.try_get("id").map_err(|e| RowError {
        id: -1,
        reason: e.to_string(),
    })?;
    let fail = |reason: String| RowError { id, reason };
    let get_i64 = |col: &str| row.try_get::<i64, _>(col).map_err(|e| fail(e.to_string()));
    let get_opt_i64 = |col: &str| row.try_get::<Option<i64>, _>(col).map_err(|e| fail(e.to_string()));
    let get_opt_str = |col: &str| row.try_get::<Option<String>, _>(col).map_err(|e| fail(e.to_string()));
    let get_str = |col: &str| row.try_get::<String, _>(col).map_err(|e| fail(e.to_string()));
    let columns = TriggerColumns {
        kind: get_str("kind")?,
        cron_expression: get_opt_str("cron_expression")?,
        time_zone: get_opt_str("time_zone")?,
        interval_ms: get_opt_i64("interval_ms")?,
        start_time: get_i64("start_time")?,
        end_time: get_opt_i64("end_time")?,
        repeat_limit: get_opt_i64("repeat_limit")?,
        misfire_policy: get_str("misfire_policy")?,
    };
    let trigger = columns.to_trigger().map_err(|e| fail(e.to_string()))?;
    let schedule_changed = get_opt_i64("schedule_sig")? != Some(columns.signature());
    let state = ExecuteState::parse(&get_str("state")?).map_err(|e| fail(e.to_string()))?;
    let times_triggered =
        u64::try_from(get_i64("times_triggered")?).map_err(|_| fail("negative times_triggered".into()))?;
    let next_fire_time = get_opt_i64("next_fire_time")?.map(Timestamp::from_millis);
    let owner = match (get_opt_str("node_id")?, get_opt_i64("incarnation")?) {
        (Some(node_id), incarnation) => Some(NodeRef {
            node_id,
            incarnation: incarnation.unwrap_or(0),
        }),
        (None, _) => None,
    };
    Ok(Execute {
        id,
        job_id: get_i64("job_id")?,
        scheduler: get_str("scheduler")?,
        priority: i32::try_from(get_i64("priority")?).map_err(|_| fail("priority out of range".into()))?,
        fire_state: TriggerState {
            prev_fire_time: get_opt_i64("prev_fire_time")?.map(Timestamp::from_millis),
            next_fire_time,
            times_triggered,
            awaiting_finish: state == ExecuteState::Running && next_fire_time.is_none(),
        },
        trigger,
        state,
        owner,
        error: get_opt_str("error")?,
        schedule_changed,
    })
}

fn decode_job(row: &AnyRow) -> Result<Job, StoreError> {
    let job = (|| -> Result<Job, Box<dyn std::error::Error + Send + Sync>> {
        Ok(Job {
            id: row.try_get("id")?,
            scheduler: row.try_get("scheduler")?,
            spec: JobSpec {
                name: row.try_get("name")?,
                handler: row.try_get("handler")?,
                payload: row.try_get("payload")?,
                description: row.try_get("description")?,
                requests_recovery: row.try_get::<i64, _>("requests_recovery")? != 0,
                allow_concurrent: row.try_get::<i64, _>("allow_concurrent")? != 0,
                timeout_ms: row.try_get("timeout_ms")?,
                retry: RetryPolicy {
                    max_attempts: u32::try_from(row.try_get::<i64, _>("max_attempts")?)?,
                    backoff_ms: row.try_get("backoff_ms")?,
                    backoff_max_ms: row.try_get("backoff_max_ms")?,
                },
                parent: row.try_get("parent_job")?,
            },
            state: JobState::parse(&row.try_get::<String, _>("state")?)?,
            created_at: Timestamp::from_millis(row.try_get("created_at")?),
            updated_at: Timestamp::from_millis(row.try_get("updated_at")?),
        })
    })();
    job.map_err(|e| StoreError::Database {
        reason: format!("job row cannot be decoded: {e}"),
    })
}

fn decode_node(row: &AnyRow) -> Result<Node, StoreError> {
    let node = (|| -> Result<Node, Box<dyn std::error::Error + Send + Sync>> {
        Ok(Node {
            scheduler: row.try_get("scheduler")?,
            node_id: row.try_get("node_id")?,
            host: row.try_get("host")?,
            pid: u32::try_from(row.try_get::<i64, _>("pid")?)?,
            weight: u32::try_from(row.try_get::<i64, _>("weight")?)?,
            state: NodeState::parse(&row.try_get::<String, _>("state")?)?,
            incarnation: row.try_get("incarnation")?,
            registered_at: Timestamp::from_millis(row.try_get("registered_at")?),
            heartbeat_at: Timestamp::from_millis(row.try_get("heartbeat_at")?),
            busy: u64::try_from(row.try_get::<i64, _>("busy")?)?,
            handlers: match row.try_get::<Option<String>, _>("handlers")? {
                Some(text) => serde_json::from_str(&text)?,
                None => Vec::new(),
            },
        })
    })();
    node.map_err(|e| StoreError::Database {
        reason: format!("node row cannot be decoded: {e}"),
    })
}

fn decode_fire(row: &AnyRow) -> Result<FireRecord, StoreError> {
    let fire = (|| -> Result<FireRecord, Box<dyn std::error::Error + Send + Sync>> {
        let ms = |col: &str| -> Result<Option<Timestamp>, sqlx::Error> {
            Ok(row.try_get::<Option<i64>, _>(col)?.map(Timestamp::from_millis))
        };
        Ok(FireRecord {
            id: row.try_get("id")?,
            execute_id: row.try_get("execute_id")?,
            job_id: row.try_get("job_id")?,
            fire_time: Timestamp::from_millis(row.try_get("fire_time")?),
            attempt: u32::try_from(row.try_get::<i64, _>("attempt")?)?,
            owner: row.try_get::<Option<String>, _>("node_id")?.map(|node_id| NodeRef {
                node_id,
                incarnation: row.try_get::<i64, _>("incarnation").unwrap_or(0),
            }),
            state: FireState::parse(&row.try_get::<String, _>("state")?)?,
            claimed_at: Timestamp::from_millis(row.try_get("claimed_at")?),
            started_at: ms("started_at")?,
            finished_at: ms("finished_at")?,
            timed_out_at: ms("timed_out_at")?,
            due_at: ms("due_at")?,
            error: row.try_get("error")?,
            skipped_until: ms("skipped_until")?,
            fire_count: u64::try_from(row.try_get::<i64, _>("fire_count")?)?,
        })
    })();
    fire.map_err(|e| StoreError::Database {
        reason: format!("fire row cannot be decoded: {e}"),
    })
}

// ---- errors and small conversions ----

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_unique_violation())
}

/// Maps a driver error: connection trouble is [`StoreError::Unavailable`] (the
/// caller may retry), a deadlock or serialization failure is
/// [`StoreError::Conflict`], the rest [`StoreError::Database`].
pub(crate) fn db_error(e: sqlx::Error) -> StoreError {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => StoreError::Unavailable { reason: e.to_string() },
        sqlx::Error::Database(ref db) if is_conflict(db.code().as_deref()) => {
            StoreError::Conflict { reason: e.to_string() }
        }
        other => StoreError::Database {
            reason: other.to_string(),
        },
    }
}

/// Runs a transaction again, up to three times in all, when the database
/// rolled it back to break a deadlock.
async fn retry_conflicts<T, F, Fut>(mut attempt: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let mut tries = 1;
    loop {
        match attempt().await {
            Err(StoreError::Conflict { .. }) if tries < 3 => tries += 1,
            other => return other,
        }
    }
}

/// SQLSTATE 40001 (serialization failure; MySQL's deadlock 1213 carries it)
/// and 40P01 (PostgreSQL's deadlock): the server rolled the transaction back.
fn is_conflict(code: Option<&str>) -> bool {
    matches!(code, Some("40001" | "40P01"))
}

fn count_to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn truncate(text: &str) -> String {
    if text.len() <= MAX_ERROR_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_ERROR_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}
