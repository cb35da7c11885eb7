//! The runner: a started fire handed to its lane (a pool thread, or a task
//! of its own for an async handler), followed to its outcome (its timeout,
//! its cancellation), and what comes after: the outcome to the recorder,
//! the execute's release, a retry or a misfire's late run to the backlog
//! (a ledger row first), a chain's children to the launcher.

use std::sync::Arc;
use std::time::Duration;

use quartz_pool::RejectReason;
use tokio::sync::{mpsc, oneshot, watch};

use super::context::{Ctx, release_cas};
use super::fixed::HashMap;
use super::gate::Gate;
use super::handler::{CancelReason, Cancellation, Dropper, JobContext, RunKind};
use super::launch_handle::Launch;
use super::recorder::{Ended, Recorder};
use super::run::{Handled, PendingFire, Ran, RunFire, Witness};
use super::steer::Steer;
use crate::misfire::MisfirePolicy;
use crate::store::{ChainedFire, FireEnd, HandlerSpan, LateRun, Outcome};
use crate::trigger::Trigger;

/// How long a fire the pool refused, though the dispatcher kept room for
/// it, is offered again (every millisecond) before its refusal is recorded
/// as a misfire: the room is a thread that has finished its last handler
/// and not yet come back for the next task. A tenth of a second was not
/// always enough on a loaded two-core machine (one fire of a saturated
/// test node misfired this way in two of four CI runs of an afternoon).
const OFFER_PATIENCE: Duration = Duration::from_secs(1);
/// How long an async handler past its timeout has, once asked to stop,
/// before its task is dropped.
pub(super) const DROP_GRACE: Duration = Duration::from_secs(1);

/// The runner stage.
pub(super) struct Runner {
    ctx: Arc<Ctx>,
    /// Outcomes to the ledger.
    pub(super) recorder: Arc<Recorder>,
    /// Retries and late runs, to the backlog, which claims them when due.
    pending: mpsc::UnboundedSender<PendingFire>,
    /// A chain's children, claimed with their parent's success, to the
    /// launcher.
    chained: Launch,
}

impl Runner {
    pub(super) fn new(
        ctx: Arc<Ctx>,
        recorder: Arc<Recorder>,
        pending: mpsc::UnboundedSender<PendingFire>,
        chained: Launch,
    ) -> Runner {
        Runner {
            ctx,
            recorder,
            pending,
            chained,
        }
    }

    /// A pending fire to the backlog.
    fn queue_pending(&self, fire: PendingFire) {
        let _ = self.pending.send(fire);
    }

    /// Hands a started fire to its lane: the pool for a blocking handler,
    /// a task of its own for an async one. Either runs the handler unless
    /// it is taken past the misfire threshold, or, taken late, found no
    /// longer this incarnation's ([`Gate`]).
    pub(super) fn submit(self: &Arc<Self>, run: RunFire) {
        if self.ctx.holds_lease_as(&run.node) {
            self.to_lane(run, true);
        } else {
            // Not renewed within its lease, or registered again since
            // the start (declared dead meanwhile): the database confirms
            // the start first, from a task, so that no pool thread waits on
            // a database that may not answer.
            tokio::spawn(Arc::clone(self).confirm_then_submit(run));
        }
    }

    /// A fire whose node has not renewed its membership lately goes to its
    /// lane only once the database confirms it is still this incarnation's
    /// (its start time set to now).
    async fn confirm_then_submit(self: Arc<Self>, run: RunFire) {
        let gate = self.gate(&run, false);
        match gate.pass().await {
            Ok(confirmed) => {
                let mut run = run;
                if let Some(at) = confirmed {
                    run.marked_at = Some(at);
                }
                self.to_lane(run, true);
            }
            Err(ran) => {
                let (done_tx, done_rx) = oneshot::channel::<Ran>();
                let (cancel_tx, _) = Cancellation::new();
                let _ = done_tx.send(ran);
                self.supervise(run, done_rx, cancel_tx, Dropper::default()).await;
            }
        }
    }

    /// What a fire passes on its way to its handler; `member` when the
    /// node's membership is fresh or the database has just confirmed the
    /// start.
    fn gate(&self, run: &RunFire, member: bool) -> Gate {
        Gate {
            ctx: Arc::clone(&self.ctx),
            recorder: Arc::clone(&self.recorder),
            fire_time: run.fire_time,
            threshold_ms: run.misfire_limit(self.ctx.settings.misfire.threshold_ms()),
            submitted_ms: self.ctx.clock.mono_ms(),
            member,
            fire_id: run.fire_id,
            owner: run.node.clone(),
        }
    }

