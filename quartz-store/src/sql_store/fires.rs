//! The ledger's fires after their claim: fenced starts and transitions
//! (many per statement), time outs, recovery take-overs and re-runs, cancel
//! requests: [`FireStore`] for the SQL backends.

use super::convert::Statement as _;
use quartz_core::Timestamp;
use quartz_core::store::{FireRecord, FireState, NodeRef, StoreError};
use sqlx::Row;

use super::*;

/// A fire of this incarnation that never ran, recorded misfired, its start
/// cleared (binds: the reason, the fire, node id, incarnation).
pub(super) const MISFIRE_CLAIMED: &str = "UPDATE quartz_fire SET state = 'misfired', error = ?, started_at = NULL, \
     finished_at = {now} WHERE id = ? AND state IN ('claimed', 'running') AND node_id = ? AND incarnation = ?";

/// A claimed fire recorded skipped (binds as [`MISFIRE_CLAIMED`]).
pub(super) const SKIP_CLAIMED: &str = "UPDATE quartz_fire SET state = 'skipped', error = ?, finished_at = {now} \
     WHERE id = ? AND state = 'claimed' AND node_id = ? AND incarnation = ?";

/// A claimed fire recorded failed (binds as [`MISFIRE_CLAIMED`]).
pub(super) const FAIL_CLAIMED: &str = "UPDATE quartz_fire SET state = 'failed', error = ?, finished_at = {now} \
     WHERE id = ? AND state = 'claimed' AND node_id = ? AND incarnation = ?";

/// A claimed fire given back, open to any node (binds: the fire, node id,
/// incarnation).
pub(super) const RELEASE_CLAIMED: &str = "UPDATE quartz_fire SET node_id = NULL, incarnation = 0 \
     WHERE id = ? AND state = 'claimed' AND node_id = ? AND incarnation = ?";

/// The fenced start of many claimed fires (MySQL; binds: the start time
/// twice, the id set, then node id and incarnation twice). A fire started
/// ahead of its time (the node then runs it at its time) is recorded
/// started at its time.
pub(super) const MARK_RUNNING: &str = "UPDATE quartz_fire SET state = 'running', \
     started_at = CASE WHEN fire_time > ? THEN fire_time ELSE ? END \
     WHERE {ids} AND state = 'claimed' AND node_id = ? AND incarnation = ? AND EXISTS \
     (SELECT 1 FROM quartz_node n WHERE n.scheduler = quartz_fire.scheduler AND n.node_id = ? \
     AND n.incarnation = ? AND n.state = 'live')";

/// A fenced start's text (PostgreSQL, SQLite), shared by the start and its
/// confirmation: `$set` what it sets beside the start time, `$state` the
/// state it expects. A macro, so that [`listed!`] can wrap it too.
macro_rules! start_returning {
    ($set:literal, $state:literal) => {
        concat!(
            "UPDATE quartz_fire SET ",
            $set,
            "started_at = CASE WHEN fire_time > {now} THEN fire_time ELSE {now} END \
             WHERE {ids} AND state = '",
            $state,
            "' AND node_id = ? AND incarnation = ? AND EXISTS \
             (SELECT 1 FROM quartz_node n WHERE n.node_id = ? AND n.incarnation = ? AND n.state = 'live' \
             AND n.scheduler = (SELECT f.scheduler FROM quartz_fire f WHERE f.id = ?){for_share}) \
             RETURNING id, started_at"
        )
    };
}

/// [`MARK_RUNNING`], returning the started ids and start times (PostgreSQL,
/// SQLite; binds: the id set, node id and incarnation twice, then one of the
/// fires). The fence names the scheduler through one of the fires rather
/// than each row's own: a fence correlated with the updated rows lets
/// PostgreSQL's planner, without statistics, reach the fires through the
/// (scheduler, state) index, every claimed fire of the scheduler (and every
/// dead index entry a claim left) read by every start; uncorrelated, the fence
/// is evaluated once and the fires are reached by their ids. The node's row
/// is read under a shared lock: a retirement of the incarnation in flight
/// (an update of that row) and a start wait for each other, so no start
/// commits after the retirement that fenced it, as an unlocked read of the
/// row as it was before the retirement would let it.
pub(super) const MARK_RUNNING_RETURNING: &str = start_returning!("state = 'running', ", "claimed");

