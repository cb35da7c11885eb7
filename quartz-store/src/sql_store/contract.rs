//! [`SqlStore`]'s side of the store contract: one impl per concern, each
//! method a statement or a transaction of the files beside this one.

use super::convert::Statement as _;
use std::sync::Arc;

use async_trait::async_trait;

use super::*;
use crate::ends::EndParts;

#[async_trait]
impl Store for SqlStore {
    async fn now(&self) -> Result<Timestamp, StoreError> {
        // Every poll reads the clock: a failover is noticed here.
        let row = self
            .db
            .watching(self.query("SELECT {now}").fetch_one(&self.db.pool))
            .await
            .map_err(db_error)?;
        Ok(Timestamp::from_millis(row.try_get::<i64, _>(0).map_err(db_error)?))
    }

    fn scheduler(&self) -> &str {
        &self.scheduler
    }

    fn scoped(&self, scheduler: &str) -> SharedStore {
        Arc::new(SqlStore {
            scheduler: scheduler.into(),
            ..self.clone()
        })
    }

    fn acting_as(&self, actor: &str) -> SharedStore {
        Arc::new(SqlStore {
            actor: crate::common::actor_name(actor).into(),
            ..self.clone()
        })
    }

    /// On PostgreSQL (one statement) and MySQL/MariaDB (four) a batch's run
    /// is one `UPDATE` of the execute; SQLite claims one by one.
    fn claims_runs_at_once(&self) -> bool {
        self.db.backend.claims_in_one_statement() || self.db.backend.claims_joined()
    }

    async fn close(&self) {
        SqlStore::close(self).await;
    }
}

#[async_trait]
impl JobStore for SqlStore {
    async fn create_job(&self, job: &JobSpec, executes: &[ExecuteSpec]) -> Result<Job, StoreError> {
        let scheduler = self.scheduler();
        self.job_create(scheduler, job, executes).await
    }

    async fn get_job(&self, name: &str) -> Result<Option<JobDetail>, StoreError> {
        let scheduler = self.scheduler();
        match self.job_by_name(scheduler, name).await? {
            Some(job) => Ok(Some(self.executes_of(job).await?)),
            None => Ok(None),
        }
    }

    async fn jobs_by_id(&self, ids: &[i64]) -> Result<Vec<Job>, StoreError> {
        let scheduler = self.scheduler();
        self.jobs_read(scheduler, ids).await
    }

    async fn list_jobs(&self) -> Result<Vec<Job>, StoreError> {
        let scheduler = self.scheduler();
        self.jobs_list(scheduler).await
    }

    async fn jobs_page(&self, query: &JobQuery) -> Result<Vec<Job>, StoreError> {
        self.jobs_query(query).await
    }

    async fn update_job(
        &self,
        name: &str,
        job: &JobSpec,
        executes: Option<&[ExecuteSpec]>,
        expected_version: Option<i64>,
    ) -> Result<Job, StoreError> {
        let scheduler = self.scheduler();
        self.job_update(scheduler, name, job, executes, expected_version).await
    }

    async fn set_paused(&self, name: &str, paused: bool, expected_version: Option<i64>) -> Result<Job, StoreError> {
        let scheduler = self.scheduler();
        self.job_set_paused(scheduler, name, paused, expected_version).await
    }

    async fn fire_now(&self, name: &str) -> Result<(i64, Timestamp), StoreError> {
        let scheduler = self.scheduler();
        retry_conflicts(|| self.job_fire_now(scheduler, name)).await
    }

    async fn delete_job(&self, name: &str, expected_version: Option<i64>) -> Result<(), StoreError> {
        let scheduler = self.scheduler();
        self.job_delete(scheduler, name, expected_version).await
    }

    async fn retry_fire(&self, fire_id: i64) -> Result<FireRetry, StoreError> {
        let scheduler = self.scheduler();
        retry_conflicts(|| self.fire_retry_by_hand(scheduler, fire_id)).await
    }

    async fn set_standby(&self, on: bool) -> Result<Option<Timestamp>, StoreError> {
        let scheduler = self.scheduler();
        retry_conflicts(|| self.standby_set(scheduler, on)).await
    }

    async fn standby(&self) -> Result<Option<Timestamp>, StoreError> {
        self.standby_read(self.scheduler()).await
    }

