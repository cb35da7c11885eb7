//! Handlers: the user code a fire runs, and what it is told about the fire.

use std::any::{Any, TypeId};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::fixed::HashMap;
use crate::time::Timestamp;

/// The error a handler returns: any error type, boxed.
pub type JobError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a handler returns: success, or an error recorded in the ledger.
pub type JobResult = Result<(), JobError>;

/// The values a node's handlers share ([`SchedulerBuilder::state`](super::SchedulerBuilder::state)),
/// by type.
pub(crate) type States = Arc<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>;

type BlockingFn = dyn Fn(JobContext) -> JobResult + Send + Sync + 'static;
type AsyncFn = dyn Fn(JobContext) -> Pin<Box<dyn Future<Output = JobResult> + Send + 'static>> + Send + Sync + 'static;

/// A registered handler: a blocking function run on a pool thread, or an async
/// function run as a tokio task (bounded by [`Settings::async_max`](super::Settings::async_max)).
#[derive(Clone)]
pub(crate) enum Handler {
    Blocking(Arc<BlockingFn>),
    Async(Arc<AsyncFn>),
}

impl Handler {
    pub(crate) fn blocking<F>(f: F) -> Handler
    where
        F: Fn(JobContext) -> JobResult + Send + Sync + 'static,
    {
        Handler::Blocking(Arc::new(f))
    }

    pub(crate) fn asynchronous<F, Fut>(f: F) -> Handler
    where
        F: Fn(JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = JobResult> + Send + 'static,
    {
        Handler::Async(Arc::new(move |ctx| Box::pin(f(ctx))))
    }

    /// Whether it runs as a tokio task rather than on a pool thread.
    pub(crate) fn is_async(&self) -> bool {
        matches!(self, Handler::Async(_))
    }

    /// Runs the handler on the calling (pool) thread inside the fire's span
    /// (so the handler's own events carry the fire, for an async handler in
    /// every poll of its future); a panic becomes an error.
    pub(crate) fn call(&self, ctx: JobContext, runtime: &tokio::runtime::Handle, span: &tracing::Span) -> JobResult {
        use tracing::Instrument as _;
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match self {
            Handler::Blocking(f) => span.in_scope(|| f(ctx)),
            Handler::Async(f) => runtime.block_on(f(ctx).instrument(span.clone())),
        }));
        outcome.unwrap_or_else(|panic| Err(panicked(&*panic)))
    }

    /// Runs an async handler as a task of its own inside the fire's span; a
    /// panic becomes an error and takes nothing else down. `dropper` can
    /// drop the task (a handler past its timeout that ignores its
    /// cancellation).
    pub(crate) async fn call_async(&self, ctx: JobContext, span: tracing::Span, dropper: &Dropper) -> JobResult {
        use tracing::Instrument as _;
        let Handler::Async(f) = self else {
            return Err("a blocking handler runs on a pool thread, not as a task".into());
        };
        let task = tokio::spawn(f(ctx).instrument(span));
        dropper.hold(task.abort_handle());
        match task.await {
            Ok(result) => result,
            Err(e) if e.is_panic() => Err(panicked(&*e.into_panic())),
            Err(_) if dropper.dropped() => Err("dropped: it did not return when asked to stop".into()),
            Err(e) => Err(format!("the handler's task ended without an outcome: {e}").into()),
        }
    }
}

/// What can drop an async handler's task: the runner, once the handler is
/// past its timeout and a grace and still has not returned. A blocking
/// handler cannot be dropped (a thread cannot be killed).
#[derive(Debug, Clone, Default)]
pub(crate) struct Dropper(Arc<parking_lot::Mutex<DropState>>);

#[derive(Debug, Default)]
struct DropState {
    task: Option<tokio::task::AbortHandle>,
    dropped: bool,
}

impl Dropper {
    /// The handler's task, once spawned (dropped at once if asked before).
    fn hold(&self, task: tokio::task::AbortHandle) {
        let mut state = self.0.lock();
        if state.dropped {
            task.abort();
        }
        state.task = Some(task);
    }

    /// Drops the handler's task: it is not polled again, and its future,
    /// with whatever it holds, is dropped. `false` for a blocking handler.
    pub(crate) fn drop_task(&self) -> bool {
        let mut state = self.0.lock();
        state.dropped = true;
        state.task.as_ref().map(tokio::task::AbortHandle::abort).is_some()
    }

    /// Whether it was dropped.
    pub(crate) fn dropped(&self) -> bool {
        self.0.lock().dropped
    }
}

