//! A node's lifecycle as a service holds it: handles are cheap clones (one
//! dropped leaves the node running), handlers share the state given to the
//! builder, `run_until` leaves the cluster when a signal comes, and a
//! second shutdown finds the node gone.

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Kind, TestDb, wait_for};
use quartz::admin::{FireFilter, JobDefinition, TriggerDefinition};
use quartz::engine::{Phase, ShutdownSummary};
use quartz::prelude::*;

const CLUSTER: &str = "lifecycle-cluster";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_is_held_by_clones_and_leaves_when_its_signal_comes() {
    common::run(Kind::SqliteFile, |db| Box::pin(lifecycle(db))).await;
}

/// What the handlers share: how many ticks ran.
struct Ticks(AtomicUsize);

async fn lifecycle(db: &TestDb) {
    let ticks = Arc::new(Ticks(AtomicUsize::new(0)));
    let node = SchedulerBuilder::new(CLUSTER)
        .settings(common::fast_settings())
        .state(Arc::clone(&ticks))
        .handler("tick", |ctx: JobContext| {
            // A trigger's fire at its time.
            assert_eq!(ctx.run_kind(), quartz::engine::RunKind::Scheduled);
            ctx.state::<Arc<Ticks>>()?.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .handler("unshared", |ctx: JobContext| {
            ctx.state::<String>()?;
            Ok(())
        })
        .start(db.store().await)
        .await
        .unwrap();
    let admin = node.admin();
    admin
        .job_put(&JobDefinition::new("tick", "tick").with_trigger(TriggerDefinition::every(Duration::from_millis(200))))
        .await
        .unwrap();
    let succeeded = |n: usize| {
        let admin = admin.clone();
        async move {
            let filter = FireFilter {
                state: Some("succeeded".into()),
                ..FireFilter::default()
            };
            let done = admin.fires(&filter).await.unwrap().items.len();
            if done >= n {
                Ok(())
            } else {
                Err(format!("{done} of {n}"))
            }
        }
    };

    // A handle dropped (a clone moved into a task that ended) stops nothing.
    let handle = node.clone();
    tokio::spawn(async move { handle.status() }).await.unwrap();
    wait_for(Duration::from_secs(20), "fires after a clone was dropped", || {
        succeeded(3)
    })
    .await;
    assert_eq!(node.status().phase, Phase::Running);
    assert!(
        ticks.0.load(Ordering::SeqCst) >= 3,
        "the handlers share the builder's state"
    );

    // A state of a type the builder was not given fails the fire, saying so.
    admin
        .job_put(&JobDefinition::new("unshared", "unshared"))
        .await
        .unwrap();
    let fired = admin.job_trigger("unshared").await.unwrap();
    wait_for(Duration::from_secs(20), "the unshared fire to fail", || {
        let admin = admin.clone();
        async move {
            let fires = admin.fires(&FireFilter::default()).await.unwrap().items;
            match fires.iter().find(|f| f.id == fired.fire_id) {
                Some(f) if f.state == "failed" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    let fires = admin.fires(&FireFilter::default()).await.unwrap().items;
    let failed = fires.iter().find(|f| f.id == fired.fire_id).unwrap();
    assert!(
        failed
            .error
            .as_deref()
            .unwrap()
            .contains("no state of type alloc::string::String"),
        "{failed:?}"
    );

    // run_until on another handle leaves when the signal comes.
    let (stop, signal) = tokio::sync::oneshot::channel::<()>();
    let runner = node.clone();
    let running = tokio::spawn(async move {
        runner
            .run_until(async {
                let _ = signal.await;
            })
            .await
    });
    stop.send(()).unwrap();
    running.await.unwrap();
    assert_eq!(node.status().phase, Phase::Stopped);
    assert_eq!(node.shutdown().await, ShutdownSummary::default(), "once");
    let nodes = admin.nodes().await.unwrap();
    assert_eq!(nodes[0].state, "gone", "{nodes:?}");
}
