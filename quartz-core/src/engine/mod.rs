//! The scheduler engine: a node of a cluster that polls, expands, claims and
//! runs fires, keeps its membership, recovers dead nodes' work and handles
//! misfires, all over a [`Store`](crate::store::Store).
//!
//! # The fire path
//!
//! 1. **Poll** every [`Settings::poll_interval`]: read the database clock, select
//!    the waiting executes due before `db_now + window` (in bounded batches, by
//!    the index), with their jobs. Rows written by hand are initialised or
//!    recomputed here, once, by compare-and-set; overdue rows go to the misfire
//!    policy.
//! 2. **Expand** each execute into its fire times inside the window, in order.
//! 3. **Claim** each fire at its time (less [`Settings::claim_lead`]), on a
//!    timer corrected to database time, with one compare-and-set per run of
//!    consecutive fires of an execute; fires due together are claimed in one
//!    call, no more than the pool has room for.
//! 4. **Start** the won fires due together a start lead (a few milliseconds)
//!    before their time: one statement marks them running, fenced by the
//!    incarnation that claimed them.
//! 5. **Run**: at its scheduled time (never before) the fire goes to the
//!    pool; the handler runs with a [`JobContext`]; the outcome goes to the
//!    ledger. Timeouts, retries (pending ledger rows), fixed-delay successors
//!    and non-concurrent jobs are handled here.
//!
//! What a node does is recorded as [`metrics`] through the `metrics` facade.
//!
//! Beside it, a cluster task heart-beats, declares nodes dead after
//! [`Settings::dead_after`] (database time), and recovers their fires: claimed
//! ones are fired here, running ones re-run when the job requests recovery and
//! are recorded abandoned otherwise.
//!
//! ```no_run
//! # async fn demo<S: quartz_core::store::Store>(store: S) -> Result<(), quartz_core::engine::SchedulerError> {
//! use quartz_core::engine::{SchedulerBuilder, Settings};
//!
//! let node = SchedulerBuilder::new("billing")
//!     .settings(Settings::default())
//!     .handler("send-invoices", |ctx| {
//!         println!("fire {} of {} at {}", ctx.fire_id(), ctx.job_name(), ctx.scheduled_fire_time());
//!         Ok(())
//!     })
//!     .start(store)
//!     .await?;
//! // ... the service runs ...
//! node.shutdown().await;
//! # Ok(()) }
//! ```

mod backlog;
mod clock;
mod cluster;
mod context;
mod dispatcher;
mod error;
mod fixed;
mod flight;
mod gate;
mod handler;
mod launch;
mod launch_handle;
mod maintenance;
pub mod metrics;
mod misfires;
mod node;
mod pace;
mod poller;
mod queue;
mod recorder;
mod recovery;
mod row_write;
mod run;
mod runner;
mod settings;
mod status;
mod steer;
mod strategy;
#[cfg(feature = "testing")]
pub(crate) mod test_context;
mod typed;

use std::fmt;
use std::future::Future;
use std::sync::Arc;

pub use error::SchedulerError;
pub use handler::{CancelReason, Cancellation, FencingToken, JobContext, JobError, JobResult, RunKind};
pub use settings::{Settings, Strategy};
pub use status::{Counters, NodeStatus, Phase, ShutdownSummary};
pub use steer::{Steer, SteerKind};
pub use typed::TypedJob;

use crate::store::{IntoStore, Job, NodeRef};
use fixed::HashMap;
use handler::Handler;
use node::Stages;
pub(crate) use strategy::mix;

/// Builds and starts a node. See the [module docs](self).
pub struct SchedulerBuilder {
    scheduler: String,
    settings: Settings,
    handlers: HashMap<String, Handler>,
    /// The payload schemas the node publishes, by handler.
    schemas: std::collections::BTreeMap<String, serde_json::Value>,
    states: HashMap<std::any::TypeId, Arc<dyn std::any::Any + Send + Sync>>,
    duplicate: Option<String>,
    clock_hooks: clock::ClockHooks,
    /// Where run log events go instead of a file (a simulation).
    run_sink: Option<crate::runlog::RunSink>,
    /// Links fires' spans to the spans that enqueued their work.
    span_linker: Option<SpanLinker>,
}

