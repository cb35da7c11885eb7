//! One node's tasks, in the order a fire travels through them: the poller
//! (poll, expand), the dispatcher (claim at the fire time), the launcher
//! (submit, mark running fenced, run, record), and beside them the cluster task
//! (heartbeat, dead nodes, recovery) and the backlog of misfired fires that
//! their policy runs late.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use quartz_pool::{Pool, RejectReason};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::clock::Clock;
use super::handler::{CancelReason, Cancellation, Handler, JobContext, JobResult};
use super::{Counters, NodeStatus, Phase, SchedulerError, Settings, ShutdownSummary, Strategy};
use crate::misfire::MisfirePolicy;
use crate::store::{
    ChainedFire, Claim, Execute, ExecuteCas, ExecuteState, FIRES_PER_BATCH, FireRecord, FireState, FollowUp, Job,
    JobSpec, JobState, Node, NodeRef, NodeRegistration, NodeState, Outcome, SkippedRecord, Store, StoreError,
    TriggerColumns,
};
use crate::time::Timestamp;
use crate::trigger::{Fire, NextFire, Schedule, Trigger, TriggerState};

mod maintenance;
mod pending;

use pending::{PENDING_BATCH, PendingFire};

/// How long the poller waits before the next poll when a batch came back full.
const FULL_BATCH_REPOLL: Duration = Duration::from_millis(50);
/// How far past the next poll a poll looks, for the time a poll takes.
const WINDOW_SLACK_MS: i64 = 500;
/// The most orphaned fires or executes one recovery pass handles.
const RECOVERY_BATCH: u32 = 200;
/// How many times recording an outcome is tried before it is left to recovery.
const FINISH_TRIES: u32 = 5;
/// A fire marked running that waits longer than this for a pool thread has
/// its ownership confirmed again before it runs.
const START_RECHECK: Duration = Duration::from_millis(100);
/// The most successes recorded by one statement batch.
const SUCCESS_BATCH: usize = FIRES_PER_BATCH;

/// A fire waiting for its claim.
#[derive(Debug)]
struct Pending {
    execute_id: i64,
    job: Arc<Job>,
    trigger: Arc<Trigger>,
    fire: Fire,
    /// The execute's tracking epoch when this was queued; a mismatch means the
    /// execute was forgotten (a claim lost, a row changed) and this is stale.
    epoch: u64,
    /// A misfire policy's run: claimed however late it is.
    late_ok: bool,
}

/// What the node remembers of an execute it has queued fires of.
#[derive(Debug, Clone)]
struct Track {
    epoch: u64,
    /// The latest fire time queued.
    horizon: Timestamp,
    /// The job as its queued fires carry it: an edit seen by a poll requeues
    /// them with the new version.
    job: Arc<Job>,
}

/// What a fire's pool task reports.
enum Ran {
    /// The handler ran, with this outcome.
    Done(JobResult),
    /// A thread took the fire this many milliseconds after its time, past the
    /// misfire threshold: the handler did not run.
    Late(i64),
}

/// A won fire, on its way to a handler.
#[derive(Debug, Clone)]
struct RunFire {
    fire_id: i64,
    execute_id: i64,
    job: Arc<Job>,
    trigger: Option<Arc<Trigger>>,
    fire_time: Timestamp,
    attempt: u32,
    node: NodeRef,
    /// The claim moved the execute to running (a fixed-delay trigger awaiting
    /// the finish, or a job that disallows concurrency): the state it wrote,
    /// which the release after the run expects.
    release: Option<TriggerState>,
}

pub(crate) struct Inner<S> {
    pub(crate) store: S,
    pub(crate) scheduler: String,
    settings: Settings,
    handlers: HashMap<String, Handler>,
    pool: Arc<Pool>,
    runtime: tokio::runtime::Handle,
    clock: Clock,
    registration: NodeRegistration,
    node: RwLock<NodeRef>,
    phase: Mutex<Phase>,
    /// Set once: stop claiming and starting fires.
    stop: watch::Sender<bool>,
    pub(crate) poll_now: Notify,
    /// Fires waiting for their claim, by claim time.
    queue: Mutex<BTreeMap<(Timestamp, u64), Pending>>,
    queue_changed: Notify,
    seq: AtomicU64,
    tracked: Mutex<HashMap<i64, Track>>,
    /// Won fires not yet started: given back at shutdown.
    unstarted: Mutex<HashSet<i64>>,
    /// Running fires' cancellation senders.
    running: Mutex<HashMap<i64, watch::Sender<Option<CancelReason>>>>,
    /// Fires accepted by the pool whose outcome is not yet recorded.
    inflight: AtomicUsize,
    members: RwLock<Vec<Node>>,
    counters: Mutex<Counters>,
    /// Misfired fires their policy runs as soon as the pool has room.
    /// Pending fires (retries, late runs) this node waits on, by ledger id.
    pending_queued: Mutex<HashSet<i64>>,
    /// This node's own heartbeats: (last written, written without a gap
    /// since). A node judges others dead only after it has itself been
    /// heart-beating without a gap for `dead_after`: after an outage of the
    /// database every heartbeat is stale, and the living need time to write
    /// theirs again.
    heartbeats: Mutex<Option<(std::time::Instant, std::time::Instant)>>,
    /// When this node last looked for fires it claimed without knowing it.
    swept: Mutex<Option<std::time::Instant>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    warned: Mutex<HashSet<String>>,
    /// Jobs that have child jobs, as of the last poll: their successes start
    /// chains.
    parents: RwLock<HashSet<i64>>,
    /// Successes on their way to the ledger, recorded together.
    successes: mpsc::UnboundedSender<Success>,
    /// The jobs the last poll read, `None` for one deleted: a fire claimed
    /// before its job was edited runs with the edited version, and one
    /// claimed before its job was paused or deleted does not run.
    latest_jobs: RwLock<HashMap<i64, Option<Arc<Job>>>>,
    /// Jobs with fires claimed and not launched yet, and how many: each poll
    /// reads them too, whether or not their triggers are due.
    awaiting_launch: Mutex<HashMap<i64, usize>>,
}

/// A success to record: the fire, its owner, and where the answer goes
/// (`true` when recorded, `false` when the fire is no longer this
/// incarnation's).
type Success = (i64, NodeRef, oneshot::Sender<Result<bool, StoreError>>);

/// Records successes as they come, many per statement: whatever arrived while
/// the previous statement ran goes in the next. Ends with the node.
async fn record_successes<S: Store>(inner: std::sync::Weak<Inner<S>>, mut rx: mpsc::UnboundedReceiver<Success>) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < SUCCESS_BATCH {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let Some(inner) = inner.upgrade() else { return };
        while !batch.is_empty() {
            let node = batch[0].1.clone();
            let (mine, rest): (Vec<Success>, Vec<Success>) = batch.into_iter().partition(|s| s.1 == node);
            batch = rest;
            let ids: Vec<i64> = mine.iter().map(|s| s.0).collect();
            let recorded = inner.store.succeed_all(&ids, &node).await;
            for (id, _, reply) in mine {
                let answer = match &recorded {
                    Ok(done) => Ok(done.contains(&id)),
                    Err(e) => Err(StoreError::Database { reason: e.to_string() }),
                };
                let _ = reply.send(answer);
            }
        }
    }
}

