//! A node: its stages, wired. Each stage is a type of its own file that
//! keeps its own state, holds the node's shared context ([`Ctx`]) and the
//! stages after it, and runs a loop of its own where it has one. A fire
//! travels forward through them, in this order: [`Poller`] (poll, expand,
//! overdue rows) fills the [`FireQueue`]; [`Dispatcher`] (claims, bounded
//! by the lanes' room); [`Launcher`] (fenced start, ahead of the fire
//! time); [`Runner`] (a lane, timeout, outcome, release); [`Recorder`]
//! (outcomes, batched). Retries, late runs and a chain's children that
//! wait for room go from the runner to the [`Backlog`] on a channel, its
//! other children to the launcher through its [`Launch`] handle; the
//! [`Cluster`] (heartbeats, dead nodes, rejoin) runs [`Recovery`], which
//! hands what it takes over to the launcher; the change watcher and the
//! purge are [`super::maintenance`]'s.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use quartz_pool::Pool;
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;

use super::backlog::Backlog;
use super::clock::{Clock, ClockHooks};
use super::cluster::Cluster;
use super::context::{Ctx, Parts, RECOVERY_BATCH};
use super::dispatcher::Dispatcher;
use super::error::SchedulerError;
use super::fixed::HashMap;
use super::handler::{CancelReason, Handler, States};
use super::launch::Launcher;
use super::launch_handle::Launch;
use super::poller::Poller;
use super::queue::FireQueue;
use super::recorder::Recorder;
use super::recovery::Recovery;
use super::runner::Runner;
use super::settings::Settings;
use super::status::{NodeStatus, Phase, ShutdownSummary};
use crate::runlog::{RunEvent, RunLog};
use crate::store::PayloadSchemas;
use crate::store::{AdminBound, Deadline, JobSpec, NodeRef, NodeRegistration, SharedStore};
use crate::time::Timestamp;

/// How long a shutdown tries to give its claimed fires back.
pub(crate) const GIVE_BACK_LIMIT: Duration = Duration::from_secs(5);
/// How long a shutdown waits, after the grace, for the running fires it
/// asked to stop.
pub(crate) const CANCEL_WAIT: Duration = Duration::from_secs(1);
/// How long a shutdown waits for the database to mark the node gone.
pub(crate) const LEAVE_LIMIT: Duration = Duration::from_secs(2);

/// What a shutdown gave back of its claimed fires.
#[derive(Debug, Default)]
struct GivenBack {
    /// Claimed fires known to give back.
    known: usize,
    /// Tried so far.
    tried: usize,
    /// Given back.
    released: usize,
    /// Whose give-back failed.
    failed: usize,
}

impl GivenBack {
    /// Claims not given back: failed, or not tried before the limit.
    fn left(&self) -> usize {
        self.failed + self.known.saturating_sub(self.tried)
    }
}

/// A node: its context, the queue between its poller and dispatcher, and
/// the tasks of its stages.
pub(crate) struct Stages {
    pub(super) ctx: Arc<Ctx>,
    /// The store the node was given, scoped to its scheduler (the stages
    /// call it through a deadline).
    pub(super) given: SharedStore,
    /// The same, as the node's admin surface calls it: a few calls at once,
    /// each bounded ([`AdminBound`]), so that no reader starves the
    /// stages of the pool's connections.
    pub(super) admin_store: SharedStore,
    queue: Arc<FireQueue>,
    /// The stages' tasks, to abort when the node is dropped unstopped.
    tasks: Vec<AbortHandle>,
}

