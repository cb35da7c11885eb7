//! Launch: from a won fire to its handler, on a pool thread or as a task.
//!
//! The fires won for one fire time wait together. A start lead before their
//! time (twice the recent duration of the start statement, plus a margin)
//! one fenced statement marks them all running, each with `started_at` =
//! the later of the database's now and its fire time; at the fire time (on
//! the node's estimate of the database clock, which never runs ahead) they
//! go to their lane: the pool, or a task each. The handler starts only after its fire is marked running,
//! so after any crash the ledger can tell that it may have started; a node
//! that dies between the start and the fire time leaves fires the ledger
//! says may have started, which recovery treats as such (re-run when the job
//! requests recovery, abandoned otherwise).
//!
//! A lane is never asked for more than it can take: the dispatcher claims
//! no more fires than its room (see `lanes.rs`), counting every fire this
//! node holds until its handler returns.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::sync::{Notify, oneshot};

use super::handler::{Cancellation, JobContext, Lane, RunKind};
use super::lanes::{Gate, Hold, Room, START_RECHECK};
use super::node::Inner;
use super::pace::{Pace, smooth};
use super::supervise::Ran;
use crate::store::{FireEnd, Job, JobState, NodeRef, StoreError};
use crate::time::Timestamp;
use crate::trigger::{Trigger, TriggerState};

/// The start lead's bounds, and its margin over twice the statement's time.
const START_LEAD_MIN: Duration = Duration::from_millis(5);
const START_LEAD_MAX: Duration = Duration::from_millis(1_000);
const START_LEAD_MARGIN: Duration = Duration::from_millis(3);
/// How many times the start statement is tried, and the first pause between
/// tries (doubled each time).
const START_TRIES: u32 = 5;
const START_RETRY: Duration = Duration::from_millis(25);

/// A won fire, on its way to a handler.
#[derive(Debug, Clone)]
pub(super) struct RunFire {
    pub(super) fire_id: i64,
    pub(super) execute_id: i64,
    pub(super) job: Arc<Job>,
    pub(super) trigger: Option<Arc<Trigger>>,
    pub(super) fire_time: Timestamp,
    pub(super) attempt: u32,
    /// Why it runs.
    pub(super) kind: RunKind,
    pub(super) node: NodeRef,
    /// The claim moved the execute to running (a fixed-delay trigger awaiting
    /// the finish, or a job that disallows concurrency): the state it wrote,
    /// which the release after the run expects.
    pub(super) release: Option<TriggerState>,
    /// Its place in the pool's room, given back when its handler returns or
    /// when it ends without running.
    pub(super) hold: Option<Hold>,
}

/// The fires of one fire time waiting for their start.
#[derive(Debug, Default)]
struct Starting {
    runs: Vec<RunFire>,
    /// Woken when more join, so that the start lead is measured again.
    grew: Arc<Notify>,
}

/// What the launch stage keeps.
#[derive(Debug, Default)]
pub(super) struct LaunchState {
    /// Won fires not yet started (claimed in the ledger): given back at
    /// shutdown, and never taken for lost by the sweep.
    pub(super) unstarted: Mutex<HashSet<i64>>,
    /// The fires this node holds for the pool.
    pub(super) room: Arc<Room>,
    /// The fires this node holds for async handlers' tasks.
    pub(super) task_room: Arc<Room>,
    /// The start statement's recent duration, smoothed, in microseconds.
    start_micros: AtomicU64,
    /// The start statement's cost per fire.
    start_pace: Pace,
    /// Won fires waiting for their start, by fire time: one starter task
    /// per fire time starts them all, a start lead ahead that grows with
    /// how many there are.
    starting: Mutex<BTreeMap<Timestamp, Starting>>,
    /// The jobs the last poll read, `None` for one deleted: a fire claimed
    /// before its job was edited runs with the edited version, and one
    /// claimed before its job was paused or deleted does not run.
    pub(super) latest_jobs: RwLock<HashMap<i64, Option<Arc<Job>>>>,
    /// Jobs with fires claimed and not launched yet, and how many: each poll
    /// reads them too, whether or not their triggers are due.
    pub(super) awaiting_launch: Mutex<HashMap<i64, usize>>,
}

impl LaunchState {
    /// Fires held (see [`Room`]), in both lanes.
    pub(super) fn held(&self) -> usize {
        self.room.held() + self.task_room.held()
    }

