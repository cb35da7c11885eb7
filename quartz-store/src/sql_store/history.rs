//! What happened, as the console, the API and the health gauges read it:
//! the nodes, a page of the ledger or of the change log, and the counts the
//! cluster's health gauges read (each a read on an index:
//! `quartz_execute_due`, `quartz_fire_open`, `quartz_fire_age`, bounded
//! whatever the size of the ledger's history).

use super::convert::Statement as _;
use quartz_core::store::{FireState, PayloadSchemas};

use super::filtered::Filtered;
use super::*;

/// A count from a row's column `i`.
fn count(row: &sqlx::any::AnyRow, i: usize) -> Result<u64, StoreError> {
    let n: i64 = row.try_get(i).map_err(db_error)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// A search the server ended at the store's search limit, as the caller's
/// time out (SQLSTATE 57014 on PostgreSQL, 70100 on MariaDB, MySQL's
/// message); any other error as it is.
fn search_ended(e: sqlx::Error, limit_ms: u64) -> StoreError {
    let ended = match &e {
        sqlx::Error::Database(db) => {
            matches!(db.code().as_deref(), Some("57014" | "70100"))
                || db.message().contains("maximum statement execution time")
        }
        _ => false,
    };
    if ended {
        StoreError::TimedOut {
            call: "fires (a search by error text, ended by the server)",
            after_ms: limit_ms,
        }
    } else {
        db_error(e)
    }
}

/// The history half of the store contract: nodes, the ledger, the change
/// log and the counts, each a read of this file; the change counter and its
/// wait are in `changes.rs`, with the listener that wakes it.
#[async_trait::async_trait]
impl HistoryStore for SqlStore {
    async fn schedulers(&self) -> Result<Vec<String>, StoreError> {
        let rows = self
            .query("SELECT scheduler FROM quartz_job UNION SELECT scheduler FROM quartz_node ORDER BY 1")
            .rows(&self.db.pool)
            .await?;
        rows.iter().map(|row| row.try_get(0).map_err(db_error)).collect()
    }

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

    async fn payload_schemas(&self) -> Result<Vec<(String, PayloadSchemas)>, StoreError> {
        let rows = self
            .query(
                "SELECT node_id, payload_schemas FROM quartz_node WHERE scheduler = ? AND state = 'live' \
                 AND payload_schemas IS NOT NULL ORDER BY node_id",
            )
            .bind(self.scheduler().to_owned())
            .rows(&self.db.pool)
            .await?;
        Ok(crate::common::decode_each(&rows, "node's payload schemas", |row| {
            let id: String = row.try_get(0).map_err(db_error)?;
            let text: String = row.try_get(1).map_err(db_error)?;
            let schemas = serde_json::from_str(&text).map_err(|e| StoreError::Database {
                reason: format!("node {id:?}'s payload schemas are not JSON: {e}"),
            })?;
            Ok((id, schemas))
        }))
    }

    /// A page of the ledger, newest first, read by the conditions the query
    /// sets (`Filtered`).
    async fn fires(&self, query: &FireQuery) -> Result<Vec<FireRecord>, StoreError> {
        let job_id = match &query.job {
            Some(name) => Some(self.require_job(&self.scheduler, name).await?.id),
            None => query.job_id,
        };
        // A search by error text reads what no index serves: the server
        // ends it past the store's search limit.
        let search = query.error_contains.is_some();
        let limit_ms = u64::try_from(self.db.search_limit.as_millis()).unwrap_or(u64::MAX);
        let select = if search && self.db.backend == Backend::MySql {
            // MariaDB runs the executable comment; MySQL reads the hint.
            format!(
                "/*M!100100 SET STATEMENT max_statement_time = {}.{:03} FOR */ \
                 SELECT /*+ MAX_EXECUTION_TIME({limit_ms}) */ {} FROM quartz_fire",
                limit_ms / 1_000,
                limit_ms % 1_000,
                fire_cols!()
            )
        } else {
            concat!("SELECT ", fire_cols!(), " FROM quartz_fire").to_owned()
        };
        let mut read = Filtered::new(&select, &self.scheduler);
        read.and("execute_id = ?", query.execute_id)
            .and("job_id = ?", job_id)
            .and("state = ?", query.state.map(FireState::as_str))
            // A state of fires not ended is read from the index of those
            // (a few thousand rows), not by walking the whole ledger
            // newest first for them: on PostgreSQL, 0.3 ms instead of
            // 0.9 s for none found in 3 million rows.
            .and_if("finished_at IS NULL", query.state.is_some_and(|s| !s.is_ended()))
            .and("fire_time >= ?", query.since.map(Timestamp::as_millis))
            .and("fire_time < ?", query.until.map(Timestamp::as_millis))
            .and("id < ?", query.before_id)
            .and(
                "LOWER(error) LIKE ? ESCAPE '!'",
                query.error_contains.as_deref().map(crate::common::like_pattern),
            )
            .and("node_id = ?", query.node_id.clone());
        let read = read.query(self, "ORDER BY id DESC", query.limit);
        let ended = |e: sqlx::Error| search_ended(e, limit_ms);
        let rows = if search && self.db.backend == Backend::Postgres {
            let mut tx = self.db.pool.begin().await.map_err(db_error)?;
            sqlx::query(sqlx::AssertSqlSafe(format!("SET LOCAL statement_timeout = {limit_ms}")))
                .exec(&mut *tx)
                .await?;
            let rows = read.fetch_all(&mut *tx).await.map_err(ended)?;
            tx.commit().await.map_err(db_error)?;
            rows
        } else {
            read.fetch_all(&self.db.pool).await.map_err(ended)?
        };
        rows.iter().map(decode_fire).collect()
    }

    /// The change log, newest first.
    async fn change_log(&self, query: &ChangeQuery) -> Result<Vec<ChangeRecord>, StoreError> {
        let mut read = Filtered::new(
            "SELECT id, scheduler, at, actor, action, target, detail, target_id FROM quartz_change_log",
            &self.scheduler,
        );
        read.and("target = ?", query.target.clone())
            .and("id < ?", query.before_id);
        let rows = read
            .query(self, "ORDER BY id DESC", query.limit)
            .rows(&self.db.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(ChangeRecord {
                    id: row.try_get(0).map_err(db_error)?,
                    scheduler: row.try_get(1).map_err(db_error)?,
                    at: Timestamp::from_millis(row.try_get(2).map_err(db_error)?),
                    actor: row.try_get(3).map_err(db_error)?,
                    action: row.try_get(4).map_err(db_error)?,
                    target: row.try_get(5).map_err(db_error)?,
                    detail: row.try_get(6).map_err(db_error)?,
                    target_id: row.try_get(7).map_err(db_error)?,
                })
            })
            .collect()
    }

    async fn health_counts(
        &self,
        overdue_before: Timestamp,
        stranded_before: Timestamp,
        recent_since: Timestamp,
    ) -> Result<HealthCounts, StoreError> {
        let scheduler = &*self.scheduler;
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

    async fn changes(&self) -> Result<i64, StoreError> {
        self.changes_read(&self.scheduler).await
    }

    async fn change_wait(&self, seen: i64, max_wait: std::time::Duration) -> Result<i64, StoreError> {
        self.changes_wait(&self.scheduler, seen, max_wait).await
    }
}
