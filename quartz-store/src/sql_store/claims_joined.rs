//! MySQL and MariaDB: a batch of claims in four statements, whatever its
//! size. Neither has `UPDATE … RETURNING`, so the batch cannot be one
//! statement as on PostgreSQL ([`claims`](super::claims)); before this, each
//! claim took a compare-and-set and a ledger insert of its own, two round
//! trips a fire.
//!
//! Inside one transaction, with the claims as JSON parameters read by
//! `JSON_TABLE`, grouped into runs as on PostgreSQL (consecutive fires of
//! one execute: one compare-and-set, one ledger row a fire):
//!
//! 1. one `UPDATE` joined to the runs takes every execute row that still
//!    holds what its run expects, in execute id order (the JSON rows are
//!    sorted and joined first, `STRAIGHT_JOIN`), the lock order every
//!    node's claims keep;
//! 2. one plain `SELECT` reads which rows now hold what their run set, with
//!    this node's incarnation as their owner: the rows taken (a run another
//!    node won holds that node's incarnation, or is read as it was);
//! 3. one `INSERT … SELECT` writes the ledger rows of the runs taken,
//!    from a JSON parameter of their fires alone (in execute id and fire
//!    time order), each joined to its execute row by its key;
//! 4. one `SELECT` reads back their ids: the rows of this node from the
//!    insert's first id on, a range of the primary key.
//!
//! A ledger row that exists already (a row moved back by hand, or this
//! node's own claim whose commit answer was lost) makes the insert fail on
//! the unique key: the transaction rolls back, and the claims go one by one,
//! which records such a fire as claimed once and moves its row past it.

use super::convert::Statement as _;
use std::collections::{HashMap, HashSet};

use sqlx::Row;

use super::claims::{answers, json_batch, won_of};
use super::*;
use quartz_core::store::{Claim, StoreError};

/// The runs' JSON rows as a table `r` (binds: the runs).
macro_rules! runs_table {
    () => {
        "JSON_TABLE(?, '$[*]' COLUMNS (execute_id BIGINT PATH '$.execute_id', \
         expect_state VARCHAR(16) PATH '$.expect_state', expect_prev BIGINT PATH '$.expect_prev', \
         expect_next BIGINT PATH '$.expect_next', expect_stamp BIGINT PATH '$.expect_stamp', \
         set_state VARCHAR(16) PATH '$.set_state', set_prev BIGINT PATH '$.set_prev', \
         set_next BIGINT PATH '$.set_next', set_times BIGINT PATH '$.set_times', \
         set_node VARCHAR(200) PATH '$.set_node', set_inc BIGINT PATH '$.set_inc')) r"
    };
}

/// Step 1 (binds: the runs).
const TAKE_ROWS: &str = concat!(
    "UPDATE ",
    runs_table!(),
    " STRAIGHT_JOIN quartz_execute e ON e.id = r.execute_id \
     SET e.prev_fire_time = r.set_prev, e.next_fire_time = r.set_next, e.times_triggered = r.set_times, \
     e.state = r.set_state, e.node_id = r.set_node, e.incarnation = r.set_inc, e.updated_at = {now} \
     WHERE e.state = r.expect_state AND e.prev_fire_time <=> r.expect_prev \
     AND e.next_fire_time <=> r.expect_next AND e.calendar_stamp = r.expect_stamp"
);

/// Step 2 (binds: the runs): the rows taken, by a plain read (a consistent
/// one, which waits for no lock: a row another node took and has not
/// committed yet is read as it was, which is not what this batch set).
const READ_TAKEN: &str = concat!(
    "SELECT e.id FROM ",
    runs_table!(),
    " STRAIGHT_JOIN quartz_execute e ON e.id = r.execute_id \
     WHERE e.state = r.set_state AND e.prev_fire_time <=> r.set_prev AND e.next_fire_time <=> r.set_next \
     AND e.times_triggered = r.set_times AND e.calendar_stamp = r.expect_stamp \
     AND e.node_id <=> r.set_node AND e.incarnation <=> r.set_inc"
);

/// Step 3 (binds: node id, incarnation, the fires of the rows taken as
/// `[execute id, fire time, attempt]` arrays). It reads only rows this
/// transaction holds: an `INSERT … SELECT` holds the fire table's
/// auto-increment lock for the whole statement, and one that waited there
/// for a row another node's claim holds would hold that node's ledger
/// insert back in turn (MariaDB ends such a wait with "Failed to read
/// auto-increment value"). The fires come first and reach their execute by
/// its key: joined the other way, MariaDB matched every execute against
/// every fire in a join buffer, a cost that grew with the square of the
/// batch.
const INSERT_WON: &str = "INSERT INTO quartz_fire (scheduler, execute_id, job_id, fire_time, attempt, node_id, \
     incarnation, state, claimed_at, fire_count) \
     SELECT e.scheduler, e.id, e.job_id, f.fire_time, f.attempt, ?, ?, 'claimed', {now}, 1 \
     FROM JSON_TABLE(?, '$[*]' COLUMNS (execute_id BIGINT PATH '$[0]', fire_time BIGINT PATH '$[1]', \
     attempt BIGINT PATH '$[2]')) f STRAIGHT_JOIN quartz_execute e ON e.id = f.execute_id";

