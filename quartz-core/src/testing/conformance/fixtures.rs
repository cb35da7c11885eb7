//! What the suite's checks are written with, public for a store's own tests
//! beside the suite: a node registered, a ticking job, claims, the whole
//! ledger, a condition waited on. Each panics on a store error (a failed
//! check).

use std::future::Future;
use std::ops::Deref;
use std::time::Duration;

use crate::Timestamp;
use crate::store::{
    Claim, Execute, ExecuteSpec, FireEnd, FireQuery, FireRecord, FollowUp, JobSpec, NodeRef, NodeRegistration, Store,
};
use crate::trigger::{Fire, Overlap, Schedule, Trigger, TriggerState};

/// A store handle of any kind: a [`SharedStore`](crate::store::SharedStore)
/// or a concrete store that dereferences to the contract.
pub trait Handle: Deref<Target = dyn Store> + Sync {}

impl<T: Deref<Target = dyn Store> + Sync> Handle for T {}

/// A trigger firing every second from `start`.
pub fn every_second(start: Timestamp) -> ExecuteSpec {
    ExecuteSpec::new(Trigger::new(Schedule::fixed_rate_millis(1000).unwrap(), start).unwrap())
}

/// Registers a node named `node_id` (weight 1, no handlers): its reference.
pub async fn register(store: &impl Handle, node_id: &str) -> NodeRef {
    let node = store
        .register_node(&NodeRegistration {
            node_id: node_id.to_owned(),
            host: "test-host".to_owned(),
            pid: std::process::id(),
            weight: 1,
            handlers: Vec::new(),
            dead_after: None,
            payload_schemas: Default::default(),
        })
        .await
        .unwrap();
    NodeRef {
        node_id: node.node_id,
        incarnation: node.incarnation,
    }
}

/// The claim of `fire` of execute `execute_id` by `node`, as the poller
/// makes it.
pub fn claim_of(execute_id: i64, fire: &Fire, node: &NodeRef) -> Claim {
    Claim::for_fire(execute_id, fire, node)
}

/// An exclusive claim under the trigger's overlap policy.
pub fn overlap_claim(execute_id: i64, fire: &Fire, node: &NodeRef, policy: Overlap) -> Claim {
    let mut claim = claim_of(execute_id, fire, node);
    claim.exclusive = true;
    claim.overlap = Some(policy);
    claim
}

/// A job firing every second from `start`: its execute's id and trigger.
pub async fn ticking_job(store: &impl Handle, name: &str, start: Timestamp) -> (i64, Trigger) {
    store
        .create_job(&JobSpec::new(name, "noop"), &[every_second(start)])
        .await
        .unwrap();
    let executes = store.get_job(name).await.unwrap().unwrap().executes;
    (executes[0].id, executes[0].trigger.clone())
}

/// A job firing every second from `start`: its execute's id and its fires
/// in the `span_ms` from `start`.
pub async fn ticking_fires(store: &impl Handle, name: &str, start: Timestamp, span_ms: i64) -> (i64, Vec<Fire>) {
    let (execute_id, trigger) = ticking_job(store, name, start).await;
    let fires = trigger
        .fires_until(
            &TriggerState::initial(&trigger),
            start.checked_add_millis(span_ms).unwrap(),
        )
        .collect();
    (execute_id, fires)
}

/// Plain successes of `ids`, as the recorder ends them.
pub fn successes(ids: &[i64]) -> Vec<(i64, FireEnd)> {
    ids.iter()
        .map(|id| {
            (
                *id,
                FireEnd::Succeeded {
                    chain: false,
                    ran: None,
                },
            )
        })
        .collect()
}

/// A job firing every second from `start` under an overlap policy: its
/// execute's id and its first `n` fires.
pub async fn overlapping_job(
    store: &impl Handle,
    name: &str,
    start: Timestamp,
    policy: Overlap,
    n: usize,
) -> (i64, Vec<Fire>) {
    let (execute, fires) = job_with_overlap(store, name, start, Some(policy), n).await;
    (execute.id, fires)
}

