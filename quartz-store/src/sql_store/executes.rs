//! Executes as the poll sees them: the due executes in time order (rows that
//! cannot be read set aside), orphaned ones, and the compare-and-set on an
//! execute row with the ledger records it writes when it wins
//! ([`ScheduleStore`] for the SQL backends).

use super::convert::Statement as _;
use quartz_core::store::{
    DueBatch, DueCursor, ExecuteCas, ExecuteState, RejectedRow, SkippedRecord, StoreError, TriggerColumns,
};
use std::collections::HashSet;

use serde::Serialize;
use serde_json::{Map, Value, json};
use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

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

/// Binds what a compare-and-set expects (the `WHERE` of each compare-and-set statement):
/// the execute, its state, its previous and next fire time, its calendar
/// stamp.
pub(super) fn bind_cas_expect(q: AnyQuery, cas: &ExecuteCas) -> AnyQuery {
    q.bind(cas.execute_id)
        .bind(cas.expect_state.as_str())
        .bind(cas.expect.prev_fire_time.map(Timestamp::as_millis))
        .bind(cas.expect.next_fire_time.map(Timestamp::as_millis))
        .bind(cas.expect.calendar_stamp)
}

/// The one-statement batches' compare-and-sets (PostgreSQL): the rows `r`
/// (a JSON parameter, `$cols` its columns past the execute's own), locked
/// in id order where they hold what their row expects, then updated
/// (`$set`: the columns written past the state and the owner) into `won`.
macro_rules! cas_rows {
    ($cols:literal, $set:literal) => {
        concat!(
            "WITH r AS MATERIALIZED (SELECT * FROM json_to_recordset(CAST(? AS json)) AS r(execute_id BIGINT, \
             expect_state TEXT, expect_prev BIGINT, expect_next BIGINT, expect_stamp BIGINT, set_state TEXT, \
             set_prev BIGINT, set_next BIGINT, set_times BIGINT, set_node TEXT, set_inc BIGINT",
            $cols,
            ")), locked AS (SELECT e.id FROM quartz_execute e JOIN r ON e.id = r.execute_id WHERE ",
            cas_rows!(@expect),
            " ORDER BY e.id FOR UPDATE OF e), \
             won AS (UPDATE quartz_execute e SET prev_fire_time = r.set_prev, next_fire_time = r.set_next, \
             times_triggered = r.set_times, state = r.set_state, node_id = r.set_node, incarnation = r.set_inc, \
             updated_at = {now}",
            $set,
            " FROM r WHERE e.id = r.execute_id AND e.id IN (SELECT id FROM locked) AND ",
            cas_rows!(@expect),
            " RETURNING e.scheduler, e.id, e.job_id)"
        )
    };
    (@expect) => {
        "e.state = r.expect_state AND e.prev_fire_time IS NOT DISTINCT FROM r.expect_prev \
         AND e.next_fire_time IS NOT DISTINCT FROM r.expect_next AND e.calendar_stamp = r.expect_stamp"
    };
}
pub(super) use cas_rows;

/// A compare-and-set as a JSON row of the one-statement batches: what
/// `expect` expects, and what `set` writes. Serialised straight to the
/// statement's parameter: built as maps of values first, a batch's JSON took
/// a twelfth of a node's time at 10,000 fires a second.
#[derive(Serialize)]
pub(super) struct CasRow<'a> {
    execute_id: i64,
    expect_state: &'static str,
    expect_prev: Option<i64>,
    expect_next: Option<i64>,
    expect_stamp: i64,
    set_state: &'static str,
    set_prev: Option<i64>,
    set_next: Option<i64>,
    set_times: i64,
    set_node: Option<&'a str>,
    set_inc: Option<i64>,
}

