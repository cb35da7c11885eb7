//! Typed jobs: a type names its kind (the handler name its rows carry) and
//! its payload once, so that registering it on a node and scheduling it go
//! through the type, and a wrong kind or a payload of the wrong shape does
//! not compile.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::handler::{JobContext, JobError, JobResult};

/// A job type: its kind and its payload, named once. Register it on a node
/// with [`SchedulerBuilder::job`](super::SchedulerBuilder::job) and schedule
/// it with [`JobDefinition::of`](crate::admin::JobDefinition::of):
///
/// ```no_run
/// # async fn service() -> Result<(), Box<dyn std::error::Error>> {
/// use quartz_core::admin::{JobDefinition, TriggerDefinition};
/// use quartz_core::engine::{JobContext, JobResult, SchedulerBuilder, TypedJob};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Invoice {
///     customer: String,
///     amount_cents: u64,
/// }
///
/// impl TypedJob for Invoice {
///     const KIND: &'static str = "invoice";
///
///     async fn run(self, ctx: JobContext) -> JobResult {
///         println!("invoicing {} {} cents at {}", self.customer, self.amount_cents, ctx.scheduled_fire_time());
///         Ok(())
///     }
/// }
///
/// let builder = SchedulerBuilder::new("billing").job::<Invoice>();
/// let acme = Invoice { customer: "acme".into(), amount_cents: 1_200 };
/// let job = JobDefinition::of("invoice-acme", &acme)?
///     .with_trigger(TriggerDefinition::cron("0 0 2 * * ?", "Europe/Paris")?);
/// # let _ = (builder, job);
/// # Ok(()) }
/// ```
pub trait TypedJob: Serialize + DeserializeOwned + Send + 'static {
    /// The kind: the handler name the job's rows carry (what the console,
    /// the CLI and other languages' rows name). Unique among a cluster's
    /// handlers.
    const KIND: &'static str;

    /// The JSON Schema of the payload, published with the node's row so
    /// that the API, the console and the `quartz` command refuse a payload
    /// that does not fit it, naming the field, when a job of this kind is
    /// written or work of it enqueued (with the `payload-schema` feature of
    /// the admin surface). `None`, the default, publishes nothing: any
    /// JSON is accepted and a payload of the wrong shape fails its fires.
    /// Derive it with `schemars` (`schemars::schema_for!(Self).into()`), or
    /// write it with `serde_json::json!`.
    fn payload_schema() -> Option<serde_json::Value> {
        None
    }

    /// Runs one fire of the job, its payload decoded into `self`; an error
    /// is recorded in the ledger (and retried by the job's policy).
    fn run(self, ctx: JobContext) -> impl Future<Output = JobResult> + Send;
}

/// Decodes a fire's payload as `J`, saying which job's payload did not fit
/// which type when it does not.
pub(super) fn decode<J: TypedJob>(ctx: &JobContext) -> Result<J, JobError> {
    ctx.payload::<J>().map_err(|e| {
        format!(
            "the payload of job {:?} is not a {} (kind {:?}): {e}",
            ctx.job_name(),
            std::any::type_name::<J>(),
            J::KIND
        )
        .into()
    })
}
