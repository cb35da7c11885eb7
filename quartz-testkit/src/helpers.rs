//! What the suites share beside their databases: the nodes' logs, a node
//! registered, the ledger read whole, waiting on a condition with a
//! deadline (real or paused time), and jobs that fire every second.

use quartz_store::AnyStore;

/// The nodes' logs on the test's output, when `RUST_LOG` asks for them.
pub fn log_if_asked() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// Registers a node named `node_id` on `store`'s scheduler, as a node does
/// when it starts (this process, a test host, no handlers): its reference.
pub async fn register_node(store: &AnyStore, node_id: &str) -> quartz_core::store::NodeRef {
    let node = store
        .register_node(&quartz_core::store::NodeRegistration {
            node_id: node_id.to_owned(),
            host: "test-host".to_owned(),
            pid: std::process::id(),
            weight: 1,
            handlers: Vec::new(),
            dead_after: None,
        })
        .await
        .unwrap();
    quartz_core::store::NodeRef {
        node_id: node.node_id,
        incarnation: node.incarnation,
    }
}

/// Every ledger row of a scheduler, newest first, through the history pages.
pub async fn ledger(
    store: &impl std::ops::Deref<Target = dyn quartz_core::store::Store>,
    scheduler: &str,
) -> Vec<quartz_core::store::FireRecord> {
    let store = store.scoped(scheduler);
    let mut all = Vec::new();
    let mut query = quartz_core::store::FireQuery::new();
    query.limit = 1_000;
    loop {
        let page = store.fires(&query).await.unwrap();
        let Some(last) = page.last() else { break };
        query.before_id = Some(last.id);
        all.extend(page);
    }
    all
}

/// Whether the test runs on tokio's paused clock (`start_paused`): it does
/// not move while the thread sleeps a millisecond of wall-clock time.
pub fn clock_is_paused() -> bool {
    let before = tokio::time::Instant::now();
    std::thread::sleep(std::time::Duration::from_millis(1));
    tokio::time::Instant::now() == before
}

/// Waits until `cond` holds, failing the test with `what` after `limit`.
pub async fn wait_until<F, Fut>(limit: std::time::Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if cond().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Waits until `check` returns `Ok`, failing the test with `what` and the
/// last state `check` described after `limit`.
pub async fn wait_for<F, Fut>(limit: std::time::Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let state = match check().await {
            Ok(()) => return,
            Err(state) => state,
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}; last seen: {state}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A steady load for a cluster test: `jobs` jobs of `handler`, each firing
/// every second (cron `* * * * * ?`) for `seconds` seconds from the
/// database's next whole second plus `lead_s`, added through the nodes in
/// turn. The first and last fire times.
pub async fn every_second_jobs(
    nodes: &[quartz_core::engine::Scheduler],
    jobs: usize,
    handler: &str,
    lead_s: i64,
    seconds: i64,
) -> (quartz_core::Timestamp, quartz_core::Timestamp) {
    use quartz_core::admin::JobDefinition;
    use quartz_core::store::{ExecuteSpec, JobSpec};
    let now = nodes[0].store().now().await.unwrap().as_millis();
    let start = quartz_core::Timestamp::from_millis((now / 1000 + lead_s) * 1000);
    let end = start.saturating_add_millis(seconds * 1000 - 1);
    for i in 0..jobs {
        let trigger = quartz_core::trigger::Trigger::cron("* * * * * ?", "UTC", start)
            .unwrap()
            .with_end(end)
            .unwrap();
        nodes[i % nodes.len()]
            .add_job(&JobDefinition::of_specs(
                &JobSpec::new(format!("job-{i:02}"), handler),
                &[ExecuteSpec::new(trigger)],
            ))
            .await
            .unwrap();
    }
    (start, end)
}

/// Waits, up to `limit`, until the database's clock is a second past `end`
/// and no fire of `scheduler` is claimed or running: every fire time of a
/// run has ended.
pub async fn wait_run_ended(
    store: &impl std::ops::Deref<Target = dyn quartz_core::store::Store>,
    scheduler: &str,
    end: quartz_core::Timestamp,
    limit: std::time::Duration,
) {
    use quartz_core::store::FireState;
    wait_until(limit, "every fire time of the run ended", || async {
        if store.now().await.is_ok_and(|t| t <= end.saturating_add_millis(1_000)) {
            return false;
        }
        let rows = ledger(store, scheduler).await;
        rows.iter()
            .all(|f| !matches!(f.state, FireState::Claimed | FireState::Running))
    })
    .await;
}
