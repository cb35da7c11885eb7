//! The metrics a node records through the `metrics` facade, read by a
//! recorder the test installs (the library installs none): one node on a
//! SQLite file runs a job firing every second, and the counters and the
//! lateness histogram say what the ledger says; the outcomes carry their
//! handler (and their job only where the operator opts in); the pool, live
//! nodes and the node's phase are gauges.

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::{Kind, TestDb, ledger, wait_for};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use quartz::engine::metrics::{
    CLAIMED, LATENESS, LIVE_NODES, OUTCOMES, PHASE, POLL_DURATION, POLLS, POOL_THREADS, STARTED, SUCCEEDED,
};
use quartz::prelude::*;
use quartz::store::ExecuteSpec;
use quartz::store::FireState;
use quartz::trigger::{Schedule, Trigger};

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
    node.add_job(&JobDefinition::of_specs(
        &JobSpec::new("tick", "noop"),
        &[ExecuteSpec::new(trigger.clone())],
    ))
    .await
    .unwrap();
    labelled
        .add_job(&JobDefinition::of_specs(
            &JobSpec::new("named", "noop"),
            &[ExecuteSpec::new(trigger)],
        ))
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
    // While the node runs, its heartbeats record the pool and the cluster.
    let seen = Arc::new(Mutex::new(Seen::default()));
    wait_for(Duration::from_secs(15), "the pool and live-node gauges", || {
        let seen = Arc::clone(&seen);
        async move {
            let mut seen = seen.lock().unwrap();
            seen.take(snapshotter);
            let (threads, live) = (seen.high(POOL_THREADS, CLUSTER), seen.high(LIVE_NODES, CLUSTER));
            if threads >= 1.0 && live >= 1.0 {
                Ok(())
            } else {
                Err(format!("{threads} pool threads, {live} live nodes"))
            }
        }
    })
    .await;
    node.shutdown().await;
    labelled.shutdown().await;
    let mut seen = Arc::try_unwrap(seen).ok().unwrap().into_inner().unwrap();
    seen.take(snapshotter);

    let outcomes = seen.of(OUTCOMES, CLUSTER);
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    let (labels, value) = &outcomes[0];
    assert_eq!(label(labels, "handler").as_deref(), Some("noop"));
    assert_eq!(label(labels, "outcome").as_deref(), Some("succeeded"));
    assert_eq!(label(labels, "job"), None, "no job label unless the operator opts in");
    assert_eq!(value.count(), 3, "{value:?}");
    let named = seen.of(OUTCOMES, LABELLED);
    assert_eq!(label(&named[0].0, "job").as_deref(), Some("named"), "{named:?}");
    // The stopped node's phase, recorded after its last heartbeat.
    let on: Vec<String> = seen
        .of(PHASE, CLUSTER)
        .iter()
        .filter(|(_, v)| matches!(v, Value::Gauge { last, .. } if *last > 0.5))
        .filter_map(|(labels, _)| label(labels, "phase"))
        .collect();
    assert_eq!(on, ["stopped"], "one phase at a time, the last one stopped");

    for name in [CLAIMED, STARTED, SUCCEEDED] {
        let n: u64 = seen.of(name, CLUSTER).iter().map(|(_, v)| v.count()).sum();
        assert_eq!(n, 3, "{name}");
    }
    assert!(seen.of(POLLS, CLUSTER).iter().any(|(_, v)| v.count() >= 1));
    assert!(seen.of(POLL_DURATION, CLUSTER).iter().any(|(_, v)| v.count() >= 1));
    let lateness: Vec<f64> = seen
        .of(LATENESS, CLUSTER)
        .into_iter()
        .flat_map(|(_, v)| match v {
            Value::Histogram(values) => values,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(lateness.len(), 3, "one lateness per started fire: {lateness:?}");
    // The ledger's own lateness, in seconds.
    let rows = ledger(&store, CLUSTER).await;
    let mut from_ledger: Vec<f64> = rows
        .iter()
        .map(|f| (f.started_at.unwrap().as_millis() - f.fire_time.as_millis()) as f64 / 1_000.0)
        .collect();
    let mut recorded = lateness;
    from_ledger.sort_by(f64::total_cmp);
    recorded.sort_by(f64::total_cmp);
    assert_eq!(recorded, from_ledger);
}

/// A series' labels.
type Labels = Vec<(String, String)>;

/// The value of a label.
fn label(labels: &[(String, String)], key: &str) -> Option<String> {
    labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

/// A series' value over the snapshots taken.
#[derive(Debug, Clone)]
enum Value {
    /// A counter: what every snapshot read, added.
    Counter(u64),
    /// A gauge: the highest value read, and what the last snapshot read.
    Gauge { high: f64, last: f64 },
    /// A histogram: every value recorded.
    Histogram(Vec<f64>),
}

impl Value {
    /// A counter's total, a histogram's count.
    fn count(&self) -> u64 {
        match self {
            Value::Counter(n) => *n,
            Value::Histogram(values) => values.len() as u64,
            Value::Gauge { .. } => panic!("a gauge has no count"),
        }
    }
}

/// What the recorder held, over every snapshot taken: a snapshot resets
/// what it reads (counters and gauges to zero, histograms emptied).
#[derive(Default)]
struct Seen {
    series: HashMap<(String, Labels), Value>,
}

impl Seen {
    /// Takes a snapshot and adds it to what was seen.
    fn take(&mut self, snapshotter: &Snapshotter) {
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let key = key.key();
            let labels = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            let entry = self.series.entry((key.name().to_owned(), labels));
            match value {
                DebugValue::Counter(n) => {
                    let total = entry.or_insert(Value::Counter(0));
                    if let Value::Counter(total) = total {
                        *total += n;
                    }
                }
                DebugValue::Gauge(v) => {
                    let v = v.into_inner();
                    let gauge = entry.or_insert(Value::Gauge { high: v, last: v });
                    if let Value::Gauge { high, last } = gauge {
                        *high = high.max(v);
                        *last = v;
                    }
                }
                DebugValue::Histogram(values) => {
                    let all = entry.or_insert(Value::Histogram(Vec::new()));
                    if let Value::Histogram(all) = all {
                        all.extend(values.into_iter().map(|v| v.into_inner()));
                    }
                }
            }
        }
    }

    /// A metric's series in one cluster.
    fn of(&self, name: &str, scheduler: &str) -> Vec<(Labels, Value)> {
        self.series
            .iter()
            .filter(|((n, labels), _)| n == name && labels.iter().any(|(k, v)| k == "scheduler" && v == scheduler))
            .map(|((_, labels), value)| (labels.clone(), value.clone()))
            .collect()
    }

    /// A gauge's highest value in one cluster, 0 if never set.
    fn high(&self, name: &str, scheduler: &str) -> f64 {
        self.of(name, scheduler)
            .iter()
            .filter_map(|(_, v)| match v {
                Value::Gauge { high, .. } => Some(*high),
                _ => None,
            })
            .fold(0.0, f64::max)
    }
}