    async fn backfill(
        &self,
        name: &str,
        fires: &[quartz_core::store::BackfillFire],
    ) -> Result<quartz_core::store::Backfilled, StoreError> {
        let scheduler = self.scheduler();
        retry_conflicts(|| self.job_backfill(scheduler, name, fires)).await
    }
}

#[async_trait]
impl HistoryStore for SqlStore {
    async fn list_nodes(&self) -> Result<Vec<Node>, StoreError> {
        let scheduler = self.scheduler();
        let rows = self
            .query(concat!(
                "SELECT ",
                node_cols!(),
                " FROM quartz_node WHERE scheduler = ? ORDER BY node_id"
            ))
            .bind(scheduler.to_owned())
            .rows(&self.db.pool)
            .await?;
        Ok(crate::common::decode_each(&rows, "node", decode_node))
    }

    async fn fires(&self, query: &FireQuery) -> Result<Vec<FireRecord>, StoreError> {
        self.fires_query(query).await
    }

    async fn change_log(&self, query: &ChangeQuery) -> Result<Vec<ChangeRecord>, StoreError> {
        self.change_log_read(query).await
    }

    async fn health_counts(
        &self,
        overdue_before: Timestamp,
        stranded_before: Timestamp,
        recent_since: Timestamp,
    ) -> Result<HealthCounts, StoreError> {
        let scheduler = self.scheduler();
        self.health_read(scheduler, overdue_before, stranded_before, recent_since)
            .await
    }

    async fn changes(&self) -> Result<i64, StoreError> {
        let scheduler = self.scheduler();
        self.changes_read(scheduler).await
    }

    async fn change_wait(&self, seen: i64, max_wait: std::time::Duration) -> Result<i64, StoreError> {
        let scheduler = self.scheduler();
        self.changes_wait(scheduler, seen, max_wait).await
    }
}

#[async_trait]
impl ScheduleStore for SqlStore {
    async fn due_executes(
        &self,
        before: Timestamp,
        after: Option<DueCursor>,
        limit: u32,
    ) -> Result<DueBatch, StoreError> {
        let scheduler = self.scheduler();
        self.executes_due(scheduler, before, after, limit).await
    }

    async fn orphaned_executes(&self, limit: u32) -> Result<DueBatch, StoreError> {
        let scheduler = self.scheduler();
        self.executes_orphaned(scheduler, limit).await
    }

    async fn update_execute(&self, cas: &ExecuteCas, records: &[SkippedRecord]) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        if !self.update_in(&mut tx, cas, records).await? {
            return Ok(false);
        }
        tx.commit().await.map_err(db_error)?;
        Ok(true)
    }

    async fn update_executes(&self, updates: &[(ExecuteCas, Vec<SkippedRecord>)]) -> Result<Vec<bool>, StoreError> {
        self.executes_update(updates).await
    }

    async fn claim(&self, claim: &Claim) -> Result<Option<i64>, StoreError> {
        self.claim_one(claim).await
    }

    async fn claim_batch(&self, claims: &[Claim]) -> Result<Vec<Option<i64>>, StoreError> {
        self.claims_batch(claims).await
    }

    async fn chain_parents(&self) -> Result<Vec<i64>, StoreError> {
        let scheduler = self.scheduler();
        let rows = self
            .query(
                "SELECT DISTINCT p.id FROM quartz_job k JOIN quartz_job p \
                 ON p.scheduler = k.scheduler AND p.name = k.parent_job \
                 WHERE k.scheduler = ? AND k.parent_job IS NOT NULL",
            )
            .bind(scheduler.to_owned())
            .rows(&self.db.pool)
            .await?;
        rows.iter().map(|row| row.try_get(0).map_err(db_error)).collect()
    }
}

#[async_trait]
impl FireStore for SqlStore {
    async fn mark_running_all(&self, fire_ids: &[i64], node: &NodeRef) -> Result<Vec<(i64, Timestamp)>, StoreError> {
        self.starts(fire_ids, node, (MARK_RUNNING, MARK_RUNNING_RETURNING), "claimed")
            .await
    }

    async fn confirm_starts(&self, fire_ids: &[i64], node: &NodeRef) -> Result<Vec<(i64, Timestamp)>, StoreError> {
        self.starts(fire_ids, node, (CONFIRM_START, CONFIRM_START_RETURNING), "running")
            .await
    }

