//! The metrics a node records through the `metrics` facade, read by a
//! recorder the test installs (the library installs none): one node on a
//! SQLite file runs a job firing every second, and the counters and the
//! lateness histogram say what the ledger says.

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use common::{Kind, TestDb, ledger, wait_for};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use quartz::engine::metrics::{CLAIMED, LATENESS, POLL_DURATION, POLLS, STARTED, SUCCEEDED};
use quartz::prelude::*;
use quartz::store::FireState;

const CLUSTER: &str = "metrics-cluster";

/// What the installed recorder holds.
static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_records_its_fires_as_metrics() {
    let recorder = DebuggingRecorder::new();
    let _ = SNAPSHOTTER.set(recorder.snapshotter());
    recorder.install().expect("the test's own recorder");
    common::run(Kind::SqliteFile, |db| Box::pin(records(db))).await;
}

async fn records(db: &TestDb) {
    let snapshotter = SNAPSHOTTER.get().expect("installed");
    let store = db.store().await;
    let node = SchedulerBuilder::new(CLUSTER)
        .settings(common::fast_settings())
        .handler("noop", |_| Ok(()))
        .start(db.store().await)
        .await
        .unwrap();
    let now = store.now().await.unwrap();
    let start = Timestamp::from_millis((now.as_millis() / 1_000 + 2) * 1_000);
    let trigger = Trigger::new(
        Schedule::cron(CronExpression::parse("* * * * * ?").unwrap(), Tz::UTC),
        start,
    )
    .unwrap()
    .with_end(start.saturating_add_millis(2_000))
    .unwrap();
    node.add_job(&JobSpec::new("tick", "noop"), &[ExecuteSpec::new(trigger)])
        .await
        .unwrap();
    wait_for(Duration::from_secs(15), "three fires succeeded", || {
        let store = store.clone();
        async move {
            let rows = ledger(&store, CLUSTER).await;
            let done = rows.iter().filter(|f| f.state == FireState::Succeeded).count();
            if done == 3 { Ok(()) } else { Err(format!("{rows:?}")) }
        }
    })
    .await;
    node.shutdown().await;

    let mut counters: HashMap<String, u64> = HashMap::new();
    let mut histograms: HashMap<String, Vec<f64>> = HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let labelled = key.labels().any(|l| l.key() == "scheduler" && l.value() == CLUSTER);
        if !labelled {
            continue;
        }
        match value {
            DebugValue::Counter(n) => {
                *counters.entry(key.name().to_owned()).or_default() += n;
            }
            DebugValue::Histogram(values) => histograms
                .entry(key.name().to_owned())
                .or_default()
                .extend(values.into_iter().map(|v| v.into_inner())),
            DebugValue::Gauge(_) => {}
        }
    }
    for name in [CLAIMED, STARTED, SUCCEEDED] {
        assert_eq!(counters.get(name), Some(&3), "{name}: {counters:?}");
    }
    assert!(counters.get(POLLS).is_some_and(|n| *n >= 1), "{counters:?}");
    assert!(
        histograms.get(POLL_DURATION).is_some_and(|v| !v.is_empty()),
        "{histograms:?}"
    );
    let lateness = &histograms[LATENESS];
    assert_eq!(lateness.len(), 3, "one lateness per started fire: {lateness:?}");
    // The ledger's own lateness, in seconds.
    let rows = ledger(&store, CLUSTER).await;
    let mut from_ledger: Vec<f64> = rows
        .iter()
        .map(|f| (f.started_at.unwrap().as_millis() - f.fire_time.as_millis()) as f64 / 1_000.0)
        .collect();
    let mut recorded = lateness.clone();
    from_ledger.sort_by(f64::total_cmp);
    recorded.sort_by(f64::total_cmp);
    assert_eq!(recorded, from_ledger);
}