impl<S: Store> Inner<S> {
    pub(crate) async fn start(
        store: S,
        scheduler: String,
        settings: Settings,
        handlers: HashMap<String, Handler>,
    ) -> Result<Arc<Inner<S>>, SchedulerError> {
        let clock = Clock::new(settings.clock_skew_ms);
        let host = hostname();
        let node_id = settings.node_id.clone().unwrap_or_else(|| {
            static N: AtomicU64 = AtomicU64::new(0);
            format!("{host}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
        });
        let registration = NodeRegistration {
            scheduler: scheduler.clone(),
            node_id,
            host,
            pid: std::process::id(),
            weight: settings.weight,
            handlers: {
                let mut names: Vec<String> = handlers.keys().cloned().collect();
                names.sort_unstable();
                names
            },
        };
        let pool = Pool::builder()
            .core(settings.pool_core)
            .max(settings.pool_max)
            .queue_capacity(settings.pool_queue)
            .keep_alive(settings.pool_keep_alive)
            .thread_name_prefix(format!("quartz-{scheduler}"))
            .build()?;
        let db_now = store.now().await?;
        clock.observe(db_now);
        let registered = store.register_node(&registration).await?;
        let node = NodeRef {
            node_id: registered.node_id.clone(),
            incarnation: registered.incarnation,
        };
        tracing::info!(scheduler, node = %node.node_id, incarnation = node.incarnation, "node registered");
        let (successes, successes_rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            store,
            scheduler,
            settings,
            handlers,
            pool: Arc::new(pool),
            runtime: tokio::runtime::Handle::current(),
            clock,
            registration,
            node: RwLock::new(node),
            phase: Mutex::new(Phase::Running),
            stop: watch::channel(false).0,
            poll_now: Notify::new(),
            queue: Mutex::new(BTreeMap::new()),
            queue_changed: Notify::new(),
            seq: AtomicU64::new(0),
            tracked: Mutex::new(HashMap::new()),
            unstarted: Mutex::new(HashSet::new()),
            running: Mutex::new(HashMap::new()),
            inflight: AtomicUsize::new(0),
            members: RwLock::new(vec![registered]),
            counters: Mutex::new(Counters::default()),
            pending_queued: Mutex::new(HashSet::new()),
            heartbeats: Mutex::new(None),
            swept: Mutex::new(None),
            tasks: Mutex::new(Vec::new()),
            warned: Mutex::new(HashSet::new()),
            parents: RwLock::new(HashSet::new()),
            successes,
            latest_jobs: RwLock::new(HashMap::new()),
            awaiting_launch: Mutex::new(HashMap::new()),
        });
        tokio::spawn(record_successes(Arc::downgrade(&inner), successes_rx));
        let tasks = vec![
            tokio::spawn(Arc::clone(&inner).poller()),
            tokio::spawn(Arc::clone(&inner).dispatcher()),
            tokio::spawn(Arc::clone(&inner).cluster()),
            tokio::spawn(Arc::clone(&inner).change_watcher()),
            tokio::spawn(Arc::clone(&inner).maintenance()),
        ];
        *inner.tasks.lock() = tasks;
        Ok(inner)
    }

    pub(crate) fn node(&self) -> NodeRef {
        self.node.read().clone()
    }

    fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    fn count(&self, f: impl FnOnce(&mut Counters)) {
        f(&mut self.counters.lock());
    }

    pub(crate) fn status(&self) -> NodeStatus {
        NodeStatus {
            scheduler: self.scheduler.clone(),
            node: self.node(),
            phase: *self.phase.lock(),
            members: self.members.read().clone(),
            pool: self.pool.metrics(),
            counters: *self.counters.lock(),
            db_offset_ms: self.clock.offset_ms(),
            running: self.running.lock().len(),
        }
    }