    /// How far ahead of the fire time the start of `fires` fires due
    /// together is issued: twice a start statement's recent time plus a
    /// margin, and the time their number takes at the start's pace.
    pub(super) fn start_lead(&self, fires: usize) -> Duration {
        let statement = start_lead(self.start_micros.load(Ordering::Relaxed));
        (statement + self.start_pace.of(fires)).min(START_LEAD_MAX)
    }

    /// Folds one start statement's duration into the average.
    fn observe_start(&self, took: Duration) {
        let took = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let _ = self
            .start_micros
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| Some(smooth(old, took)));
    }
}

/// The misfire threshold that applies to a fire, if one does: a fire won by
/// a poll, on its first attempt, is misfired when it starts past it (late
/// runs, retries, recoveries and children are late by design).
fn misfire_limit(run: &RunFire, threshold_ms: i64) -> Option<i64> {
    (run.attempt == 1 && run.trigger.is_some()).then_some(threshold_ms)
}

/// How late a fire started, when that is past the threshold that applies.
fn late_past_limit(run: &RunFire, threshold_ms: i64, started_at: Timestamp) -> Option<i64> {
    let late_ms = started_at.as_millis() - run.fire_time.as_millis();
    misfire_limit(run, threshold_ms)
        .is_some_and(|limit| late_ms > limit)
        .then_some(late_ms)
}

/// Twice the smoothed duration plus a margin, within bounds.
fn start_lead(smoothed_micros: u64) -> Duration {
    let lead = Duration::from_micros(smoothed_micros.saturating_mul(2)) + START_LEAD_MARGIN;
    lead.clamp(START_LEAD_MIN, START_LEAD_MAX)
}

impl Inner {
    /// The lane a job's fires run in: a task for an async handler, the pool
    /// otherwise.
    pub(super) fn lane_of(&self, job: &Job) -> Lane {
        match self.handlers.get(&job.spec.handler) {
            Some(handler) if handler.is_async() => Lane::Task,
            _ => Lane::Pool,
        }
    }

    /// The room a lane has. The pool's: its threads and queue, less what
    /// this node holds; none while every thread is busy (a queued fire would
    /// wait for a thread that long handlers may hold past its time). The
    /// tasks': `async_max` less the fires held for them.
    pub(super) fn room_in(&self, lane: Lane) -> usize {
        match lane {
            Lane::Pool if self.pool.metrics().busy >= self.settings.pool_max => 0,
            Lane::Pool => self.launch.room.left(self.settings.pool_max + self.settings.pool_queue),
            Lane::Task => self.launch.task_room.left(self.settings.async_max),
        }
    }

    /// The room of each lane, by [`Lane`] as index.
    pub(super) fn rooms(&self) -> [usize; 2] {
        [self.room_in(Lane::Pool), self.room_in(Lane::Task)]
    }

    /// The room for a fire of the job with this id: its lane's when the last
    /// poll read the job, else the room of either.
    pub(super) fn room_for_job(&self, job_id: i64) -> usize {
        let lane = match self.launch.latest_jobs.read().get(&job_id) {
            Some(Some(job)) => Some(self.lane_of(job)),
            _ => None,
        };
        lane.map_or_else(|| self.rooms().into_iter().sum(), |lane| self.room_in(lane))
    }

    /// A place in the room of a job's lane, for a fire of it.
    pub(super) fn hold(&self, job: &Job) -> Hold {
        match self.lane_of(job) {
            Lane::Pool => self.launch.room.hold(),
            Lane::Task => self.launch.task_room.hold(),
        }
    }

    /// Launches fires won for `fire_time`: started a start lead ahead, handed
    /// to the pool at their time (at once if it has passed).
    pub(super) fn launch_at(self: &Arc<Self>, fire_time: Timestamp, runs: Vec<RunFire>) {
        let mut starting = self.launch.starting.lock();
        match starting.get_mut(&fire_time) {
            Some(waiting) => {
                waiting.runs.extend(runs);
                waiting.grew.notify_one();
            }
            None => {
                starting.insert(
                    fire_time,
                    Starting {
                        runs,
                        grew: Arc::new(Notify::new()),
                    },
                );
                let inner = Arc::clone(self);
                tokio::spawn(async move { inner.start_then_submit(fire_time).await });
            }
        }
    }