/// Step 4 (binds: the insert's first id, node id, incarnation): a range of
/// the primary key, whatever the ledger's history. The transaction's
/// snapshot (taken by step 2) holds no row another transaction inserted
/// after it, and every id from the insert's first on was given out after
/// it: under the servers' default isolation (repeatable read) the rows read
/// are this insert's own. Under read committed, rows of this node's other
/// batches may follow; the caller keeps only the rows of its own fires.
const READ_WON: &str = "SELECT execute_id, fire_time, id FROM quartz_fire \
     WHERE id >= ? AND node_id = ? AND incarnation = ? AND state = 'claimed'";

impl SqlStore {
    /// Claims that [`fit_one_statement`](super::claims::fit_one_statement),
    /// in four statements (see the module docs): claim by claim, the
    /// ledger id of each fire won, or `None` when the ledger holds one of
    /// the fires already and the claims must go one by one.
    pub(super) async fn claim_joined(&self, claims: &[Claim]) -> Result<Option<Vec<Option<i64>>>, StoreError> {
        let Some(node) = claims.first().map(|c| c.node.clone()) else {
            return Ok(Some(Vec::new()));
        };
        let batch = json_batch(claims);
        let mut tx = self.begin().await?;
        let taken = self.query(TAKE_ROWS).bind(batch.runs.clone()).exec(&mut *tx).await?;
        let mut won: HashMap<(i64, i64), i64> = HashMap::new();
        if taken.rows_affected() > 0 {
            let rows = self.query(READ_TAKEN).bind(batch.runs).rows(&mut *tx).await?;
            let ids = rows
                .iter()
                .map(|row| row.try_get::<i64, _>(0))
                .collect::<Result<Vec<i64>, _>>()
                .map_err(db_error)?;
            if disagrees(taken.rows_affected(), ids.len(), "rows read back") {
                return Ok(None);
            }
            let taken_ids: HashSet<i64> = ids.into_iter().collect();
            let mut fires: Vec<(i64, i64, i64)> = batch
                .fires
                .into_iter()
                .filter(|(execute, _, _)| taken_ids.contains(execute))
                .collect();
            fires.sort_unstable();
            let inserted = self
                .query(INSERT_WON)
                .bind(node.node_id.clone())
                .bind(node.incarnation)
                .bind(serde_json::to_string(&fires).unwrap_or_default())
                .execute(&mut *tx)
                .await;
            let first_id = match inserted {
                // Dropping the transaction rolls the batch back.
                Err(e) if is_unique_violation(&e) => return Ok(None),
                Err(e) => return Err(db_error(e)),
                Ok(done) => done.last_insert_id(),
            };
            let Some(first_id) = first_id else {
                tracing::warn!("a joined claim's ledger insert gave no first id; claiming one by one");
                return Ok(None);
            };
            let rows = self
                .query(READ_WON)
                .bind(first_id)
                .bind(node.node_id.clone())
                .bind(node.incarnation)
                .rows(&mut *tx)
                .await?;
            let ours: HashSet<(i64, i64)> = fires.iter().map(|(execute, at, _)| (*execute, *at)).collect();
            won = won_of(rows)?;
            won.retain(|key, _| ours.contains(key));
            // Every fire of the rows taken is written (each run has one at
            // least), or none of the batch stands: rolled back, the claims
            // go one by one.
            if disagrees(fires.len() as u64, won.len(), "ledger rows written") {
                return Ok(None);
            }
        }
        tx.commit().await.map_err(db_error)?;
        let rest = match batch.rest.is_empty() {
            true => Vec::new(),
            false => Box::pin(self.claim_together(&batch.rest)).await?,
        };
        Ok(Some(answers(claims, &won, &batch.rest, rest)))
    }
}

/// Whether `rows` rows disagree with the `expected`: the rows read back
/// with the compare-and-set's count, or the ledger rows written with the
/// fires of the rows taken. The batch is then rolled back and claimed one
/// by one.
fn disagrees(expected: u64, rows: usize, what: &str) -> bool {
    if rows as u64 == expected {
        return false;
    }
    tracing::warn!(
        expected,
        rows,
        "a joined claim's {what} disagree with what it took; claiming one by one"
    );
    true
}