/// Links a fire's span to another span, given that span's W3C trace
/// context (`traceparent`): see [`SchedulerBuilder::link_spans`].
pub type SpanLinker = Arc<dyn Fn(&tracing::Span, &str) + Send + Sync>;

impl fmt::Debug for SchedulerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&String> = self.handlers.keys().collect();
        names.sort();
        f.debug_struct("SchedulerBuilder")
            .field("scheduler", &self.scheduler)
            .field("settings", &self.settings)
            .field("handlers", &names)
            .finish()
    }
}

impl SchedulerBuilder {
    /// Shifts this node's own clock by this many milliseconds, for tests of
    /// clock skew (the engine takes no decision on the node's clock, so a
    /// skewed node behaves exactly as the others). Only with the `testing`
    /// feature.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    #[must_use]
    pub fn clock_skew_for_tests(mut self, ms: i64) -> SchedulerBuilder {
        self.clock_hooks.skew_ms = ms;
        self
    }

    /// Runs the node on a clock the test steps: tokio's paused clock (a
    /// `#[tokio::test(start_paused = true)]`, or `tokio::time::pause()`),
    /// with the in-memory store ([`crate::testing::MemoryStore`]), whose
    /// time is tokio's too. A day of fires runs in milliseconds, and the
    /// same steps give the same fires on every run. A blocking handler holds
    /// the clock still while it runs on a pool thread, as tokio's own
    /// blocking threads do, so that time moves only when the whole node
    /// waits. Costs a blocking thread per running fire: for tests only, with
    /// the `testing` feature.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::time::Duration;
    /// use quartz_core::admin::{JobDefinition, TriggerDefinition};
    /// use quartz_core::engine::{JobContext, SchedulerBuilder};
    /// use quartz_core::testing::MemoryStore;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
    /// let runs = Arc::new(AtomicUsize::new(0));
    /// let seen = Arc::clone(&runs);
    /// let node = SchedulerBuilder::new("test")
    ///     .async_handler("count", move |_ctx: JobContext| {
    ///         let seen = Arc::clone(&seen);
    ///         async move {
    ///             seen.fetch_add(1, Ordering::SeqCst);
    ///             Ok(())
    ///         }
    ///     })
    ///     .stepped_clock()
    ///     .start(MemoryStore::new())
    ///     .await?;
    /// let every_minute = JobDefinition::new("tick", "count")
    ///     .with_trigger(TriggerDefinition::cron("0 * * * * ?", "UTC")?);
    /// node.admin().job_put(&every_minute).await?;
    /// tokio::time::sleep(Duration::from_secs(3_600)).await; // an hour, stepped
    /// assert!(runs.load(Ordering::SeqCst) >= 59);
    /// node.shutdown().await;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    #[cfg(feature = "testing")]
    #[must_use]
    pub fn stepped_clock(mut self) -> SchedulerBuilder {
        self.clock_hooks.paused = true;
        self
    }

    /// Runs the node's own clock from `anchor_ms` (epoch ms at start,
    /// instead of the system's clock), drifting by `rate_ppm` parts per
    /// million, and hands each run log event to `sink` (as well as no file:
    /// [`Settings::run_log`] is ignored): a node of a simulated cluster,
    /// the same on every run of a seed. Only with the `testing` feature.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    #[must_use]
    pub fn simulated_for_tests(
        mut self,
        anchor_ms: i64,
        rate_ppm: i64,
        sink: crate::runlog::RunSink,
    ) -> SchedulerBuilder {
        self.clock_hooks.anchor_ms = Some(anchor_ms);
        self.clock_hooks.rate_ppm = rate_ppm;
        self.run_sink = Some(sink);
        self
    }

    /// Replaces the settings.
    pub fn settings(mut self, settings: Settings) -> SchedulerBuilder {
        self.settings = settings;
        self
    }

    /// Gives the node's handlers a value to share, by its type: each fire's
    /// [`JobContext::state`] returns it (a later value of the same type
    /// replaces an earlier one). No cloning into every closure.
    #[must_use]
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> SchedulerBuilder {
        self.states.insert(std::any::TypeId::of::<T>(), Arc::new(value));
        self
    }