impl Stages {
    pub(crate) async fn start(
        store: SharedStore,
        scheduler: String,
        settings: Settings,
        (handlers, states, schemas): (HashMap<String, Handler>, States, PayloadSchemas),
        (clock_hooks, run_sink, span_linker): (ClockHooks, Option<crate::runlog::RunSink>, Option<super::SpanLinker>),
    ) -> Result<Stages, SchedulerError> {
        // Every call the node makes has a deadline.
        let given = store.scoped(&scheduler);
        let (ctx, feeds) = context(
            given.clone(),
            scheduler,
            settings,
            (handlers, states, schemas),
            (clock_hooks, run_sink, span_linker),
        )
        .await?;
        let Feeds {
            members: members_tx,
            misfires: misfires_rx,
            latest_jobs: latest_jobs_tx,
        } = feeds;
        // The stages, from the last a fire reaches to the first.
        let lease: super::recorder::Lease = {
            let ctx = Arc::clone(&ctx);
            Arc::new(move || ctx.membership_fresh())
        };
        let (parents, parents_rx) = watch::channel(Default::default());
        let recorder = Arc::new(Recorder::start(
            ctx.store.clone(),
            ctx.scheduler.clone(),
            ctx.stop_signal(),
            lease,
            parents_rx,
        ));
        let (pending_tx, pending_rx) = mpsc::unbounded_channel();
        let (launch, inbox) = Launch::new(Arc::clone(&ctx));
        let runner = Arc::new(Runner::new(
            Arc::clone(&ctx),
            Arc::clone(&recorder),
            pending_tx.clone(),
            launch.clone(),
        ));
        let launcher = Launcher::new(Arc::clone(&ctx), Arc::clone(&runner), inbox);
        let backlog = Arc::new(Backlog::new(Arc::clone(&ctx), launch.clone()));
        let queue = Arc::new(FireQueue::default());
        let dispatcher = Dispatcher::new(Arc::clone(&ctx), Arc::clone(&queue), launch.clone());
        let poller = Poller::new(
            Arc::clone(&ctx),
            Arc::clone(&queue),
            pending_tx,
            parents,
            misfires_rx,
            latest_jobs_tx,
        );
        let recovery = Recovery::new(Arc::clone(&ctx), launch, runner);
        let cluster = Cluster::new(Arc::clone(&ctx), Arc::clone(&queue), recovery, members_tx);
        let tasks = [
            tokio::spawn(poller.run()),
            tokio::spawn(dispatcher.run()),
            tokio::spawn(launcher.run()),
            tokio::spawn(backlog.run(pending_rx)),
            tokio::spawn(cluster.run()),
            tokio::spawn(super::maintenance::change_watcher(Arc::clone(&ctx))),
            tokio::spawn(super::maintenance::maintenance(Arc::clone(&ctx))),
        ]
        .map(|task| task.abort_handle())
        .into();
        Ok(Stages {
            ctx,
            admin_store: AdminBound::wrap(given.clone()),
            given,
            queue,
            tasks,
        })
    }

    pub(crate) fn node(&self) -> NodeRef {
        self.ctx.node()
    }

    pub(crate) fn status(&self) -> NodeStatus {
        let ctx = &self.ctx;
        NodeStatus {
            scheduler: ctx.scheduler.clone(),
            node: ctx.node(),
            phase: ctx.phase(),
            members: ctx.members.borrow().clone(),
            pool: ctx.pool.metrics(),
            tasks: ctx.flights.task_room.held(),
            counters: ctx.counters(),
            db_offset_ms: ctx.clock.offset_ms(),
            running: ctx.flights.running_count(),
            holds_lease: ctx.membership_fresh(),
        }
    }