/// [`MARK_RUNNING_RETURNING`] answering one row on PostgreSQL (see
/// [`listed!`]).
const MARK_RUNNING_LISTED: &str = listed!(start_returning!("state = 'running', ", "claimed"));

/// The confirmation of many started fires: still running under this live
/// incarnation, started now (MySQL; binds as [`MARK_RUNNING`]).
pub(super) const CONFIRM_START: &str = "UPDATE quartz_fire SET \
     started_at = CASE WHEN fire_time > ? THEN fire_time ELSE ? END \
     WHERE {ids} AND state = 'running' AND node_id = ? AND incarnation = ? AND EXISTS \
     (SELECT 1 FROM quartz_node n WHERE n.scheduler = quartz_fire.scheduler AND n.node_id = ? \
     AND n.incarnation = ? AND n.state = 'live')";

/// [`CONFIRM_START`], returning the confirmed ids and start times
/// (PostgreSQL, SQLite; binds as [`MARK_RUNNING_RETURNING`], whose fence it
/// shares).
pub(super) const CONFIRM_START_RETURNING: &str = start_returning!("", "running");

/// [`CONFIRM_START_RETURNING`] answering one row on PostgreSQL.
const CONFIRM_START_LISTED: &str = listed!(start_returning!("", "running"));

/// A statement returning `id, started_at` rows, wrapped to answer one row
/// (PostgreSQL): the rows as one text list `id:started_at,…` (`NULL` for
/// none), as the claim and success batches answer, sparing the node an
/// `AnyRow` per fire.
macro_rules! listed {
    ($returning:expr) => {
        concat!(
            "WITH t AS (",
            $returning,
            ") SELECT string_agg(CONCAT(id, ':', started_at), ',') FROM t"
        )
    };
}
use listed;

/// The `id:started_at` pairs of a [`listed!`] answer.
fn starts_of_list(list: Option<&str>) -> Result<Vec<(i64, Option<Timestamp>)>, StoreError> {
    let items = super::convert::int_items::<2>(list, "a started fire is not id:started_at")?;
    Ok(items
        .into_iter()
        .map(|[id, at]| (id, Some(Timestamp::from_millis(at))))
        .collect())
}

/// The row of a live incarnation, locked (MySQL; binds: node id,
/// incarnation, and a fire of its scheduler).
const LIVE_OWNER: &str = "SELECT n.node_id FROM quartz_node n WHERE n.node_id = ? AND n.incarnation = ? \
     AND n.state = 'live' AND n.scheduler = (SELECT f.scheduler FROM quartz_fire f WHERE f.id = ?) FOR UPDATE";

/// Which of the named fires are in a state under an incarnation, and their
/// start times, locked, with their fire times and the database's time
/// (MySQL, around a batched transition; binds: the id list, state, node id,
/// incarnation).
pub(super) const IN_STATE_OF: &str = "SELECT id, started_at, fire_time, {now} FROM quartz_fire \
     WHERE {ids} AND state = ? AND node_id = ? AND incarnation = ? FOR UPDATE";

impl SqlStore {
    pub(super) async fn fire_transition(
        &self,
        template: &'static str,
        fire_id: i64,
        node: &NodeRef,
        extra: Option<String>,
    ) -> Result<bool, StoreError> {
        let mut q = self.query(template);
        if let Some(extra) = extra {
            q = q.bind(extra);
        }
        self.changed_one(q.bind(fire_id).bind(node.node_id.clone()).bind(node.incarnation))
            .await
    }