impl<'a> CasRow<'a> {
    pub(super) fn of(expect: &ExecuteCas, set: &'a ExecuteCas) -> CasRow<'a> {
        CasRow {
            execute_id: expect.execute_id,
            expect_state: expect.expect_state.as_str(),
            expect_prev: expect.expect.prev_fire_time.map(|t| t.as_millis()),
            expect_next: expect.expect.next_fire_time.map(|t| t.as_millis()),
            expect_stamp: expect.expect.calendar_stamp,
            set_state: set.set_state.as_str(),
            set_prev: set.set.prev_fire_time.map(|t| t.as_millis()),
            set_next: set.set.next_fire_time.map(|t| t.as_millis()),
            set_times: count_to_i64(set.set.times_triggered),
            set_node: set.set_owner.as_ref().map(|n| n.node_id.as_str()),
            set_inc: set.set_owner.as_ref().map(|n| n.incarnation),
        }
    }
}

/// [`CasRow`] as a JSON object, for a row that carries more columns.
pub(super) fn cas_row(expect: &ExecuteCas, set: &ExecuteCas) -> Map<String, Value> {
    match serde_json::to_value(CasRow::of(expect, set)) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

impl SqlStore {
    /// Decodes execute rows; marks the ones that cannot be decoded as errors.
    pub(super) async fn serve(
        &self,
        scheduler: &str,
        rows: Vec<AnyRow>,
        batch: &mut DueBatch,
    ) -> Result<(), StoreError> {
        let calendars = self.calendars_for(scheduler, &rows).await?;
        for (i, row) in rows.into_iter().enumerate() {
            // A poll decodes thousands of rows: the runtime's other tasks
            // run in between.
            if i % 256 == 255 {
                tokio::task::yield_now().await;
            }
            match decode_execute(&row, &calendars) {
                Ok(execute) => batch.executes.push(execute),
                Err(RowError { id, reason }) => {
                    tracing::warn!(execute_id = id, %reason, "execute row cannot be understood; marked as an error");
                    self.query("UPDATE quartz_execute SET state = ?, error = ?, updated_at = {now} WHERE id = ?")
                        .bind(ExecuteState::Error.as_str())
                        .bind(truncate(&reason))
                        .bind(id)
                        .exec(&self.db.pool)
                        .await?;
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
                 WHERE id = ? AND state = ? AND prev_fire_time {is} ? AND next_fire_time {is} ? AND calendar_stamp = ?",
            ),
            (false, true) => self.query(
                "UPDATE quartz_execute SET prev_fire_time = ?, next_fire_time = ?, times_triggered = ?, state = ?, \
                 node_id = ?, incarnation = ?, schedule_sig = COALESCE(?, schedule_sig), updated_at = {now} \
                 WHERE id = ? AND state = ? AND prev_fire_time {is} ? AND next_fire_time {is} ? AND calendar_stamp = ? \
                 AND node_id {is} ? AND incarnation {is} ?",
            ),
            (true, false) => self.query(
                "UPDATE quartz_execute SET prev_fire_time = ?, next_fire_time = ?, times_triggered = ?, state = ?, \
                 node_id = ?, incarnation = ?, schedule_sig = COALESCE(?, schedule_sig), updated_at = {now}, \
                 start_time = ?, repeat_limit = ? \
                 WHERE id = ? AND state = ? AND prev_fire_time {is} ? AND next_fire_time {is} ? AND calendar_stamp = ?",
            ),
            (true, true) => self.query(
                "UPDATE quartz_execute SET prev_fire_time = ?, next_fire_time = ?, times_triggered = ?, state = ?, \
                 node_id = ?, incarnation = ?, schedule_sig = COALESCE(?, schedule_sig), updated_at = {now}, \
                 start_time = ?, repeat_limit = ? \
                 WHERE id = ? AND state = ? AND prev_fire_time {is} ? AND next_fire_time {is} ? AND calendar_stamp = ? \
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
        let done = q.exec(&mut **tx).await?;
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
        if cas.recomputes() {
            self.query(UNCLAIM_AHEAD).bind(cas.execute_id).exec(&mut **tx).await?;
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

    /// A poll's row decisions in one statement (PostgreSQL): every
    /// compare-and-set and the ledger records of the rows that won, as the
    /// claims' batch does (see `claims.rs`); the rows locked in id order.
    async fn update_in_one(&self, updates: &[(ExecuteCas, Vec<SkippedRecord>)]) -> Result<Vec<bool>, StoreError> {
        let rows: Vec<Value> = updates
            .iter()
            .map(|(cas, _)| {
                let set_trigger = cas.set_trigger.as_ref();
                let mut row = cas_row(cas, cas);
                row.extend([
                    (
                        "set_sig".to_owned(),
                        json!(
                            set_trigger
                                .map(|t| TriggerColumns::from_trigger(t).signature())
                                .or(cas.set_signature)
                        ),
                    ),
                    ("reschedule".to_owned(), json!(set_trigger.is_some())),
                    (
                        "set_start".to_owned(),
                        json!(set_trigger.map(|t| t.start().as_millis())),
                    ),
                    (
                        "set_limit".to_owned(),
                        json!(set_trigger.and_then(|t| t.repeat_limit()).map(count_to_i64)),
                    ),
                    ("withdraw".to_owned(), json!(cas.recomputes())),
                ]);
                Value::Object(row)
            })
            .collect();
        let records: Vec<Value> = updates
            .iter()
            .flat_map(|(cas, records)| records.iter().map(move |r| (cas.execute_id, r)))
            .map(|(execute_id, r)| {
                json!({
                    "execute_id": execute_id,
                    "fire_time": r.from.as_millis(),
                    "state": r.state.as_str(),
                    "ended": r.state.is_ended(),
                    "error": truncate(&r.reason),
                    "until_time": r.until.as_millis(),
                    "fire_count": count_to_i64(r.count),
                })
            })
            .collect();
        let won_rows = self
            .query(DECIDE_ROWS)
            .bind(Value::Array(rows).to_string())
            .bind(Value::Array(records).to_string())
            .rows(&self.db.pool)
            .await?;
        let mut won = HashSet::with_capacity(won_rows.len());
        for row in won_rows {
            won.insert(row.try_get::<i64, _>(0).map_err(db_error)?);
        }
        Ok(updates.iter().map(|(cas, _)| won.contains(&cas.execute_id)).collect())
    }
}

/// Row decisions one statement can take: none expects an owner, and each
/// names its own row.
fn fit_one_statement(updates: &[(ExecuteCas, Vec<SkippedRecord>)]) -> bool {
    let mut seen = HashSet::with_capacity(updates.len());
    updates
        .iter()
        .all(|(cas, _)| cas.expect_owner.is_none() && seen.insert(cas.execute_id))
}

/// The fires of a row whose edited schedule was taken, claimed ahead on the
/// schedule as it was, unclaimed (binds: the execute; see
/// `ExecuteCas::recomputes`).
const UNCLAIM_AHEAD: &str = "DELETE FROM quartz_fire WHERE execute_id = ? AND state = 'claimed' AND fire_time > {now}";

/// A poll's row decisions (binds: the compare-and-sets, the ledger records
/// of the skipped ranges), answering the rows that won; the fires claimed
/// ahead of a row whose edited schedule was taken are unclaimed.
const DECIDE_ROWS: &str = concat!(
    cas_rows!(
        ", set_sig BIGINT, reschedule BOOLEAN, set_start BIGINT, set_limit BIGINT, withdraw BOOLEAN",
        ", schedule_sig = COALESCE(r.set_sig, e.schedule_sig), \
         start_time = CASE WHEN r.reschedule THEN r.set_start ELSE e.start_time END, \
         repeat_limit = CASE WHEN r.reschedule THEN r.set_limit ELSE e.repeat_limit END"
    ),
    ", k AS MATERIALIZED (SELECT * FROM json_to_recordset(CAST(? AS json)) AS k(execute_id BIGINT, fire_time BIGINT, \
     state TEXT, ended BOOLEAN, error TEXT, until_time BIGINT, fire_count BIGINT)), \
     recorded AS (INSERT INTO quartz_fire (scheduler, execute_id, job_id, fire_time, attempt, node_id, incarnation, \
     state, finished_at, claimed_at, error, skipped_until, fire_count) \
     SELECT won.scheduler, won.id, won.job_id, k.fire_time, 1, NULL, 0, k.state, \
     CASE WHEN k.ended THEN {now} END, {now}, k.error, k.until_time, k.fire_count \
     FROM won JOIN k ON k.execute_id = won.id ORDER BY won.id, k.fire_time \
     ON CONFLICT (execute_id, job_id, fire_time, attempt) DO NOTHING), \
     unclaimed AS (DELETE FROM quartz_fire f USING won JOIN r ON r.execute_id = won.id \
     WHERE r.withdraw AND f.execute_id = won.id AND f.state = 'claimed' AND f.fire_time > {now}) \
     SELECT id FROM won"
);

/// The schedule half of the store contract: the poll's reads and the
/// compare-and-set of execute rows, statements of this file; a claim's
/// statements in `claims.rs`.
#[async_trait::async_trait]
impl ScheduleStore for SqlStore {
    async fn due_executes(
        &self,
        before: Timestamp,
        after: Option<DueCursor>,
        limit: u32,
    ) -> Result<DueBatch, StoreError> {
        let scheduler = &*self.scheduler;
        let mut batch = DueBatch::default();
        let query = match after {
            None => self
                .query(concat!(
                    "SELECT ",
                    execute_cols!(),
                    " FROM quartz_execute WHERE scheduler = ? AND state = 'waiting' AND next_fire_time < ? \
                     ORDER BY next_fire_time, priority DESC, id LIMIT ?"
                ))
                .bind(scheduler.to_owned())
                .bind(before.as_millis()),
            // The rows after the cursor's in the same order, reached through
            // the due index from the cursor's next fire time.
            Some(c) => self
                .query(concat!(
                    "SELECT ",
                    execute_cols!(),
                    " FROM quartz_execute WHERE scheduler = ? AND state = 'waiting' AND next_fire_time < ? \
                     AND next_fire_time >= ? AND (next_fire_time > ? OR priority < ? OR (priority = ? AND id > ?)) \
                     ORDER BY next_fire_time, priority DESC, id LIMIT ?"
                ))
                .bind(scheduler.to_owned())
                .bind(before.as_millis())
                .bind(c.next_fire_time.as_millis())
                .bind(c.next_fire_time.as_millis())
                .bind(c.priority)
                .bind(c.priority)
                .bind(c.execute_id),
        };
        let due = query.bind(i64::from(limit)).rows(&self.db.pool).await?;
        let room = u32::try_from(due.len()).map_or(0, |n| limit.saturating_sub(n));
        self.serve(scheduler, due, &mut batch).await?;
        if room > 0 {
            // In no order: ordered by id, PostgreSQL's generic plan walked
            // the primary key and filtered every execute of the database
            // (49 ms a poll at 100,000, most of what B10's database spent
            // more per fire than B1's); each is initialised once, so the
            // order serves nothing. Through the due index.
            let uninitialised = self
                .query(concat!(
                    "SELECT ",
                    execute_cols!(),
                    " FROM quartz_execute WHERE scheduler = ? AND state = 'waiting' AND next_fire_time IS NULL \
                     LIMIT ?"
                ))
                .bind(scheduler.to_owned())
                .bind(i64::from(room))
                .rows(&self.db.pool)
                .await?;
            self.serve(scheduler, uninitialised, &mut batch).await?;
        }
        Ok(batch)
    }

    async fn orphaned_executes(&self, limit: u32) -> Result<DueBatch, StoreError> {
        let scheduler = &*self.scheduler;
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
            .rows(&self.db.pool)
            .await?;
        let mut batch = DueBatch::default();
        self.serve(scheduler, rows, &mut batch).await?;
        Ok(batch)
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
        let mut won = Vec::with_capacity(updates.len());
        if updates.is_empty() {
            return Ok(won);
        }
        // One lock order on every node: by row.
        let mut order: Vec<usize> = (0..updates.len()).collect();
        order.sort_by_key(|&i| updates[i].0.execute_id);
        won.resize(updates.len(), false);
        if self.db.backend.claims_in_one_statement() && fit_one_statement(updates) {
            return self.update_in_one(updates).await;
        }
        let mut tx = self.begin().await?;
        for i in order {
            let (cas, records) = &updates[i];
            won[i] = self.update_in(&mut tx, cas, records).await?;
        }
        tx.commit().await.map_err(db_error)?;
        Ok(won)
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
