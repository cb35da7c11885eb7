//! A handler's run as a fire's end records it: its start and finish, for
//! one end and for a batch of successes (one statement: JSON rows).

use super::convert::Statement as _;
use quartz_core::store::{HandlerSpan, NodeRef, StoreError};
use std::collections::HashSet;

use super::fires::IN_STATE_OF;
use super::*;

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

/// Successes of many running fires, each with when its handler ran, given
/// as JSON rows `{"id", "s", "e"}` (the start and finish left out when not
/// known), fenced by the incarnation (binds: the rows, node id,
/// incarnation), returning the ids recorded (PostgreSQL).
const SUCCEED_PG: &str = "WITH r AS MATERIALIZED (SELECT * FROM json_to_recordset(CAST(? AS json)) \
     AS r(id BIGINT, s BIGINT, e BIGINT)) \
     UPDATE quartz_fire SET state = 'succeeded', error = NULL, \
     started_at = COALESCE(r.s, quartz_fire.started_at), finished_at = COALESCE(r.e, {now}), \
     duration_ms = COALESCE(r.e, {now}) - COALESCE(r.s, quartz_fire.started_at) \
     FROM r WHERE quartz_fire.id = r.id AND quartz_fire.state = 'running' \
     AND quartz_fire.node_id = ? AND quartz_fire.incarnation = ? RETURNING quartz_fire.id";

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

impl SqlStore {
    /// Plain successes of many running fires of this incarnation, each
    /// with when its handler ran, all or none; the ids recorded. One
    /// statement on PostgreSQL and SQLite; on MySQL one transaction that
    /// locks the fires still running under the incarnation, then records
    /// those, [`IDS_PER_LIST`] at a time.
    pub(super) async fn fires_succeed(
        &self,
        fires: &[(i64, Option<HandlerSpan>)],
        node: &NodeRef,
    ) -> Result<Vec<i64>, StoreError> {
        if fires.is_empty() {
            return Ok(Vec::new());
        }
        let backend = self.db.backend;
        if backend.returns_rows() {
            let statement = backend.each(SUCCEED_PG, SUCCEED_SQLITE, SUCCEED_MYSQL);
            let rows = self
                .query(statement)
                .bind(span_rows(fires))
                .bind(node.node_id.clone())
                .bind(node.incarnation)
                .rows(&self.db.pool)
                .await?;
            return first_ids(&rows);
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
}
