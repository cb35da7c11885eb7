//! Pending fires: retries waiting out their backoff and late runs a misfire
//! policy promised. Each is a ledger row written in the transaction that
//! recorded the attempt before it, so a shutdown, crash or rejoin loses
//! none: the node that wrote it waits for its due time, every node's poll
//! finds it too, and the first to claim it by compare-and-set runs it, once
//! its pool has a thread free (a node never claims what it cannot start).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::context::Ctx;
use super::fixed::HashSet;
use super::handler::RunKind;
use super::launch_handle::Launch;
use super::run::{PendingFire, RunFire};
use crate::store::{
    FireEnd, FireQuery, FireState, JobState, MANUAL_EXECUTE, NodeRef, PendingClaim, waited_for_room, work_of_execute,
};

/// How often a pending fire whose time has come looks for a free thread, or
/// for its job's running fire to end.
const ROOM_TICK: Duration = Duration::from_millis(50);

/// The longest a pending fire that its job's running fire blocks waits
/// between two tries (each a transaction): the wait doubles from
/// [`ROOM_TICK`] up to this.
const BLOCKED_TICK_MAX: Duration = Duration::from_millis(400);

/// The most pending fires one poll reads.
pub(super) const PENDING_BATCH: u32 = 1_000;

/// The backlog stage: a loop that owns the pending fires this node waits
/// on (the poller and the runner send them on a channel; each is queued
/// once, whoever found it), each a task until its time comes and its lane
/// has room.
pub(super) struct Backlog {
    ctx: Arc<Ctx>,
    /// Where claimed pending fires go.
    launcher: Launch,
}

impl Backlog {
    pub(super) fn new(ctx: Arc<Ctx>, launcher: Launch) -> Backlog {
        Backlog { ctx, launcher }
    }

