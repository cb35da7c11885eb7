//! Retention: the purge turn, the audit's horizon, and the batched deletes of
//! finished fires, gone nodes and complete triggers (see
//! [`quartz_core::retention`]).

use super::convert::Statement as _;
use async_trait::async_trait;
use quartz_core::Timestamp;
use quartz_core::store::{FireState, RetentionStore, Store as _, StoreError};

use super::{SqlStore, bind_id_list, db_error};
use crate::dialect::IDS_PER_LIST;

/// The finished fires a purge batch takes (binds: scheduler, state, before,
/// and for the keep-last form the offset), oldest first.
macro_rules! purgeable_fires {
    ($keep:expr) => {
        concat!(
            "SELECT f.id FROM quartz_fire f WHERE f.scheduler = ? AND f.state = ? AND f.fire_time < ?",
            $keep,
            " ORDER BY f.fire_time LIMIT ?"
        )
    };
}

/// Keeps each job's newest fires: a fire goes only when its id is below the
/// id of the job's `keep_last`-th newest fire (none when the job has fewer).
macro_rules! keep_newest {
    () => {
        " AND f.id < COALESCE((SELECT g.id FROM quartz_fire g WHERE g.job_id = f.job_id \
         ORDER BY g.id DESC LIMIT 1 OFFSET ?), -1)"
    };
}

/// Complete executes no open fire names (binds: scheduler, before twice, limit).
macro_rules! purgeable_executes {
    () => {
        "SELECT e.id FROM quartz_execute e WHERE e.scheduler = ? AND e.state = 'complete' \
         AND e.updated_at < ? AND COALESCE(e.prev_fire_time, e.start_time) < ? AND NOT EXISTS \
         (SELECT 1 FROM quartz_fire f WHERE f.execute_id = e.id AND f.state IN ('claimed', 'running')) \
         ORDER BY e.id LIMIT ?"
    };
}

/// Deletes finished fires by id (MySQL; binds: an `{ids}` list).
const DELETE_FIRES: &str = "DELETE FROM quartz_fire WHERE {ids} AND state NOT IN ('claimed', 'running', 'pending')";

/// Deletes complete executes by id (MySQL; binds: an `{ids}` list).
const DELETE_EXECUTES: &str = "DELETE FROM quartz_execute WHERE {ids} AND state = 'complete'";

impl SqlStore {
    /// MySQL: the rows a plain (non-locking) read chose, deleted by primary
    /// key. A DELETE whose own subquery picks its rows takes shared locks on
    /// every row and gap that subquery reads (the newest fires of each job
    /// among them) and would stall claims and outcomes while it runs.
    async fn delete_by_id(&self, statement: &'static str, ids: &[i64]) -> Result<u64, StoreError> {
        let mut deleted = 0;
        for chunk in ids.chunks(IDS_PER_LIST) {
            let q = bind_id_list(self.query(statement), chunk);
            deleted += q.exec(&self.db.pool).await?.rows_affected();
        }
        Ok(deleted)
    }
}

#[async_trait]
impl RetentionStore for SqlStore {
    async fn purge_turn(&self, every_ms: i64) -> Result<bool, StoreError> {
        let scheduler = self.scheduler();
        self.ensure_scheduler_row(scheduler).await?;
        self.changed_one(
            self.query(
                "UPDATE quartz_scheduler SET purge_started_at = {now} \
                 WHERE scheduler = ? AND purge_started_at <= {now} - ?",
            )
            .bind(scheduler.to_owned())
            .bind(every_ms),
        )
        .await
    }

    async fn purge_horizon(&self) -> Result<Option<Timestamp>, StoreError> {
        let scheduler = self.scheduler();
        let horizon: Option<Option<i64>> = sqlx::query_scalar(
            self.db
                .sql("SELECT purged_before FROM quartz_scheduler WHERE scheduler = ?"),
        )
        .bind(scheduler.to_owned())
        .fetch_optional(&self.db.pool)
        .await
        .map_err(db_error)?;
        Ok(horizon.flatten().map(Timestamp::from_millis))
    }

    async fn purge_horizon_advance(&self, before: Timestamp) -> Result<(), StoreError> {
        let scheduler = self.scheduler();
        self.ensure_scheduler_row(scheduler).await?;
        self.query(
            "UPDATE quartz_scheduler SET purged_before = ? \
             WHERE scheduler = ? AND (purged_before IS NULL OR purged_before < ?)",
        )
        .bind(before.as_millis())
        .bind(scheduler.to_owned())
        .bind(before.as_millis())
        .exec(&self.db.pool)
        .await?;
        Ok(())
    }

