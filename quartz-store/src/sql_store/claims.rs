//! Claims: an execute's compare-and-set with its ledger row, alone or many
//! in one transaction, and the job lock of jobs that disallow concurrency.
//!
//! On PostgreSQL a batch is one statement (on MySQL and MariaDB, four:
//! [`claims_joined`](super::claims_joined)). The claims are sent as one JSON parameter. Consecutive fires of one
//! execute in the batch (each claim expecting the state the one before it
//! leaves) form a run: one compare-and-set from the state the first expects
//! to the state the last leaves, and one ledger row per fire. A data-modifying
//! CTE feeds the rows whose compare-and-set won into the ledger insert, so
//! the whole batch is atomic on its own: one round trip, one commit, however
//! many fires. The rows are locked in id order first, as every node's
//! claims lock them, so that two nodes claiming the same rows wait for each
//! other instead of deadlocking. As with one claim, a fire the ledger already
//! holds (a row moved back by hand) is passed over, not claimed twice.

use super::convert::Statement as _;
use std::collections::HashMap;

use quartz_core::Timestamp;
use quartz_core::store::{Claim, ClaimBusy, FireState, NodeRef, StoreError};
use quartz_core::trigger::{Overlap, TriggerState};
use serde::Serialize;
use sqlx::{Any, Row, Transaction};

use super::executes::{CasRow, bind_cas_expect, bind_cas_set, cas_rows};
use super::overlap::{Claimed, JobOfClaim};
use super::*;

/// A ledger row for one fire of an execute (binds: the job, when not the
/// execute's own, fire time, attempt, node id, incarnation, state, 1 when
/// that state is an end (the row is finished now), error, skipped until,
/// fire count, the execute); PostgreSQL and SQLite add their own "nothing on
/// a duplicate" and `RETURNING`.
macro_rules! insert_fire {
    () => {
        "INSERT INTO quartz_fire (scheduler, execute_id, job_id, fire_time, attempt, node_id, incarnation, \
         state, finished_at, claimed_at, error, skipped_until, fire_count) \
         SELECT scheduler, id, COALESCE(?, job_id), ?, ?, ?, ?, ?, CASE WHEN ? = 1 THEN {now} END, {now}, ?, ?, ? \
         FROM quartz_execute WHERE id = ?"
    };
}

/// The batch: one row per run of an execute, one row per fire (binds: the
/// runs, the fires, node id, incarnation). It answers one row, the fires
/// won as one text list `execute:fire time:ledger id,…` (`NULL` for none),
/// not a row per fire: each row the driver returns is several allocations
/// on the node (a `PgRow` made an `AnyRow`), and a batch is hundreds.
const CLAIM_RUNS: &str = concat!(
    cas_rows!("", ""),
    ", f AS MATERIALIZED (SELECT * FROM json_to_recordset(CAST(? AS json)) AS f(execute_id BIGINT, fire_time BIGINT, \
     attempt BIGINT)), \
     ins AS (INSERT INTO quartz_fire (scheduler, execute_id, job_id, fire_time, attempt, node_id, incarnation, state, \
     claimed_at, fire_count) \
     SELECT won.scheduler, won.id, won.job_id, f.fire_time, f.attempt, ?, ?, 'claimed', {now}, 1 \
     FROM won JOIN f ON f.execute_id = won.id \
     ORDER BY won.id, f.fire_time \
     ON CONFLICT (execute_id, job_id, fire_time, attempt) DO NOTHING RETURNING execute_id, fire_time, id) \
     SELECT string_agg(CONCAT(execute_id, ':', fire_time, ':', id), ',') FROM ins"
);

/// The fires won, by execute and fire time, from [`CLAIM_RUNS`]'s list.
fn won_of_list(list: Option<&str>) -> Result<HashMap<(i64, i64), i64>, StoreError> {
    let items = super::convert::int_items::<3>(list, "a claimed fire is not execute:fire time:id")?;
    Ok(items
        .into_iter()
        .map(|[execute, fire_time, id]| ((execute, fire_time), id))
        .collect())
}

