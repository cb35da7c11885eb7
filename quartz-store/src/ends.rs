//! One way to end a fire for the stores of this crate: the contract's
//! [`end_fires`](quartz_core::store::FireStore::end_fires) made of the nine
//! statements (or scripts) each store already has, one per kind of end.

use async_trait::async_trait;
use quartz_core::store::{ChainedFire, FireEnd, FollowUp, HandlerSpan, LateRun, NodeRef, Outcome, StoreError};

/// The statements a store of this crate ends a fire with, each fenced to the
/// node's incarnation (see [`FireEnd`] for what each records).
#[async_trait]
pub(crate) trait EndParts: Send + Sync {
    /// Many plain successes, each with when its handler ran, in one
    /// transaction; the ids recorded.
    async fn succeed_all(&self, fires: &[(i64, Option<HandlerSpan>)], node: &NodeRef) -> Result<Vec<i64>, StoreError>;
    /// A success or a failure without a follow-up.
    async fn finish(
        &self,
        fire_id: i64,
        node: &NodeRef,
        outcome: &Outcome,
        ran: Option<HandlerSpan>,
    ) -> Result<bool, StoreError>;
    /// A success that starts its job's chain; `None` when not this
    /// incarnation's.
    async fn succeed_and_chain(
        &self,
        fire_id: i64,
        node: &NodeRef,
        ran: Option<HandlerSpan>,
    ) -> Result<Option<Vec<ChainedFire>>, StoreError>;
    /// A misfire without a late run.
    async fn misfire_claimed(&self, fire_id: i64, node: &NodeRef, reason: &str) -> Result<bool, StoreError>;
    /// A claimed fire skipped.
    async fn skip_claimed(&self, fire_id: i64, node: &NodeRef, reason: &str) -> Result<bool, StoreError>;
    /// A claimed fire failed unrun.
    async fn fail_claimed(&self, fire_id: i64, node: &NodeRef, reason: &str) -> Result<bool, StoreError>;
    /// A claimed fire given back.
    async fn release_fire(&self, fire_id: i64, node: &NodeRef) -> Result<bool, StoreError>;
    /// A failure and its retry, pending after `retry_in_ms`.
    async fn fire_fail_and_retry(
        &self,
        fire_id: i64,
        node: &NodeRef,
        error: &str,
        retry_in_ms: i64,
        ran: Option<HandlerSpan>,
    ) -> Result<FollowUp, StoreError>;
    /// A misfire and its late run.
    async fn fire_misfire_and_run_late(
        &self,
        fire_id: i64,
        node: &NodeRef,
        reason: &str,
        one_per_execute: bool,
    ) -> Result<FollowUp, StoreError>;
}

/// [`FireStore::end_fires`](quartz_core::store::FireStore::end_fires) on a
/// store's parts: a batch of plain successes in one transaction, anything
/// else end by end.
pub(crate) async fn end_fires<S: EndParts>(
    store: &S,
    node: &NodeRef,
    ends: &[(i64, FireEnd)],
) -> Result<Vec<FollowUp>, StoreError> {
    if let Some(fires) = FireEnd::plain_successes(ends) {
        let recorded = store.succeed_all(&fires, node).await?;
        return Ok(FollowUp::of_batch(ends, &recorded));
    }
    let mut done = Vec::with_capacity(ends.len());
    for (fire_id, end) in ends {
        done.push(end_one(store, *fire_id, node, end).await?);
    }
    Ok(done)
}

async fn end_one<S: EndParts>(store: &S, fire_id: i64, node: &NodeRef, end: &FireEnd) -> Result<FollowUp, StoreError> {
    Ok(match end {
        FireEnd::Succeeded { chain: false, ran } => {
            FollowUp::recorded(store.finish(fire_id, node, &Outcome::Succeeded, *ran).await?)
        }
        FireEnd::Succeeded { chain: true, ran } => match store.succeed_and_chain(fire_id, node, *ran).await? {
            Some(children) => FollowUp::Chained(children),
            None => FollowUp::NotOwned,
        },
        FireEnd::Failed {
            error,
            retry_in: None,
            ran,
        } => {
            let outcome = Outcome::Failed { error: error.clone() };
            FollowUp::recorded(store.finish(fire_id, node, &outcome, *ran).await?)
        }
        FireEnd::Failed {
            error,
            retry_in: Some(after),
            ran,
        } => {
            let ms = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
            store.fire_fail_and_retry(fire_id, node, error, ms, *ran).await?
        }
        FireEnd::Misfired { reason, run_late: None } => {
            FollowUp::recorded(store.misfire_claimed(fire_id, node, reason).await?)
        }
        FireEnd::Misfired {
            reason,
            run_late: Some(late),
        } => {
            let one_per_execute = *late == LateRun::OnePerExecute;
            store
                .fire_misfire_and_run_late(fire_id, node, reason, one_per_execute)
                .await?
        }
        FireEnd::Skipped { reason } => FollowUp::recorded(store.skip_claimed(fire_id, node, reason).await?),
        FireEnd::Refused { reason } => FollowUp::recorded(store.fail_claimed(fire_id, node, reason).await?),
        FireEnd::Released => FollowUp::recorded(store.release_fire(fire_id, node).await?),
    })
}
