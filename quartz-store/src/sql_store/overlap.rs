//! Claims under an overlap policy or a concurrency limit: what an
//! exclusive claim reads of its job before its transaction, the job's and
//! the key's locks and what it reads under them, the trigger's waiting fires, and what a claim held back
//! records (a skipped row, or a pending fire due at its time; under cancel,
//! the job's open fires asked to stop).

use super::convert::Statement as _;
use quartz_core::store::{Claim, ClaimBusy, FireState, FullKey, StoreError};
use quartz_core::trigger::Overlap;
use sqlx::{Any, Row, Transaction};

use super::*;

/// What one claim inside a transaction came to.
pub(super) enum Claimed {
    /// Won: the ledger row's id.
    Won(i64),
    /// The compare-and-set matched nothing: another node won.
    Lost,
    /// The compare-and-set matched but the ledger already holds the fire.
    Conflict,
    /// The compare-and-set matched while a fire of the job was open: the
    /// overlap policy recorded the fire as skipped or pending.
    Held,
}

/// What a claim reads of its job before its transaction.
pub(super) struct JobOfClaim {
    pub(super) job_id: i64,
    pub(super) limit: Option<KeyLimit>,
}

/// A job's concurrency limit as a claim applies it.
pub(super) struct KeyLimit {
    /// The resolved key.
    pub(super) key: String,
    /// The most fires of the key at once.
    pub(super) max: i64,
    /// The key's first job (the lowest id): its row is the key's lock.
    pub(super) first: i64,
}

/// What a claim reads under its job's lock and its key's.
pub(super) struct JobLocked {
    /// A claimed or running fire of the job.
    pub(super) open: Option<i64>,
    /// The job's concurrency key, when it has as many fires claimed or
    /// running as its limit, or more.
    pub(super) full: Option<FullKey>,
}

/// A job's limit from columns `at` (its resolved key), `at + 1` (its
/// limit) and `at + 2` (the key's first job).
pub(super) fn limit_of_row(row: &sqlx::any::AnyRow, at: usize) -> Result<Option<KeyLimit>, StoreError> {
    let key: Option<String> = row.try_get(at).map_err(db_error)?;
    let max: Option<i64> = row.try_get(at + 1).map_err(db_error)?;
    let first: Option<i64> = row.try_get(at + 2).map_err(db_error)?;
    Ok(match (key, max, first) {
        (Some(key), Some(max), Some(first)) => Some(KeyLimit { key, max, first }),
        _ => None,
    })
}

impl SqlStore {
    /// What an exclusive claim needs of its job, read before its
    /// transaction (an execute never changes job; a job's key seldom
    /// changes, and a claim that finds its key's first job gone or moved
    /// is tried again): `None` when the execute is gone.
    pub(super) async fn job_of_claim(&self, execute_id: i64) -> Result<Option<JobOfClaim>, StoreError> {
        let row = self
            .query(
                "SELECT e.job_id, j.limit_key, j.concurrency_limit, \
                 (SELECT MIN(k.id) FROM quartz_job k WHERE k.scheduler = j.scheduler AND k.limit_key = j.limit_key) \
                 FROM quartz_execute e JOIN quartz_job j ON j.id = e.job_id WHERE e.id = ?",
            )
            .bind(execute_id)
            .row(&self.db.pool)
            .await?;
        row.map(|row| {
            Ok(JobOfClaim {
                job_id: row.try_get(0).map_err(db_error)?,
                limit: limit_of_row(&row, 1)?,
            })
        })
        .transpose()
    }