    /// Launches one won fire at its time (at once if it has passed).
    pub(super) fn launch(self: &Arc<Self>, run: RunFire) {
        self.launch_at(run.fire_time, vec![run]);
    }

    /// The starter of one fire time: waits for the start lead of every fire
    /// due then (measured again whenever more join), starts them, and hands
    /// them over at their time. Fires won after it took them have a starter
    /// of their own, which starts them at once.
    async fn start_then_submit(self: Arc<Self>, fire_time: Timestamp) {
        loop {
            let Some((fires, grew)) = self
                .launch
                .starting
                .lock()
                .get(&fire_time)
                .map(|w| (w.runs.len(), Arc::clone(&w.grew)))
            else {
                return;
            };
            let lead = i64::try_from(self.launch.start_lead(fires).as_millis()).unwrap_or(0);
            let start_at = fire_time.saturating_add_millis(-lead);
            if start_at <= self.clock.db_now() {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep_until(self.clock.instant_of(start_at)) => break,
                () = grew.notified() => {}
            }
        }
        let runs = self
            .launch
            .starting
            .lock()
            .remove(&fire_time)
            .map(|w| w.runs)
            .unwrap_or_default();
        if self.stopping() {
            return; // the shutdown gives them back
        }
        let runs = self.ready(runs);
        if runs.is_empty() {
            return;
        }
        let started = self.start_fenced(runs).await;
        if fire_time > self.clock.db_now() {
            tokio::time::sleep_until(self.clock.instant_of(fire_time)).await;
        }
        for run in started {
            self.submit(run);
        }
    }

    /// The fires still to run: a fire whose job was paused or deleted since
    /// its claim is recorded skipped, and one whose job was edited runs the
    /// new version.
    fn ready(self: &Arc<Self>, runs: Vec<RunFire>) -> Vec<RunFire> {
        let mut ready = Vec::with_capacity(runs.len());
        for mut run in runs {
            if let Some(reason) = self.refresh_job(&mut run) {
                tokio::spawn(Arc::clone(self).skip_unstarted(run, reason));
            } else if self.handlers.contains_key(&run.job.spec.handler) {
                ready.push(run);
            }
        }
        ready
    }

    /// The fenced start of fires due together, one statement (refused for a
    /// fire this incarnation no longer owns, or when it is no longer live);
    /// returns the started ones. A fire that did not start is given back; one
    /// whose recorded start is past the misfire threshold goes to its policy.
    async fn start_fenced(self: &Arc<Self>, runs: Vec<RunFire>) -> Vec<RunFire> {
        // Fenced by the incarnation that claimed them, never by a later one
        // of this node: a fire claimed before the node was declared dead and
        // rejoined may have been taken over since, by that later incarnation
        // too, whose own launch of it is the one that must run.
        let mut by_owner: HashMap<NodeRef, Vec<RunFire>> = HashMap::new();
        for run in runs {
            by_owner.entry(run.node.clone()).or_default().push(run);
        }
        let mut ready = Vec::new();
        for (owner, mut runs) in by_owner {
            // A statement each of at most a claim batch's size.
            while !runs.is_empty() {
                let rest = runs.split_off(runs.len().min(self.settings.claim_batch));
                ready.extend(self.start_owned(&owner, runs).await);
                runs = rest;
            }
        }
        ready
    }