/// A handler's panic as the error recorded for its fire.
fn panicked(panic: &(dyn Any + Send)) -> JobError {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_owned());
    format!("handler panicked: {message}").into()
}

impl fmt::Debug for Handler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Handler::Blocking(_) => "Handler::Blocking",
            Handler::Async(_) => "Handler::Async",
        })
    }
}

/// Where a fire's handler runs, and whose room it takes: a pool thread (a
/// blocking handler, or one this node does not have), or a tokio task (an
/// async handler).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// A pool thread: [`Settings::pool_max`](super::Settings::pool_max)
    /// threads and the pool's queue.
    Pool = 0,
    /// A tokio task: [`Settings::async_max`](super::Settings::async_max) at once.
    Task = 1,
}

/// Why a running fire was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// The job's timeout passed; the fire is recorded as failed.
    TimedOut,
    /// The node is shutting down and its grace period ran out.
    Shutdown,
    /// A newer fire of the job, under the cancel overlap policy
    /// ([`Overlap::Cancel`](crate::trigger::Overlap::Cancel)), replaces this
    /// one; the fire is recorded as failed and not retried.
    Overlapped,
    /// The node could not renew its membership within its lease (a
    /// network that drops packets, a database that stopped answering): it
    /// may be declared dead, and the fire run again elsewhere (its job
    /// requesting recovery). Stop writing; the
    /// [fencing token](JobContext::fencing_token) tells the systems the
    /// handler writes to which run is the latest.
    Fenced,
}

impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CancelReason::TimedOut => "timed out",
            CancelReason::Shutdown => "node shutting down",
            CancelReason::Overlapped => "replaced by a newer fire of the job (overlap policy cancel)",
            CancelReason::Fenced => "the node lost its membership lease (it may be declared dead)",
        })
    }
}

/// A signal that asks a running handler to stop: its job's timeout passed,
/// the node is shutting down or lost its membership lease, or a newer fire
/// replaced it. Blocking handlers poll
/// [`is_cancelled`](Self::is_cancelled); async handlers await
/// [`cancelled`](Self::cancelled).
#[derive(Debug, Clone)]
pub struct Cancellation {
    rx: watch::Receiver<Option<CancelReason>>,
}

impl Cancellation {
    pub(crate) fn new() -> (watch::Sender<Option<CancelReason>>, Cancellation) {
        let (tx, rx) = watch::channel(None);
        (tx, Cancellation { rx })
    }

    /// Whether the fire has been asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.rx.borrow().is_some()
    }

    /// Why, once it has been.
    pub fn reason(&self) -> Option<CancelReason> {
        *self.rx.borrow()
    }

    /// Completes when the fire is asked to stop (never, if it is not).
    pub async fn cancelled(&self) {
        let mut rx = self.rx.clone();
        if rx.wait_for(Option::is_some).await.is_err() {
            // The node dropped the sender without cancelling: nothing will.
            std::future::pending::<()>().await;
        }
    }
}

/// Why a fire runs ([`JobContext::run_kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RunKind {
    /// A trigger's fire at its time (or a child job's after its parent
    /// succeeded), first attempt.
    Scheduled,
    /// Another attempt after a failed one: the job's retry policy, or a
    /// retry by hand.
    Retry,
    /// The late run a misfire policy promised for a fire time that was
    /// missed.
    LateRun,
    /// Run again because its node died mid-run (the job requests recovery).
    Recovery,
    /// Fired by hand ("fire now").
    ByHand,
    /// A past fire time a backfill queued.
    Backfill,
    /// Work enqueued from code ([`Work`](crate::store::Work)), first
    /// attempt.
    Enqueued,
}

impl RunKind {
    /// `scheduled`, `retry`, `late_run`, `recovery`, `by_hand`, `backfill`
    /// or `enqueued`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Scheduled => "scheduled",
            RunKind::Retry => "retry",
            RunKind::LateRun => "late_run",
            RunKind::Recovery => "recovery",
            RunKind::ByHand => "by_hand",
            RunKind::Backfill => "backfill",
            RunKind::Enqueued => "enqueued",
        }
    }
}
/// What a handler is told about the fire it runs.
#[derive(Debug, Clone)]
pub struct JobContext {
    pub(crate) states: States,
    pub(crate) kind: RunKind,
    pub(crate) job_id: i64,
    pub(crate) job_name: Arc<str>,
    pub(crate) execute_id: i64,
    pub(crate) fire_time: Timestamp,
    pub(crate) fire_id: i64,
    pub(crate) attempt: u32,
    pub(crate) payload: Arc<str>,
    pub(crate) node_id: Arc<str>,
    pub(crate) scheduler: Arc<str>,
    pub(crate) incarnation: i64,
    pub(crate) cancellation: Cancellation,
}