    /// Hands a fire to its lane; `member` as [`Self::gate`] takes it.
    fn to_lane(self: &Arc<Self>, mut run: RunFire, member: bool) {
        let Some(handler) = self.ctx.handlers.get(&run.job.spec.handler).cloned() else {
            return;
        };
        let (cancel_tx, cancellation) = Cancellation::new();
        let (done_tx, done_rx) = oneshot::channel::<Ran>();
        let ctx = JobContext {
            states: Arc::clone(&self.ctx.states),
            kind: run.kind,
            job_id: run.job.id,
            job_name: Arc::from(run.job.spec.name.as_str()),
            execute_id: run.execute_id,
            fire_time: run.fire_time,
            fire_id: run.fire_id,
            attempt: run.attempt,
            payload: run
                .payload
                .clone()
                .unwrap_or_else(|| Arc::from(run.job.spec.payload.as_str())),
            node_id: Arc::from(run.node.node_id.as_str()),
            scheduler: Arc::from(self.ctx.scheduler.as_str()),
            incarnation: run.node.incarnation,
            cancellation,
        };
        let span = run.span(&self.ctx.scheduler, self.ctx.span_linker.as_ref());
        let gate = self.gate(&run, member);
        let mut witness = Witness::of(&self.ctx, &run).in_span(&span);
        // The fire's place in its room is given back when its handler returns.
        let hold = run.hold.take();
        if handler.is_async() {
            let dropper = Dropper::default();
            let drops = dropper.clone();
            tokio::spawn(async move {
                let _hold = hold;
                let ran = match gate.pass().await {
                    Ok(confirmed) => {
                        witness.confirmed(confirmed);
                        Ran::Done(witness.run_async(handler.call_async(ctx, span, &drops), &drops).await)
                    }
                    Err(ran) => ran,
                };
                let _ = done_tx.send(ran);
            });
            tokio::spawn(Arc::clone(self).supervise(run, done_rx, cancel_tx, dropper));
            return;
        }
        let runtime = self.ctx.runtime.clone();
        let clock_hold = self.ctx.clock.hold();
        let task = move || {
            let _hold = (hold, clock_hold);
            let _in_fire = span.enter();
            let ran = match gate.pass_blocking() {
                Ok(confirmed) => {
                    witness.confirmed(confirmed);
                    Ran::Done(witness.run(|| handler.call(ctx, &runtime, &span)))
                }
                Err(ran) => ran,
            };
            let _ = done_tx.send(ran);
        };
        match self.ctx.pool.try_submit(task) {
            Ok(()) => {
                tokio::spawn(Arc::clone(self).supervise(run, done_rx, cancel_tx, Dropper::default()));
            }
            Err(rejected) => {
                tokio::spawn(Arc::clone(self).offer_again(run, rejected, done_rx, cancel_tx));
            }
        }
    }

    /// A started fire the pool refused. The room the dispatcher keeps says a
    /// thread is about to be free (a handler returned and gave its place
    /// back before its thread took the next task): offered again every
    /// millisecond for a short while; refused still, it is a misfire.
    async fn offer_again(
        self: Arc<Self>,
        run: RunFire,
        mut rejected: quartz_pool::Rejected,
        done_rx: oneshot::Receiver<Ran>,
        cancel_tx: watch::Sender<Option<CancelReason>>,
    ) {
        let patience = tokio::time::Instant::now() + OFFER_PATIENCE;
        while rejected.reason != RejectReason::ShutDown && tokio::time::Instant::now() < patience {
            tokio::time::sleep(Duration::from_millis(1)).await;
            match self.ctx.pool.try_resubmit(rejected.into_task()) {
                Ok(()) => return self.supervise(run, done_rx, cancel_tx, Dropper::default()).await,
                Err(again) => rejected = again,
            }
        }
        let reason = rejected.reason;
        drop(rejected);
        self.on_rejected(run, reason).await;
    }

    /// Follows a fire the pool accepted: its start, timeout and outcome, then
    /// what comes after (release, retry).
    pub(super) async fn supervise(
        self: Arc<Self>,
        run: RunFire,
        done_rx: oneshot::Receiver<Ran>,
        cancel_tx: watch::Sender<Option<CancelReason>>,
        dropper: Dropper,
    ) {
        self.follow(&run, done_rx, cancel_tx, dropper).await;
        self.ctx.flights.ended(1);
    }