    /// Registers a typed job: fires of its kind ([`TypedJob::KIND`]) run
    /// [`TypedJob::run`] with the payload decoded (a payload that does not
    /// decode fails the fire, naming the job and the type).
    #[must_use]
    pub fn job<J: TypedJob>(self) -> SchedulerBuilder {
        let builder = self.async_handler(J::KIND, |ctx: JobContext| async move {
            let job = typed::decode::<J>(&ctx)?;
            job.run(ctx).await
        });
        match J::payload_schema() {
            Some(schema) => builder.payload_schema(J::KIND, schema),
            None => builder,
        }
    }

    /// Links the span of each fire of enqueued work to the span that
    /// enqueued it: `link` is called with the fire's span, before it is
    /// first entered, and the W3C trace context the work carries
    /// ([`Work::trace_parent`](crate::store::Work::trace_parent); also the
    /// span's `trace_parent` field). With `tracing-opentelemetry`:
    /// `span.add_link(span_context)` of the context parsed from it, as
    /// `quartz run` does.
    #[must_use]
    pub fn link_spans(mut self, link: impl Fn(&tracing::Span, &str) + Send + Sync + 'static) -> SchedulerBuilder {
        self.span_linker = Some(Arc::new(link));
        self
    }

    /// Publishes the JSON Schema of `handler`'s payload with the node's
    /// row (what [`TypedJob::payload_schema`] does for a typed job): the
    /// admin surface refuses a payload of that handler that does not fit
    /// it, naming the field. A later schema for one handler replaces an
    /// earlier one; a schema that is not a valid JSON Schema fails
    /// [`start`](Self::start).
    #[must_use]
    pub fn payload_schema(mut self, handler: impl Into<String>, schema: serde_json::Value) -> SchedulerBuilder {
        self.schemas.insert(handler.into(), schema);
        self
    }

    /// Registers a blocking handler: it runs on a pool thread.
    pub fn handler<F>(self, name: impl Into<String>, f: F) -> SchedulerBuilder
    where
        F: Fn(JobContext) -> JobResult + Send + Sync + 'static,
    {
        self.register(name.into(), Handler::blocking(f))
    }

    /// Registers an async handler: each fire runs as a tokio task on the
    /// node's runtime, not on a pool thread, so a handler that awaits IO
    /// holds no thread. At most [`Settings::async_max`] run at once (the
    /// node claims no more), beside the pool's bound for blocking handlers.
    /// It must not block: code that does belongs in a blocking
    /// [`handler`](Self::handler).
    pub fn async_handler<F, Fut>(self, name: impl Into<String>, f: F) -> SchedulerBuilder
    where
        F: Fn(JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = JobResult> + Send + 'static,
    {
        self.register(name.into(), Handler::asynchronous(f))
    }

    fn register(mut self, name: String, handler: Handler) -> SchedulerBuilder {
        if self.handlers.insert(name.clone(), handler).is_some() {
            self.duplicate.get_or_insert(name);
        }
        self
    }

    /// Starts the node on `store`: registers it (a new incarnation), then
    /// starts polling, heart-beating and recovering. Must be called within a
    /// tokio runtime with timers enabled.
    ///
    /// # Errors
    ///
    /// Invalid settings or handler names, a pool that cannot start, or the
    /// store failing to register the node.
    pub async fn start(self, store: impl IntoStore) -> Result<Scheduler, SchedulerError> {
        self.settings.validate()?;
        crate::store::check_name("scheduler", &self.scheduler)?;
        if let Some(name) = self.duplicate {
            return Err(SchedulerError::InvalidHandler {
                name,
                reason: "registered twice".to_owned(),
            });
        }
        for name in self.handlers.keys() {
            crate::store::check_name("handler", name).map_err(|e| SchedulerError::InvalidHandler {
                name: name.clone(),
                reason: e.to_string(),
            })?;
        }
        for (name, schema) in &self.schemas {
            crate::admin::schema::check_schema(schema, self.handlers.contains_key(name)).map_err(|reason| {
                SchedulerError::InvalidHandler {
                    name: name.clone(),
                    reason,
                }
            })?;
        }
        let inner = Arc::new(
            Stages::start(
                store.into_store(),
                self.scheduler,
                self.settings,
                (self.handlers, Arc::new(self.states), self.schemas),
                (self.clock_hooks, self.run_sink, self.span_linker),
            )
            .await?,
        );
        let last = Arc::new(StopOnDrop(Arc::clone(&inner)));
        Ok(Scheduler { inner, _last: last })
    }
}

/// Reads a node's status while the node lives ([`Scheduler::probe`]).
#[derive(Clone)]
pub struct NodeProbe(std::sync::Weak<Stages>);

impl NodeProbe {
    /// The node's status, or `None` once the node is gone.
    pub fn status(&self) -> Option<NodeStatus> {
        self.0.upgrade().map(|stages| stages.status())
    }
}

impl fmt::Debug for NodeProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeProbe")
            .field("alive", &(self.0.strong_count() > 0))
            .finish()
    }
}

