//! Pending fires: retries waiting out their backoff and late runs a misfire
//! policy promised. Each is a ledger row written in the transaction that
//! recorded the attempt before it, so a shutdown, crash or rejoin loses
//! none: the node that wrote it waits for its due time, every node's poll
//! finds it too, and the first to claim it by compare-and-set runs it, once
//! its pool has a thread free (a node never claims what it cannot start).

use std::sync::Arc;
use std::time::Duration;

use super::RunKind;
use super::launch::RunFire;
use super::node::{FINISH_TRIES, Inner};
use crate::store::{FireEnd, FireQuery, FireRecord, FireState, FollowUp, JobState, MANUAL_EXECUTE, PendingClaim};
use crate::time::Timestamp;

/// How often a pending fire whose time has come looks for a free thread, or
/// for its job's running fire to end.
const ROOM_TICK: Duration = Duration::from_millis(50);

/// The most pending fires one poll reads.
pub(super) const PENDING_BATCH: u32 = 1_000;

/// A pending fire, as the node queues it.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingFire {
    pub(super) fire_id: i64,
    pub(super) execute_id: i64,
    pub(super) job_id: i64,
    pub(super) fire_time: Timestamp,
    pub(super) attempt: u32,
    pub(super) due_at: Timestamp,
}

impl PendingFire {
    pub(super) fn of(f: &FireRecord) -> PendingFire {
        PendingFire {
            fire_id: f.id,
            execute_id: f.execute_id,
            job_id: f.job_id,
            fire_time: f.fire_time,
            attempt: f.attempt,
            due_at: f.due_at.unwrap_or(f.claimed_at),
        }
    }

    /// The next attempt of `run`, pending as a follow-up said.
    pub(super) fn after(run: &RunFire, follow_up: FollowUp) -> Option<PendingFire> {
        match follow_up {
            FollowUp::Pending { fire_id, due_at } => Some(PendingFire {
                fire_id,
                execute_id: run.execute_id,
                job_id: run.job.id,
                fire_time: run.fire_time,
                attempt: run.attempt + 1,
                due_at,
            }),
            FollowUp::NotOwned | FollowUp::Recorded | FollowUp::Chained(_) => None,
        }
    }
}