    pub(super) async fn follow(
        self: &Arc<Self>,
        run: &RunFire,
        done_rx: oneshot::Receiver<Ran>,
        cancel_tx: watch::Sender<Option<CancelReason>>,
        dropper: Dropper,
    ) {
        self.ctx.flights.running(run.fire_id, cancel_tx.clone());
        let timeout = run.job.spec.timeout;
        let mut done_rx = done_rx;
        let result = match timeout {
            Some(limit) => {
                tokio::select! {
                    biased;
                    r = &mut done_rx => r.ok(),
                    () = tokio::time::sleep(limit) => self.time_out(run, limit, &cancel_tx, done_rx, &dropper).await,
                }
            }
            None => done_rx.await.ok(),
        };
        let result = match result {
            Some(Ran::Late(late_ms)) => {
                self.ctx.flights.not_running(run.fire_id);
                let cause = format!("a thread took it {late_ms} ms after its time");
                self.misfired(run.clone(), &cause, false).await;
                return;
            }
            Some(Ran::Unconfirmed) => {
                self.ctx.flights.not_running(run.fire_id);
                self.misfired(
                    run.clone(),
                    "its start could not be confirmed after waiting for a thread",
                    false,
                )
                .await;
                return;
            }
            Some(Ran::NotOwned) => {
                self.ctx.flights.not_running(run.fire_id);
                self.ctx.count(|c| c.fenced += 1);
                return;
            }
            Some(Ran::Done(handled)) => Some(handled),
            None => None,
        };
        // When the handler ran, on this node's estimate of database time:
        // the start and finish the ledger records with the outcome.
        let ran = result.as_ref().map(|h| HandlerSpan {
            started_at: h.started,
            finished_at: h.finished,
        });
        if let Some(ran) = ran {
            super::metrics::handler_started(
                &self.ctx.scheduler,
                ran.started_at.as_millis() - run.fire_time.as_millis(),
            );
        }
        let result = result.map(|h| h.result);
        // What the handler's error asked, if it steers its fire.
        let steer = match &result {
            Some(Err(e)) => Steer::of(&**e),
            _ => None,
        };
        self.ctx.flights.not_running(run.fire_id);
        // Replaced by a newer fire of its job (the cancel overlap policy):
        // a failure says so, and is not retried.
        let cancelled = *cancel_tx.borrow();
        let replaced = cancelled == Some(CancelReason::Overlapped);
        let outcome = super::run::outcome_of(result, cancelled);
        self.ctx.outcome_seen(run, &outcome);
        let retry = match &outcome {
            Outcome::Failed { .. } if !replaced => super::steer::retry_wait(steer, run),
            _ => None,
        };
        let children = match (&outcome, retry) {
            (Outcome::Failed { error }, Some(backoff)) => {
                self.fail_with_retry(run, error, ran, backoff).await;
                Vec::new()
            }
            _ => self.recorder.record(run, &outcome, ran).await,
        };
        self.release(run).await;
        if !children.is_empty() {
            self.chain(run, children).await;
        }
    }

