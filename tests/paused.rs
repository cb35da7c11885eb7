//! A node on the in-memory store under tokio's paused time: the engine's
//! own logic on a clock the test steps, without a database or the wall
//! clock (issue 32 builds its stage tests on this).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use quartz::prelude::*;
use quartz::store::{FireState, Store};
use quartz_testkit::memory::MemoryStore;

const CLUSTER: &str = "paused";

/// A minute of a one-second trigger passes in the test's own time: every
/// fire time from the first runs once, on time by the store's clock, and
/// the audit finds nothing.
#[tokio::test(start_paused = true)]
async fn a_minute_of_fires_on_a_stepped_clock() {
    let store = MemoryStore::new();
    let seen: Arc<Mutex<Vec<Timestamp>>> = Arc::default();
    let s = Arc::clone(&seen);
    let node = SchedulerBuilder::new(CLUSTER)
        .settings(quartz_testkit::fast_settings())
        .handler("tick", move |ctx| {
            s.lock().push(ctx.scheduled_fire_time());
            Ok(())
        })
        .start(store.clone())
        .await
        .unwrap();
    let job = JobDefinition::new("tick", "tick").with_trigger(TriggerDefinition::every(Duration::from_secs(1)));
    node.admin().job_add(&job).await.unwrap();
    let from = store.now().await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let until = store.now().await.unwrap();
    node.shutdown().await;

    let mut times = seen.lock().clone();
    times.sort_unstable(); // two pool threads may record out of order
    assert!(
        times.windows(2).all(|w| w[1].as_millis() - w[0].as_millis() == 1_000),
        "{times:?}"
    );
    assert!(times.len() >= 58, "a fire a second for a minute: {}", times.len());
    let store = store.scoped(CLUSTER);
    let rows = quartz_testkit::ledger(&quartz::store::AnyStore::from(store.clone()), CLUSTER).await;
    let (ran, given_back): (Vec<_>, Vec<_>) = rows.iter().partition(|r| r.state == FireState::Succeeded);
    assert_eq!(ran.len(), times.len());
    for r in ran {
        let late = r.started_at.unwrap().as_millis() - r.fire_time.as_millis();
        assert!(
            (0..1_000).contains(&late),
            "started on time by the store's clock: {r:?}"
        );
    }
    // Won ahead of their time and given back at the shutdown, for any node.
    assert!(
        given_back
            .iter()
            .all(|r| r.state == FireState::Claimed && r.owner.is_none() && r.fire_time >= until),
        "{given_back:?}"
    );
    let params = quartz::audit::AuditParams {
        since: from,
        until,
        misfire_threshold: quartz_testkit::fast_settings().misfire.threshold,
    };
    let report = quartz::audit::audit(&*store, &params).await.unwrap();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert!(report.fire_times_checked >= 58);
}