/// Claims that one statement can take: no job lock (not exclusive), no
/// owner to check, no schedule to rewrite, and one node for all.
pub(super) fn fit_one_statement(claims: &[Claim]) -> bool {
    claims.iter().all(|c| {
        !c.exclusive && c.cas.expect_owner.is_none() && c.cas.set_trigger.is_none() && c.cas.set_signature.is_none()
    }) && claims.windows(2).all(|w| w[0].node == w[1].node)
}

/// A run of consecutive claims of one execute.
pub(super) struct Run<'a> {
    /// Its first claim: what the run expects.
    pub(super) first: &'a Claim,
    /// Its last: what the run sets.
    pub(super) last: &'a Claim,
}

/// Splits claims into runs, in order, with the claims the runs hold (one
/// ledger row each); a claim of an execute that does not follow its run (not
/// expecting the state the run leaves) goes to the rest, for a statement of
/// its own after this one.
pub(super) fn runs(claims: &[Claim]) -> (Vec<Run<'_>>, Vec<&Claim>, Vec<Claim>) {
    let mut runs: Vec<Run<'_>> = Vec::new();
    let mut in_runs = Vec::with_capacity(claims.len());
    let mut by_execute: HashMap<i64, usize> = HashMap::new();
    let mut rest = Vec::new();
    for claim in claims {
        match by_execute.get(&claim.cas.execute_id) {
            None => {
                by_execute.insert(claim.cas.execute_id, runs.len());
                runs.push(Run {
                    first: claim,
                    last: claim,
                });
            }
            Some(&i) if follows(runs[i].last, claim) => runs[i].last = claim,
            Some(_) => {
                rest.push(claim.clone());
                continue;
            }
        }
        in_runs.push(claim);
    }
    (runs, in_runs, rest)
}

/// Whether `next` expects exactly what `prev` leaves, for the same owner
/// (every claim names its node as the execute's owner: a run's one
/// compare-and-set writes it once).
fn follows(prev: &Claim, next: &Claim) -> bool {
    prev.cas.set_state == next.cas.expect_state
        && same(&prev.cas.set, &next.cas.expect)
        && prev.cas.set_owner == next.cas.set_owner
        && next.cas.expect_owner.is_none()
        && !prev.cas.set.awaiting_finish
}

fn same(a: &TriggerState, b: &TriggerState) -> bool {
    a.prev_fire_time == b.prev_fire_time && a.next_fire_time == b.next_fire_time && a.calendar_stamp == b.calendar_stamp
}

/// A batch: its runs' compare-and-sets as a JSON parameter (in execute id
/// order, the lock order) and their fires, with the claims that follow no
/// run, for a statement of their own.
pub(super) struct JsonBatch {
    /// The runs' rows ([`cas_row`]).
    pub(super) runs: String,
    /// The runs' fires, in the claims' order: execute, fire time, attempt
    /// (each backend sends them in its own shape).
    pub(super) fires: Vec<(i64, i64, i64)>,
    /// The claims left over.
    pub(super) rest: Vec<Claim>,
}

pub(super) fn json_batch(claims: &[Claim]) -> JsonBatch {
    let (mut runs, in_runs, rest) = runs(claims);
    runs.sort_by_key(|r| r.first.cas.execute_id);
    let run_rows: Vec<CasRow<'_>> = runs.iter().map(|r| CasRow::of(&r.first.cas, &r.last.cas)).collect();
    JsonBatch {
        runs: serde_json::to_string(&run_rows).unwrap_or_default(),
        fires: in_runs
            .iter()
            .map(|c| (c.cas.execute_id, c.fire_time.as_millis(), i64::from(c.attempt)))
            .collect(),
        rest,
    }
}

/// Fires as the JSON rows of [`CLAIM_RUNS`]: objects of execute, fire time
/// and attempt.
fn fire_rows(fires: &[(i64, i64, i64)]) -> String {
    #[derive(Serialize)]
    struct FireRow {
        execute_id: i64,
        fire_time: i64,
        attempt: i64,
    }
    let rows: Vec<FireRow> = fires
        .iter()
        .map(|&(execute_id, fire_time, attempt)| FireRow {
            execute_id,
            fire_time,
            attempt,
        })
        .collect();
    serde_json::to_string(&rows).unwrap_or_default()
}

