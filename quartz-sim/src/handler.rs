//! The simulated job: its one handler (how long a run takes and whether it
//! fails, drawn from the seed and the fire; what the witness sees of it),
//! and the rules its runs are judged by.

use std::sync::Arc;
use std::time::Duration;

use quartz_core::engine::{JobContext, JobResult};
use quartz_core::trigger::Overlap;
use quartz_testkit::memory::MemoryStore;
use tokio::sync::watch;

use crate::rng::mix;
use crate::witness::{Rules, Whose, Witness};
use crate::workload::{Behaviour, DrawnJob};

/// The handler of every simulated job: runs as long as its payload and the
/// fire draw, fails as often as the payload says, stops when asked, and
/// never returns once its process died.
pub(crate) fn handler(
    witness: Arc<Witness>,
    store: MemoryStore,
    process: usize,
    died: watch::Receiver<bool>,
    seed: u64,
) -> impl Fn(JobContext) -> std::pin::Pin<Box<dyn std::future::Future<Output = JobResult> + Send>> + Send + Sync + 'static
{
    move |ctx: JobContext| {
        let witness = Arc::clone(&witness);
        let store = store.clone();
        let mut died = died.clone();
        Box::pin(async move {
            let behaviour: Behaviour = ctx.payload().unwrap_or(Behaviour {
                run_ms: (1, 10),
                fail: 0,
            });
            let draw = mix(seed
                ^ mix(ctx.job_id().unsigned_abs())
                ^ mix(ctx.scheduled_fire_time().as_millis().unsigned_abs())
                ^ u64::from(ctx.attempt()));
            let (lo, hi) = behaviour.run_ms;
            let run = lo + draw % (hi.saturating_sub(lo) + 1);
            let fails = (draw >> 32) % 1_000 < behaviour.fail;
            let fire_id = ctx.fire_id();
            let whose = if ctx.run_kind() == quartz_core::engine::RunKind::Recovery {
                Whose::Recovery
            } else if ctx.run_kind() == quartz_core::engine::RunKind::ByHand
                || (ctx.execute_id() == quartz_core::store::MANUAL_EXECUTE && ctx.attempt() > 1)
            {
                // A fire by hand, or a later attempt of one (or of a child
                // of one): no trigger's overlap holds it, only the job's
                // concurrency. By its kind for a first attempt: a child of
                // a parent fired by hand carries the manual execute, and is
                // a chained fire.
                Whose::ByHand
            } else if ctx.attempt() == 1 {
                Whose::Trigger
            } else {
                Whose::Attempt
            };
            let fire = (ctx.execute_id(), ctx.scheduled_fire_time().as_millis());
            let at = store.clock().as_millis();
            if !witness.began(process, ctx.job_name(), fire_id, fire, ctx.attempt(), whose, at) {
                // Its process crashed: nothing of it runs any more.
                return std::future::pending().await;
            }
            let outcome: JobResult = tokio::select! {
                biased;
                () = async { let _ = died.wait_for(|d| *d).await; } => std::future::pending().await,
                () = ctx.cancellation().cancelled() => Err("asked to stop".into()),
                () = tokio::time::sleep(Duration::from_millis(run)) => {
                    if fails { Err("the simulated job failed".into()) } else { Ok(()) }
                }
            };
            witness.ended(fire_id, store.clock().as_millis());
            outcome
        })
    }
}

/// How a drawn job's runs may overlap.
pub(crate) fn rules_of(job: &DrawnJob) -> Rules {
    let overlap = job.executes.first().and_then(|e| e.trigger.overlap());
    Rules {
        // A child has no trigger of its own: its fire, written with its
        // parent's success, waits for the child's running fire when the
        // child disallows concurrency (and for room under its key).
        trigger_waits: match job.spec.parent {
            Some(_) => !job.spec.allow_concurrent,
            None => Overlap::effective(overlap, job.spec.allow_concurrent) != Some(Overlap::Allow),
        },
        attempts_wait: !job.spec.allow_concurrent || overlap.is_some_and(|o| o != Overlap::Allow),
        by_hand_waits: !job.spec.allow_concurrent,
        limit: job.spec.limit.as_ref().map(|l| (l.key.clone(), l.max)),
    }
}