/// Which run of a fire a handler is: the scheduler, the node and its
/// incarnation, the fire's ledger id and attempt
/// ([`JobContext::fencing_token`]).
///
/// A handler passes it along with what it writes elsewhere (a row, a
/// message, an object), so that the system written to can refuse a write
/// from a run that is no longer the latest: the same fire time's runs have
/// increasing `(attempt, fire_id)`, and a node's incarnations increase,
/// so a store that keeps the greatest token it has seen for a fire
/// refuses an older one. A run whose node was cut off and declared dead
/// keeps the token it started with; the run that replaces it (a recovery's
/// re-run, attempt + 1) has a greater one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FencingToken {
    /// The scheduler (cluster) name.
    pub scheduler: Arc<str>,
    /// The node that runs the fire.
    pub node_id: Arc<str>,
    /// Its incarnation when it started the fire (increases with each
    /// registration of the node).
    pub incarnation: i64,
    /// The fire's ledger id.
    pub fire_id: i64,
    /// The attempt, from 1.
    pub attempt: u32,
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}/{}/{}",
            self.scheduler, self.node_id, self.incarnation, self.fire_id, self.attempt
        )
    }
}

impl JobContext {
    /// The job's id.
    pub fn job_id(&self) -> i64 {
        self.job_id
    }

    /// The job's name.
    pub fn job_name(&self) -> &str {
        &self.job_name
    }

    /// The execute (trigger) that fired.
    pub fn execute_id(&self) -> i64 {
        self.execute_id
    }

    /// The scheduled fire time (database time). The handler never starts
    /// before it.
    pub fn scheduled_fire_time(&self) -> Timestamp {
        self.fire_time
    }

    /// The ledger row of this run.
    pub fn fire_id(&self) -> i64 {
        self.fire_id
    }

    /// The attempt, from 1 (retries and recovery re-runs count up).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Why this run happens: its trigger's fire, a retry, the late run a
    /// misfire policy promised, a recovery after its node died, or a fire
    /// by hand (an attempt number alone cannot tell a retry from a late run).
    pub fn run_kind(&self) -> RunKind {
        self.kind
    }

    /// The node running the fire.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The job's payload, as the JSON text stored with it.
    pub fn payload_json(&self) -> &str {
        &self.payload
    }

    /// The job's payload, decoded.
    ///
    /// # Errors
    ///
    /// The decoding error when the payload does not fit `T`.
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.payload)
    }

    /// A value the node's handlers share, given to the builder with
    /// [`SchedulerBuilder::state`](super::SchedulerBuilder::state) (a
    /// database pool, a client, the service's configuration), by its type.
    ///
    /// ```no_run
    /// # async fn service() -> Result<(), Box<dyn std::error::Error>> {
    /// use quartz_core::engine::{JobContext, SchedulerBuilder};
    ///
    /// struct Mailer {
    ///     from: String,
    /// }
    ///
    /// let builder = SchedulerBuilder::new("billing")
    ///     .state(Mailer { from: "billing@example.com".into() })
    ///     .handler("remind", |ctx: JobContext| {
    ///         let mailer = ctx.state::<Mailer>()?;
    ///         println!("reminding from {}", mailer.from);
    ///         Ok(())
    ///     });
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// When no value of type `T` was given to the builder (the fire fails
    /// saying so).
    pub fn state<T: Send + Sync + 'static>(&self) -> Result<&T, JobError> {
        self.states
            .get(&TypeId::of::<T>())
            .and_then(|value| value.downcast_ref::<T>())
            .ok_or_else(|| {
                format!(
                    "no state of type {} was given to this node (SchedulerBuilder::state)",
                    std::any::type_name::<T>()
                )
                .into()
            })
    }

    /// This run's fencing token: pass it to the systems the handler writes
    /// to, so that a run that is no longer the latest (its node cut off
    /// and declared dead, the fire run again elsewhere) can be refused
    /// there. See [`FencingToken`].
    pub fn fencing_token(&self) -> FencingToken {
        FencingToken {
            scheduler: Arc::clone(&self.scheduler),
            node_id: Arc::clone(&self.node_id),
            incarnation: self.incarnation,
            fire_id: self.fire_id,
            attempt: self.attempt,
        }
    }

    /// The signal that asks this fire to stop.
    pub fn cancellation(&self) -> &Cancellation {
        &self.cancellation
    }

    /// Whether this fire has been asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.cancellation.is_cancelled()
    }
}
