//! A node: its stages, wired. Each stage is a type of its own file that
//! keeps its own state, holds the node's shared context ([`Ctx`]) and the
//! stages after it, and runs a loop of its own where it has one. A fire
//! travels forward through them, in this order: [`Poller`] (poll, expand,
//! overdue rows) fills the [`FireQueue`]; [`Dispatcher`] (claims, bounded
//! by the lanes' room); [`Launcher`] (fenced start, ahead of the fire
//! time); [`Runner`] (a lane, timeout, outcome, release); [`Recorder`]
//! (outcomes, batched). Retries and late runs go from the runner to the
//! [`Backlog`], and a chain's children to the launcher, on channels; the
//! [`Cluster`] (heartbeats, dead nodes, rejoin) runs [`Recovery`], which
//! hands what it takes over to the launcher; the change watcher and the
//! purge are [`super::maintenance`]'s.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use quartz_pool::Pool;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::backlog::Backlog;
use super::clock::{Clock, ClockHooks};
use super::cluster::Cluster;
use super::context::{Ctx, Parts, RECOVERY_BATCH};
use super::dispatcher::Dispatcher;
use super::handler::{CancelReason, Handler, States};
use super::launch::Launcher;
use super::poller::Poller;
use super::queue::FireQueue;
use super::recorder::Recorder;
use super::recovery::Recovery;
use super::runner::Runner;
use super::{NodeStatus, Phase, SchedulerError, Settings, ShutdownSummary};
use crate::runlog::{RunEvent, RunLog};
use crate::store::{JobSpec, NodeRef, NodeRegistration, SharedStore};
use crate::time::Timestamp;

/// A node: its context, the queue between its poller and dispatcher, and
/// the tasks of its stages.
pub(crate) struct Stages {
    pub(super) ctx: Arc<Ctx>,
    queue: Arc<FireQueue>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Stages {
    pub(crate) async fn start(
        store: SharedStore,
        scheduler: String,
        settings: Settings,
        (handlers, states): (HashMap<String, Handler>, States),
        clock_hooks: ClockHooks,
    ) -> Result<Stages, SchedulerError> {
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
        let run_log = match &settings.run_log {
            Some(dir) => Some(open_run_log(dir, &scheduler, &registration, clock.local_ms())?),
            None => None,
        };
        let db_now = store.now().await?;
        clock.observe(db_now);
        let registered_at = clock.db_now();
        let registered = store.register_node(&registration).await?;
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
            registered_at,
            standby,
            run_log,
        }));
        // The stages, from the last a fire reaches to the first.
        let recorder = Arc::new(Recorder::start(
            ctx.store.clone(),
            ctx.scheduler.clone(),
            ctx.stop_signal(),
        ));
        let (pending_tx, pending_rx) = mpsc::unbounded_channel();
        let (chained_tx, chained_rx) = mpsc::unbounded_channel();
        let runner = Arc::new(Runner::new(
            Arc::clone(&ctx),
            Arc::clone(&recorder),
            pending_tx,
            chained_tx,
        ));
        let launcher = Arc::new(Launcher::new(Arc::clone(&ctx), Arc::clone(&runner)));
        let backlog = Arc::new(Backlog::new(Arc::clone(&ctx), Arc::clone(&launcher)));
        let queue = Arc::new(FireQueue::default());
        let dispatcher = Dispatcher::new(Arc::clone(&ctx), Arc::clone(&queue), Arc::clone(&launcher));
        let poller = Poller::new(Arc::clone(&ctx), Arc::clone(&queue), Arc::clone(&backlog), recorder);
        let recovery = Recovery::new(Arc::clone(&ctx), Arc::clone(&launcher), runner);
        let cluster = Cluster::new(Arc::clone(&ctx), Arc::clone(&queue), recovery);
        let tasks = vec![
            tokio::spawn(Arc::new(poller).run()),
            tokio::spawn(Arc::new(dispatcher).run()),
            tokio::spawn(launcher.run(chained_rx)),
            tokio::spawn(backlog.run(pending_rx)),
            tokio::spawn(Arc::new(cluster).run()),
            tokio::spawn(super::maintenance::change_watcher(Arc::clone(&ctx))),
            tokio::spawn(super::maintenance::maintenance(Arc::clone(&ctx))),
        ];
        Ok(Stages {
            ctx,
            queue,
            tasks: Mutex::new(tasks),
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
            members: ctx.members.read().clone(),
            pool: ctx.pool.metrics(),
            tasks: ctx.flights.task_room.held(),
            counters: ctx.counters(),
            db_offset_ms: ctx.clock.offset_ms(),
            running: ctx.flights.running_count(),
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

    pub(crate) async fn shutdown(&self) -> ShutdownSummary {
        if !self.ctx.begin_shutdown() {
            return ShutdownSummary::default();
        }
        super::metrics::phased(&self.ctx.scheduler, Phase::ShuttingDown);
        self.ctx.stop();
        self.queue.clear();
        let node = self.ctx.node();
        let released = self.give_back(&node).await;
        let deadline = tokio::time::Instant::now() + self.ctx.settings.shutdown_grace;
        while self.ctx.flights.in_flight() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let still_running = self.ctx.flights.in_flight();
        if still_running > 0 {
            self.ctx.flights.cancel_all(CancelReason::Shutdown);
            tracing::warn!(
                scheduler = self.ctx.scheduler,
                still_running,
                "grace period over: running fires cancelled"
            );
        }
        let pool = Arc::clone(&self.ctx.pool);
        let _ = tokio::task::spawn_blocking(move || pool.shutdown(Duration::from_millis(500))).await;
        match self.ctx.store.leave(&node).await {
            Ok(_) => tracing::info!(
                scheduler = self.ctx.scheduler,
                node = node.node_id,
                released,
                "node left the cluster"
            ),
            Err(e) => {
                tracing::warn!(scheduler = self.ctx.scheduler, error = %e, "could not mark the node gone; it will be declared dead")
            }
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
            released,
            still_running,
        }
    }

    /// Gives back the fires this incarnation won and has not started: the
    /// ones it knows, and any whose claim it has not heard back from yet (as
    /// the ledger has them). A start racing with this wins or loses by the
    /// fire's state; a started fire runs, and the shutdown waits for it.
    async fn give_back(&self, node: &NodeRef) -> usize {
        let mut ids = self.ctx.flights.take_unstarted();
        let everything = Timestamp::from_millis(i64::MAX / 2);
        match self.ctx.store.claimed_by(node, everything, RECOVERY_BATCH).await {
            Ok(fires) => ids.extend(fires.iter().map(|f| f.id)),
            Err(e) => tracing::warn!(scheduler = self.ctx.scheduler, error = %e, "could not read this node's claims"),
        }
        let mut released = 0;
        for fire_id in ids {
            match self.ctx.give_back_fire(fire_id, node).await {
                Ok(true) => released += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(scheduler = self.ctx.scheduler, fire_id, error = %e, "could not give a fire back")
                }
            }
        }
        released
    }

    pub(crate) fn stop_tasks(&self) {
        self.ctx.stop();
        for task in self.tasks.lock().drain(..) {
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
    log.write(&RunEvent::Open {
        scheduler: scheduler.to_owned(),
        node: registration.node_id.clone(),
        host: registration.host.clone(),
        pid: registration.pid,
        local_ms,
    });
    Ok(log)
}

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