    /// [`Self::start_fenced`] for the fires of one incarnation.
    async fn start_owned(self: &Arc<Self>, node: &NodeRef, runs: Vec<RunFire>) -> Vec<RunFire> {
        let ids: Vec<i64> = runs.iter().map(|r| r.fire_id).collect();
        // Counted before the statement: a shutdown from here on waits. The
        // fires stay known as unstarted until the answer, so that the sweep
        // for claims this node lost track of leaves them alone meanwhile.
        self.inflight.fetch_add(runs.len(), Ordering::SeqCst);
        let (started, error) = self.mark_running(&ids, node).await;
        if let Some(e) = error {
            tracing::warn!(scheduler = self.scheduler, fires = ids.len() - started.len(), error = %e,
                "could not mark fires running; giving them back");
            for run in runs.iter().filter(|r| !started.contains_key(&r.fire_id)) {
                let _ = self.give_back_fire(run.fire_id, &run.node).await;
            }
        }
        {
            let mut unstarted = self.launch.unstarted.lock();
            for id in &ids {
                unstarted.remove(id);
            }
        }
        let mut ready = Vec::with_capacity(started.len());
        let mut refused = 0;
        for run in runs {
            let Some(&started_at) = started.get(&run.fire_id) else {
                refused += 1;
                continue;
            };
            match late_past_limit(&run, self.settings.misfire.threshold_ms(), started_at) {
                Some(late_ms) => {
                    let inner = Arc::clone(self);
                    tokio::spawn(async move {
                        let cause = format!("started {late_ms} ms after its time");
                        inner.misfired(run, &cause, false).await;
                        inner.inflight.fetch_sub(1, Ordering::SeqCst);
                    });
                }
                None => ready.push(run),
            }
        }
        super::metrics::started(
            &self.scheduler,
            ready.iter().filter_map(|r| {
                started
                    .get(&r.fire_id)
                    .map(|at| at.as_millis() - r.fire_time.as_millis())
            }),
        );
        self.inflight.fetch_sub(refused, Ordering::SeqCst);
        if refused > 0 {
            self.count(|c| c.fenced += refused as u64);
            tracing::warn!(
                scheduler = self.scheduler,
                fires = refused,
                "fires not started: this incarnation no longer owns them"
            );
        }
        ready
    }

    /// The start statement, tried again on database errors. An error may
    /// come after the statement committed (the answer lost on its way): after
    /// one, a fire the next try does not start is confirmed one by one, and
    /// one found running under this incarnation counts as started now.
    /// Returns the started fires, and the last error if some fires' fate is
    /// still unknown after every try.
    async fn mark_running(&self, ids: &[i64], node: &NodeRef) -> (HashMap<i64, Timestamp>, Option<StoreError>) {
        let mut started = HashMap::new();
        let mut unknown = ids.to_vec();
        let mut answer_lost = false;
        let mut last_error = None;
        for tries in 1..=START_TRIES {
            let asked = std::time::Instant::now();
            let answer = self.store.mark_running_all(&unknown, node).await;
            self.launch.observe_start(asked.elapsed());
            self.launch.start_pace.observe(asked.elapsed(), unknown.len());
            match answer {
                Ok(now_started) => {
                    started.extend(now_started);
                    unknown.retain(|id| !started.contains_key(id));
                    if !answer_lost {
                        return (started, None);
                    }
                    match self.store.confirm_starts(&unknown, node).await {
                        Ok(confirmed) => {
                            started.extend(confirmed);
                            return (started, None);
                        }
                        Err(e) => last_error = Some(e),
                    }
                }
                Err(e) => {
                    tracing::warn!(scheduler = self.scheduler, fires = unknown.len(), error = %e,
                        "marking fires running failed; retrying");
                    answer_lost = true;
                    last_error = Some(e);
                }
            }
            if self.stopping() {
                break;
            }
            tokio::time::sleep(START_RETRY * (1 << tries)).await;
        }
        (started, last_error)
    }

