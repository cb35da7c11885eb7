//! A fire's end: a handler's run as the end records it (its start and
//! finish, for one end and for a batch of successes in one statement of JSON
//! rows), an outcome, a success that writes a chain's children: the parts
//! of [`crate::ends`] for the SQL backends.

use super::convert::Statement as _;
use quartz_core::store::{HandlerSpan, NodeRef, StoreError};
use std::collections::HashSet;

use quartz_core::store::FireState;

use super::fires::IN_STATE_OF;
use super::*;
use crate::ends::EndParts;

/// The children's ledger rows of a succeeded fire (binds: node id,
/// incarnation, the parent's fire id); each backend adds its own "do nothing
/// on a duplicate". A child that disallows concurrency or shares a
/// concurrency limit waits: its row is pending, due at the fire time (as a
/// trigger's fire waiting for room is), and claimed exclusively like one.
macro_rules! chain_insert {
    () => {
        "INSERT INTO quartz_fire (scheduler, execute_id, job_id, fire_time, attempt, node_id, incarnation, \
         state, claimed_at, due_at, finished_at, error, fire_count) \
         SELECT f.scheduler, f.execute_id, k.id, f.fire_time, 1, \
         CASE WHEN k.state = 'enabled' AND (k.allow_concurrent = 0 OR k.limit_key IS NOT NULL) THEN NULL ELSE ? END, \
         CASE WHEN k.state = 'enabled' AND (k.allow_concurrent = 0 OR k.limit_key IS NOT NULL) THEN 0 ELSE ? END, \
         CASE WHEN k.state <> 'enabled' THEN 'skipped' \
         WHEN k.allow_concurrent = 0 OR k.limit_key IS NOT NULL THEN 'pending' ELSE 'claimed' END, {now}, \
         CASE WHEN k.state = 'enabled' AND (k.allow_concurrent = 0 OR k.limit_key IS NOT NULL) \
         THEN f.fire_time ELSE NULL END, \
         CASE WHEN k.state = 'enabled' THEN NULL ELSE {now} END, \
         CASE WHEN k.state = 'enabled' THEN NULL ELSE 'the child job is paused' END, 1 \
         FROM quartz_fire f JOIN quartz_job p ON p.id = f.job_id \
         JOIN quartz_job k ON k.scheduler = p.scheduler AND k.parent_job = p.name \
         AND k.parent_job IS NOT NULL \
         WHERE f.id = ?"
    };
}

/// A handler's run as a fire's end records it: its start and finish as its
/// node saw them, or, without them, the start the fenced start recorded and
/// now (binds: [`bind_ran`]'s four). On MySQL, whose single-table `UPDATE`
/// assigns from left to right, the duration reads the start just written,
/// which is the same value.
macro_rules! ran_cols {
    () => {
        "started_at = COALESCE(?, started_at), finished_at = COALESCE(?, {now}), \
         duration_ms = COALESCE(?, {now}) - COALESCE(?, started_at)"
    };
}
pub(super) use ran_cols;

/// Binds [`ran_cols`]'s four values.
pub(super) fn bind_ran(q: AnyQuery, ran: Option<HandlerSpan>) -> AnyQuery {
    let started = ran.map(|r| r.started_at.as_millis());
    let finished = ran.map(|r| r.finished_at.as_millis());
    q.bind(started).bind(finished).bind(finished).bind(started)
}

/// Plain successes of running fires of one incarnation, each with when its
/// handler ran (binds: the JSON rows `[{"id", "s", "e"}]`, node id,
/// incarnation), answering one row: the recorded ids as one text list
/// (`NULL` for none), not a row per fire, as each row the driver returns
/// is several allocations on the node (a `PgRow` made an `AnyRow`) and a
/// batch is dozens of fires.
const SUCCEED_PG: &str = "WITH done AS (WITH r AS MATERIALIZED (SELECT * FROM json_to_recordset(CAST(? AS json)) \
     AS r(id BIGINT, s BIGINT, e BIGINT)) \
     UPDATE quartz_fire SET state = 'succeeded', error = NULL, \
     started_at = COALESCE(r.s, quartz_fire.started_at), finished_at = COALESCE(r.e, {now}), \
     duration_ms = COALESCE(r.e, {now}) - COALESCE(r.s, quartz_fire.started_at) \
     FROM r WHERE quartz_fire.id = r.id AND quartz_fire.state = 'running' \
     AND quartz_fire.node_id = ? AND quartz_fire.incarnation = ? RETURNING quartz_fire.id) \
     SELECT string_agg(CAST(id AS TEXT), ',') FROM done";