    pub(crate) fn check_handler(&self, job: &JobSpec) -> Result<(), SchedulerError> {
        if self.ctx.handlers.contains_key(&job.handler) {
            return Ok(());
        }
        let mut known: Vec<&str> = self.ctx.handlers.keys().map(String::as_str).collect();
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

    /// Leaves the cluster, every step bounded whatever the database does:
    /// the claims are given back (within [`GIVE_BACK_LIMIT`]) while running
    /// fires have [`Settings::shutdown_grace`] to finish (then they are
    /// asked to stop and given [`CANCEL_WAIT`]), and the node is marked
    /// gone (within [`LEAVE_LIMIT`]). What could not be done is logged and
    /// summed up, for the cluster's recovery to finish once this node is
    /// declared dead.
    pub(crate) async fn shutdown(&self) -> ShutdownSummary {
        if !self.ctx.begin_shutdown() {
            return ShutdownSummary::default();
        }
        super::metrics::phased(&self.ctx.scheduler, Phase::ShuttingDown);
        self.ctx.stop();
        self.queue.clear();
        let node = self.ctx.node();
        let deadline = tokio::time::Instant::now() + self.ctx.settings.shutdown_grace;
        let mut back = GivenBack::default();
        let give_back = tokio::time::timeout(GIVE_BACK_LIMIT, self.give_back(&node, &mut back));
        let finish = async {
            while self.ctx.flights.in_flight() > 0 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let (gave_back, ()) = tokio::join!(give_back, finish);
        if gave_back.is_err() {
            tracing::warn!(
                scheduler = self.ctx.scheduler,
                released = back.released,
                left = back.left(),
                limit_ms = GIVE_BACK_LIMIT.as_millis(),
                "the database did not take every claimed fire back in time: the rest are left to recovery"
            );
        }
        let still_running = self.ctx.flights.in_flight();
        if still_running > 0 {
            self.ctx.flights.cancel_all(CancelReason::Shutdown);
            tracing::warn!(
                scheduler = self.ctx.scheduler,
                still_running,
                "grace period over: running fires cancelled"
            );
            let until = tokio::time::Instant::now() + CANCEL_WAIT;
            while self.ctx.flights.in_flight() > 0 && tokio::time::Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let pool = Arc::clone(&self.ctx.pool);
        let _ = tokio::task::spawn_blocking(move || pool.shutdown(Duration::from_millis(500))).await;
        let left = match tokio::time::timeout(LEAVE_LIMIT, self.ctx.store.leave(&node)).await {
            Ok(Ok(_)) => {
                tracing::info!(
                    scheduler = self.ctx.scheduler,
                    node = node.node_id,
                    released = back.released,
                    "node left the cluster"
                );
                true
            }
            Ok(Err(e)) => {
                tracing::warn!(scheduler = self.ctx.scheduler, error = %e, "could not mark the node gone; it will be declared dead");
                false
            }
            Err(_) => {
                tracing::warn!(
                    scheduler = self.ctx.scheduler,
                    limit_ms = LEAVE_LIMIT.as_millis(),
                    "the database did not mark the node gone in time; it will be declared dead"
                );
                false
            }
        };
        let running = self.ctx.flights.running_count();
        let unrecorded = self.ctx.flights.in_flight().saturating_sub(running);
        if running + unrecorded + back.left() > 0 || !left {
            tracing::warn!(
                scheduler = self.ctx.scheduler,
                node = node.node_id,
                incarnation = node.incarnation,
                claims_not_given_back = back.left(),
                handlers_still_running = running,
                outcomes_not_recorded = unrecorded,
                marked_gone = left,
                "stopped, leaving work behind: the cluster's recovery takes it once this node is declared dead"
            );
        }
        self.stop_tasks();
        self.ctx.note(|db_ms, local_ms| RunEvent::Close {
            node: node.node_id.clone(),
            db_ms,
            local_ms,
        });
        self.ctx.set_phase(Phase::Stopped);
        super::metrics::stopped(&self.ctx.scheduler, &self.ctx.pool.metrics());
        ShutdownSummary {
            released: back.released,
            still_running,
            claims_left: back.left(),
            outcomes_unrecorded: unrecorded,
            marked_gone: left,
        }
    }

    /// Gives back the fires this incarnation won and has not started: the
    /// ones it knows, and any whose claim it has not heard back from yet (as
    /// the ledger has them), counting in `back` as it goes (so that a
    /// shutdown that stops waiting knows what is left). A start racing with
    /// this wins or loses by the fire's state; a started fire runs, and the
    /// shutdown waits for it.
    async fn give_back(&self, node: &NodeRef, back: &mut GivenBack) {
        let mut ids = self.ctx.flights.take_unstarted();
        back.known = ids.len();
        let everything = Timestamp::from_millis(i64::MAX / 2);
        match self.ctx.store.claimed_by(node, everything, RECOVERY_BATCH).await {
            Ok(fires) => ids.extend(fires.iter().map(|f| f.id)),
            Err(e) => tracing::warn!(scheduler = self.ctx.scheduler, error = %e, "could not read this node's claims"),
        }
        back.known = ids.len();
        for fire_id in ids {
            match self.ctx.give_back_fire(fire_id, node).await {
                Ok(true) => back.released += 1,
                Ok(false) => {}
                Err(e) => {
                    back.failed += 1;
                    tracing::warn!(scheduler = self.ctx.scheduler, fire_id, error = %e, "could not give a fire back")
                }
            }
            back.tried += 1;
        }
    }

    pub(crate) fn stop_tasks(&self) {
        self.ctx.stop();
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// What this node registers: its id (the setting, or `host-pid-n`), host,
/// process, weight and the handlers it offers.
/// Creates a node's run log in `dir` and writes its first line.
fn open_run_log(
    dir: &std::path::Path,
    scheduler: &str,
    registration: &NodeRegistration,
    local_ms: i64,
) -> Result<RunLog, SchedulerError> {
    let log =
        RunLog::create(dir, scheduler, &registration.node_id, local_ms).map_err(|source| SchedulerError::RunLog {
            dir: dir.to_owned(),
            source,
        })?;
    Ok(opened(log, scheduler, registration, local_ms))
}

/// A run log with its first line written.
fn opened(log: RunLog, scheduler: &str, registration: &NodeRegistration, local_ms: i64) -> RunLog {
    log.write(&RunEvent::Open {
        scheduler: scheduler.to_owned(),
        node: registration.node_id.clone(),
        host: registration.host.clone(),
        pid: registration.pid,
        local_ms,
    });
    log
}

/// How long a starting node keeps trying its first calls (the clock reading
/// and its registration) when the database does not answer within the
/// node's deadline, is unavailable or rolls the call back: a database busy
/// or restarting as the service starts delays the node instead of failing
/// its start. A running node's deadlines stay as they are.
const START_PATIENCE: Duration = Duration::from_secs(15);

/// Runs a starting node's call, trying again (with a warning) while its
/// error may pass and [`START_PATIENCE`] lasts.
async fn at_start<T, F, Fut>(scheduler: &str, what: &str, mut call: F) -> Result<T, crate::store::StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, crate::store::StoreError>>,
{
    use crate::store::StoreError;
    let began = tokio::time::Instant::now();
    let mut wait = Duration::from_millis(100);
    loop {
        match call().await {
            Err(e @ (StoreError::TimedOut { .. } | StoreError::Unavailable { .. } | StoreError::Conflict { .. }))
                if began.elapsed() + wait < START_PATIENCE =>
            {
                tracing::warn!(scheduler, error = %e, "{what} failed as the node starts; trying again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
            done => return done,
        }
    }
}

/// What the stages around a node's context take of it: the membership's
/// sender (the cluster stage's), what misfired (the poller's) and the
/// publisher of the jobs a poll read (the poller's).
pub(super) struct Feeds {
    members: watch::Sender<Vec<crate::store::Node>>,
    misfires: mpsc::UnboundedReceiver<super::misfires::Misfired>,
    latest_jobs: watch::Sender<super::flight::LatestJobs>,
}

/// Registers a node on `given` (a store scoped to its scheduler, which the
/// node calls through a deadline) and builds its context: its clock, pool,
/// run log and registration.
pub(super) async fn context(
    given: SharedStore,
    scheduler: String,
    settings: Settings,
    (handlers, states, schemas): (HashMap<String, Handler>, States, PayloadSchemas),
    (clock_hooks, run_sink, span_linker): (ClockHooks, Option<crate::runlog::RunSink>, Option<super::SpanLinker>),
) -> Result<(Arc<Ctx>, Feeds), SchedulerError> {
    let clock = Clock::new(clock_hooks);
    let store = Deadline::wrap(given, settings.store_deadline());
    let registration = registration(&settings, &handlers, schemas);
    let pool = Pool::builder()
        .core(settings.pool_core)
        .max(settings.pool_max)
        .queue_capacity(settings.pool_queue)
        .keep_alive(settings.pool_keep_alive)
        .thread_name_prefix(format!("quartz-{scheduler}"))
        .build()?;
    let run_log = match (run_sink, &settings.run_log) {
        (Some(sink), _) => Some(opened(RunLog::sink(sink), &scheduler, &registration, clock.local_ms())),
        (None, Some(dir)) => Some(open_run_log(dir, &scheduler, &registration, clock.local_ms())?),
        (None, None) => None,
    };
    let (asked, db_now) = at_start(&scheduler, "reading the database's clock", || async {
        let asked = clock.local_ms();
        store.now().await.map(|now| (asked, now))
    })
    .await?;
    clock.observe(db_now, asked);
    let registered_at = clock.mono_ms();
    let registered = at_start(&scheduler, "registering the node", || {
        store.register_node(&registration)
    })
    .await?;
    if let Some(log) = &run_log {
        log.write(&RunEvent::Registered {
            node: registered.node_id.clone(),
            incarnation: registered.incarnation,
            db_ms: clock.db_now().as_millis(),
            local_ms: clock.local_ms(),
        });
    }
    let standby = store.standby().await?.is_some();
    tracing::info!(scheduler, node = %registered.node_id, incarnation = registered.incarnation, "node registered");
    let (members_tx, members) = watch::channel(vec![registered.clone()]);
    let (misfires, misfires_rx) = mpsc::unbounded_channel();
    let (latest_jobs_tx, latest_jobs) = watch::channel(Default::default());
    let feeds = Feeds {
        members: members_tx,
        misfires: misfires_rx,
        latest_jobs: latest_jobs_tx,
    };
    let ctx = Arc::new(Ctx::new(Parts {
        store,
        scheduler,
        settings,
        handlers,
        states,
        pool,
        clock,
        registration,
        node: registered,
        members,
        registered_at,
        standby,
        run_log,
        misfires,
        latest_jobs,
        span_linker,
    }));
    Ok((ctx, feeds))
}

/// A node's context for a test of one stage: registered on `given` (a
/// store scoped to `scheduler`) with default settings and one handler.
#[cfg(test)]
pub(super) async fn test_context(given: SharedStore, scheduler: &str, handler: (&str, Handler)) -> Arc<Ctx> {
    let handlers: HashMap<String, Handler> = [(handler.0.to_owned(), handler.1)].into_iter().collect();
    let (ctx, _feeds) = context(
        given,
        scheduler.to_owned(),
        Settings::default(),
        (handlers, Default::default(), PayloadSchemas::new()),
        (ClockHooks::default(), None, None),
    )
    .await
    .expect("a node registers on the in-memory store");
    ctx
}

fn registration(
    settings: &Settings,
    handlers: &HashMap<String, Handler>,
    payload_schemas: PayloadSchemas,
) -> NodeRegistration {
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
        payload_schemas,
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