/// A job firing every second from `start`, with `overlap` (or none): its
/// execute as stored and its first `n` fires.
pub async fn job_with_overlap(
    store: &impl Handle,
    name: &str,
    start: Timestamp,
    overlap: Option<Overlap>,
    n: usize,
) -> (Execute, Vec<Fire>) {
    let trigger = Trigger::new(Schedule::fixed_rate_millis(1000).unwrap(), start)
        .unwrap()
        .with_overlap(overlap);
    store
        .create_job(&JobSpec::new(name, "noop"), &[ExecuteSpec::new(trigger)])
        .await
        .unwrap();
    let execute = store.get_job(name).await.unwrap().unwrap().executes.remove(0);
    let fires = execute
        .trigger
        .fires_until(
            &TriggerState::initial(&execute.trigger),
            start.checked_add_millis(100_000).unwrap(),
        )
        .take(n)
        .collect();
    (execute, fires)
}

/// Claims of fires already won lose, alone and in a batch: `fires[0]`
/// alone, then `fires[0]` and `fires[1]` together, claimed by `node`.
pub async fn assert_claimed_already(store: &impl Handle, execute_id: i64, fires: &[Fire], node: &NodeRef) {
    assert_eq!(store.claim(&claim_of(execute_id, &fires[0], node)).await.unwrap(), None);
    let batch = store
        .claim_batch(&[
            claim_of(execute_id, &fires[0], node),
            claim_of(execute_id, &fires[1], node),
        ])
        .await
        .unwrap();
    assert_eq!(batch, [None, None]);
}

/// `n` ticking jobs named `prefix-i`, the first fire of each claimed by
/// `node`: the fires' ids.
pub async fn claimed_fires(store: &impl Handle, prefix: &str, n: usize, start: Timestamp, node: &NodeRef) -> Vec<i64> {
    let mut ids = Vec::new();
    for i in 0..n {
        let (execute_id, trigger) = ticking_job(store, &format!("{prefix}-{i}"), start).await;
        let fire = trigger
            .fires_until(
                &TriggerState::initial(&trigger),
                trigger.start().checked_add_millis(1).unwrap(),
            )
            .next()
            .unwrap();
        ids.push(store.claim(&claim_of(execute_id, &fire, node)).await.unwrap().unwrap());
    }
    ids
}

/// Plain successes in one call, as the recorder writes them: the ids
/// recorded.
pub async fn succeed_all(store: &impl Handle, ids: &[i64], node: &NodeRef) -> Vec<i64> {
    let done = store.end_fires(node, &successes(ids)).await.unwrap();
    assert_eq!(done.len(), ids.len());
    ids.iter()
        .zip(done)
        .filter(|(_, d)| *d == FollowUp::Recorded)
        .map(|(id, _)| *id)
        .collect()
}

/// The ids of every page of a history query, read by `before_id`.
pub async fn fire_pages(store: &impl Handle, mut q: FireQuery) -> Vec<i64> {
    let mut seen = Vec::new();
    loop {
        let page = store.fires(&q).await.unwrap();
        if page.is_empty() {
            return seen;
        }
        q.before_id = page.last().map(|f| f.id);
        seen.extend(page.into_iter().map(|f| f.id));
    }
}

/// The handle's scheduler's whole ledger, newest first.
pub async fn ledger(store: &impl Handle) -> Vec<FireRecord> {
    let mut query = FireQuery::new();
    query.limit = 1_000;
    let mut all = Vec::new();
    loop {
        let page = store.fires(&query).await.unwrap();
        let Some(last) = page.last() else { break };
        query.before_id = Some(last.id);
        all.extend(page);
    }
    all
}

/// How many fires the handle's scheduler's ledger holds.
pub async fn count_fires(store: &impl Handle) -> i64 {
    i64::try_from(ledger(store).await.len()).unwrap()
}

/// Waits until `cond` holds, panicking with `what` after `limit`.
pub async fn wait_until<F, Fut>(limit: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !cond().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