    /// A fire past its job's timeout: asked to stop and recorded timed out.
    /// An async handler that has not returned [`DROP_GRACE`] later is
    /// dropped (its task is not polled again), and the fire ends failed. A
    /// thread cannot be killed, so a blocking handler is followed until its
    /// code really returns: until then the fire stays running in the ledger
    /// (a job that disallows concurrency stays blocked) and its pool thread
    /// stays busy, which the node reports once the grace is over; then it
    /// is failed, whatever the code returned.
    pub(super) async fn time_out(
        &self,
        run: &RunFire,
        limit: Duration,
        cancel_tx: &watch::Sender<Option<CancelReason>>,
        mut done_rx: oneshot::Receiver<Ran>,
        dropper: &Dropper,
    ) -> Option<Ran> {
        let _ = cancel_tx.send(Some(CancelReason::TimedOut));
        let limit_ms = limit.as_millis();
        let asked = tokio::time::Instant::now();
        self.ctx.count(|c| c.timed_out += 1);
        let note = format!("timed out after {limit_ms} ms; asked to stop, still running");
        if let Err(e) = self.ctx.store.fire_time_out(run.fire_id, &run.node, &note).await {
            tracing::warn!(scheduler = self.ctx.scheduler, fire_id = run.fire_id, error = %e, "could not record the timeout");
        }
        tracing::warn!(
            scheduler = self.ctx.scheduler,
            job = run.job.spec.name,
            fire_id = run.fire_id,
            limit_ms,
            "fire timed out"
        );
        let ran = match tokio::time::timeout(DROP_GRACE, &mut done_rx).await {
            Ok(ran) => ran.ok()?,
            Err(_) => {
                let grace_ms = DROP_GRACE.as_millis();
                let what = if dropper.drop_task() {
                    self.ctx.count(|c| c.dropped += 1);
                    "an async handler past its timeout did not return when asked to stop: dropped"
                } else {
                    self.ctx.count(|c| c.held_past_timeout += 1);
                    "a blocking handler past its timeout did not return when asked to stop: it still holds its pool thread"
                };
                tracing::warn!(
                    scheduler = self.ctx.scheduler,
                    job = run.job.spec.name,
                    fire_id = run.fire_id,
                    limit_ms,
                    grace_ms,
                    "{what}"
                );
                done_rx.await.ok()?
            }
        };
        match ran {
            ran @ (Ran::Late(_) | Ran::NotOwned | Ran::Unconfirmed) => Some(ran),
            Ran::Done(handled) if dropper.dropped() => Some(Ran::Done(Handled {
                result: Err(format!(
                    "timed out after {limit_ms} ms; asked to stop, it had not returned {} ms later: dropped",
                    DROP_GRACE.as_millis()
                )
                .into()),
                ..handled
            })),
            Ran::Done(handled) => {
                let after = asked.elapsed().as_millis();
                let how = match handled.result {
                    Ok(()) => "returned success".to_owned(),
                    Err(e) => format!("returned: {e}"),
                };
                Some(Ran::Done(Handled {
                    result: Err(format!(
                        "timed out after {limit_ms} ms; asked to stop, the code {how} {after} ms later"
                    )
                    .into()),
                    ..handled
                }))
            }
        }
    }