impl Inner {
    /// Records a failed attempt and, in the same transaction, its retry as a
    /// pending fire after the job's backoff; then waits for it here.
    pub(super) async fn fail_with_retry(self: &Arc<Self>, run: &RunFire, error: &str) {
        let backoff = run.job.spec.retry.delay(run.attempt + 1, run.fire_id);
        for attempt in 1..=FINISH_TRIES {
            match self
                .store
                .end_fire(
                    run.fire_id,
                    &run.node,
                    FireEnd::Failed {
                        error: error.to_owned(),
                        retry_in: Some(backoff),
                    },
                )
                .await
            {
                Ok(FollowUp::NotOwned) => {
                    tracing::warn!(
                        scheduler = self.scheduler,
                        fire_id = run.fire_id,
                        "outcome not recorded: this incarnation no longer owns the fire (declared dead meanwhile)"
                    );
                    return;
                }
                Ok(follow_up) => {
                    if let Some(next) = PendingFire::after(run, follow_up) {
                        self.queue_pending(next);
                    }
                    return;
                }
                Err(e) if attempt < FINISH_TRIES => {
                    tracing::warn!(scheduler = self.scheduler, fire_id = run.fire_id, error = %e, "recording the failure failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                }
                Err(e) => {
                    tracing::error!(scheduler = self.scheduler, fire_id = run.fire_id, error = %e,
                        "the failure could not be recorded; the fire stays running in the ledger");
                }
            }
        }
    }

    /// Waits for a pending fire's time, then claims and launches it when the
    /// pool has room. Queued once per node, whoever found it.
    pub(super) fn queue_pending(self: &Arc<Self>, fire: PendingFire) {
        if !self.pending_queued.lock().insert(fire.fire_id) {
            return;
        }
        let inner = Arc::clone(self);
        tokio::spawn(async move {
            inner.run_pending(fire).await;
            inner.pending_queued.lock().remove(&fire.fire_id);
        });
    }

    async fn run_pending(self: &Arc<Self>, fire: PendingFire) {
        let wait = self
            .clock
            .instant_of(fire.due_at)
            .saturating_duration_since(tokio::time::Instant::now());
        if !self.pause(wait).await {
            return;
        }
        loop {
            // Room in the lane of its job's handler: a thread free and room
            // in the pool, or room for another task.
            if self.room_for_job(fire.job_id) > 0 && *self.phase.lock() == super::Phase::Running {
                match self.claim_pending(fire).await {
                    Ok(Some(claimed)) => {
                        if claimed {
                            return;
                        }
                    }
                    Ok(None) => return,
                    Err(e) => {
                        tracing::warn!(scheduler = self.scheduler, fire_id = fire.fire_id, error = %e, "pending fire not claimed; retrying");
                    }
                }
            }
            if !self.pause(ROOM_TICK).await {
                return;
            }
        }
    }

    /// One try: `Some(true)` when claimed (and launched or skipped), `Some(false)`
    /// when its job's running fire blocks it, `None` when it is not for this
    /// node (gone, or its handler is not here).
    async fn claim_pending(self: &Arc<Self>, fire: PendingFire) -> Result<Option<bool>, crate::store::StoreError> {
        let jobs = self.jobs(std::iter::once(fire.job_id)).await?;
        let job = jobs.get(&fire.job_id).cloned();
        if job
            .as_ref()
            .is_some_and(|j| !self.handlers.contains_key(&j.spec.handler))
        {
            return Ok(None); // for a node that has its handler
        }
        let exclusive = job.as_ref().is_some_and(|j| !j.spec.allow_concurrent);
        let node = self.node();
        // Known before it is claimed: the sweep for claims this node lost
        // track of must never take it.
        self.launch.unstarted.lock().insert(fire.fire_id);
        let claimed = self.store.pending_claim(fire.fire_id, &node, exclusive).await;
        if !matches!(claimed, Ok(PendingClaim::Won)) {
            self.launch.unstarted.lock().remove(&fire.fire_id);
        }
        match claimed? {
            PendingClaim::Gone => return Ok(None),
            PendingClaim::Blocked => return Ok(Some(false)),
            PendingClaim::Won => {}
        }
        // A fire asked for by hand runs on a paused job: the pause holds
        // the job's triggers, and this fire is none of theirs.
        let by_hand = fire.execute_id == MANUAL_EXECUTE;
        let skip = match &job {
            None if by_hand => Some("the job was deleted before its fire by hand"),
            None => Some("the job was deleted before its retry or late run"),
            Some(j) if j.state == JobState::Paused && !by_hand => {
                Some("the job was paused before its retry or late run")
            }
            Some(_) => None,
        };
        if let Some(reason) = skip {
            self.launch.unstarted.lock().remove(&fire.fire_id);
            self.store
                .end_fire(fire.fire_id, &node, FireEnd::skipped(reason))
                .await?;
            return Ok(Some(true));
        }
        let Some(job) = job else { return Ok(Some(true)) };
        let kind = if by_hand && fire.attempt == 1 {
            RunKind::ByHand
        } else {
            self.pending_kind(fire).await
        };
        self.launch(RunFire {
            fire_id: fire.fire_id,
            execute_id: fire.execute_id,
            trigger: None,
            fire_time: fire.fire_time,
            attempt: fire.attempt,
            kind,
            node,
            release: None,
            hold: Some(self.hold(&job)),
            job,
        });
        Ok(Some(true))
    }

    /// Why a pending fire runs, from the attempt before it: a late run a
    /// misfire policy promised follows a misfired one, a retry any other.
    /// The attempt before is read by its key (execute, job, fire time), the
    /// newest below the pending row: one row, however long the ledger.
    async fn pending_kind(&self, fire: PendingFire) -> RunKind {
        let mut query = FireQuery::new();
        query.execute_id = Some(fire.execute_id);
        query.job_id = Some(fire.job_id);
        query.since = Some(fire.fire_time);
        query.until = Some(fire.fire_time.saturating_add_millis(1));
        query.before_id = Some(fire.fire_id);
        query.limit = 1;
        let before = match self.store.fires(&query).await {
            Ok(rows) => rows
                .into_iter()
                .find(|f| f.execute_id == fire.execute_id && f.attempt + 1 == fire.attempt),
            Err(_) => None,
        };
        match before {
            Some(f) if f.state == FireState::Misfired => RunKind::LateRun,
            _ => RunKind::Retry,
        }
    }
}
