//! The counts the cluster's health gauges read: each a read on an index
//! (`quartz_execute_due`, `quartz_fire_open`, `quartz_fire_age`), bounded
//! whatever the size of the ledger's history.

use super::convert::Statement as _;
use quartz_core::Timestamp;
use quartz_core::store::{HealthCounts, StoreError};
use sqlx::Row;

use super::{SqlStore, db_error};

/// A count from a row's column `i`.
fn count(row: &sqlx::any::AnyRow, i: usize) -> Result<u64, StoreError> {
    let n: i64 = row.try_get(i).map_err(db_error)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

impl SqlStore {
    pub(super) async fn health_read(
        &self,
        scheduler: &str,
        overdue_before: Timestamp,
        stranded_before: Timestamp,
        recent_since: Timestamp,
    ) -> Result<HealthCounts, StoreError> {
        let mut counts = HealthCounts::default();
        let overdue = self
            .query(
                "SELECT COUNT(*), MIN(next_fire_time) FROM quartz_execute \
                 WHERE scheduler = ? AND state = 'waiting' AND next_fire_time < ?",
            )
            .bind(scheduler.to_owned())
            .bind(overdue_before.as_millis())
            .one(&self.db.pool)
            .await?;
        counts.overdue_triggers = count(&overdue, 0)?;
        counts.oldest_overdue = overdue
            .try_get::<Option<i64>, _>(1)
            .map_err(db_error)?
            .map(Timestamp::from_millis);
        let by_state = self
            .query(
                "SELECT state, COUNT(*) FROM quartz_fire WHERE scheduler = ? \
                 AND finished_at IS NULL AND state IN ('claimed', 'running', 'pending') GROUP BY state",
            )
            .bind(scheduler.to_owned())
            .rows(&self.db.pool)
            .await?;
        for row in &by_state {
            let n = count(row, 1)?;
            match row.try_get::<String, _>(0).map_err(db_error)?.as_str() {
                "claimed" => counts.claimed = n,
                "running" => counts.running = n,
                _ => counts.pending = n,
            }
        }
        let stranded = self
            .query(
                "SELECT COUNT(*) FROM quartz_fire WHERE scheduler = ? AND finished_at IS NULL \
                 AND state = 'pending' AND due_at < ?",
            )
            .bind(scheduler.to_owned())
            .bind(stranded_before.as_millis())
            .one(&self.db.pool)
            .await?;
        counts.stranded = count(&stranded, 0)?;
        let recent = self
            .query(
                "SELECT state, COUNT(*) FROM quartz_fire WHERE scheduler = ? \
                 AND state IN ('succeeded', 'failed', 'misfired') AND fire_time >= ? GROUP BY state",
            )
            .bind(scheduler.to_owned())
            .bind(recent_since.as_millis())
            .rows(&self.db.pool)
            .await?;
        for row in &recent {
            let n = count(row, 1)?;
            match row.try_get::<String, _>(0).map_err(db_error)?.as_str() {
                "succeeded" => counts.recent_succeeded = n,
                "failed" => counts.recent_failed = n,
                _ => counts.recent_misfired = n,
            }
        }
        Ok(counts)
    }
}