/// A running node: cheap to clone (clones are handles to one node). When
/// the last handle is dropped its tasks stop without the graceful steps;
/// call [`shutdown`](Self::shutdown) (from any handle) to leave the cluster
/// cleanly, or [`run_until`](Self::run_until) to do so when a signal comes.
pub struct Scheduler {
    inner: Arc<Stages>,
    /// Stops the node's tasks when the last handle goes.
    _last: Arc<StopOnDrop>,
}

impl Clone for Scheduler {
    fn clone(&self) -> Scheduler {
        Scheduler {
            inner: Arc::clone(&self.inner),
            _last: Arc::clone(&self._last),
        }
    }
}

/// Stops a node's tasks when dropped: held by every handle, so dropped with
/// the last.
struct StopOnDrop(Arc<Stages>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop_tasks();
    }
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("scheduler", &self.inner.ctx.scheduler)
            .field("node", &self.inner.node())
            .finish_non_exhaustive()
    }
}

impl SchedulerBuilder {
    /// A builder for a node of the cluster `scheduler`, with the default
    /// settings and no handlers.
    pub fn new(scheduler: impl Into<String>) -> SchedulerBuilder {
        SchedulerBuilder {
            scheduler: scheduler.into(),
            settings: Settings::default(),
            handlers: HashMap::default(),
            schemas: std::collections::BTreeMap::new(),
            states: HashMap::default(),
            duplicate: None,
            clock_hooks: clock::ClockHooks::default(),
            run_sink: None,
            span_linker: None,
        }
    }
}

impl Scheduler {
    /// The store the node was started on, scoped to its scheduler (the
    /// node's own calls go through a deadline, [`Settings::store_deadline`]).
    pub fn store(&self) -> &crate::store::SharedStore {
        &self.inner.given
    }

    /// The cluster's name.
    pub fn scheduler(&self) -> &str {
        &self.inner.ctx.scheduler
    }

    /// This node's id and current incarnation.
    pub fn node(&self) -> NodeRef {
        self.inner.node()
    }

    /// A snapshot of the node: phase, members, pool and counters.
    pub fn status(&self) -> NodeStatus {
        self.inner.status()
    }

    /// A handle that reads this node's status without keeping the node
    /// alive (for a web server's readiness probe beside it).
    pub fn probe(&self) -> NodeProbe {
        NodeProbe(Arc::downgrade(&self.inner))
    }

    /// Creates a job with its triggers, after checking that this node has its
    /// handler. This node polls at once; every other node sees it within
    /// [`CHANGE_VISIBILITY_MS`](crate::store::CHANGE_VISIBILITY_MS), and no
    /// trigger's first fire time is earlier than that. (The admin surface's
    /// [`job_add`](crate::admin::Admin::job_add) takes the same definition,
    /// and [`job_put`](crate::admin::Admin::job_put) declares it on every
    /// start.)
    ///
    /// # Errors
    ///
    /// [`SchedulerError::UnknownHandler`] when this node has no such handler,
    /// [`SchedulerError::Rejected`] naming a field at fault, and the store's
    /// errors; on error nothing is stored.
    pub async fn add_job(&self, job: &crate::admin::JobDefinition) -> Result<Job, SchedulerError> {
        self.inner.check_handler(&job.spec)?;
        // As the admin surface writes: bounded, not at the engine's deadline.
        let store = &self.inner.admin_store;
        let now = store.now().await?;
        let (spec, executes) = job.to_specs(now)?;
        let created = store.create_job(&spec, &executes).await?;
        self.inner.ctx.poll_now.notify_one();
        Ok(created)
    }