    async fn fires_purge(
        &self,
        state: FireState,
        before: Timestamp,
        keep_last: u32,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let scheduler = self.scheduler();
        crate::common::refuse_open_purge(state)?;
        if self.db.backend.purges_by_id() {
            let select = if keep_last == 0 {
                purgeable_fires!("")
            } else {
                purgeable_fires!(keep_newest!())
            };
            let mut q = sqlx::query_scalar(self.db.sql(select))
                .bind(scheduler.to_owned())
                .bind(state.as_str())
                .bind(before.as_millis());
            if keep_last > 0 {
                q = q.bind(i64::from(keep_last) - 1);
            }
            let ids: Vec<i64> = q
                .bind(i64::from(limit))
                .fetch_all(&self.db.pool)
                .await
                .map_err(db_error)?;
            return self.delete_by_id(DELETE_FIRES, &ids).await;
        }
        let template = match keep_last {
            0 => concat!("DELETE FROM quartz_fire WHERE id IN (", purgeable_fires!(""), ")"),
            _ => concat!(
                "DELETE FROM quartz_fire WHERE id IN (",
                purgeable_fires!(keep_newest!()),
                ")"
            ),
        };
        let mut q = self
            .query(template)
            .bind(scheduler.to_owned())
            .bind(state.as_str())
            .bind(before.as_millis());
        if keep_last > 0 {
            q = q.bind(i64::from(keep_last) - 1);
        }
        let done = q.bind(i64::from(limit)).exec(&self.db.pool).await?;
        Ok(done.rows_affected())
    }

    async fn nodes_purge(&self, before: Timestamp) -> Result<u64, StoreError> {
        let scheduler = self.scheduler();
        // Candidates by a plain read, then each deleted by its key with the
        // conditions checked again: a scan inside the DELETE would lock every
        // node row it passes on MySQL, live nodes' included, and stall their
        // heartbeats for as long as it runs.
        let candidates: Vec<String> = sqlx::query_scalar(self.db.sql(
            "SELECT node_id FROM quartz_node WHERE scheduler = ? AND state IN ('dead', 'gone') AND heartbeat_at < ?",
        ))
        .bind(scheduler.to_owned())
        .bind(before.as_millis())
        .fetch_all(&self.db.pool)
        .await
        .map_err(db_error)?;
        let mut deleted = 0;
        for node_id in candidates {
            let done = self
                .query(
                    "DELETE FROM quartz_node WHERE scheduler = ? AND node_id = ? AND state IN ('dead', 'gone') \
                     AND heartbeat_at < ? \
                     AND NOT EXISTS (SELECT 1 FROM quartz_fire f WHERE f.scheduler = quartz_node.scheduler \
                     AND f.finished_at IS NULL AND f.state IN ('claimed', 'running') \
                     AND f.node_id = quartz_node.node_id) \
                     AND NOT EXISTS (SELECT 1 FROM quartz_execute e WHERE e.scheduler = quartz_node.scheduler \
                     AND e.state = 'running' AND e.node_id = quartz_node.node_id)",
                )
                .bind(scheduler.to_owned())
                .bind(node_id)
                .bind(before.as_millis())
                .exec(&self.db.pool)
                .await?;
            deleted += done.rows_affected();
        }
        Ok(deleted)
    }

    async fn executes_purge(&self, before: Timestamp, limit: u32) -> Result<u64, StoreError> {
        let scheduler = self.scheduler();
        let work = self.work_purge(scheduler, before, limit).await?;
        Ok(work + self.complete_executes_purge(scheduler, before, limit).await?)
    }
}

impl SqlStore {
    /// Enqueued work enqueued before `before` whose fires have all ended
    /// and whose unique window has passed: chosen by a plain read, deleted
    /// by id.
    async fn work_purge(&self, scheduler: &str, before: Timestamp, limit: u32) -> Result<u64, StoreError> {
        let ids: Vec<i64> = sqlx::query_scalar(self.db.sql(
            "SELECT w.id FROM quartz_work w WHERE w.scheduler = ? AND w.created_at < ? \
             AND (w.unique_until IS NULL OR w.unique_until <= {now}) AND NOT EXISTS \
             (SELECT 1 FROM quartz_fire f WHERE f.execute_id = -w.id AND f.job_id = w.job_id \
             AND f.fire_time = w.fire_time AND f.finished_at IS NULL) ORDER BY w.id LIMIT ?",
        ))
        .bind(scheduler.to_owned())
        .bind(before.as_millis())
        .bind(i64::from(limit))
        .fetch_all(&self.db.pool)
        .await
        .map_err(db_error)?;
        let mut deleted = 0;
        for chunk in ids.chunks(self.ids_per_statement()) {
            let q = self.bind_id_set(self.query("DELETE FROM quartz_work WHERE {ids}"), chunk);
            deleted += q.exec(&self.db.pool).await?.rows_affected();
        }
        Ok(deleted)
    }

    /// The complete executes of [`RetentionStore::executes_purge`].
    async fn complete_executes_purge(&self, scheduler: &str, before: Timestamp, limit: u32) -> Result<u64, StoreError> {
        if self.db.backend.purges_by_id() {
            let ids: Vec<i64> = sqlx::query_scalar(self.db.sql(purgeable_executes!()))
                .bind(scheduler.to_owned())
                .bind(before.as_millis())
                .bind(before.as_millis())
                .bind(i64::from(limit))
                .fetch_all(&self.db.pool)
                .await
                .map_err(db_error)?;
            return self.delete_by_id(DELETE_EXECUTES, &ids).await;
        }
        let done = self
            .query(concat!(
                "DELETE FROM quartz_execute WHERE id IN (",
                purgeable_executes!(),
                ")"
            ))
            .bind(scheduler.to_owned())
            .bind(before.as_millis())
            .bind(before.as_millis())
            .bind(i64::from(limit))
            .exec(&self.db.pool)
            .await?;
        Ok(done.rows_affected())
    }
}