    async fn end_fires(&self, node: &NodeRef, ends: &[(i64, FireEnd)]) -> Result<Vec<FollowUp>, StoreError> {
        crate::ends::end_fires(self, node, ends).await
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

    async fn orphaned_fires(&self, limit: u32) -> Result<Vec<FireRecord>, StoreError> {
        let scheduler = self.scheduler();
        self.fires_orphaned(scheduler, limit).await
    }

    async fn claimed_by(&self, node: &NodeRef, before: Timestamp, limit: u32) -> Result<Vec<FireRecord>, StoreError> {
        let scheduler = self.scheduler();
        self.fires_claimed_by(scheduler, node, before, limit).await
    }

    async fn take_over(&self, fire: &FireRecord, node: &NodeRef) -> Result<bool, StoreError> {
        self.fire_take_over(fire, node).await
    }

    async fn rerun(&self, fire: &FireRecord, node: &NodeRef) -> Result<Option<i64>, StoreError> {
        self.fire_rerun(fire, node).await
    }

    async fn abandon(&self, fire: &FireRecord) -> Result<bool, StoreError> {
        self.fire_abandon(fire).await
    }

    async fn fires_pending(&self, before: Timestamp, limit: u32) -> Result<Vec<FireRecord>, StoreError> {
        let scheduler = self.scheduler();
        self.pending_due(scheduler, before, limit).await
    }

    async fn pending_claim(&self, fire_id: i64, node: &NodeRef, exclusive: bool) -> Result<PendingClaim, StoreError> {
        self.claim_pending(fire_id, node, exclusive).await
    }

    async fn cancel_requests(&self, node: &NodeRef) -> Result<Vec<i64>, StoreError> {
        self.query(
            "SELECT id FROM quartz_fire WHERE scheduler = ? AND finished_at IS NULL \
             AND state IN ('claimed', 'running') AND cancel_at IS NOT NULL AND node_id = ? AND incarnation = ? \
             ORDER BY id",
        )
        .bind(self.scheduler.to_string())
        .bind(node.node_id.clone())
        .bind(node.incarnation)
        .rows(&self.db.pool)
        .await
        .and_then(|rows| first_ids(&rows))
    }
}

#[async_trait]
impl EndParts for SqlStore {
    async fn succeed_all(&self, fires: &[(i64, Option<HandlerSpan>)], node: &NodeRef) -> Result<Vec<i64>, StoreError> {
        self.fires_succeed(fires, node).await
    }

    async fn finish(
        &self,
        fire_id: i64,
        node: &NodeRef,
        outcome: &Outcome,
        ran: Option<HandlerSpan>,
    ) -> Result<bool, StoreError> {
        self.fire_finish(fire_id, node, outcome, ran).await
    }

    async fn succeed_and_chain(
        &self,
        fire_id: i64,
        node: &NodeRef,
        ran: Option<HandlerSpan>,
    ) -> Result<Option<Vec<ChainedFire>>, StoreError> {
        self.fire_succeed_and_chain(fire_id, node, ran).await
    }

    async fn misfire_claimed(&self, fire_id: i64, node: &NodeRef, reason: &str) -> Result<bool, StoreError> {
        self.fire_transition(MISFIRE_CLAIMED, fire_id, node, Some(truncate(reason)))
            .await
    }

    async fn skip_claimed(&self, fire_id: i64, node: &NodeRef, reason: &str) -> Result<bool, StoreError> {
        self.fire_transition(SKIP_CLAIMED, fire_id, node, Some(truncate(reason)))
            .await
    }

    async fn fail_claimed(&self, fire_id: i64, node: &NodeRef, reason: &str) -> Result<bool, StoreError> {
        self.fire_transition(FAIL_CLAIMED, fire_id, node, Some(truncate(reason)))
            .await
    }

    async fn release_fire(&self, fire_id: i64, node: &NodeRef) -> Result<bool, StoreError> {
        self.fire_transition(RELEASE_CLAIMED, fire_id, node, None).await
    }

    async fn fire_fail_and_retry(
        &self,
        fire_id: i64,
        node: &NodeRef,
        error: &str,
        retry_in_ms: i64,
        ran: Option<HandlerSpan>,
    ) -> Result<FollowUp, StoreError> {
        self.fail_and_retry(fire_id, node, error, retry_in_ms, ran).await
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
}