    /// Enqueues a piece of work (see [`Work`](crate::store::Work)): a
    /// one-off fire of an existing job with a payload of its own, due now,
    /// at a time or after a delay, perhaps unique by a key. This node
    /// polls at once; every other node sees it within
    /// [`CHANGE_VISIBILITY_MS`](crate::store::CHANGE_VISIBILITY_MS). For
    /// work that must exist only if a transaction of the service commits,
    /// `quartz::store::postgres::enqueue` (and `mysql`, `sqlite`) take the
    /// transaction's connection.
    ///
    /// ```no_run
    /// # async fn signup(node: quartz_core::engine::Scheduler) -> Result<(), Box<dyn std::error::Error>> {
    /// use quartz_core::store::Work;
    /// use std::time::Duration;
    ///
    /// let work = Work::new("welcome-mail")
    ///     .payload(&serde_json::json!({ "to": "ada@example.com" }))?
    ///     .after(Duration::from_secs(60))
    ///     .unique("welcome:ada@example.com");
    /// let queued = node.enqueue(&work).await?;
    /// println!("{queued:?}");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`SchedulerError::Rejected`] naming the field at fault, the store's
    /// errors ([`StoreError::UnknownJob`](crate::store::StoreError::UnknownJob)
    /// for a job the scheduler does not have).
    pub async fn enqueue(&self, work: &crate::store::Work) -> Result<crate::store::Enqueued, SchedulerError> {
        let enqueued = self.inner.admin_store.enqueue(work).await?;
        if enqueued.is_queued() {
            self.inner.ctx.poll_now.notify_one();
        }
        Ok(enqueued)
    }

    /// Asks the poller to poll now rather than at its next tick.
    pub fn poll_now(&self) {
        self.inner.ctx.poll_now.notify_one();
    }

    /// Leaves the cluster gracefully: stops claiming, gives back the fires
    /// claimed but not started (another node fires them at once), lets
    /// running fires finish within [`Settings::shutdown_grace`] (then cancels
    /// them), and marks the node gone. It returns within the grace and a few
    /// seconds whatever the database does (a database that stopped
    /// answering leaves claims and outcomes behind, which the summary counts
    /// and the log lists, for the cluster's recovery). Once: a later call
    /// (from any handle) finds the node stopping or stopped and returns an
    /// empty summary.
    pub async fn shutdown(&self) -> ShutdownSummary {
        self.inner.shutdown().await
    }

    /// Runs until `signal` completes (Ctrl-C, a `CancellationToken`'s
    /// `cancelled()`, the service's own shutdown), then leaves the cluster
    /// as [`shutdown`](Self::shutdown) does.
    ///
    /// ```no_run
    /// # async fn service(
    /// #     node: quartz_core::engine::Scheduler,
    /// #     stop: tokio::sync::oneshot::Receiver<()>,
    /// # ) {
    /// // `stop` fires when the service shuts down (or Ctrl-C, a token...).
    /// let summary = node
    ///     .run_until(async {
    ///         let _ = stop.await;
    ///     })
    ///     .await;
    /// println!("left the cluster; {} fires given back", summary.released);
    /// # }
    /// ```
    pub async fn run_until(&self, signal: impl std::future::Future<Output = ()>) -> ShutdownSummary {
        signal.await;
        self.shutdown().await
    }
}

impl Scheduler {
    /// The admin surface of this node's cluster, over its store: list, show,
    /// add, edit, pause, resume, fire now and delete jobs; read the ledger,
    /// the nodes and the change log (see [`crate::admin`]). Its calls share
    /// the node's connections with the node's own work, a few at once and
    /// each within a deadline ([`AdminBound`](crate::store::AdminBound)), so
    /// that no caller of the surface starves the node's heartbeats and
    /// starts.
    pub fn admin(&self) -> crate::admin::Admin {
        crate::admin::Admin::new(self.inner.admin_store.clone(), self.inner.ctx.scheduler.clone())
    }
}
