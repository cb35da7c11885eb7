//! Cluster health as the admin surface reads it from the database, on every
//! backend: a node whose row says live but whose heartbeat is older than
//! its own `dead_after` (in database time) is shown silent, not live, even
//! when no peer is left to declare it dead.

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;

use std::time::Duration;

use common::{TestDb, backend_tests, wait_for};
use quartz::admin::{Admin, JobDefinition, TriggerDefinition};
use quartz::store::spi::NodeRegistration;

const CLUSTER: &str = "health-cluster";

async fn a_node_past_its_dead_after_is_silent_not_live(db: &TestDb) {
    let store = db.store().await.scoped(CLUSTER);
    let admin = Admin::new(store.clone(), CLUSTER);
    let register = |id: &str, dead_after: Option<Duration>| NodeRegistration {
        node_id: id.to_owned(),
        host: "h".to_owned(),
        pid: 1,
        weight: 1,
        handlers: vec!["report".to_owned()],
        dead_after,
        payload_schemas: Default::default(),
    };
    store
        .register_node(&register("stalled", Some(Duration::from_secs(2))))
        .await
        .unwrap();
    // A node from before dead_after was recorded: never called silent.
    store.register_node(&register("older", None)).await.unwrap();

    let nodes = admin.nodes().await.unwrap();
    let stalled = nodes.iter().find(|n| n.node_id == "stalled").unwrap();
    assert_eq!((stalled.state.as_str(), stalled.dead_after_ms), ("live", Some(2_000)));
    assert_eq!(admin.nodes_offering("report").await.unwrap().len(), 2);

    // No heartbeat, and no peer to declare it dead: silent once its
    // heartbeat is older than its dead_after, by the database's clock.
    wait_for(Duration::from_secs(20), "the stalled node shown silent", || async {
        let nodes = admin.nodes().await.unwrap();
        let n = nodes.iter().find(|n| n.node_id == "stalled").unwrap();
        (n.state == "silent")
            .then_some(())
            .ok_or(format!("{} after {} ms", n.state, n.heartbeat_age_ms))
    })
    .await;
    let nodes = admin.nodes().await.unwrap();
    let stalled = nodes.iter().find(|n| n.node_id == "stalled").unwrap();
    assert!(stalled.heartbeat_age_ms > 2_000, "{stalled:?}");
    let older = nodes.iter().find(|n| n.node_id == "older").unwrap();
    assert_eq!((older.state.as_str(), older.dead_after_ms), ("live", None));
    assert_eq!(
        admin.nodes_offering("report").await.unwrap(),
        ["older"],
        "a silent node offers nothing"
    );
    let overview = admin.overview(60_000).await.unwrap();
    assert_eq!((overview.live_nodes, overview.silent_nodes), (1, 1));
}

/// With no node at all, the health the admin surface reads (and `/metrics`
/// exports) counts a trigger no node fires as overdue, and a fire by hand
/// as pending.
async fn health_counts_what_no_node_is_left_to_report(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    let now = admin.now().await.unwrap();
    let mut job = JobDefinition::new("stuck", "report");
    job.triggers
        .push(TriggerDefinition::every(Duration::from_secs(3600)).starting(now.saturating_add_millis(-600_000)));
    admin.job_add(&job).await.unwrap();
    let mut later = JobDefinition::new("later", "report");
    later.triggers.push(TriggerDefinition::every(Duration::from_secs(3600)));
    admin.job_add(&later).await.unwrap();
    admin.job_trigger("later").await.unwrap();

    let health = admin.health().await.unwrap();
    assert_eq!(health.overdue_triggers, 1, "{health:?}");
    let oldest = health.oldest_overdue_ms.unwrap();
    assert!((600_000..700_000).contains(&oldest), "{health:?}");
    assert_eq!(
        (
            health.pending_fires,
            health.stranded_fires,
            health.claimed_fires,
            health.running_fires
        ),
        (1, 0, 0, 0)
    );
    assert_eq!(
        (health.live_nodes, health.recent_failed, health.recent_succeeded),
        (0, 0, 0)
    );
}

backend_tests!(
    a_node_past_its_dead_after_is_silent_not_live,
    health_counts_what_no_node_is_left_to_report,
);
