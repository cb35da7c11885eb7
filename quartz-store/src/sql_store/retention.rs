//! Retention: the purge turn, the audit's horizon, and the batched deletes of
//! finished fires, gone nodes and complete triggers (see
//! [`quartz_core::retention`]).

use quartz_core::Timestamp;
use quartz_core::store::{FireState, StoreError};

use super::{SqlStore, db_error};
use crate::connect::Backend;

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

impl SqlStore {
    pub(super) async fn purge_turn_take(&self, scheduler: &str, every_ms: i64) -> Result<bool, StoreError> {
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

    pub(super) async fn purge_horizon_read(&self, scheduler: &str) -> Result<Option<Timestamp>, StoreError> {
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

    pub(super) async fn purge_horizon_move(&self, scheduler: &str, before: Timestamp) -> Result<(), StoreError> {
        self.ensure_scheduler_row(scheduler).await?;
        self.query(
            "UPDATE quartz_scheduler SET purged_before = ? \
             WHERE scheduler = ? AND (purged_before IS NULL OR purged_before < ?)",
        )
        .bind(before.as_millis())
        .bind(scheduler.to_owned())
        .bind(before.as_millis())
        .execute(&self.db.pool)
        .await
        .map_err(db_error)?;
        Ok(())
    }

    pub(super) async fn fires_delete(
        &self,
        scheduler: &str,
        state: FireState,
        before: Timestamp,
        keep_last: u32,
        limit: u32,
    ) -> Result<u64, StoreError> {
        if matches!(state, FireState::Claimed | FireState::Running) {
            return Err(StoreError::Invalid(quartz_core::Error::InvalidJob {
                reason: format!("a {state} fire is open and is never purged"),
            }));
        }
        // MySQL cannot delete from a table its own subquery reads, nor take a
        // LIMIT in an IN subquery: the ids go through a derived table.
        let template = match (self.db.backend, keep_last) {
            (Backend::MySql, 0) => concat!(
                "DELETE d FROM quartz_fire d JOIN (SELECT id FROM (",
                purgeable_fires!(""),
                ") AS x) AS y ON d.id = y.id"
            ),
            (Backend::MySql, _) => concat!(
                "DELETE d FROM quartz_fire d JOIN (SELECT id FROM (",
                purgeable_fires!(keep_newest!()),
                ") AS x) AS y ON d.id = y.id"
            ),
            (_, 0) => concat!("DELETE FROM quartz_fire WHERE id IN (", purgeable_fires!(""), ")"),
            (_, _) => concat!(
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
        let done = q
            .bind(i64::from(limit))
            .execute(&self.db.pool)
            .await
            .map_err(db_error)?;
        Ok(done.rows_affected())
    }

    pub(super) async fn nodes_delete(&self, scheduler: &str, before: Timestamp) -> Result<u64, StoreError> {
        let done = self
            .query(
                "DELETE FROM quartz_node WHERE scheduler = ? AND state IN ('dead', 'gone') AND heartbeat_at < ? \
                 AND NOT EXISTS (SELECT 1 FROM quartz_fire f WHERE f.scheduler = quartz_node.scheduler \
                 AND f.state IN ('claimed', 'running') AND f.node_id = quartz_node.node_id) \
                 AND NOT EXISTS (SELECT 1 FROM quartz_execute e WHERE e.scheduler = quartz_node.scheduler \
                 AND e.state = 'running' AND e.node_id = quartz_node.node_id)",
            )
            .bind(scheduler.to_owned())
            .bind(before.as_millis())
            .execute(&self.db.pool)
            .await
            .map_err(db_error)?;
        Ok(done.rows_affected())
    }

    pub(super) async fn executes_delete(
        &self,
        scheduler: &str,
        before: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let template = match self.db.backend {
            Backend::MySql => concat!(
                "DELETE d FROM quartz_execute d JOIN (SELECT id FROM (",
                purgeable_executes!(),
                ") AS x) AS y ON d.id = y.id"
            ),
            Backend::Postgres | Backend::Sqlite => {
                concat!("DELETE FROM quartz_execute WHERE id IN (", purgeable_executes!(), ")")
            }
        };
        let done = self
            .query(template)
            .bind(scheduler.to_owned())
            .bind(before.as_millis())
            .bind(before.as_millis())
            .bind(i64::from(limit))
            .execute(&self.db.pool)
            .await
            .map_err(db_error)?;
        Ok(done.rows_affected())
    }
}
