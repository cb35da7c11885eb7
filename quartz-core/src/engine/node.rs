//! A node's shared state, its start and its stop. The stages a fire travels
//! through each have a file of their own, in this order: [`super::poller`]
//! (poll, expand, overdue rows), [`super::queue`] (the fires waiting for
//! their claim), [`super::dispatcher`] (claims, bounded by the pool's room),
//! [`super::launch`] (fenced start, ahead of the fire time, then the pool),
//! [`super::supervise`] (timeout, outcome, release, retry, chain),
//! [`super::completer`] (outcomes, batched); beside them
//! [`super::backlog`] (retries and late runs, which are ledger rows),
//! [`super::cluster`] (heartbeats, dead nodes, rejoin), [`super::recovery`]
//! and [`super::maintenance`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use quartz_pool::Pool;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::clock::{Clock, ClockHooks};
use super::cluster::ClusterState;
use super::completer::Recorder;
use super::handler::{CancelReason, Handler, States};
use super::launch::LaunchState;
use super::queue::FireQueue;
use super::{Counters, NodeStatus, Phase, SchedulerError, Settings, ShutdownSummary};
use crate::store::{
    ExecuteCas, ExecuteState, FireEnd, Job, JobSpec, NodeRef, NodeRegistration, SharedStore, StoreError,
};
use crate::time::Timestamp;
use crate::trigger::{Trigger, TriggerState};

/// How many times recording an outcome is tried before it is left to recovery.
pub(super) const FINISH_TRIES: u32 = 5;

/// A node: what its tasks share. Each stage's own state is a field of its
/// type ([`FireQueue`], [`LaunchState`], [`ClusterState`]); the rest is
/// read by several stages.
pub(crate) struct Inner {
    pub(crate) store: SharedStore,
    pub(crate) scheduler: String,
    pub(super) settings: Settings,
    pub(super) handlers: HashMap<String, Handler>,
    /// What the handlers share ([`JobContext::state`](super::JobContext::state)).
    pub(super) states: States,
    pub(super) pool: Arc<Pool>,
    pub(super) runtime: tokio::runtime::Handle,
    pub(super) clock: Clock,
    pub(super) registration: NodeRegistration,
    pub(super) node: RwLock<NodeRef>,
    pub(super) phase: Mutex<Phase>,
    /// Set once: stop claiming and starting fires.
    pub(super) stop: watch::Sender<bool>,
    pub(crate) poll_now: Notify,
    /// How long the last poll took (the window reaches past the next poll
    /// by twice that).
    pub(super) poll_took: Mutex<Duration>,
    /// The fires waiting for their claim.
    pub(super) queue: FireQueue,
    /// Won fires on their way to the pool, and the room the pool has.
    pub(super) launch: LaunchState,
    /// Running fires' cancellation senders.
    pub(super) running: Mutex<HashMap<i64, watch::Sender<Option<CancelReason>>>>,
    /// Fires started (marked running) whose outcome is not recorded yet: a
    /// shutdown waits for them.
    pub(super) inflight: AtomicUsize,
    /// Membership: the nodes as last read, and this node's own heartbeats.
    pub(super) cluster: ClusterState,
    pub(super) counters: Mutex<Counters>,
    /// Pending fires (retries, late runs) this node waits on, by ledger id.
    pub(super) pending_queued: Mutex<HashSet<i64>>,
    pub(super) tasks: Mutex<Vec<JoinHandle<()>>>,
    pub(super) warned: Mutex<HashSet<String>>,
    /// What misfired since the last poll, for its one-line report.
    pub(super) misfires: Mutex<super::supervise::Misfires>,
    /// Outcomes to the ledger, and starts confirmed again.
    pub(super) recorder: Recorder,
}

