//! The metrics a node records through the `metrics` facade, read by a
//! recorder the test installs (the library installs none): one node on a
//! SQLite file runs a job firing every second, and the counters and the
//! lateness histogram say what the ledger says; the outcomes carry their
//! handler (and their job only where the operator opts in); the pool, live
//! nodes and the node's phase are gauges.

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use common::{Kind, TestDb, ledger, wait_for};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use quartz::engine::metrics::{
    CLAIMED, LATENESS, LIVE_NODES, OUTCOMES, PHASE, POLL_DURATION, POLLS, POOL_THREADS, STARTED, SUCCEEDED,
};
use quartz::prelude::*;
use quartz::store::FireState;

const CLUSTER: &str = "metrics-cluster";
const LABELLED: &str = "metrics-labelled";

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
    // A cluster whose operator opted in to the job label.
    let labelled = SchedulerBuilder::new(LABELLED)
        .settings(Settings {
            metrics_job_label: true,
            ..common::fast_settings()
        })
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
    node.add_job(&JobSpec::new("tick", "noop"), &[ExecuteSpec::new(trigger.clone())])
        .await
        .unwrap();
    labelled
        .add_job(&JobSpec::new("named", "noop"), &[ExecuteSpec::new(trigger)])
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
    wait_for(Duration::from_secs(15), "the labelled cluster's fires", || {
        let store = store.clone();
        async move {
            let done = ledger(&store, LABELLED).await;
            let n = done.iter().filter(|f| f.state == FireState::Succeeded).count();
            if n == 3 { Ok(()) } else { Err(format!("{n} so far")) }
        }
    })
    .await;
    node.shutdown().await;
    labelled.shutdown().await;

    let snapshot = snapshotter.snapshot().into_vec();
    // Each series of a metric in a cluster: its labels and value (a
    // histogram's count).
    #[allow(clippy::cast_precision_loss)]
    let series = |name: &str, scheduler: &str| -> Vec<(Vec<(String, String)>, f64)> {
        snapshot
            .iter()
            .filter(|(key, ..)| key.key().name() == name)
            .map(|(key, _, _, value)| {
                let labels = key
                    .key()
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect();
                let value = match value {
                    DebugValue::Counter(n) => *n as f64,
                    DebugValue::Gauge(v) => v.into_inner(),
                    DebugValue::Histogram(v) => v.len() as f64,
                };
                (labels, value)
            })
            .filter(|(labels, _): &(Vec<(String, String)>, _)| {
                labels.iter().any(|(k, v)| k == "scheduler" && v == scheduler)
            })
            .collect()
    };
    let label = |labels: &[(String, String)], key: &str| labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    let outcomes = series(OUTCOMES, CLUSTER);
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    let (labels, value) = &outcomes[0];
    assert_eq!(label(labels, "handler").as_deref(), Some("noop"));
    assert_eq!(label(labels, "outcome").as_deref(), Some("succeeded"));
    assert_eq!(label(labels, "job"), None, "no job label unless the operator opts in");
    assert!((*value - 3.0).abs() < f64::EPSILON, "{value}");
    let named = series(OUTCOMES, LABELLED);
    assert_eq!(label(&named[0].0, "job").as_deref(), Some("named"), "{named:?}");
    let gauge = |name: &str| {
        series(name, CLUSTER)
            .first()
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("{name}"))
    };
    assert!(gauge(POOL_THREADS) >= 1.0);
    assert!(gauge(LIVE_NODES) >= 1.0, "this node saw itself live");
    let phases = series(PHASE, CLUSTER);
    let on: Vec<String> = phases
        .iter()
        .filter(|(_, v)| *v > 0.5)
        .filter_map(|(labels, _)| label(labels, "phase"))
        .collect();
    assert_eq!(on, ["stopped"], "one phase at a time, the last one stopped: {phases:?}");

    let mut counters: HashMap<String, u64> = HashMap::new();
    let mut histograms: HashMap<String, Vec<f64>> = HashMap::new();
    for (key, _, _, value) in snapshot {
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
