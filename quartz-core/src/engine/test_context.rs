//! [`TestContext`]: a [`JobContext`] a test builds, to call one handler
//! without a node, a store or a clock.

use std::any::{Any, TypeId};
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::watch;

use super::fixed::HashMap;
use super::handler::{CancelReason, Cancellation, JobContext, RunKind};
use crate::time::Timestamp;

/// Builds the [`JobContext`] a node would give a handler, for a unit test
/// of that handler: its job, payload, fire time, attempt, run kind and the
/// shared values the node's builder would hold
/// ([`SchedulerBuilder::state`](super::SchedulerBuilder::state)).
///
/// ```
/// use quartz_core::engine::{JobContext, JobResult, RunKind};
/// use quartz_core::testing::TestContext;
///
/// fn report(ctx: JobContext) -> JobResult {
///     let to: String = ctx.payload()?;
///     if ctx.attempt() > 1 {
///         return Err(format!("{} already failed once for {to}", ctx.job_name()).into());
///     }
///     Ok(())
/// }
///
/// let ctx = TestContext::new("nightly-report").payload(&"ops@example.com").build();
/// assert!(report(ctx).is_ok());
/// let retry = TestContext::new("nightly-report")
///     .payload(&"ops@example.com")
///     .attempt(2)
///     .run_kind(RunKind::Retry)
///     .build();
/// assert!(report(retry).is_err());
/// ```
#[derive(Debug)]
pub struct TestContext {
    job_name: String,
    job_id: i64,
    execute_id: i64,
    fire_id: i64,
    fire_time: Timestamp,
    attempt: u32,
    kind: RunKind,
    payload: String,
    scheduler: String,
    node_id: String,
    incarnation: i64,
    states: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
    cancel: Option<CancelReason>,
}

impl TestContext {
    /// A first, scheduled attempt of `job_name`'s fire at 2026-01-01T00:00Z,
    /// with a `null` payload, on node `test-node` of scheduler `default`.
    pub fn new(job_name: &str) -> TestContext {
        TestContext {
            job_name: job_name.to_owned(),
            job_id: 1,
            execute_id: 1,
            fire_id: 1,
            fire_time: Timestamp::from_millis(1_767_225_600_000),
            attempt: 1,
            kind: RunKind::Scheduled,
            payload: "null".to_owned(),
            scheduler: crate::store::DEFAULT_SCHEDULER.to_owned(),
            node_id: "test-node".to_owned(),
            incarnation: 1,
            states: HashMap::default(),
            cancel: None,
        }
    }

    /// The payload, as the job's JSON (what
    /// [`JobContext::payload`] decodes).
    ///
    /// # Panics
    ///
    /// When `payload` cannot be written as JSON (a map with keys that are
    /// not strings): a test's own mistake.
    #[must_use]
    #[allow(clippy::expect_used)]
    pub fn payload<T: Serialize + ?Sized>(mut self, payload: &T) -> TestContext {
        self.payload = serde_json::to_string(payload).expect("the payload is written as JSON");
        self
    }

    /// The payload as JSON text, as it is stored (for a payload a test
    /// wants malformed).
    #[must_use]
    pub fn payload_json(mut self, json: &str) -> TestContext {
        json.clone_into(&mut self.payload);
        self
    }

    /// The scheduled fire time.
    #[must_use]
    pub fn fire_time(mut self, at: Timestamp) -> TestContext {
        self.fire_time = at;
        self
    }

    /// The attempt, from 1.
    #[must_use]
    pub fn attempt(mut self, attempt: u32) -> TestContext {
        self.attempt = attempt.max(1);
        self
    }

    /// Which run of the fire it is.
    #[must_use]
    pub fn run_kind(mut self, kind: RunKind) -> TestContext {
        self.kind = kind;
        self
    }

    /// The ids the ledger would give: the job's, its trigger's and the
    /// fire's.
    #[must_use]
    pub fn ids(mut self, job_id: i64, execute_id: i64, fire_id: i64) -> TestContext {
        self.job_id = job_id;
        self.execute_id = execute_id;
        self.fire_id = fire_id;
        self
    }

    /// The scheduler, node and incarnation the run is on (what its
    /// [fencing token](JobContext::fencing_token) carries).
    #[must_use]
    pub fn node(mut self, scheduler: &str, node_id: &str, incarnation: i64) -> TestContext {
        scheduler.clone_into(&mut self.scheduler);
        node_id.clone_into(&mut self.node_id);
        self.incarnation = incarnation;
        self
    }

    /// A value the handler reads with [`JobContext::state`], as the node's
    /// builder would hold it.
    #[must_use]
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> TestContext {
        self.states.insert(TypeId::of::<T>(), Arc::new(value));
        self
    }

    /// The fire asked to stop before the handler starts, for this reason.
    #[must_use]
    pub fn cancelled(mut self, reason: CancelReason) -> TestContext {
        self.cancel = Some(reason);
        self
    }

    /// The context.
    pub fn build(self) -> JobContext {
        self.build_with_cancel().0
    }

    /// The context and the handle that asks its fire to stop while the
    /// handler runs (as a timeout, a shutdown or a fenced node would).
    pub fn build_with_cancel(self) -> (JobContext, CancelHandle) {
        let (tx, cancellation) = Cancellation::new();
        if let Some(reason) = self.cancel {
            tx.send_replace(Some(reason));
        }
        let ctx = JobContext {
            states: Arc::new(self.states),
            kind: self.kind,
            job_id: self.job_id,
            job_name: Arc::from(self.job_name.as_str()),
            execute_id: self.execute_id,
            fire_time: self.fire_time,
            fire_id: self.fire_id,
            attempt: self.attempt,
            payload: Arc::from(self.payload.as_str()),
            node_id: Arc::from(self.node_id.as_str()),
            scheduler: Arc::from(self.scheduler.as_str()),
            incarnation: self.incarnation,
            cancellation,
        };
        (ctx, CancelHandle(tx))
    }
}

/// Asks a [`TestContext`]'s fire to stop ([`JobContext::cancellation`]).
#[derive(Debug)]
pub struct CancelHandle(watch::Sender<Option<CancelReason>>);

impl CancelHandle {
    /// Asks the fire to stop, for `reason`: the handler's
    /// [`is_cancelled`](JobContext::is_cancelled) turns true and its
    /// [`cancelled`](super::Cancellation::cancelled) completes.
    pub fn cancel(&self, reason: CancelReason) {
        self.0.send_replace(Some(reason));
    }
}