    /// One fenced transition of many fires, all or none (binds: the id set,
    /// node id and incarnation, and again when `node_twice`), from the first
    /// state of the pair to the second; returns the ids it moved, each with
    /// its start time after the move. On
    /// PostgreSQL and SQLite one statement names every fire and its
    /// `RETURNING` says which moved; on MySQL one transaction runs a statement
    /// per [`IDS_PER_LIST`] fires, reading which are in the first state
    /// (locked) before it: those are the fires it moves, as its count
    /// confirms (else the second state is read after it).
    pub(super) async fn transition_all(
        &self,
        fire_ids: &[i64],
        node: &NodeRef,
        (plain, returning, listed): (&'static str, &'static str, &'static str),
        node_twice: bool,
        (from_state, to_state): (&'static str, &'static str),
    ) -> Result<Vec<(i64, Option<Timestamp>)>, StoreError> {
        if fire_ids.is_empty() {
            return Ok(Vec::new());
        }
        let backend = self.db.backend;
        let with_node = |mut q: AnyQuery| {
            q = q.bind(node.node_id.clone()).bind(node.incarnation);
            if node_twice {
                q = q.bind(node.node_id.clone()).bind(node.incarnation);
            }
            q
        };
        if backend.returns_rows() {
            let postgres = backend == Backend::Postgres;
            let statement = if postgres { listed } else { returning };
            let mut q = with_node(self.query(statement).bind(backend.encode_ids(fire_ids)));
            if node_twice {
                q = q.bind(fire_ids[0]); // the fence's scheduler
            }
            if postgres {
                return starts_of_list(super::convert::text_of(q.row(&self.db.pool).await?)?.as_deref());
            }
            return q.rows(&self.db.pool).await?.iter().map(id_and_start).collect();
        }
        let mut moved = Vec::with_capacity(fire_ids.len());
        let mut tx = self.begin().await?;
        if node_twice {
            // Fenced by liveness: checked first, the node's row locked, so
            // that the sets read before and after (which cannot tell a
            // confirmation, from running to running, that the fence refused)
            // are those of a live incarnation.
            let live = self
                .query(LIVE_OWNER)
                .bind(node.node_id.clone())
                .bind(node.incarnation)
                .bind(fire_ids[0])
                .row(&mut *tx)
                .await?;
            if live.is_none() {
                return Ok(Vec::new());
            }
        }
        for chunk in fire_ids.chunks(IDS_PER_LIST) {
            let in_state = |state: &'static str| {
                bind_id_list(self.query(IN_STATE_OF), chunk)
                    .bind(state)
                    .bind(node.node_id.clone())
                    .bind(node.incarnation)
            };
            let rows = in_state(from_state).rows(&mut *tx).await?;
            let start = to_state == "running";
            let mut now = None;
            let mut before = Vec::with_capacity(rows.len());
            for row in &rows {
                let (id, started_at) = id_and_start(row)?;
                let fire_time: i64 = row.try_get(2).map_err(db_error)?;
                let read_at: i64 = row.try_get(3).map_err(db_error)?;
                let now = *now.get_or_insert(read_at);
                // A start records the later of the fire time and now.
                before.push((
                    id,
                    if start {
                        Some(Timestamp::from_millis(fire_time.max(now)))
                    } else {
                        started_at
                    },
                ));
            }
            // None of these in the first state: none to move.
            let Some(now) = now else { continue };
            let mut update = self.query(plain);
            if start {
                // The start time: the database's, as the locking read saw it.
                update = update.bind(now).bind(now);
            }
            let done = with_node(bind_id_list(update, chunk)).exec(&mut *tx).await?;
            // The statement's conditions are the read's, on rows the read
            // locked (a start's fence is the node row, locked above): the
            // rows read are the rows moved, as the count confirms, with the
            // start time the statement wrote (an end keeps it).
            if done.rows_affected() == before.len() as u64 {
                moved.extend(before);
                continue;
            }
            let before: HashSet<i64> = before.into_iter().map(|(id, _)| id).collect();
            for row in in_state(to_state).rows(&mut *tx).await? {
                let (id, started_at) = id_and_start(&row)?;
                if before.contains(&id) {
                    moved.push((id, started_at));
                }
            }
        }
        tx.commit().await.map_err(db_error)?;
        Ok(moved)
    }