/// The fires won, by (execute, fire time), from rows of (execute id, fire
/// time, ledger id).
pub(super) fn won_of(rows: Vec<sqlx::any::AnyRow>) -> Result<HashMap<(i64, i64), i64>, StoreError> {
    let mut won = HashMap::with_capacity(rows.len());
    for row in rows {
        let key = (
            row.try_get::<i64, _>(0).map_err(db_error)?,
            row.try_get::<i64, _>(1).map_err(db_error)?,
        );
        won.insert(key, row.try_get::<i64, _>(2).map_err(db_error)?);
    }
    Ok(won)
}

impl SqlStore {
    /// Claims in one statement (see the module docs); for claims that
    /// [`fit_one_statement`]. The result says, claim by claim, the ledger id
    /// of each fire won.
    pub(super) async fn claim_in_one(&self, claims: &[Claim]) -> Result<Vec<Option<i64>>, StoreError> {
        let Some(node) = claims.first().map(|c| c.node.clone()) else {
            return Ok(Vec::new());
        };
        let batch = json_batch(claims);
        let row = self
            .query(CLAIM_RUNS)
            .bind(batch.runs)
            .bind(fire_rows(&batch.fires))
            .bind(node.node_id.clone())
            .bind(node.incarnation)
            .row(&self.db.pool)
            .await?;
        let won = won_of_list(super::convert::text_of(row)?.as_deref())?;
        let rest = match batch.rest.is_empty() {
            true => Vec::new(),
            false => Box::pin(self.claim_in_one(&batch.rest)).await?,
        };
        Ok(answers(claims, &won, &batch.rest, rest))
    }
}

/// Claim by claim, the ledger id of each fire won: from `won`, or from the
/// answers to `rest` (the claims that followed no run).
pub(super) fn answers(
    claims: &[Claim],
    won: &HashMap<(i64, i64), i64>,
    rest: &[Claim],
    rest_answers: Vec<Option<i64>>,
) -> Vec<Option<i64>> {
    let mut rest_won: HashMap<(i64, i64), Option<i64>> = rest
        .iter()
        .map(|c| (c.cas.execute_id, c.fire_time.as_millis()))
        .zip(rest_answers)
        .collect();
    claims
        .iter()
        .map(|c| {
            let key = (c.cas.execute_id, c.fire_time.as_millis());
            won.get(&key).copied().or_else(|| rest_won.remove(&key).flatten())
        })
        .collect()
}