    /// The trigger's fire that waits under an overlap policy (pending, first
    /// attempt, due at its own time, of the trigger's own job: a chained
    /// child's waiting fire shares the execute), the oldest, if there is one.
    pub(super) async fn waiting_fire(
        &self,
        tx: &mut Transaction<'static, Any>,
        execute_id: i64,
        job_id: i64,
    ) -> Result<Option<i64>, StoreError> {
        sqlx::query_scalar(self.db.sql(
            "SELECT id FROM quartz_fire WHERE scheduler = ? AND finished_at IS NULL AND due_at IS NOT NULL \
             AND execute_id = ? AND state = 'pending' AND attempt = 1 AND due_at = fire_time AND job_id = ? \
             ORDER BY fire_time, id LIMIT 1",
        ))
        .bind(self.scheduler.to_string())
        .bind(execute_id)
        .bind(job_id)
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_error)
    }

    /// An exclusive claim under an overlap policy while its job or trigger
    /// is busy (the job's row locked): the execute still advances, and the
    /// fire is recorded as skipped or as a pending fire due at its time.
    /// Under cancel the trigger's older waiting fires are skipped (replaced),
    /// the job's open fires are asked to stop, and the change counter moves
    /// so that the nodes running them look.
    pub(super) async fn claim_overlapped(
        &self,
        tx: &mut Transaction<'static, Any>,
        claim: &Claim,
        policy: Overlap,
        job_id: i64,
        busy: ClaimBusy,
    ) -> Result<Claimed, StoreError> {
        if !self.cas_execute(tx, &claim.cas).await? {
            return Ok(Claimed::Lost);
        }
        let skip = busy.skip_reason(policy);
        let cancels = busy.cancels(policy);
        let state = if skip.is_some() {
            FireState::Skipped
        } else {
            FireState::Pending
        };
        let Some(id) = self
            .insert_fire(
                tx,
                claim.cas.execute_id,
                None,
                claim.fire_time,
                i64::from(claim.attempt),
                None,
                state,
                skip.as_deref(),
                None,
            )
            .await?
        else {
            return Ok(Claimed::Conflict);
        };
        if skip.is_some() {
            return Ok(Claimed::Held);
        }
        self.query("UPDATE quartz_fire SET due_at = fire_time WHERE id = ?")
            .bind(id)
            .exec(&mut **tx)
            .await?;
        if cancels {
            self.cancel_for(tx, claim.cas.execute_id, job_id, id).await?;
        }
        Ok(Claimed::Held)
    }

    /// Locks a job's row, then its concurrency key's (the key's first job
    /// row), so that claims of one job, and of one key, are serialised
    /// whichever nodes make them; then reads, after every lock, whether a
    /// fire of the job is open and how many of the key's are.
    ///
    /// The reads are plain, not locking: every claim that opens a fire of
    /// the job (or the key) holds these locks, so a plain read after them
    /// sees every such fire committed. On MySQL the transaction's first
    /// plain read fixes the snapshot its later ones see, so both come after
    /// the locks; a locking read would instead lock the gaps of the fires'
    /// index, which InnoDB's insert of another job's fire (holding the
    /// table's auto-increment lock) then waits on: a deadlock.
    ///
    /// A key's first job gone or moved to another key since it was read
    /// is a conflict: the claim is tried again.
    pub(super) async fn lock_job(
        &self,
        tx: &mut Transaction<'static, Any>,
        job_id: i64,
        limit: Option<&KeyLimit>,
    ) -> Result<JobLocked, StoreError> {
        self.query("UPDATE quartz_job SET updated_at = updated_at WHERE id = ?")
            .bind(job_id)
            .exec(&mut **tx)
            .await?;
        if let Some(limit) = limit {
            let locked = self
                .query("SELECT id FROM quartz_job WHERE id = ? AND limit_key = ?{for_update}")
                .bind(limit.first)
                .bind(limit.key.clone())
                .row(&mut **tx)
                .await?;
            if locked.is_none() {
                return Err(StoreError::Conflict {
                    reason: format!("the first job of concurrency key {:?} changed", limit.key),
                });
            }
        }
        // Any open fire of the job counts, whatever its execute's state (the
        // last fire of a trigger leaves it complete while it runs); read
        // through the index of the job's fires not ended (PostgreSQL and
        // SQLite), so that neither its history nor other jobs' fires count.
        let open = sqlx::query_scalar(self.db.sql(
            "SELECT id FROM quartz_fire WHERE job_id = ? AND finished_at IS NULL \
             AND state IN ('claimed', 'running') LIMIT 1",
        ))
        .bind(job_id)
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_error)?;
        let full = match limit {
            Some(limit) => {
                let open: i64 = sqlx::query_scalar(self.db.sql(
                    "SELECT COUNT(*) FROM quartz_fire f JOIN quartz_job j ON j.id = f.job_id \
                     WHERE f.scheduler = ? AND f.finished_at IS NULL AND f.state IN ('claimed', 'running') \
                     AND j.scheduler = ? AND j.limit_key = ?",
                ))
                .bind(self.scheduler.to_string())
                .bind(self.scheduler.to_string())
                .bind(limit.key.clone())
                .fetch_one(&mut **tx)
                .await
                .map_err(db_error)?;
                (open >= limit.max).then(|| FullKey {
                    key: limit.key.clone(),
                    open,
                    max: limit.max,
                })
            }
            None => None,
        };
        Ok(JobLocked { open, full })
    }

    /// Under cancel, fire `newer` replaces what runs or waits before it:
    /// the trigger's older waiting fires are skipped, the job's open fires
    /// are asked to stop, and the change counter moves.
    async fn cancel_for(
        &self,
        tx: &mut Transaction<'static, Any>,
        execute_id: i64,
        job_id: i64,
        newer: i64,
    ) -> Result<(), StoreError> {
        self.query(
            "UPDATE quartz_fire SET state = 'skipped', finished_at = {now}, error = ? WHERE scheduler = ? \
             AND finished_at IS NULL AND due_at IS NOT NULL AND execute_id = ? AND state = 'pending' \
             AND attempt = 1 AND due_at = fire_time AND job_id = ? AND id <> ?",
        )
        .bind(format!(
            "overlap policy cancel: replaced by fire {newer} before it started"
        ))
        .bind(self.scheduler.to_string())
        .bind(execute_id)
        .bind(job_id)
        .bind(newer)
        .exec(&mut **tx)
        .await?;
        self.query(
            "UPDATE quartz_fire SET cancel_at = {now} WHERE scheduler = ? AND finished_at IS NULL \
             AND state IN ('claimed', 'running') AND job_id = ? AND cancel_at IS NULL",
        )
        .bind(self.scheduler.to_string())
        .bind(job_id)
        .exec(&mut **tx)
        .await?;
        self.bump_changes(tx, &self.scheduler).await?;
        Ok(())
    }
}