    /// After a run of an execute the claim had moved to running: back to
    /// waiting, with a fixed-delay trigger's next fire computed from the finish.
    pub(super) async fn release(self: &Arc<Self>, run: &RunFire) {
        let (Some(expect), Some(trigger)) = (&run.release, &run.trigger) else {
            return;
        };
        // Only a fixed-delay successor needs the clock: it counts from the finish.
        let now = if expect.awaiting_finish {
            match self.ctx.db_now().await {
                Ok(now) => now,
                Err(e) => {
                    tracing::warn!(scheduler = self.ctx.scheduler, error = %e, "cannot read the clock; the execute is released by recovery");
                    return;
                }
            }
        } else {
            self.ctx.clock.db_now()
        };
        let cas = release_cas(run.execute_id, trigger, expect, Some(run.node.clone()), now);
        match self.ctx.store.update_execute(&cas, &[]).await {
            // The successor is due soon, perhaps before the next poll.
            Ok(true) => self.ctx.poll_now.notify_one(),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(scheduler = self.ctx.scheduler, execute_id = run.execute_id, error = %e,
                    "releasing the execute failed; recovery releases it if this node dies");
            }
        }
    }

    /// Runs the children a parent's success claimed for this node, at once. A
    /// child whose handler this node lacks is given back, for a node that has
    /// it (recovery takes released fires). A child that waits for room (it
    /// disallows concurrency or shares a limit) is a pending fire: the
    /// backlog claims it exclusively, as any node's poll of pending fires
    /// may.
    pub(super) async fn chain(self: &Arc<Self>, parent: &RunFire, children: Vec<ChainedFire>) {
        let (waiting, children): (Vec<ChainedFire>, Vec<ChainedFire>) =
            children.into_iter().partition(|c| c.waits_from.is_some());
        for child in waiting {
            self.ctx.count(|c| c.chained += 1);
            self.queue_pending(PendingFire {
                fire_id: child.fire_id,
                execute_id: parent.execute_id,
                job_id: child.job_id,
                fire_time: parent.fire_time,
                attempt: 1,
                due_at: child.waits_from.unwrap_or(parent.fire_time),
            });
        }
        if children.is_empty() {
            return;
        }
        let jobs = match self.ctx.jobs(children.iter().map(|c| c.job_id)).await {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::warn!(scheduler = self.ctx.scheduler, fire_id = parent.fire_id, error = %e,
                    "cannot read the child jobs; their claimed fires are released by recovery if this node dies");
                HashMap::default()
            }
        };
        for child in children {
            let job = jobs
                .get(&child.job_id)
                .filter(|job| self.ctx.handlers.contains_key(&job.spec.handler));
            let Some(job) = job else {
                let _ = self.ctx.give_back_fire(child.fire_id, &parent.node).await;
                continue;
            };
            tracing::debug!(
                scheduler = self.ctx.scheduler,
                parent = parent.job.spec.name,
                child = job.spec.name,
                fire_id = child.fire_id,
                "chained fire"
            );
            self.ctx.count(|c| c.chained += 1);
            self.chained.launch(RunFire {
                fire_id: child.fire_id,
                execute_id: parent.execute_id,
                job: Arc::clone(job),
                trigger: None,
                fire_time: parent.fire_time,
                attempt: 1,
                kind: RunKind::Scheduled,
                node: parent.node.clone(),
                release: None,
                hold: Some(self.ctx.hold(job)),
                marked_at: None,
                payload: None,
                trace_parent: None,
                snoozed: 0,
            });
        }
    }

    /// The pool refused a started fire: recorded as misfired, then the trigger's
    /// policy decides whether it runs late.
    pub(super) async fn on_rejected(self: Arc<Self>, run: RunFire, reason: RejectReason) {
        // Started already: the pool's refusal is recorded as a misfire (the
        // room the dispatcher keeps makes it the rare exception).
        self.ctx.count(|c| c.rejected += 1);
        self.misfired(run, &format!("the pool refused the fire ({reason})"), false)
            .await;
        self.ctx.flights.ended(1);
    }

    /// A won fire that will not start on time: recorded as misfired with its
    /// cause, then its trigger's policy decides whether it runs late. When
    /// `row_decides` (the fire was found past the threshold after an outage),
    /// the execute row's own misfire decision stands for the fire-now policies,
    /// so only the ignore policy runs the fire late.
    pub(super) async fn misfired(self: &Arc<Self>, run: RunFire, cause: &str, row_decides: bool) {
        let policy = run
            .trigger
            .as_deref()
            .map_or(MisfirePolicy::FireNow, Trigger::resolved_misfire_policy);
        let runs_late = match policy {
            MisfirePolicy::IgnoreMisfires => true,
            MisfirePolicy::FireNow
            | MisfirePolicy::RescheduleNowWithExistingCount
            | MisfirePolicy::RescheduleNowWithRemainingCount => !row_decides,
            _ => false,
        };
        let text = format!(
            "misfired: {cause}; policy {policy}: {}",
            if runs_late {
                "runs it as soon as the pool has room"
            } else {
                "skips it"
            }
        );
        // The late run is a pending row written with the misfire record. Fire
        // once now: one pending late run per execute stands for them all.
        // Retried on database errors: a fire marked running stays so until
        // this is recorded, and nothing else would ever end it.
        let run_late = runs_late.then_some(if policy == MisfirePolicy::IgnoreMisfires {
            LateRun::Each
        } else {
            LateRun::OnePerExecute
        });
        let end = FireEnd::Misfired { reason: text, run_late };
        let follow_up = match self.recorder.end(&run, end, "the misfire").await {
            Ended::Recorded(follow_up) => follow_up,
            // After an error, the record may have committed with its answer
            // lost: the release is a compare-and-set, harmless if it was done.
            Ended::NotOwned { after_error: true } => {
                self.release(&run).await;
                return;
            }
            Ended::NotOwned { .. } | Ended::GaveUp => return,
        };
        tracing::debug!(scheduler = self.ctx.scheduler, job = run.job.spec.name, fire_id = run.fire_id, %policy, cause, "fire misfired");
        self.ctx.misfired(&run.job.spec.name, policy.as_str(), 1);
        self.release(&run).await;
        if let Some(late) = PendingFire::after(&run, follow_up) {
            self.queue_pending(late);
        }
    }
    /// Records a failed attempt and, in the same transaction, its retry as a
    /// pending fire after `backoff` (the job's, or what the handler asked);
    /// then waits for it here.
    pub(super) async fn fail_with_retry(
        self: &Arc<Self>,
        run: &RunFire,
        error: &str,
        ran: Option<HandlerSpan>,
        backoff: Duration,
    ) {
        let end = FireEnd::Failed {
            error: error.to_owned(),
            retry_in: Some(backoff),
            ran,
        };
        match self.recorder.end(run, end, "the failure").await {
            Ended::Recorded(follow_up) => {
                if let Some(next) = PendingFire::after(run, follow_up) {
                    self.queue_pending(next);
                }
            }
            Ended::NotOwned { .. } => tracing::warn!(
                scheduler = self.ctx.scheduler,
                fire_id = run.fire_id,
                "outcome not recorded: this incarnation no longer owns the fire (declared dead meanwhile)"
            ),
            Ended::GaveUp => {}
        }
    }
}