/// The ids of a text list (`1,2,3`) as [`SUCCEED_PG`] answers them.
fn ids_of_list(list: Option<&str>) -> Result<Vec<i64>, StoreError> {
    let items = super::convert::int_items::<1>(list, "a recorded fire id is not a number")?;
    Ok(items.into_iter().map(|[id]| id).collect())
}

/// [`SUCCEED_PG`] on SQLite.
const SUCCEED_SQLITE: &str = "UPDATE quartz_fire SET state = 'succeeded', error = NULL, \
     started_at = COALESCE(r.s, quartz_fire.started_at), finished_at = COALESCE(r.e, {now}), \
     duration_ms = COALESCE(r.e, {now}) - COALESCE(r.s, quartz_fire.started_at) \
     FROM (SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.s') AS s, \
     json_extract(value, '$.e') AS e FROM json_each(?)) AS r \
     WHERE quartz_fire.id = r.id AND quartz_fire.state = 'running' \
     AND quartz_fire.node_id = ? AND quartz_fire.incarnation = ? RETURNING id";

/// [`SUCCEED_PG`] on MySQL, for fires a locking read found running under
/// the incarnation (binds: the rows, node id, incarnation). A multiple-table
/// `UPDATE` assigns in no set order: each value reads only the JSON row and
/// columns it does not write, or the start, which it writes with the same
/// value.
const SUCCEED_MYSQL: &str = "UPDATE quartz_fire f JOIN JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$.id', \
     s BIGINT PATH '$.s', e BIGINT PATH '$.e')) r ON f.id = r.id \
     SET f.state = 'succeeded', f.error = NULL, f.finished_at = COALESCE(r.e, {now}), \
     f.duration_ms = COALESCE(r.e, {now}) - COALESCE(r.s, f.started_at), \
     f.started_at = COALESCE(r.s, f.started_at) \
     WHERE f.state = 'running' AND f.node_id = ? AND f.incarnation = ?";

/// Fires as [`SUCCEED_PG`]'s JSON rows.
fn span_rows(fires: &[(i64, Option<HandlerSpan>)]) -> String {
    let rows: Vec<serde_json::Value> = fires
        .iter()
        .map(|(id, ran)| match ran {
            Some(r) => serde_json::json!({
                "id": id,
                "s": r.started_at.as_millis(),
                "e": r.finished_at.as_millis(),
            }),
            None => serde_json::json!({ "id": id }),
        })
        .collect();
    serde_json::Value::Array(rows).to_string()
}

impl SqlStore {}