    /// Hands a started fire to its lane: the pool for a blocking handler,
    /// a task of its own for an async one. Either runs the handler unless
    /// it is taken past the misfire threshold, or, taken late, found no
    /// longer this incarnation's ([`Gate`]).
    fn submit(self: &Arc<Self>, mut run: RunFire) {
        let Some(handler) = self.handlers.get(&run.job.spec.handler).cloned() else {
            return;
        };
        let (cancel_tx, cancellation) = Cancellation::new();
        let (done_tx, done_rx) = oneshot::channel::<Ran>();
        let ctx = JobContext {
            states: Arc::clone(&self.states),
            kind: run.kind,
            job_id: run.job.id,
            job_name: Arc::from(run.job.spec.name.as_str()),
            execute_id: run.execute_id,
            fire_time: run.fire_time,
            fire_id: run.fire_id,
            attempt: run.attempt,
            payload: Arc::from(run.job.spec.payload.as_str()),
            node_id: Arc::from(run.node.node_id.as_str()),
            cancellation,
        };
        let span = fire_span(&self.scheduler, &run);
        let gate = Gate {
            inner: Arc::clone(self),
            fire_time: run.fire_time,
            threshold_ms: misfire_limit(&run, self.settings.misfire.threshold_ms()),
            submitted: std::time::Instant::now(),
            fire_id: run.fire_id,
            owner: run.node.clone(),
        };
        // The fire's place in its room is given back when its handler returns.
        let hold = run.hold.take();
        if handler.is_async() {
            tokio::spawn(async move {
                let _hold = hold;
                let ran = match gate.pass().await {
                    Ok(()) => Ran::Done(handler.call_async(ctx, span).await),
                    Err(ran) => ran,
                };
                let _ = done_tx.send(ran);
            });
            tokio::spawn(Arc::clone(self).supervise(run, done_rx, cancel_tx));
            return;
        }
        let runtime = self.runtime.clone();
        let clock_hold = self.clock.hold();
        let task = move || {
            let _hold = (hold, clock_hold);
            let _in_fire = span.enter();
            let ran = match gate.pass_blocking() {
                Ok(()) => Ran::Done(handler.call(ctx, &runtime, &span)),
                Err(ran) => ran,
            };
            let _ = done_tx.send(ran);
        };
        match self.pool.try_submit(task) {
            Ok(()) => {
                tokio::spawn(Arc::clone(self).supervise(run, done_rx, cancel_tx));
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
        cancel_tx: tokio::sync::watch::Sender<Option<super::handler::CancelReason>>,
    ) {
        let patience = std::time::Instant::now() + START_RECHECK;
        while rejected.reason != quartz_pool::RejectReason::ShutDown && std::time::Instant::now() < patience {
            tokio::time::sleep(Duration::from_millis(1)).await;
            match self.pool.try_resubmit(rejected.into_task()) {
                Ok(()) => return self.supervise(run, done_rx, cancel_tx).await,
                Err(again) => rejected = again,
            }
        }
        let reason = rejected.reason;
        drop(rejected);
        self.on_rejected(run, reason).await;
    }

    /// A fire claimed before an edit of its job that a poll has seen since
    /// runs with the edited job (when this node has its handler); one claimed
    /// before its job was paused or deleted does not run: why is returned.
    fn refresh_job(&self, run: &mut RunFire) -> Option<&'static str> {
        {
            let mut awaiting = self.launch.awaiting_launch.lock();
            if let Some(n) = awaiting.get_mut(&run.job.id) {
                *n -= 1;
                if *n == 0 {
                    awaiting.remove(&run.job.id);
                }
            }
        }
        let latest = self.launch.latest_jobs.read();
        match latest.get(&run.job.id) {
            Some(None) => Some("the job was deleted after the fire was claimed"),
            Some(Some(job)) if job.updated_at >= run.job.updated_at => {
                if job.state == JobState::Paused {
                    return Some("the job was paused after the fire was claimed");
                }
                if job.spec != run.job.spec && self.handlers.contains_key(&job.spec.handler) {
                    run.job = Arc::clone(job);
                }
                None
            }
            _ => None,
        }
    }

    /// A claimed fire whose job was paused or deleted since: recorded skipped
    /// with the reason, and its execute released.
    async fn skip_unstarted(self: Arc<Self>, run: RunFire, reason: &'static str) {
        self.launch.unstarted.lock().remove(&run.fire_id);
        match self
            .store
            .end_fire(run.fire_id, &run.node, FireEnd::skipped(reason))
            .await
            .map(|f| f.ended())
        {
            Ok(true) => {
                tracing::info!(
                    scheduler = self.scheduler,
                    job = run.job.spec.name,
                    fire_id = run.fire_id,
                    reason,
                    "fire skipped"
                );
            }
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(scheduler = self.scheduler, fire_id = run.fire_id, error = %e,
                    "could not record a skipped fire; giving it back");
                let _ = self.give_back_fire(run.fire_id, &run.node).await;
                return;
            }
        }
        self.release(&run).await;
    }
}

/// The span of one fire, entered on the pool thread around its handler: a
/// handler's own log lines carry the job, the trigger (`execute`), the fire
/// time, the attempt, the fire's ledger id and the node.
fn fire_span(scheduler: &str, run: &RunFire) -> tracing::Span {
    tracing::info_span!(
        "fire",
        scheduler,
        job = run.job.spec.name.as_str(),
        execute = run.execute_id,
        fire_time = %run.fire_time,
        attempt = run.attempt,
        fire_id = run.fire_id,
        node = run.node.node_id.as_str(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_lead_is_twice_the_smoothed_statement_time_plus_a_margin_within_bounds() {
        assert_eq!(start_lead(0), START_LEAD_MIN);
        assert_eq!(start_lead(10_000), Duration::from_millis(23));
        assert_eq!(start_lead(10_000_000), START_LEAD_MAX);
    }
}