    /// Queues the pending fires sent (retries, late runs, those a poll
    /// found), once each, until the node stops; publishes how many it
    /// waits on ([`Flights::set_pending`](super::flight::Flights::set_pending)).
    pub(super) async fn run(self: Arc<Self>, mut pending: mpsc::UnboundedReceiver<PendingFire>) {
        let mut stop = self.ctx.stop_signal();
        let mut waiting: HashSet<i64> = HashSet::default();
        let (done_tx, mut done) = mpsc::unbounded_channel();
        loop {
            tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => return,
                Some(fire_id) = done.recv() => {
                    waiting.remove(&fire_id);
                }
                fire = pending.recv() => {
                    let Some(fire) = fire else { return };
                    if waiting.insert(fire.fire_id) {
                        let (backlog, done) = (Arc::clone(&self), done_tx.clone());
                        tokio::spawn(async move {
                            backlog.run_pending(fire).await;
                            let _ = done.send(fire.fire_id);
                        });
                    }
                }
            }
            self.ctx.flights.set_pending(waiting.len());
        }
    }

    async fn run_pending(self: &Arc<Self>, fire: PendingFire) {
        let wait = self
            .ctx
            .clock
            .instant_of(fire.due_at)
            .saturating_duration_since(tokio::time::Instant::now());
        if !self.ctx.pause(wait).await {
            return;
        }
        let mut tick = ROOM_TICK;
        // Whether a try of this task failed with its answer perhaps lost:
        // only then may a fire found claimed by this incarnation be this
        // task's own claim (a fire told again after an earlier task
        // launched it is that task's, and already on its way).
        let mut unsure = false;
        loop {
            // Room in the lane of its job's handler: a thread free and room
            // in the pool, or room for another task.
            if self.ctx.room_for_job(fire.job_id) > 0
                && self.ctx.phase() == super::status::Phase::Running
                && !self.ctx.on_standby()
            {
                match self.claim_pending(fire, unsure).await {
                    Ok(Some(claimed)) => {
                        if claimed {
                            return;
                        }
                        tick = (tick * 2).min(BLOCKED_TICK_MAX);
                    }
                    Ok(None) => return,
                    Err(e) => {
                        unsure = true;
                        tracing::warn!(scheduler = self.ctx.scheduler, fire_id = fire.fire_id, error = %e, "pending fire not claimed; retrying");
                    }
                }
            }
            if !self.ctx.pause(tick).await {
                return;
            }
        }
    }

    /// One try: `Some(true)` when claimed (and launched or skipped), `Some(false)`
    /// when its job's running fire blocks it, `None` when it is not for this
    /// node (gone, or its handler is not here). `unsure`: an earlier try
    /// failed, perhaps after its claim committed.
    async fn claim_pending(
        self: &Arc<Self>,
        fire: PendingFire,
        unsure: bool,
    ) -> Result<Option<bool>, crate::store::StoreError> {
        let jobs = self.ctx.jobs(std::iter::once(fire.job_id)).await?;
        let job = jobs.get(&fire.job_id).cloned();
        if job
            .as_ref()
            .is_some_and(|j| !self.ctx.handlers.contains_key(&j.spec.handler))
        {
            return Ok(None); // for a node that has its handler
        }
        // Enqueued work: a paused job's waits (the next poll tells it
        // again), and its own payload is read before the claim, so that a
        // claim never waits on a read.
        let work = work_of_execute(fire.execute_id);
        if work.is_some() && job.as_ref().is_some_and(|j| j.state == JobState::Paused) {
            return Ok(None);
        }
        let (payload, trace_parent) = match work {
            Some(work) => {
                let run = self.ctx.store.work_run(work).await?;
                (run.payload.map(Arc::from), run.trace_parent.map(Arc::from))
            }
            None => (None, None),
        };
        let exclusive = job.as_ref().is_some_and(|j| !j.spec.allow_concurrent);
        let node = self.ctx.node();
        // Known before it is claimed: the sweep for claims this node lost
        // track of must never take it.
        self.ctx.flights.unstarted([fire.fire_id]);
        let mut claimed = self.ctx.store.pending_claim(fire.fire_id, &node, exclusive).await;
        if unsure && matches!(claimed, Ok(PendingClaim::Gone)) && self.claimed_before(fire, &node).await {
            // An earlier try of this claim committed and its answer was
            // lost (a store call past its deadline): the fire is this
            // incarnation's already. Taken as gone, no one would start it
            // until the sweep for lost claims recorded it misfired. Asked
            // only after such a try: a fire this node claimed and launched
            // before, told again by a poll that read it pending, is found
            // claimed by this incarnation too, and launched again it ran
            // twice (the simulator's seeds 27621, 67723, 78317, 84816).
            claimed = Ok(PendingClaim::Won);
        }
        match &claimed {
            Ok(PendingClaim::Won) => {}
            // Its fate unknown: still known as won and not started, so
            // that the sweep for lost claims leaves it to the next try
            // (and a shutdown gives it back if it was claimed).
            Err(_) => {}
            Ok(_) => self.ctx.flights.not_unstarted([fire.fire_id]),
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
            None if work.is_some() => Some("the job was deleted before its enqueued work ran"),
            None => Some("the job was deleted before its retry or late run"),
            Some(j) if j.state == JobState::Paused && !by_hand => {
                Some("the job was paused before its retry or late run")
            }
            Some(_) => None,
        };
        if let Some(reason) = skip {
            self.ctx.flights.not_unstarted([fire.fire_id]);
            self.ctx
                .store
                .end_fire(fire.fire_id, &node, FireEnd::skipped(reason))
                .await?;
            return Ok(Some(true));
        }
        let Some(job) = job else { return Ok(Some(true)) };
        let mut snoozed = 0;
        let kind = if by_hand && fire.attempt == 1 {
            RunKind::ByHand
        } else if work.is_some() && fire.attempt == 1 {
            RunKind::Enqueued
        } else if waited_for_room(fire.execute_id, fire.attempt, fire.fire_time, Some(fire.due_at)) {
            // A trigger's fire that waited for its job's running fire or its
            // concurrency key: due at its own time.
            RunKind::Scheduled
        } else {
            let (kind, snoozes) = self.pending_kind(fire).await;
            snoozed = snoozes;
            kind
        };
        self.launcher.launch(RunFire {
            fire_id: fire.fire_id,
            execute_id: fire.execute_id,
            trigger: None,
            fire_time: fire.fire_time,
            attempt: fire.attempt,
            kind,
            snoozed,
            node,
            release: None,
            hold: Some(self.ctx.hold(&job)),
            marked_at: None,
            payload,
            trace_parent,
            job,
        });
        Ok(Some(true))
    }

    /// Whether the pending fire is claimed by `node` already (its row read
    /// by id): a claim of it this node made before and never heard back
    /// from.
    async fn claimed_before(&self, fire: PendingFire, node: &NodeRef) -> bool {
        let query = FireQuery {
            execute_id: Some(fire.execute_id),
            before_id: Some(fire.fire_id.saturating_add(1)),
            limit: 1,
            ..FireQuery::new()
        };
        self.ctx.store.fires(&query).await.is_ok_and(|rows| {
            rows.first().is_some_and(|f| {
                f.id == fire.fire_id && f.state == FireState::Claimed && f.owner.as_ref() == Some(node)
            })
        })
    }

    /// Why a pending fire runs, from the attempt before it: a late run a
    /// misfire policy promised follows a misfired one, a retry any other; a
    /// first attempt is a backfill's.
    /// The attempt before is read by its key (execute, job, fire time), the
    /// newest below the pending row: one row, however long the ledger.
    async fn pending_kind(&self, fire: PendingFire) -> (RunKind, u32) {
        let mut query = FireQuery::new();
        query.execute_id = Some(fire.execute_id);
        query.job_id = Some(fire.job_id);
        query.since = Some(fire.fire_time);
        query.until = Some(fire.fire_time.saturating_add_millis(1));
        query.before_id = Some(fire.fire_id);
        // Its earlier attempts: the one before says why it runs, and those
        // its handler snoozed do not count against the job's attempts.
        query.limit = fire.attempt.max(1);
        let earlier = self.ctx.store.fires(&query).await.unwrap_or_default();
        let earlier: Vec<_> = earlier
            .into_iter()
            .filter(|f| f.execute_id == fire.execute_id && f.attempt < fire.attempt)
            .collect();
        let snoozed = earlier
            .iter()
            .filter(|f| f.error.as_deref().is_some_and(|e| e.starts_with(super::steer::SNOOZED)))
            .count();
        let kind = match earlier.iter().find(|f| f.attempt + 1 == fire.attempt) {
            // A first attempt pending on a trigger's row: a backfill queued it.
            None if fire.attempt == 1 => RunKind::Backfill,
            Some(f) if f.state == FireState::Misfired => RunKind::LateRun,
            _ => RunKind::Retry,
        };
        (kind, u32::try_from(snoozed).unwrap_or(u32::MAX))
    }
}