    pub(crate) fn check_handler(&self, job: &JobSpec) -> Result<(), SchedulerError> {
        if self.handlers.contains_key(&job.handler) {
            return Ok(());
        }
        let mut known: Vec<&str> = self.handlers.keys().map(String::as_str).collect();
        known.sort_unstable();
        Err(SchedulerError::UnknownHandler {
            job: job.name.clone(),
            handler: job.handler.clone(),
            known: if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            },
        })
    }

    /// Reads the database clock and corrects the node's offset to it.
    async fn db_now(&self) -> Result<Timestamp, StoreError> {
        let now = self.store.now().await?;
        self.clock.observe(now);
        Ok(now)
    }

    /// The jobs with these ids, by id.
    async fn jobs(&self, ids: impl Iterator<Item = i64>) -> Result<HashMap<i64, Arc<Job>>, StoreError> {
        let ids: Vec<i64> = ids.collect();
        let jobs = self.store.jobs_by_id(&self.scheduler, &ids).await?;
        Ok(jobs.into_iter().map(|j| (j.id, Arc::new(j))).collect())
    }

    /// Waits for `d`, or until the node stops; `false` when it stopped.
    async fn pause(&self, d: Duration) -> bool {
        let mut stop = self.stop.subscribe();
        tokio::select! {
            () = tokio::time::sleep(d) => !self.stopping(),
            _ = stop.wait_for(|s| *s) => false,
        }
    }

    // ---- 1. poll and 2. expand ----

    async fn poller(self: Arc<Self>) {
        let mut stop = self.stop.subscribe();
        loop {
            if self.stopping() {
                return;
            }
            let full = match self.poll().await {
                Ok(full) => full,
                Err(e) => {
                    tracing::warn!(scheduler = self.scheduler, error = %e, "poll failed; retrying at the next tick");
                    false
                }
            };
            let wait = if full {
                FULL_BATCH_REPOLL
            } else {
                self.settings.poll_interval
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.poll_now.notified() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }

    /// One poll; `true` when a batch came back full and more may be due.
    async fn poll(self: &Arc<Self>) -> Result<bool, StoreError> {
        if *self.phase.lock() != Phase::Running {
            return Ok(false);
        }
        let db_now = self.db_now().await?;
        self.count(|c| c.polls += 1);
        let reach = duration_ms(self.settings.window).max(duration_ms(self.settings.poll_interval) + WINDOW_SLACK_MS);
        let horizon = db_now.saturating_add_millis(reach);
        let batch = self
            .store
            .due_executes(&self.scheduler, horizon, self.settings.batch_size)
            .await?;
        for rejected in &batch.rejected {
            tracing::error!(
                scheduler = self.scheduler,
                execute_id = rejected.execute_id,
                reason = rejected.reason,
                "execute row cannot be understood: marked as an error and skipped"
            );
        }
        let full = batch.executes.len() + batch.rejected.len() >= self.settings.batch_size as usize;
        let parents = self.store.chain_parents(&self.scheduler).await?;
        *self.parents.write() = parents.into_iter().collect();
        let awaiting: Vec<i64> = self.awaiting_launch.lock().keys().copied().collect();
        let jobs = self
            .jobs(batch.executes.iter().map(|e| e.job_id).chain(awaiting.iter().copied()))
            .await?;
        {
            let mut latest = self.latest_jobs.write();
            latest.clear();
            latest.extend(jobs.iter().map(|(id, job)| (*id, Some(Arc::clone(job)))));
            for id in awaiting {
                latest.entry(id).or_insert(None);
            }
        }
        for execute in batch.executes {
            let Some(job) = jobs.get(&execute.job_id) else {
                continue; // deleted since
            };
            if self.stopping() {
                break;
            }
            self.consider(execute, job, db_now, horizon).await?;
        }
        for fire in self
            .store
            .fires_pending(&self.scheduler, horizon, PENDING_BATCH)
            .await?
        {
            self.queue_pending(PendingFire::of(&fire));
        }
        Ok(full)
    }

    /// An execute whose job's handler this node lacks: left to the nodes that
    /// have it; but a fire still unclaimed past the misfire threshold (no live
    /// node has the handler) is claimed and recorded failed, saying so.
    async fn unhandled(&self, execute: &Execute, job: &Arc<Job>, db_now: Timestamp) -> Result<(), StoreError> {
        if self.warned.lock().insert(job.spec.name.clone()) {
            tracing::warn!(
                scheduler = self.scheduler,
                job = job.spec.name,
                handler = job.spec.handler,
                "this node has no such handler; leaving the job to nodes that have it"
            );
        }
        let cutoff = Timestamp::from_millis(db_now.as_millis() - self.settings.misfire.threshold_ms);
        // A fixed-delay fire waits for a finish that never comes: left alone.
        let fires: Vec<Fire> = execute
            .trigger
            .fires_until(&execute.fire_state, cutoff)
            .filter(|f| !matches!(f.next, NextFire::AfterFinish))
            .take(RECOVERY_BATCH as usize)
            .collect();
        if fires.is_empty() {
            return Ok(()); // the usual case: not overdue, others may have it
        }
        let node = self.node();
        let mut known: Vec<&str> = self.handlers.keys().map(String::as_str).collect();
        known.sort_unstable();
        let error = format!(
            "no live node ran handler {:?} within the misfire threshold (this node has: {})",
            job.spec.handler,
            known.join(", ")
        );
        for fire in fires {
            let Some(fire_id) = self.store.claim(&Claim::for_fire(execute.id, &fire, &node)).await? else {
                break; // another node moved the row
            };
            if self.store.fail_claimed(fire_id, &node, &error).await? {
                self.count(|c| c.failed += 1);
            }
        }
        Ok(())
    }

    /// What a poll does with one due execute.
    async fn consider(
        self: &Arc<Self>,
        execute: Execute,
        job: &Arc<Job>,
        db_now: Timestamp,
        horizon: Timestamp,
    ) -> Result<(), StoreError> {
        if job.state == JobState::Paused {
            // Paused after this row was read, or written waiting by hand.
            let cas = cas_from(&execute, ExecuteState::Paused, execute.fire_state.clone());
            self.store.update_execute(&cas, &[]).await?;
            self.forget(execute.id);
            return Ok(());
        }
        if !self.handlers.contains_key(&job.spec.handler) {
            return self.unhandled(&execute, job, db_now).await;
        }
        if execute.schedule_changed
            || (execute.fire_state.next_fire_time.is_none() && !execute.fire_state.awaiting_finish)
        {
            return self.recompute(execute, job, db_now, horizon).await;
        }
        if let Some(decision) = execute
            .trigger
            .on_misfire(&execute.fire_state, db_now, &self.settings.misfire)
        {
            let late_ms = execute
                .fire_state
                .next_fire_time
                .map_or(0, |t| db_now.as_millis() - t.as_millis());
            let records: Vec<SkippedRecord> = decision
                .skipped
                .iter()
                .map(|s| SkippedRecord {
                    from: s.from,
                    until: s.until,
                    count: s.count,
                    state: FireState::Misfired,
                    reason: format!(
                        "misfired: found {late_ms} ms late (threshold {} ms); policy {} ran {} of the missed times, \
                         skipped {}{}",
                        self.settings.misfire.threshold_ms,
                        decision.applied,
                        decision.runs.len(),
                        s.count,
                        if s.count_exact { "" } else { " or more" }
                    ),
                })
                .collect();
            let set_state = waiting_or_complete(decision.state.next_fire_time);
            let mut cas = cas_from(&execute, set_state, decision.state.clone());
            cas.set_trigger.clone_from(&decision.rescheduled);
            self.forget(execute.id);
            if self.store.update_execute(&cas, &records).await? {
                self.count(|c| c.misfires += 1);
                tracing::info!(
                    scheduler = self.scheduler,
                    job = job.spec.name,
                    execute_id = execute.id,
                    policy = %decision.applied,
                    runs = decision.runs.len(),
                    skipped = decision.skipped.as_ref().map_or(0, |s| s.count),
                    "misfire handled"
                );
                if set_state == ExecuteState::Waiting {
                    let trigger = decision.rescheduled.unwrap_or(execute.trigger);
                    self.enqueue(
                        execute.id,
                        job,
                        Arc::new(trigger),
                        &decision.state,
                        horizon,
                        Some(db_now),
                    );
                }
            }
            return Ok(());
        }
        let trigger = Arc::new(execute.trigger);
        self.enqueue(execute.id, job, trigger, &execute.fire_state, horizon, None);
        Ok(())
    }

    /// Initialises a row written without a next fire time, or recomputes one
    /// whose schedule was edited: the first fire time at or after now.
    async fn recompute(
        self: &Arc<Self>,
        execute: Execute,
        job: &Arc<Job>,
        db_now: Timestamp,
        horizon: Timestamp,
    ) -> Result<(), StoreError> {
        let next = first_at_or_after(&execute.trigger, &execute.fire_state, db_now);
        let state = TriggerState {
            prev_fire_time: execute.fire_state.prev_fire_time,
            next_fire_time: next,
            times_triggered: execute.fire_state.times_triggered,
            awaiting_finish: false,
        };
        let set_state = waiting_or_complete(next);
        let mut cas = cas_from(&execute, set_state, state.clone());
        cas.set_signature = Some(TriggerColumns::from_trigger(&execute.trigger).signature());
        self.forget(execute.id);
        if self.store.update_execute(&cas, &[]).await? {
            self.count(|c| c.recomputed += 1);
            tracing::info!(
                scheduler = self.scheduler,
                job = job.spec.name,
                execute_id = execute.id,
                next_fire_time = ?next,
                "execute initialised from its schedule columns"
            );
            if next.is_some() {
                self.enqueue(
                    execute.id,
                    job,
                    Arc::new(execute.trigger),
                    &state,
                    horizon,
                    Some(db_now),
                );
            }
        }
        Ok(())
    }

    /// Queues the fires of an execute before `horizon` that are not queued yet.
    /// Fires at or before `late_ok_until` are claimed however late they are
    /// (a misfire policy's runs).
    fn enqueue(
        &self,
        execute_id: i64,
        job: &Arc<Job>,
        trigger: Arc<Trigger>,
        state: &TriggerState,
        horizon: Timestamp,
        late_ok_until: Option<Timestamp>,
    ) {
        let blocks = !job.spec.allow_concurrent;
        let fires: Vec<Fire> = trigger
            .fires_until(state, horizon)
            // A job that disallows concurrency blocks its execute until the run
            // finishes: only its next fire can be claimed.
            .take(if blocks { 1 } else { usize::MAX })
            .collect();
        if fires.is_empty() {
            return;
        }
        let mut tracked = self.tracked.lock();
        let fresh = || Track {
            epoch: self.seq.fetch_add(1, Ordering::Relaxed),
            horizon: Timestamp::from_millis(i64::MIN),
            job: Arc::clone(job),
        };
        let track = tracked.entry(execute_id).or_insert_with(fresh);
        if track.job.spec != job.spec || track.job.state != job.state {
            // The job was edited: what is queued carries the old version.
            *track = fresh();
        }
        let mut queue = self.queue.lock();
        let mut added = false;
        for fire in fires {
            if fire.fire_time <= track.horizon {
                continue;
            }
            track.horizon = fire.fire_time;
            let claim_at = if self.tries_first(execute_id) {
                fire.fire_time
                    .saturating_add_millis(-duration_ms(self.settings.claim_lead))
            } else {
                fire.fire_time
                    .saturating_add_millis(duration_ms(self.settings.strategy_grace))
            };
            let late_ok = late_ok_until.is_some_and(|t| fire.fire_time <= t);
            let key = (claim_at, self.seq.fetch_add(1, Ordering::Relaxed));
            queue.insert(
                key,
                Pending {
                    execute_id,
                    job: Arc::clone(job),
                    trigger: Arc::clone(&trigger),
                    fire,
                    epoch: track.epoch,
                    late_ok,
                },
            );
            added = true;
        }
        if added {
            self.queue_changed.notify_one();
        }
    }

    /// Drops what the node remembers of an execute: its queued fires become
    /// stale, and the next poll expands it afresh from the database.
    fn forget(&self, execute_id: i64) {
        self.tracked.lock().remove(&execute_id);
    }

    /// Whether this node tries an execute's fires at their time (otherwise after
    /// the strategy's grace period).
    fn tries_first(&self, execute_id: i64) -> bool {
        if self.settings.strategy == Strategy::FirstCome {
            return true;
        }
        let members = self.members.read();
        let me = self.node.read().node_id.clone();
        let key = mix(u64::from_ne_bytes(execute_id.to_ne_bytes()));
        let live = members.iter().filter(|n| n.state == NodeState::Live);
        let chosen = match self.settings.strategy {
            Strategy::FirstCome => return true,
            Strategy::IdHash => {
                let mut ids: Vec<&str> = live.map(|n| n.node_id.as_str()).collect();
                ids.sort_unstable();
                let len = u64::try_from(ids.len()).unwrap_or(1).max(1);
                ids.get(usize::try_from(key % len).unwrap_or(0))
                    .map(|s| (*s).to_owned())
            }
            Strategy::Weighted => rendezvous(key, live, |n| f64::from(n.weight.max(1))),
            // The weight shrinks as the node gets busier: a node running ten
            // fires is offered a tenth of what an idle one is.
            #[allow(clippy::cast_precision_loss)]
            Strategy::LeastLoaded => rendezvous(key, live, |n| f64::from(n.weight.max(1)) / (1.0 + n.busy as f64)),
        };
        chosen.is_none_or(|id| id == me)
    }

    // ---- 3. claim ----

    async fn dispatcher(self: Arc<Self>) {
        let mut stop = self.stop.subscribe();
        loop {
            if self.stopping() {
                return;
            }
            let first = self.queue.lock().keys().next().map(|k| k.0);
            let wake = first.map(|t| self.clock.instant_of(t));
            tokio::select! {
                () = sleep_until_or_forever(wake) => {}
                () = self.queue_changed.notified() => continue,
                _ = stop.wait_for(|s| *s) => return,
            }
            let db_now = self.clock.db_now();
            let due = self.take_due(db_now);
            if due.is_empty() {
                continue;
            }
            if let Err(e) = self.claim_all(due).await {
                tracing::warn!(scheduler = self.scheduler, error = %e, "claims failed; the next poll retries them");
            }
        }
    }

    /// Takes the queued fires whose claim time has come, dropping stale ones
    /// and ones already too late (the misfire handler decides those).
    fn take_due(&self, db_now: Timestamp) -> Vec<Pending> {
        // The same lock order as `enqueue`: tracked, then queue.
        let tracked = self.tracked.lock();
        let mut queue = self.queue.lock();
        let mut due = Vec::new();
        let mut late = Vec::new();
        while due.len() < self.settings.claim_batch {
            let Some(entry) = queue.first_entry() else { break };
            if entry.key().0 > db_now {
                break;
            }
            let pending = entry.remove();
            if tracked
                .get(&pending.execute_id)
                .is_none_or(|t| t.epoch != pending.epoch)
            {
                continue;
            }
            let lateness = db_now.as_millis() - pending.fire.fire_time.as_millis();
            if !pending.late_ok && lateness > self.settings.misfire.threshold_ms {
                late.push(pending.execute_id);
                continue;
            }
            due.push(pending);
        }
        drop(queue);
        drop(tracked);
        // One lock order on every node: by time, then by row. Claims of the same
        // rows in different orders by two nodes would deadlock.
        due.sort_by_key(|p| (p.fire.fire_time, p.execute_id));
        if !late.is_empty() {
            for id in late {
                self.forget(id);
            }
            self.poll_now.notify_one();
        }
        due
    }

    async fn claim_all(self: &Arc<Self>, due: Vec<Pending>) -> Result<(), StoreError> {
        let node = self.node();
        let claims: Vec<Claim> = due
            .iter()
            .map(|p| {
                let mut claim = Claim::for_fire(p.execute_id, &p.fire, &node);
                if !p.job.spec.allow_concurrent {
                    // Blocked while the fire runs, and refused while another
                    // execute of the job runs: one fire of the job at a time.
                    claim.exclusive = true;
                    if matches!(p.fire.next, NextFire::At(_)) {
                        claim.cas.set_state = ExecuteState::Running;
                    }
                }
                claim
            })
            .collect();
        let won = match self.store.claim_batch(&claims).await {
            Ok(won) => won,
            Err(e) => {
                for p in &due {
                    self.forget(p.execute_id);
                }
                return Err(e);
            }
        };
        let mut starts: BTreeMap<Timestamp, Vec<RunFire>> = BTreeMap::new();
        let mut lost = 0;
        for ((pending, claim), fire_id) in due.into_iter().zip(claims).zip(won) {
            let Some(fire_id) = fire_id else {
                lost += 1;
                self.forget(pending.execute_id);
                continue;
            };
            self.unstarted.lock().insert(fire_id);
            *self.awaiting_launch.lock().entry(pending.job.id).or_default() += 1;
            let release = (claim.cas.set_state == ExecuteState::Running).then(|| claim.cas.set.clone());
            starts.entry(pending.fire.fire_time).or_default().push(RunFire {
                fire_id,
                execute_id: pending.execute_id,
                job: pending.job,
                trigger: Some(pending.trigger),
                fire_time: pending.fire.fire_time,
                attempt: 1,
                node: node.clone(),
                release,
            });
        }
        let won_count: u64 = starts.values().map(|v| v.len() as u64).sum();
        self.count(|c| {
            c.claimed += won_count;
            c.lost += lost;
        });
        for (fire_time, runs) in starts {
            self.launch_at(fire_time, runs);
        }
        Ok(())
    }

    /// Launches fires due at `fire_time` when it comes (at once if it has):
    /// one timer for all of them.
    fn launch_at(self: &Arc<Self>, fire_time: Timestamp, runs: Vec<RunFire>) {
        if fire_time <= self.clock.db_now() {
            self.launch_all(runs);
            return;
        }
        let inner = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep_until(inner.clock.instant_of(fire_time)).await;
            inner.launch_all(runs);
        });
    }

    // ---- 4. submit and 5. run ----

    /// Hands a won fire to the pool (at or after its time).
    fn launch(self: &Arc<Self>, run: RunFire) {
        self.launch_all(vec![run]);
    }

    /// Hands won fires due together to the pool, then starts the accepted ones
    /// with one fenced statement (per few dozen fires) instead of one each:
    /// their tasks wait on the pool's threads for the word to go.
    fn launch_all(self: &Arc<Self>, runs: Vec<RunFire>) {
        if self.stopping() {
            return; // given back by the shutdown
        }
        let mut accepted = Vec::with_capacity(runs.len());
        for mut run in runs {
            if let Some(reason) = self.refresh_job(&mut run) {
                tokio::spawn(Arc::clone(self).skip_unstarted(run, reason));
                continue;
            }
            let Some(handler) = self.handlers.get(&run.job.spec.handler).cloned() else {
                continue;
            };
            let (cancel_tx, cancellation) = Cancellation::new();
            let (started_tx, started_rx) = oneshot::channel::<Result<bool, StoreError>>();
            let (go_tx, go_rx) = std::sync::mpsc::sync_channel::<Option<std::time::Instant>>(1);
            let (done_tx, done_rx) = oneshot::channel::<Ran>();
            // A fire won by a poll, on its first attempt, is misfired when a
            // thread takes it past the threshold (late runs, retries,
            // recoveries and children are late by design).
            let fire_time = run.fire_time;
            let threshold_ms =
                (run.attempt == 1 && run.trigger.is_some()).then_some(self.settings.misfire.threshold_ms);
            let ctx = JobContext {
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
            let runtime = self.runtime.clone();
            let inner = Arc::clone(self);
            let owner = run.node.clone();
            let fire_id = run.fire_id;
            let task = move || {
                // Started (fenced) by the launcher, or refused: only then run.
                let Ok(Some(marked)) = go_rx.recv() else { return };
                // Past the threshold (it waited for a thread, or for the
                // database to mark it running): its policy decides.
                let past_threshold = || {
                    let late_ms = inner.clock.db_now().as_millis() - fire_time.as_millis();
                    threshold_ms.is_some_and(|limit| late_ms > limit).then_some(late_ms)
                };
                if let Some(late_ms) = past_threshold() {
                    let _ = done_tx.send(Ran::Late(late_ms));
                    return;
                }
                // Waited on the pool past the bound (a busy pool, or this
                // process paused): its ownership is confirmed again, and its
                // start time set to now, before it runs. A node declared dead
                // meanwhile runs nothing it lost.
                if marked.elapsed() > START_RECHECK {
                    if !matches!(runtime.block_on(inner.store.confirm_start(fire_id, &owner)), Ok(true)) {
                        tracing::warn!(fire_id, "fire not run: this incarnation no longer owns it");
                        return;
                    }
                    // The confirmation itself may have waited for the
                    // database (connections killed, the server restarting).
                    if let Some(late_ms) = past_threshold() {
                        let _ = done_tx.send(Ran::Late(late_ms));
                        return;
                    }
                }
                let result = handler.call(ctx, &runtime);
                let _ = done_tx.send(Ran::Done(result));
            };
            self.inflight.fetch_add(1, Ordering::SeqCst);
            match self.pool.try_submit(task) {
                Ok(()) => {
                    tokio::spawn(Arc::clone(self).supervise(run.clone(), started_rx, done_rx, cancel_tx));
                    accepted.push((run.fire_id, go_tx, started_tx));
                }
                Err(rejected) => {
                    let reason = rejected.reason;
                    drop(rejected);
                    self.inflight.fetch_sub(1, Ordering::SeqCst);
                    tokio::spawn(Arc::clone(self).on_rejected(run, reason));
                }
            }
        }
        if accepted.is_empty() {
            return;
        }
        let inner = Arc::clone(self);
        let node = self.node();
        tokio::spawn(async move {
            let ids: Vec<i64> = accepted.iter().map(|(id, _, _)| *id).collect();
            {
                let mut unstarted = inner.unstarted.lock();
                for id in &ids {
                    unstarted.remove(id);
                }
            }
            // Fenced: refused unless this incarnation still owns each fire
            // and is live. Each call is all-or-nothing: an error says of
            // every fire it names that it did not start.
            let mut accepted = accepted.into_iter();
            for chunk in ids.chunks(FIRES_PER_BATCH) {
                let started = inner.store.mark_running_all(chunk, &node).await;
                for (id, go_tx, started_tx) in accepted.by_ref().take(chunk.len()) {
                    let outcome = match &started {
                        Ok(started) => Ok(started.contains(&id)),
                        Err(e) => Err(StoreError::Database { reason: e.to_string() }),
                    };
                    let _ = go_tx.send(matches!(outcome, Ok(true)).then(std::time::Instant::now));
                    let _ = started_tx.send(outcome);
                }
            }
        });
    }

    /// A fire claimed before an edit of its job that a poll has seen since
    /// runs with the edited job (when this node has its handler); one claimed
    /// before its job was paused or deleted does not run: why is returned.
    fn refresh_job(&self, run: &mut RunFire) -> Option<&'static str> {
        {
            let mut awaiting = self.awaiting_launch.lock();
            if let Some(n) = awaiting.get_mut(&run.job.id) {
                *n -= 1;
                if *n == 0 {
                    awaiting.remove(&run.job.id);
                }
            }
        }
        let latest = self.latest_jobs.read();
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
        self.unstarted.lock().remove(&run.fire_id);
        match self.store.skip_claimed(run.fire_id, &run.node, reason).await {
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
                let _ = self.store.release_fire(run.fire_id, &run.node).await;
                return;
            }
        }
        self.release(&run).await;
    }

    /// Follows a fire the pool accepted: its start, timeout and outcome, then
    /// what comes after (release, retry).
    async fn supervise(
        self: Arc<Self>,
        run: RunFire,
        started_rx: oneshot::Receiver<Result<bool, StoreError>>,
        done_rx: oneshot::Receiver<Ran>,
        cancel_tx: watch::Sender<Option<CancelReason>>,
    ) {
        self.follow(&run, started_rx, done_rx, cancel_tx).await;
        self.inflight.fetch_sub(1, Ordering::SeqCst);
    }

    async fn follow(
        self: &Arc<Self>,
        run: &RunFire,
        started_rx: oneshot::Receiver<Result<bool, StoreError>>,
        done_rx: oneshot::Receiver<Ran>,
        cancel_tx: watch::Sender<Option<CancelReason>>,
    ) {
        match started_rx.await {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => {
                // Declared dead (or given back at shutdown) since the claim: the
                // fire is another node's now.
                self.count(|c| c.fenced += 1);
                tracing::warn!(
                    scheduler = self.scheduler,
                    fire_id = run.fire_id,
                    "fire not started: this incarnation no longer owns it"
                );
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(scheduler = self.scheduler, fire_id = run.fire_id, error = %e,
                    "could not mark the fire running; giving it back");
                let _ = self.store.release_fire(run.fire_id, &run.node).await;
                return;
            }
            Err(_) => {
                // The pool dropped the task unrun (shutting down).
                let _ = self.store.release_fire(run.fire_id, &run.node).await;
                return;
            }
        }
        self.running.lock().insert(run.fire_id, cancel_tx.clone());
        let timeout = run
            .job
            .spec
            .timeout_ms
            .and_then(|ms| u64::try_from(ms).ok())
            .map(Duration::from_millis);
        let mut done_rx = done_rx;
        let result = match timeout {
            Some(limit) => {
                tokio::select! {
                    r = &mut done_rx => r.ok(),
                    () = tokio::time::sleep(limit) => self.time_out(run, limit, &cancel_tx, done_rx).await,
                }
            }
            None => done_rx.await.ok(),
        };
        let result = match result {
            Some(Ran::Late(late_ms)) => {
                self.running.lock().remove(&run.fire_id);
                let cause = format!("a thread took it {late_ms} ms after its time");
                self.misfired(run.clone(), &cause, false).await;
                return;
            }
            Some(Ran::Done(result)) => Some(result),
            None => None,
        };
        self.running.lock().remove(&run.fire_id);
        let outcome = match result {
            Some(Ok(())) => Outcome::Succeeded,
            Some(Err(e)) => Outcome::Failed { error: e.to_string() },
            None => Outcome::Failed {
                error: "the handler's thread ended without an outcome".to_owned(),
            },
        };
        let succeeded = outcome == Outcome::Succeeded;
        self.count(|c| {
            if succeeded {
                c.succeeded += 1;
            } else {
                c.failed += 1;
            }
        });
        if let Outcome::Failed { error } = &outcome {
            tracing::warn!(
                scheduler = self.scheduler,
                job = run.job.spec.name,
                fire_id = run.fire_id,
                attempt = run.attempt,
                error,
                "fire failed"
            );
        }
        let children = match &outcome {
            Outcome::Failed { error } if run.attempt < run.job.spec.retry.max_attempts => {
                self.fail_with_retry(run, error).await;
                Vec::new()
            }
            _ => self.record(run, &outcome).await,
        };
        self.release(run).await;
        if !children.is_empty() {
            self.chain(run, children).await;
        }
    }

    /// A fire past its job's timeout: asked to stop, recorded timed out, and
    /// followed until its code really returns. A thread cannot be killed, so
    /// until then the fire stays running in the ledger (a job that disallows
    /// concurrency stays blocked) and its pool thread stays busy; then it is
    /// failed, whatever the code returned.
    async fn time_out(
        &self,
        run: &RunFire,
        limit: Duration,
        cancel_tx: &watch::Sender<Option<CancelReason>>,
        done_rx: oneshot::Receiver<Ran>,
    ) -> Option<Ran> {
        let _ = cancel_tx.send(Some(CancelReason::TimedOut));
        let limit_ms = limit.as_millis();
        let asked = std::time::Instant::now();
        self.count(|c| c.timed_out += 1);
        let note = format!("timed out after {limit_ms} ms; asked to stop, still running");
        if let Err(e) = self.store.fire_time_out(run.fire_id, &run.node, &note).await {
            tracing::warn!(scheduler = self.scheduler, fire_id = run.fire_id, error = %e, "could not record the timeout");
        }
        tracing::warn!(
            scheduler = self.scheduler,
            job = run.job.spec.name,
            fire_id = run.fire_id,
            limit_ms,
            "fire timed out"
        );
        match done_rx.await.ok()? {
            Ran::Late(late_ms) => Some(Ran::Late(late_ms)),
            Ran::Done(returned) => {
                let after = asked.elapsed().as_millis();
                let how = match returned {
                    Ok(()) => "returned success".to_owned(),
                    Err(e) => format!("returned: {e}"),
                };
                Some(Ran::Done(Err(format!(
                    "timed out after {limit_ms} ms; asked to stop, the code {how} {after} ms later"
                )
                .into())))
            }
        }
    }

    /// Records an outcome, retrying on database errors. A success of a job
    /// with children claims their fires in the same transaction: those are
    /// returned, to be run by this node.
    async fn record(&self, run: &RunFire, outcome: &Outcome) -> Vec<ChainedFire> {
        let chains = *outcome == Outcome::Succeeded && self.parents.read().contains(&run.job.id);
        for attempt in 1..=FINISH_TRIES {
            let recorded = if chains {
                self.store.succeed_and_chain(run.fire_id, &run.node).await
            } else if *outcome == Outcome::Succeeded {
                let (reply, answer) = oneshot::channel();
                let _ = self.successes.send((run.fire_id, run.node.clone(), reply));
                answer
                    .await
                    .unwrap_or_else(|_| {
                        Err(StoreError::Database {
                            reason: "the success recorder stopped".to_owned(),
                        })
                    })
                    .map(|done| done.then(Vec::new))
            } else {
                self.store
                    .finish(run.fire_id, &run.node, outcome)
                    .await
                    .map(|done| done.then(Vec::new))
            };
            match recorded {
                Ok(Some(children)) => return children,
                Ok(None) => {
                    tracing::warn!(
                        scheduler = self.scheduler,
                        fire_id = run.fire_id,
                        "outcome not recorded: this incarnation no longer owns the fire (declared dead meanwhile)"
                    );
                    return Vec::new();
                }
                Err(e) if attempt < FINISH_TRIES => {
                    tracing::warn!(scheduler = self.scheduler, fire_id = run.fire_id, error = %e, "recording the outcome failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                }
                Err(e) => {
                    tracing::error!(scheduler = self.scheduler, fire_id = run.fire_id, error = %e,
                        "the outcome could not be recorded; the fire stays running in the ledger");
                }
            }
        }
        Vec::new()
    }

    /// After a run of an execute the claim had moved to running: back to
    /// waiting, with a fixed-delay trigger's next fire computed from the finish.
    async fn release(self: &Arc<Self>, run: &RunFire) {
        let (Some(expect), Some(trigger)) = (&run.release, &run.trigger) else {
            return;
        };
        // Only a fixed-delay successor needs the clock: it counts from the finish.
        let now = if expect.awaiting_finish {
            match self.db_now().await {
                Ok(now) => now,
                Err(e) => {
                    tracing::warn!(scheduler = self.scheduler, error = %e, "cannot read the clock; the execute is released by recovery");
                    return;
                }
            }
        } else {
            self.clock.db_now()
        };
        let cas = release_cas(run.execute_id, trigger, expect, Some(run.node.clone()), now);
        match self.store.update_execute(&cas, &[]).await {
            // The successor is due soon, perhaps before the next poll.
            Ok(true) => self.poll_now.notify_one(),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(scheduler = self.scheduler, execute_id = run.execute_id, error = %e,
                    "releasing the execute failed; recovery releases it if this node dies");
            }
        }
    }

    /// Runs the children a parent's success claimed for this node, at once. A
    /// child whose handler this node lacks is given back, for a node that has
    /// it (recovery takes released fires).
    async fn chain(self: &Arc<Self>, parent: &RunFire, children: Vec<ChainedFire>) {
        let jobs = match self.jobs(children.iter().map(|c| c.job_id)).await {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::warn!(scheduler = self.scheduler, fire_id = parent.fire_id, error = %e,
                    "cannot read the child jobs; their claimed fires are released by recovery if this node dies");
                HashMap::new()
            }
        };
        for child in children {
            let job = jobs
                .get(&child.job_id)
                .filter(|job| self.handlers.contains_key(&job.spec.handler));
            let Some(job) = job else {
                let _ = self.store.release_fire(child.fire_id, &parent.node).await;
                continue;
            };
            tracing::debug!(
                scheduler = self.scheduler,
                parent = parent.job.spec.name,
                child = job.spec.name,
                fire_id = child.fire_id,
                "chained fire"
            );
            self.count(|c| c.chained += 1);
            self.unstarted.lock().insert(child.fire_id);
            self.launch(RunFire {
                fire_id: child.fire_id,
                execute_id: parent.execute_id,
                job: Arc::clone(job),
                trigger: None,
                fire_time: parent.fire_time,
                attempt: 1,
                node: parent.node.clone(),
                release: None,
            });
        }
    }

    /// The pool refused a won fire: recorded as misfired, then the trigger's
    /// policy decides whether it runs late.
    async fn on_rejected(self: Arc<Self>, run: RunFire, reason: RejectReason) {
        self.unstarted.lock().remove(&run.fire_id);
        if reason == RejectReason::ShutDown {
            let _ = self.store.release_fire(run.fire_id, &run.node).await;
            return;
        }
        self.count(|c| c.rejected += 1);
        self.misfired(run, &format!("the pool refused the fire ({reason})"), false)
            .await;
    }

    /// A won fire that will not start on time: recorded as misfired with its
    /// cause, then its trigger's policy decides whether it runs late. When
    /// `row_decides` (the fire was found past the threshold after an outage),
    /// the execute row's own misfire decision stands for the fire-now policies,
    /// so only the ignore policy runs the fire late.
    async fn misfired(self: &Arc<Self>, run: RunFire, cause: &str, row_decides: bool) {
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
        let recorded = if runs_late {
            self.store
                .fire_misfire_and_run_late(run.fire_id, &run.node, &text, policy != MisfirePolicy::IgnoreMisfires)
                .await
        } else {
            self.store
                .misfire_claimed(run.fire_id, &run.node, &text)
                .await
                .map(|done| if done { FollowUp::Recorded } else { FollowUp::NotOwned })
        };
        let follow_up = match recorded {
            Ok(FollowUp::NotOwned) => return,
            Ok(follow_up) => follow_up,
            Err(e) => {
                tracing::warn!(scheduler = self.scheduler, fire_id = run.fire_id, error = %e, "recording a refused fire failed");
                return;
            }
        };
        tracing::warn!(scheduler = self.scheduler, job = run.job.spec.name, fire_id = run.fire_id, %policy, cause, "fire misfired");
        self.release(&run).await;
        if let Some(late) = PendingFire::after(&run, follow_up) {
            self.queue_pending(late);
        }
    }

    // ---- the cluster ----

    async fn cluster(self: Arc<Self>) {
        loop {
            if let Err(e) = self.cluster_pass().await {
                tracing::warn!(scheduler = self.scheduler, error = %e, "heartbeat or recovery failed; retrying");
            }
            if !self.pause(self.settings.heartbeat_interval).await {
                return;
            }
        }
    }

    async fn cluster_pass(self: &Arc<Self>) -> Result<(), StoreError> {
        let node = self.node();
        let busy = self.inflight.load(Ordering::SeqCst) + self.pending_queued.lock().len();
        if !self.store.heartbeat(&self.scheduler, &node, busy as u64).await? {
            self.rejoin(&node).await?;
        }
        let steady = {
            let now = std::time::Instant::now();
            let mut heartbeats = self.heartbeats.lock();
            let since = match *heartbeats {
                Some((last, since)) if now.duration_since(last) <= self.settings.dead_after / 2 => since,
                _ => now, // the first, or after a gap: this node was cut off too
            };
            *heartbeats = Some((now, since));
            now.duration_since(since) >= self.settings.dead_after
        };
        let db_now = self.db_now().await?;
        let members = self.store.list_nodes(&self.scheduler).await?;
        let dead_after = duration_ms(self.settings.dead_after);
        let me = self.node();
        for member in &members {
            let silent = db_now.as_millis() - member.heartbeat_at.as_millis();
            if steady && member.state == NodeState::Live && member.node_id != me.node_id && silent > dead_after {
                let theirs = NodeRef {
                    node_id: member.node_id.clone(),
                    incarnation: member.incarnation,
                };
                if self.store.retire_node(&self.scheduler, &theirs, dead_after).await? {
                    tracing::warn!(
                        scheduler = self.scheduler,
                        node = member.node_id,
                        incarnation = member.incarnation,
                        silent_ms = silent,
                        "node declared dead; its incarnation is retired"
                    );
                }
            }
        }
        *self.members.write() = members;
        self.recover().await
    }

    /// This incarnation was declared dead (a long pause): forget everything in
    /// flight (its claims are refused now) and register again.
    async fn rejoin(self: &Arc<Self>, old: &NodeRef) -> Result<(), StoreError> {
        *self.phase.lock() = Phase::Fenced;
        tracing::warn!(
            scheduler = self.scheduler,
            node = old.node_id,
            incarnation = old.incarnation,
            "this node was declared dead; re-registering"
        );
        self.queue.lock().clear();
        self.tracked.lock().clear();
        let registered = self.store.register_node(&self.registration).await?;
        *self.node.write() = NodeRef {
            node_id: registered.node_id,
            incarnation: registered.incarnation,
        };
        *self.phase.lock() = Phase::Running;
        self.poll_now.notify_one();
        Ok(())
    }

    /// Recovery of dead nodes' work, each item won by compare-and-set.
    async fn recover(self: &Arc<Self>) -> Result<(), StoreError> {
        if self.stopping() || *self.phase.lock() != Phase::Running {
            return Ok(());
        }
        let node = self.node();
        let fires = self.store.orphaned_fires(&self.scheduler, RECOVERY_BATCH).await?;
        if !fires.is_empty() {
            let jobs = self.jobs(fires.iter().map(|f| f.job_id)).await?;
            for fire in fires {
                let job = jobs.get(&fire.job_id);
                self.recover_fire(fire, job, &node, "recovered from a node that is gone")
                    .await?;
            }
        }
        self.sweep_own_claims(&node).await?;
        let executes = self.store.orphaned_executes(&self.scheduler, RECOVERY_BATCH).await?;
        if !executes.executes.is_empty() {
            let db_now = self.db_now().await?;
            for execute in executes.executes {
                let cas = release_cas(
                    execute.id,
                    &execute.trigger,
                    &execute.fire_state,
                    execute.owner.clone(),
                    db_now,
                );
                if self.store.update_execute(&cas, &[]).await? {
                    tracing::info!(
                        scheduler = self.scheduler,
                        execute_id = execute.id,
                        "released an execute a dead node left running"
                    );
                    self.poll_now.notify_one();
                }
            }
        }
        Ok(())
    }

    /// Fires this incarnation claimed but does not know of: a claim stored
    /// by a commit whose answer was lost (the connection cut at that
    /// moment). Once past their time by the misfire threshold and
    /// `dead_after`, they are recovered as a dead node's are; the
    /// compare-and-set on their state keeps a start still on its way from
    /// running one twice. At most once per `dead_after`.
    async fn sweep_own_claims(self: &Arc<Self>, node: &NodeRef) -> Result<(), StoreError> {
        {
            let now = std::time::Instant::now();
            let mut swept = self.swept.lock();
            if swept.is_some_and(|at| now.duration_since(at) < self.settings.dead_after) {
                return Ok(());
            }
            *swept = Some(now);
        }
        let margin = self
            .settings
            .misfire
            .threshold_ms
            .saturating_add(duration_ms(self.settings.dead_after));
        let before = Timestamp::from_millis(self.clock.db_now().as_millis().saturating_sub(margin));
        let unknown: Vec<FireRecord> = {
            let fires = self
                .store
                .claimed_by(&self.scheduler, node, before, RECOVERY_BATCH)
                .await?;
            let unstarted = self.unstarted.lock();
            fires.into_iter().filter(|f| !unstarted.contains(&f.id)).collect()
        };
        if unknown.is_empty() {
            return Ok(());
        }
        let jobs = self.jobs(unknown.iter().map(|f| f.job_id)).await?;
        for fire in unknown {
            tracing::warn!(
                scheduler = self.scheduler,
                fire_id = fire.id,
                "found a fire this node claimed without knowing it; recovering it"
            );
            let job = jobs.get(&fire.job_id);
            self.recover_fire(fire, job, node, "claimed by this node, which lost track of it")
                .await?;
        }
        Ok(())
    }

    // A compare-and-set that writes is not a match guard: it stays in the arm.
    #[allow(clippy::collapsible_match)]
    async fn recover_fire(
        self: &Arc<Self>,
        fire: FireRecord,
        job: Option<&Arc<Job>>,
        node: &NodeRef,
        whence: &str,
    ) -> Result<(), StoreError> {
        let Some(job) = job else {
            // The job was deleted: nothing to run.
            if fire.state == FireState::Running {
                self.store.abandon(&fire).await?;
            } else if self.store.take_over(&fire, node).await? {
                self.store.misfire_claimed(fire.id, node, "the job was deleted").await?;
            }
            return Ok(());
        };
        if !self.handlers.contains_key(&job.spec.handler) {
            return Ok(()); // a node with the handler recovers it
        }
        let run = |fire_id: i64, attempt: u32| RunFire {
            fire_id,
            execute_id: fire.execute_id,
            job: Arc::clone(job),
            trigger: None,
            fire_time: fire.fire_time,
            attempt,
            node: node.clone(),
            release: None,
        };
        match fire.state {
            FireState::Claimed => {
                if self.store.take_over(&fire, node).await? {
                    self.count(|c| c.recovered += 1);
                    let late_ms = self.clock.db_now().as_millis() - fire.fire_time.as_millis();
                    // Its trigger's policy decides if it is past the
                    // threshold now, or when a thread takes it.
                    let trigger = self.trigger_of(job, fire.execute_id).await?;
                    // A child's fire (the execute is its parent's) has no
                    // trigger of its own: it runs whenever it is found.
                    let chained = job.spec.parent.is_some() && trigger.is_none();
                    if late_ms > self.settings.misfire.threshold_ms && !chained {
                        // Found past the threshold, like any overdue fire: its
                        // policy decides.
                        let cause = format!("{whence}, {late_ms} ms after its time");
                        self.misfired(
                            RunFire {
                                trigger,
                                ..run(fire.id, fire.attempt)
                            },
                            &cause,
                            true,
                        )
                        .await;
                    } else {
                        tracing::info!(
                            scheduler = self.scheduler,
                            job = job.spec.name,
                            fire_id = fire.id,
                            "firing a claimed fire its node did not start"
                        );
                        self.unstarted.lock().insert(fire.id);
                        self.launch_at(
                            fire.fire_time,
                            vec![RunFire {
                                trigger,
                                ..run(fire.id, fire.attempt)
                            }],
                        );
                    }
                }
            }
            FireState::Running if job.spec.requests_recovery => {
                if let Some(fire_id) = self.store.rerun(&fire, node).await? {
                    self.count(|c| c.recovered += 1);
                    tracing::info!(
                        scheduler = self.scheduler,
                        job = job.spec.name,
                        fire_id,
                        "re-running a fire its node died in (the job requests recovery)"
                    );
                    self.unstarted.lock().insert(fire_id);
                    self.launch(run(fire_id, fire.attempt + 1));
                }
            }
            FireState::Running => {
                if self.store.abandon(&fire).await? {
                    self.count(|c| c.recovered += 1);
                    tracing::warn!(
                        scheduler = self.scheduler,
                        job = job.spec.name,
                        fire_id = fire.id,
                        "fire abandoned: its node died mid-run and the job does not request recovery"
                    );
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The trigger of one of a job's executes, if it still exists.
    async fn trigger_of(&self, job: &Job, execute_id: i64) -> Result<Option<Arc<Trigger>>, StoreError> {
        let detail = self.store.get_job(&self.scheduler, &job.spec.name).await?;
        Ok(detail
            .and_then(|d| d.executes.into_iter().find(|e| e.id == execute_id))
            .map(|e| Arc::new(e.trigger)))
    }

    // ---- shutdown ----

    pub(crate) async fn shutdown(&self) -> ShutdownSummary {
        *self.phase.lock() = Phase::ShuttingDown;
        let _ = self.stop.send(true);
        self.queue.lock().clear();
        self.tracked.lock().clear();
        let node = self.node();
        let unstarted: Vec<i64> = self.unstarted.lock().drain().collect();
        let mut released = 0;
        for fire_id in unstarted {
            match self.store.release_fire(fire_id, &node).await {
                Ok(true) => released += 1,
                Ok(false) => {}
                Err(e) => tracing::warn!(scheduler = self.scheduler, fire_id, error = %e, "could not give a fire back"),
            }
        }
        let deadline = tokio::time::Instant::now() + self.settings.shutdown_grace;
        while self.inflight.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let still_running = self.inflight.load(Ordering::SeqCst);
        if still_running > 0 {
            for cancel in self.running.lock().values() {
                let _ = cancel.send(Some(CancelReason::Shutdown));
            }
            tracing::warn!(
                scheduler = self.scheduler,
                still_running,
                "grace period over: running fires cancelled"
            );
        }
        let pool = Arc::clone(&self.pool);
        let _ = tokio::task::spawn_blocking(move || pool.shutdown(Duration::from_millis(500))).await;
        match self.store.leave(&self.scheduler, &node).await {
            Ok(_) => tracing::info!(
                scheduler = self.scheduler,
                node = node.node_id,
                released,
                "node left the cluster"
            ),
            Err(e) => {
                tracing::warn!(scheduler = self.scheduler, error = %e, "could not mark the node gone; it will be declared dead")
            }
        }
        self.stop_tasks();
        *self.phase.lock() = Phase::Stopped;
        ShutdownSummary {
            released,
            still_running,
        }
    }

    pub(crate) fn stop_tasks(&self) {
        let _ = self.stop.send(true);
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
    }
}

/// A compare-and-set from an execute's current row to `set` in `set_state`.
fn cas_from(execute: &Execute, set_state: ExecuteState, set: TriggerState) -> ExecuteCas {
    ExecuteCas {
        execute_id: execute.id,
        expect_state: execute.state,
        expect: execute.fire_state.clone(),
        expect_owner: None,
        set_state,
        set,
        set_owner: None,
        set_trigger: None,
        set_signature: None,
    }
}

/// The release of an execute a fire held in the running state (a fixed-delay
/// trigger awaiting its finish, or a job that disallows concurrency): back to
/// waiting, or complete when nothing follows; a fixed-delay trigger's next fire
/// is one delay after `now`.
fn release_cas(
    execute_id: i64,
    trigger: &Trigger,
    held: &TriggerState,
    owner: Option<NodeRef>,
    now: Timestamp,
) -> ExecuteCas {
    let next = if held.awaiting_finish {
        trigger.next_after_finish(now)
    } else {
        held.next_fire_time
    };
    ExecuteCas {
        execute_id,
        expect_state: ExecuteState::Running,
        expect: held.clone(),
        expect_owner: owner,
        set_state: waiting_or_complete(next),
        set: TriggerState {
            next_fire_time: next,
            awaiting_finish: false,
            ..held.clone()
        },
        set_owner: None,
        set_trigger: None,
        set_signature: None,
    }
}

/// Waiting when a fire follows, complete otherwise.
fn waiting_or_complete(next: Option<Timestamp>) -> ExecuteState {
    if next.is_some() {
        ExecuteState::Waiting
    } else {
        ExecuteState::Complete
    }
}

/// The first fire time at or after `now` of a row whose schedule is new or was
/// edited (a repeat limit already reached completes it).
fn first_at_or_after(trigger: &Trigger, state: &TriggerState, now: Timestamp) -> Option<Timestamp> {
    if trigger
        .repeat_limit()
        .is_some_and(|limit| state.times_triggered >= limit)
    {
        return None;
    }
    let first = trigger.first_fire_time()?;
    if first >= now {
        return Some(first);
    }
    match trigger.schedule() {
        Schedule::Cron { .. } | Schedule::FixedRate { .. } => trigger.fire_time_after(now.saturating_add_millis(-1)),
        // Already due: fire now, unless a once trigger has fired.
        Schedule::Once if state.times_triggered > 0 => None,
        Schedule::Once | Schedule::FixedDelay { .. } => match trigger.end() {
            Some(end) if now > end => None,
            _ => Some(now),
        },
    }
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

async fn sleep_until_or_forever(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// splitmix64's finaliser: spreads ids over the hash space.
/// Weighted rendezvous hashing: the node with the highest `-w / ln(u)`, `u` a
/// hash of the key and the node in (0, 1). Every node computes the same choice
/// from the same members, and each node gets keys in proportion to its weight.
fn rendezvous<'a>(key: u64, nodes: impl Iterator<Item = &'a Node>, weight: impl Fn(&Node) -> f64) -> Option<String> {
    nodes
        .map(|n| {
            let h = mix(key ^ fnv(n.node_id.as_bytes()));
            #[allow(clippy::cast_precision_loss)]
            let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            (-weight(n) / u.ln(), n)
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, n)| n.node_id.clone())
}

pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}