    /// A fenced start statement (a start, or its confirmation) from
    /// `from_state` to running: the fires it started, with their start times.
    pub(super) async fn starts(
        &self,
        fire_ids: &[i64],
        node: &NodeRef,
        statements: (&'static str, &'static str, &'static str),
        from_state: &'static str,
    ) -> Result<Vec<(i64, Timestamp)>, StoreError> {
        let started = self
            .transition_all(fire_ids, node, statements, true, (from_state, "running"))
            .await?;
        started
            .into_iter()
            .map(|(id, at)| {
                at.map(|at| (id, at)).ok_or_else(|| StoreError::Database {
                    reason: format!("fire {id} is running without a start time"),
                })
            })
            .collect()
    }
}

/// A fire's id and start time, from a row of `id, started_at`.
fn id_and_start(row: &sqlx::any::AnyRow) -> Result<(i64, Option<Timestamp>), StoreError> {
    let id = row.try_get::<i64, _>(0).map_err(db_error)?;
    let started_at = row.try_get::<Option<i64>, _>(1).map_err(db_error)?;
    Ok((id, started_at.map(Timestamp::from_millis)))
}

/// The fire half of the store contract: a fire's start, time out, recovery
/// and cancel, statements of this file; its end in `ends.rs` and `ran.rs`,
/// a pending fire's in `pending.rs`.
#[async_trait::async_trait]
impl FireStore for SqlStore {
    async fn mark_running_all(&self, fire_ids: &[i64], node: &NodeRef) -> Result<Vec<(i64, Timestamp)>, StoreError> {
        self.starts(
            fire_ids,
            node,
            (MARK_RUNNING, MARK_RUNNING_RETURNING, MARK_RUNNING_LISTED),
            "claimed",
        )
        .await
    }

    async fn confirm_starts(&self, fire_ids: &[i64], node: &NodeRef) -> Result<Vec<(i64, Timestamp)>, StoreError> {
        self.starts(
            fire_ids,
            node,
            (CONFIRM_START, CONFIRM_START_RETURNING, CONFIRM_START_LISTED),
            "running",
        )
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
        let scheduler = &*self.scheduler;
        let rows = self
            .query(concat!(
                "SELECT ",
                fire_cols!(),
                " FROM quartz_fire f WHERE f.scheduler = ? AND f.finished_at IS NULL \
                 AND f.state IN ('claimed', 'running') AND NOT EXISTS \
                 (SELECT 1 FROM quartz_node n WHERE n.scheduler = f.scheduler AND n.node_id = f.node_id \
                 AND n.incarnation = f.incarnation AND n.state = 'live') ORDER BY f.fire_time, f.id LIMIT ?"
            ))
            .bind(scheduler.to_owned())
            .bind(i64::from(limit))
            .rows(&self.db.pool)
            .await?;
        Ok(crate::common::decode_each(&rows, "fire", decode_fire))
    }

    async fn claimed_by(&self, node: &NodeRef, before: Timestamp, limit: u32) -> Result<Vec<FireRecord>, StoreError> {
        let scheduler = &*self.scheduler;
        let rows = self
            .query(concat!(
                "SELECT ",
                fire_cols!(),
                " FROM quartz_fire WHERE scheduler = ? AND finished_at IS NULL AND state = 'claimed' \
                 AND node_id = ? AND incarnation = ? \
                 AND fire_time < ? AND claimed_at < ? ORDER BY fire_time, id LIMIT ?"
            ))
            .bind(scheduler.to_owned())
            .bind(node.node_id.clone())
            .bind(node.incarnation)
            .bind(before.as_millis())
            .bind(before.as_millis())
            .bind(i64::from(limit))
            .rows(&self.db.pool)
            .await?;
        Ok(crate::common::decode_each(&rows, "fire", decode_fire))
    }

    async fn take_over(&self, fire: &FireRecord, node: &NodeRef) -> Result<bool, StoreError> {
        self.changed_one(
            self.query(
                "UPDATE quartz_fire SET node_id = ?, incarnation = ?, claimed_at = {now} \
                 WHERE id = ? AND state = 'claimed' AND node_id {is} ? AND incarnation = ?",
            )
            .bind(node.node_id.clone())
            .bind(node.incarnation)
            .bind(fire.id)
            .bind(fire.owner.as_ref().map(|o| o.node_id.clone()))
            .bind(fire.owner.as_ref().map_or(0, |o| o.incarnation)),
        )
        .await
    }