/// The parts a fire's end is made of ([`crate::ends`] puts them together):
/// a success, a failure and a chain's children, statements of this file and
/// `fires.rs`; a retry's or a late run's pending fire in `pending.rs`.
#[async_trait::async_trait]
impl EndParts for SqlStore {
    /// Plain successes of many running fires of this incarnation, each
    /// with when its handler ran, all or none; the ids recorded. One
    /// statement on PostgreSQL and SQLite; on MySQL one transaction that
    /// locks the fires still running under the incarnation, then records
    /// those, [`IDS_PER_LIST`] at a time.
    async fn succeed_all(&self, fires: &[(i64, Option<HandlerSpan>)], node: &NodeRef) -> Result<Vec<i64>, StoreError> {
        if fires.is_empty() {
            return Ok(Vec::new());
        }
        let backend = self.db.backend;
        // One statement, the same binds: the spans, the node, its incarnation.
        let one = |sql: &'static str| {
            self.query(sql)
                .bind(span_rows(fires))
                .bind(node.node_id.clone())
                .bind(node.incarnation)
        };
        if backend == Backend::Postgres {
            let row = one(SUCCEED_PG).row(&self.db.pool).await?;
            return ids_of_list(super::convert::text_of(row)?.as_deref());
        }
        if backend == Backend::Sqlite {
            return first_ids(&one(SUCCEED_SQLITE).rows(&self.db.pool).await?);
        }
        let mut recorded = Vec::with_capacity(fires.len());
        let mut tx = self.begin().await?;
        for chunk in fires.chunks(IDS_PER_LIST) {
            let ids: Vec<i64> = chunk.iter().map(|(id, _)| *id).collect();
            let running = bind_id_list(self.query(IN_STATE_OF), &ids)
                .bind("running")
                .bind(node.node_id.clone())
                .bind(node.incarnation)
                .rows(&mut *tx)
                .await?;
            let running: HashSet<i64> = first_ids(&running)?;
            let mine: Vec<(i64, Option<HandlerSpan>)> =
                chunk.iter().filter(|(id, _)| running.contains(id)).copied().collect();
            if mine.is_empty() {
                continue;
            }
            // The rows read are locked and their conditions are the
            // update's: they are the rows it records.
            self.query(SUCCEED_MYSQL)
                .bind(span_rows(&mine))
                .bind(node.node_id.clone())
                .bind(node.incarnation)
                .exec(&mut *tx)
                .await?;
            recorded.extend(mine.iter().map(|(id, _)| *id));
        }
        tx.commit().await.map_err(db_error)?;
        Ok(recorded)
    }

    async fn finish(
        &self,
        fire_id: i64,
        node: &NodeRef,
        outcome: &Outcome,
        ran: Option<HandlerSpan>,
    ) -> Result<bool, StoreError> {
        let (state, error) = match outcome {
            Outcome::Succeeded => (FireState::Succeeded, None),
            Outcome::Failed { error } => (FireState::Failed, Some(truncate(error))),
        };
        let q = self
            .query(concat!(
                "UPDATE quartz_fire SET state = ?, error = ?, ",
                ran_cols!(),
                " WHERE id = ? AND state = 'running' AND node_id = ? AND incarnation = ?"
            ))
            .bind(state.as_str())
            .bind(error);
        self.changed_one(
            bind_ran(q, ran)
                .bind(fire_id)
                .bind(node.node_id.clone())
                .bind(node.incarnation),
        )
        .await
    }

    async fn succeed_and_chain(
        &self,
        fire_id: i64,
        node: &NodeRef,
        ran: Option<HandlerSpan>,
    ) -> Result<Option<Vec<ChainedFire>>, StoreError> {
        let mut tx = self.begin().await?;
        let q = self.query(concat!(
            "UPDATE quartz_fire SET state = 'succeeded', error = NULL, ",
            ran_cols!(),
            " WHERE id = ? AND state = 'running' AND node_id = ? AND incarnation = ?"
        ));
        let done = bind_ran(q, ran)
            .bind(fire_id)
            .bind(node.node_id.clone())
            .bind(node.incarnation)
            .exec(&mut *tx)
            .await?;
        if done.rows_affected() != 1 {
            return Ok(None);
        }
        // One row per child: claimed by this node, pending when it waits
        // for room, or skipped when paused. A child that has its row already
        // (a cycle coming round) gets nothing.
        self.query(self.db.backend.pick(
            concat!(
                chain_insert!(),
                " ON CONFLICT (execute_id, job_id, fire_time, attempt) DO NOTHING"
            ),
            concat!(
                chain_insert!(),
                " ON DUPLICATE KEY UPDATE quartz_fire.attempt = quartz_fire.attempt"
            ),
        ))
        .bind(node.node_id.clone())
        .bind(node.incarnation)
        .bind(fire_id)
        .exec(&mut *tx)
        .await?;
        let rows = self
            .query(
                "SELECT c.id, c.job_id, c.due_at FROM quartz_fire f JOIN quartz_fire c \
                 ON c.execute_id = f.execute_id AND c.fire_time = f.fire_time \
                 JOIN quartz_job p ON p.id = f.job_id \
                 JOIN quartz_job k ON k.id = c.job_id AND k.scheduler = p.scheduler AND k.parent_job = p.name \
                 WHERE f.id = ? AND c.attempt = 1 AND c.finished_at IS NULL AND \
                 ((c.state = 'claimed' AND c.node_id = ? AND c.incarnation = ?) OR c.state = 'pending') \
                 ORDER BY c.id",
            )
            .bind(fire_id)
            .bind(node.node_id.clone())
            .bind(node.incarnation)
            .rows(&mut *tx)
            .await?;
        tx.commit().await.map_err(db_error)?;
        rows.iter()
            .map(|row| {
                Ok(ChainedFire {
                    fire_id: row.try_get(0).map_err(db_error)?,
                    job_id: row.try_get(1).map_err(db_error)?,
                    waits_from: row
                        .try_get::<Option<i64>, _>(2)
                        .map_err(db_error)?
                        .map(Timestamp::from_millis),
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()
            .map(Some)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_success_list_reads_back_as_ids() {
        assert_eq!(ids_of_list(None).unwrap(), Vec::<i64>::new());
        assert_eq!(ids_of_list(Some("3,1,2")).unwrap(), [3, 1, 2]);
        assert!(ids_of_list(Some("3,x")).is_err());
    }
}