impl Inner {
    pub(crate) async fn start(
        store: SharedStore,
        scheduler: String,
        settings: Settings,
        (handlers, states): (HashMap<String, Handler>, States),
        clock_hooks: ClockHooks,
    ) -> Result<Arc<Inner>, SchedulerError> {
        let clock = Clock::new(clock_hooks);
        let store = store.scoped(&scheduler);
        let registration = registration(&settings, &handlers);
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
        let stop = watch::channel(false).0;
        let recorder = Recorder::start(store.clone(), scheduler.clone(), stop.subscribe());
        let inner = Arc::new(Inner {
            store,
            scheduler,
            states,
            settings,
            handlers,
            pool: Arc::new(pool),
            runtime: tokio::runtime::Handle::current(),
            clock,
            registration,
            node: RwLock::new(node),
            phase: Mutex::new(Phase::Running),
            stop,
            poll_now: Notify::new(),
            poll_took: Mutex::new(Duration::ZERO),
            queue: FireQueue::default(),
            launch: LaunchState::default(),
            running: Mutex::new(HashMap::new()),
            inflight: AtomicUsize::new(0),
            cluster: ClusterState::new(registered),
            counters: Mutex::new(Counters::default()),
            pending_queued: Mutex::new(HashSet::new()),
            tasks: Mutex::new(Vec::new()),
            warned: Mutex::new(HashSet::new()),
            misfires: Mutex::default(),
            recorder,
        });
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

    pub(super) fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Updates the node's counters, and records what was added as metrics.
    pub(super) fn count(&self, f: impl FnOnce(&mut Counters)) {
        let mut counters = self.counters.lock();
        let before = *counters;
        f(&mut counters);
        let after = *counters;
        drop(counters);
        super::metrics::counted(&self.scheduler, &before, &after);
    }

    pub(crate) fn status(&self) -> NodeStatus {
        NodeStatus {
            scheduler: self.scheduler.clone(),
            node: self.node(),
            phase: *self.phase.lock(),
            members: self.cluster.members.read().clone(),
            pool: self.pool.metrics(),
            tasks: self.launch.task_room.held(),
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
    pub(super) async fn db_now(&self) -> Result<Timestamp, StoreError> {
        let now = self.store.now().await?;
        self.clock.observe(now);
        Ok(now)
    }

    /// The jobs with these ids, by id.
    pub(super) async fn jobs(&self, ids: impl Iterator<Item = i64>) -> Result<HashMap<i64, Arc<Job>>, StoreError> {
        let ids: Vec<i64> = ids.collect();
        let jobs = self.store.jobs_by_id(&ids).await?;
        Ok(jobs.into_iter().map(|j| (j.id, Arc::new(j))).collect())
    }

    /// Waits for `d`, or until the node stops; `false` when it stopped.
    pub(super) async fn pause(&self, d: Duration) -> bool {
        let mut stop = self.stop.subscribe();
        tokio::select! {
            () = tokio::time::sleep(d) => !self.stopping(),
            _ = stop.wait_for(|s| *s) => false,
        }
    }

    pub(crate) async fn shutdown(&self) -> ShutdownSummary {
        {
            let mut phase = self.phase.lock();
            if matches!(*phase, Phase::ShuttingDown | Phase::Stopped) {
                return ShutdownSummary::default();
            }
            *phase = Phase::ShuttingDown;
        }
        super::metrics::phased(&self.scheduler, Phase::ShuttingDown);
        let _ = self.stop.send(true);
        self.queue.clear();
        let node = self.node();
        let released = self.give_back(&node).await;
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
        match self.store.leave(&node).await {
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
        super::metrics::stopped(&self.scheduler, &self.pool.metrics());
        ShutdownSummary {
            released,
            still_running,
        }
    }

    /// Gives back the fires this incarnation won and has not started: the
    /// ones it knows, and any whose claim it has not heard back from yet (as
    /// the ledger has them). A start racing with this wins or loses by the
    /// fire's state; a started fire runs, and the shutdown waits for it.
    async fn give_back(&self, node: &NodeRef) -> usize {
        let mut ids: HashSet<i64> = self.launch.unstarted.lock().drain().collect();
        let everything = Timestamp::from_millis(i64::MAX / 2);
        match self
            .store
            .claimed_by(node, everything, super::recovery::RECOVERY_BATCH)
            .await
        {
            Ok(fires) => ids.extend(fires.iter().map(|f| f.id)),
            Err(e) => tracing::warn!(scheduler = self.scheduler, error = %e, "could not read this node's claims"),
        }
        let mut released = 0;
        for fire_id in ids {
            match self.give_back_fire(fire_id, node).await {
                Ok(true) => released += 1,
                Ok(false) => {}
                Err(e) => tracing::warn!(scheduler = self.scheduler, fire_id, error = %e, "could not give a fire back"),
            }
        }
        released
    }

    /// Gives a claimed, unstarted fire back, for any node to take at once;
    /// whether it was still this incarnation's to give.
    pub(super) async fn give_back_fire(&self, fire_id: i64, node: &NodeRef) -> Result<bool, StoreError> {
        Ok(self.store.end_fire(fire_id, node, FireEnd::Released).await?.ended())
    }

    pub(crate) fn stop_tasks(&self) {
        let _ = self.stop.send(true);
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
    }
}

/// The release of an execute a fire held in the running state (a fixed-delay
/// trigger awaiting its finish, or a job that disallows concurrency): back to
/// waiting, or complete when nothing follows; a fixed-delay trigger's next fire
/// is one delay after `now`.
pub(super) fn release_cas(
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
pub(super) fn waiting_or_complete(next: Option<Timestamp>) -> ExecuteState {
    if next.is_some() {
        ExecuteState::Waiting
    } else {
        ExecuteState::Complete
    }
}

/// The first fire time at or after `now` of a row whose schedule is new or was
/// edited (a repeat limit already reached completes it).
pub(super) fn first_at_or_after(trigger: &Trigger, state: &TriggerState, now: Timestamp) -> Option<Timestamp> {
    trigger.first_at_or_after(state, now)
}

pub(super) fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

pub(super) async fn sleep_until_or_forever(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// What this node registers: its id (the setting, or `host-pid-n`), host,
/// process, weight and the handlers it offers.
fn registration(settings: &Settings, handlers: &HashMap<String, Handler>) -> NodeRegistration {
    let host = hostname();
    let node_id = settings.node_id.clone().unwrap_or_else(|| {
        static N: AtomicU64 = AtomicU64::new(0);
        format!("{host}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
    });
    let mut names: Vec<String> = handlers.keys().cloned().collect();
    names.sort_unstable();
    NodeRegistration {
        node_id,
        host,
        pid: std::process::id(),
        weight: settings.weight,
        handlers: names,
        dead_after: Some(settings.dead_after),
    }
}

/// The host's name, for the node's row and default id: the one thing a node
/// reads from its host besides the time (`HOSTNAME`, then `/etc/hostname`).
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