    async fn rerun(&self, fire: &FireRecord, node: &NodeRef) -> Result<Option<i64>, StoreError> {
        let mut tx = self.begin().await?;
        let attempt = i64::from(fire.attempt) + 1;
        let closed = self
            .query(
                "UPDATE quartz_fire SET state = 'failed', finished_at = {now}, error = ? \
                 WHERE id = ? AND state = 'running' AND node_id {is} ? AND incarnation = ?",
            )
            .bind(format!("node died mid-run; recovered as attempt {attempt}"))
            .bind(fire.id)
            .bind(fire.owner.as_ref().map(|o| o.node_id.clone()))
            .bind(fire.owner.as_ref().map_or(0, |o| o.incarnation))
            .exec(&mut *tx)
            .await?;
        if closed.rows_affected() != 1 {
            return Ok(None);
        }
        let id = self
            .insert_fire(
                &mut tx,
                fire.execute_id,
                Some(fire.job_id),
                fire.fire_time,
                attempt,
                Some(node),
                FireState::Claimed,
                None,
                None,
            )
            .await?;
        if id.is_some() {
            tx.commit().await.map_err(db_error)?;
        }
        Ok(id)
    }

    async fn abandon(&self, fire: &FireRecord) -> Result<bool, StoreError> {
        self.changed_one(
            self.query(
                "UPDATE quartz_fire SET state = 'abandoned', finished_at = {now}, \
                 error = 'node died mid-run; the job does not request recovery' \
                 WHERE id = ? AND state = 'running' AND node_id {is} ? AND incarnation = ?",
            )
            .bind(fire.id)
            .bind(fire.owner.as_ref().map(|o| o.node_id.clone()))
            .bind(fire.owner.as_ref().map_or(0, |o| o.incarnation)),
        )
        .await
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

    async fn work_run(&self, work_id: i64) -> Result<quartz_core::store::WorkRun, StoreError> {
        let row = self
            .query("SELECT payload, trace_parent FROM quartz_work WHERE id = ?")
            .bind(work_id)
            .row(&self.db.pool)
            .await?;
        let Some(row) = row else {
            return Ok(quartz_core::store::WorkRun::default());
        };
        Ok(quartz_core::store::WorkRun {
            payload: row.try_get(0).map_err(db_error)?,
            trace_parent: row.try_get(1).map_err(db_error)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fenced_starts_read_as_written_out() {
        let fence = "WHERE {ids} AND state = '{S}' AND node_id = ? AND incarnation = ? AND EXISTS \
             (SELECT 1 FROM quartz_node n WHERE n.node_id = ? AND n.incarnation = ? AND n.state = 'live' \
             AND n.scheduler = (SELECT f.scheduler FROM quartz_fire f WHERE f.id = ?){for_share}) RETURNING id, started_at";
        let start = "started_at = CASE WHEN fire_time > {now} THEN fire_time ELSE {now} END ";
        assert_eq!(
            MARK_RUNNING_RETURNING,
            format!(
                "UPDATE quartz_fire SET state = 'running', {start}{}",
                fence.replace("{S}", "claimed")
            )
        );
        assert_eq!(
            CONFIRM_START_RETURNING,
            format!("UPDATE quartz_fire SET {start}{}", fence.replace("{S}", "running"))
        );
        assert!(
            MARK_RUNNING_LISTED.starts_with("WITH t AS (UPDATE")
                && MARK_RUNNING_LISTED.contains(MARK_RUNNING_RETURNING)
        );
    }

    #[test]
    fn the_starts_list_reads_back_as_ids_and_starts() {
        assert!(starts_of_list(None).unwrap().is_empty());
        assert_eq!(
            starts_of_list(Some("4:1000,5:2000")).unwrap(),
            [
                (4, Some(Timestamp::from_millis(1000))),
                (5, Some(Timestamp::from_millis(2000)))
            ]
        );
        assert!(starts_of_list(Some("4")).is_err());
        assert!(starts_of_list(Some("4:")).is_err());
    }
}