#[cfg(test)]
mod tests {
    //! The backlog alone: a node's context on the in-memory store, the
    //! backlog's channel in, and the launcher stood in for by the inbox of
    //! its handle; no poller, dispatcher, launcher or cluster stage runs.

    use super::*;
    use crate::engine::handler::Handler;
    use crate::engine::node::test_context;
    use crate::memory::MemoryStore;
    use crate::store::{FireEnd, JobSpec, Store as _};

    #[tokio::test(start_paused = true)]
    async fn a_pending_fire_is_claimed_and_launched_once_its_job_has_room() {
        let store = MemoryStore::new().scoped("backlog");
        let mut serial = JobSpec::new("serial", "noop");
        serial.allow_concurrent = false;
        let job_id = store.create_job(&serial, &[]).await.unwrap().id;
        let ctx = test_context(store.clone(), "backlog", ("noop", Handler::blocking(|_| Ok(())))).await;
        let (launch, mut launched) = Launch::new(Arc::clone(&ctx));
        let (pending_tx, pending_rx) = mpsc::unbounded_channel();
        tokio::spawn(Arc::new(Backlog::new(Arc::clone(&ctx), launch)).run(pending_rx));

        // Two fires by hand of a job that disallows concurrency: pending
        // rows, told to the backlog (the second twice, as a poll and the
        // runner may both find it).
        let mut fires = Vec::new();
        for _ in 0..2 {
            let (fire_id, at) = store.fire_now("serial").await.unwrap();
            fires.push(PendingFire {
                fire_id,
                execute_id: MANUAL_EXECUTE,
                job_id,
                fire_time: at,
                attempt: 1,
                due_at: at,
            });
        }
        for fire in [fires[0], fires[1], fires[1]] {
            pending_tx.send(fire).unwrap();
        }
        let (_, first) = launched.recv().await.expect("the first fire launched");
        assert_eq!(first.len(), 1);
        assert_eq!((first[0].fire_id, first[0].kind), (fires[0].fire_id, RunKind::ByHand));
        let node = ctx.node();
        let row = |id: i64| {
            let store = store.clone();
            async move {
                let query = FireQuery {
                    before_id: Some(id + 1),
                    limit: 1,
                    ..FireQuery::new()
                };
                store.fires(&query).await.unwrap().remove(0)
            }
        };
        assert_eq!(row(fires[0].fire_id).await.state, FireState::Claimed);
        assert_eq!(row(fires[0].fire_id).await.owner.as_ref(), Some(&node));

        // The first is claimed and open: the second waits (a minute of the
        // paused clock passes), still pending.
        let waited = tokio::time::timeout(Duration::from_secs(60), launched.recv()).await;
        assert!(waited.is_err(), "the second fire launched beside the first: {waited:?}");
        assert_eq!(row(fires[1].fire_id).await.state, FireState::Pending);

        // The first ends: the second is claimed and launched, once.
        ctx.store.mark_running_all(&[fires[0].fire_id], &node).await.unwrap();
        ctx.store
            .end_fire(
                fires[0].fire_id,
                &node,
                FireEnd::Succeeded {
                    chain: false,
                    ran: None,
                },
            )
            .await
            .unwrap();
        let (_, second) = tokio::time::timeout(Duration::from_secs(2), launched.recv())
            .await
            .expect("the second fire launched within its blocked tick")
            .unwrap();
        assert_eq!(second[0].fire_id, fires[1].fire_id);
        assert_eq!(row(fires[1].fire_id).await.state, FireState::Claimed);
        let again = tokio::time::timeout(Duration::from_secs(60), launched.recv()).await;
        assert!(again.is_err(), "a fire told twice launched twice: {again:?}");

        // Told again once its task is done (a poll that read it pending
        // before the claim): found claimed by this incarnation, it is the
        // launched fire's, not launched again.
        for _ in 0..100 {
            if ctx.flights.pending_count() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            ctx.flights.pending_count(),
            0,
            "the backlog still waits on the second fire"
        );
        pending_tx.send(fires[1]).unwrap();
        let again = tokio::time::timeout(Duration::from_secs(60), launched.recv()).await;
        assert!(again.is_err(), "a claimed fire told again launched again: {again:?}");
    }
}