impl SqlStore {
    /// Inserts a ledger row for an execute, taking its scheduler from the
    /// execute row and its job from it too unless `job_id` names one (a chained
    /// child's fire); returns the new id, or `None` when the unique key says
    /// the fire exists already.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn insert_fire(
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
        let q = self
            .query(self.db.backend.pick(
                concat!(
                    insert_fire!(),
                    " ON CONFLICT (execute_id, job_id, fire_time, attempt) DO NOTHING RETURNING id"
                ),
                insert_fire!(),
            ))
            .bind(job_id)
            .bind(fire_time.as_millis())
            .bind(attempt)
            .bind(owner.map(|n| n.node_id.clone()))
            .bind(owner.map_or(0, |n| n.incarnation))
            .bind(state.as_str())
            .bind(i64::from(state.is_ended()))
            .bind(error.map(truncate))
            .bind(skipped.map(|(until, _)| until.as_millis()))
            .bind(skipped.map_or(1, |(_, count)| count_to_i64(count)))
            .bind(execute_id);
        let result = if self.db.backend.returns_rows() {
            q.fetch_optional(&mut **tx)
                .await
                .and_then(|row| row.map(|r| r.try_get::<i64, _>(0)).transpose())
        } else {
            q.execute(&mut **tx)
                .await
                .map(|done: AnyQueryResult| (done.rows_affected() == 1).then(|| done.last_insert_id()).flatten())
        };
        match result {
            Ok(id) => Ok(id),
            Err(e) if is_unique_violation(&e) => Ok(None),
            Err(e) => Err(db_error(e)),
        }
    }

    /// One claim in `tx`; an exclusive one with what [`Self::job_of_claim`]
    /// read of its job before the transaction began.
    pub(super) async fn claim_in(
        &self,
        tx: &mut Transaction<'static, Any>,
        claim: &Claim,
        pre: Option<&JobOfClaim>,
    ) -> Result<Claimed, StoreError> {
        if claim.exclusive
            && let Some(pre) = pre
        {
            // The job's row locked first (claims of one job are
            // serialised), then its key's. Under allow, the job's own fires
            // do not hold this one; its concurrency limit still may.
            let locked = self.lock_job(tx, pre.job_id, pre.limit.as_ref()).await?;
            let open = locked.open.filter(|_| claim.overlap != Some(Overlap::Allow));
            if claim.overlap.is_none() && open.is_some() {
                return Ok(Claimed::Lost);
            }
            let full = locked.full;
            // A fire of the trigger that waits holds the later ones behind
            // it, so that they keep their order.
            let waiting = if claim.overlap.is_some() || full.is_some() {
                self.waiting_fire(tx, claim.cas.execute_id, pre.job_id).await?
            } else {
                None
            };
            let busy = ClaimBusy { open, waiting, full };
            if busy.any() {
                let policy = claim.overlap.unwrap_or(Overlap::BufferAll);
                return self.claim_overlapped(tx, claim, policy, pre.job_id, busy).await;
            }
        }
        if self.db.backend.claims_in_one_statement()
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

    /// Claims in one transaction (on PostgreSQL, one statement when they
    /// fit); a ledger conflict sends them one by one.
    pub(super) async fn claim_together(&self, claims: &[Claim]) -> Result<Vec<Option<i64>>, StoreError> {
        if self.db.backend.claims_in_one_statement() && claims::fit_one_statement(claims) {
            return self.claim_in_one(claims).await;
        }
        if self.db.backend.claims_joined()
            && claims.len() > 1
            && claims::fit_one_statement(claims)
            && let Some(won) = self.claim_joined(claims).await?
        {
            return Ok(won);
        }
        // One lock order on every node: by row, a row's fires in their
        // order (a stable sort). Two nodes' batches over the same rows in
        // the order of their fire times would deadlock.
        let mut order: Vec<usize> = (0..claims.len()).collect();
        order.sort_by_key(|&i| claims[i].cas.execute_id);
        let mut tx = self.begin().await?;
        let mut won = vec![None; claims.len()];
        for i in order {
            won[i] = match self.claim_in(&mut tx, &claims[i], None).await? {
                Claimed::Won(id) => Some(id),
                Claimed::Lost => None,
                // The ledger already holds this fire (a row moved back by
                // hand, or edited while a fire of it was claimed): the row
                // still advances past it, as on PostgreSQL, which loses
                // nothing (that fire is recorded) and keeps the execute
                // from being stuck on a fire it can never claim.
                Claimed::Conflict | Claimed::Held => None,
            };
        }
        tx.commit().await.map_err(db_error)?;
        Ok(won)
    }

    /// PostgreSQL: the claim as one statement, the compare-and-set in a
    /// data-modifying CTE feeding the ledger insert. Atomic on its own, so a
    /// single claim needs no transaction around it: one round trip, one commit.
    /// When the ledger already holds the fire (a row moved back by hand) the
    /// row still advances past it, which loses nothing: that fire is recorded.
    pub(super) async fn claim_statement<'e, E>(&self, executor: E, claim: &Claim) -> Result<Claimed, StoreError>
    where
        E: sqlx::Executor<'e, Database = Any>,
    {
        let cas = &claim.cas;
        let statement = self.query(
            "WITH won AS (UPDATE quartz_execute SET prev_fire_time = ?, next_fire_time = ?, times_triggered = ?, \
                 state = ?, node_id = ?, incarnation = ?, updated_at = {now} \
                 WHERE id = ? AND state = ? AND prev_fire_time {is} ? AND next_fire_time {is} ? AND calendar_stamp = ? \
                 RETURNING scheduler, id, job_id) \
                 INSERT INTO quartz_fire (scheduler, execute_id, job_id, fire_time, attempt, node_id, incarnation, \
                 state, claimed_at, fire_count) \
                 SELECT scheduler, id, job_id, ?, ?, ?, ?, 'claimed', {now}, 1 FROM won \
                 ON CONFLICT (execute_id, job_id, fire_time, attempt) DO NOTHING RETURNING id",
        );
        let row = bind_cas_expect(bind_cas_set(statement, cas), cas)
            .bind(claim.fire_time.as_millis())
            .bind(i64::from(claim.attempt))
            .bind(claim.node.node_id.clone())
            .bind(claim.node.incarnation)
            .row(executor)
            .await?;
        match row {
            Some(row) => Ok(Claimed::Won(row.try_get::<i64, _>(0).map_err(db_error)?)),
            None => Ok(Claimed::Lost),
        }
    }

    pub(super) async fn claim_one(&self, claim: &Claim) -> Result<Option<i64>, StoreError> {
        if self.db.backend.claims_in_one_statement()
            && !claim.exclusive
            && claim.cas.expect_owner.is_none()
            && claim.cas.set_trigger.is_none()
            && claim.cas.set_signature.is_none()
        {
            return match self.claim_statement(&self.db.pool, claim).await? {
                Claimed::Won(id) => Ok(Some(id)),
                Claimed::Lost | Claimed::Conflict | Claimed::Held => Ok(None),
            };
        }
        // Read before the transaction: on MySQL a transaction's first plain
        // read fixes the snapshot its later plain reads see, which must come
        // after the job's and the key's locks.
        let pre = match claim.exclusive {
            true => self.job_of_claim(claim.cas.execute_id).await?,
            false => None,
        };
        let mut tx = self.begin().await?;
        match self.claim_in(&mut tx, claim, pre.as_ref()).await? {
            Claimed::Won(id) => {
                tx.commit().await.map_err(db_error)?;
                Ok(Some(id))
            }
            // The row advances past a fire the ledger holds already.
            Claimed::Conflict | Claimed::Held => {
                tx.commit().await.map_err(db_error)?;
                Ok(None)
            }
            // Dropping the transaction rolls the compare-and-set back.
            Claimed::Lost => Ok(None),
        }
    }

    /// The ledger row of a claim, if it went through: claimed by the
    /// claim's incarnation and not started yet.
    async fn claimed_already(&self, claim: &Claim) -> Result<Option<i64>, StoreError> {
        let row = self
            .query(
                "SELECT id FROM quartz_fire WHERE scheduler = ? AND execute_id = ? AND fire_time = ? \
                 AND attempt = ? AND state = 'claimed' AND node_id = ? AND incarnation = ?",
            )
            .bind(self.scheduler().to_owned())
            .bind(claim.cas.execute_id)
            .bind(claim.fire_time.as_millis())
            .bind(i64::from(claim.attempt))
            .bind(claim.node.node_id.clone())
            .bind(claim.node.incarnation)
            .row(&self.db.pool)
            .await?;
        row.map(|r| r.try_get(0).map_err(db_error)).transpose()
    }

    pub(super) async fn claims_batch(&self, claims: &[Claim]) -> Result<Vec<Option<i64>>, StoreError> {
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
                        // Its commit may have gone through with the answer
                        // lost: read back, so that a claim won is not
                        // reported lost (the fire would wait for the sweep
                        // for lost claims).
                        Err(e) => match self.claimed_already(claim).await {
                            Ok(Some(id)) => Some(id),
                            _ => {
                                tracing::warn!(execute_id = claim.cas.execute_id, error = %e,
                                    "exclusive claim failed; the next poll offers it again");
                                None
                            }
                        },
                    }
                } else {
                    shared_won.next().flatten()
                });
            }
            return Ok(won);
        }
        self.claim_together(claims).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claims_list_reads_back_as_the_fires_won() {
        assert!(won_of_list(None).unwrap().is_empty());
        let won = won_of_list(Some("7:1000:41,7:2000:42,9:1000:43")).unwrap();
        assert_eq!(won.len(), 3);
        assert_eq!(won[&(7, 2000)], 42);
        assert_eq!(won[&(9, 1000)], 43);
        for bad in ["7:1000", "7:1000:41:1", "x:1:2"] {
            assert!(won_of_list(Some(bad)).is_err(), "{bad}");
        }
    }
}
