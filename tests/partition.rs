//! A node cut off from the database by the network, not by a closed
//! connection: three nodes under a steady load, one of them talking to the
//! database through a [`FaultProxy`] that stalls (sockets open and silent,
//! no reset, its queries hanging) for three times `dead_after`, then heals.
//! On PostgreSQL, MariaDB and Redis; and a node on a slow link (100 ms each
//! way) on PostgreSQL.
//!
//! The others declare it dead and take over its fires; it starts nothing
//! once cut off past its claims' lead (the start of a fire is fenced by the
//! database, which it cannot reach), and when the network heals it finds
//! itself declared dead and rejoins under a new incarnation. The ledger then
//! holds every fire time once, run or recorded misfired (the audit finds
//! nothing), and no handler ran twice for one fire.

#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use quartz::audit::{AuditParams, audit};
use quartz::engine::Phase;
use quartz::prelude::*;
use quartz::store::{FireState, NodeState};
use quartz_testkit::proxy::{FaultProxy, Mode};
use quartz_testkit::{EverySecond, Kind, TestDb, ledger, wait_until};

const CLUSTER: &str = "partition";
const JOBS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    quartz_testkit::run(Kind::Postgres, |db| Box::pin(a_node_cut_off_silently(db))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb() {
    quartz_testkit::run(Kind::MySql, |db| Box::pin(a_node_cut_off_silently(db))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis() {
    quartz_testkit::run(Kind::Redis, |db| Box::pin(a_node_cut_off_silently(db))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_shutdown_cut_off() {
    quartz_testkit::run(Kind::Postgres, |db| {
        Box::pin(a_node_cut_off_shuts_down_within_its_grace(db))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_shutdown_cut_off() {
    quartz_testkit::run(Kind::MySql, |db| {
        Box::pin(a_node_cut_off_shuts_down_within_its_grace(db))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_shutdown_cut_off() {
    quartz_testkit::run(Kind::Redis, |db| {
        Box::pin(a_node_cut_off_shuts_down_within_its_grace(db))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_deadline() {
    quartz_testkit::run(Kind::Postgres, |db| {
        Box::pin(a_call_past_its_deadline_closes_its_connection(db))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_deadline() {
    quartz_testkit::run(Kind::MySql, |db| {
        Box::pin(a_call_past_its_deadline_closes_its_connection(db))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_admin_readers() {
    quartz_testkit::run(Kind::Postgres, |db| {
        Box::pin(readers_never_starve_a_nodes_heartbeats(db))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_slow_link() {
    quartz_testkit::run(Kind::Postgres, |db| Box::pin(a_node_on_a_slow_link(db))).await;
}

/// The `host:port` a database URL names.
fn host_port(url: &str) -> &str {
    let rest = url.split_once("://").unwrap().1;
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap()
}

/// A handler's run: which node, which fire, when on the test's clock.
type Runs = Arc<Mutex<Vec<(usize, String, Timestamp, Instant)>>>;

async fn node(index: usize, store: AnyStore, runs: &Runs) -> Scheduler {
    let runs = Arc::clone(runs);
    SchedulerBuilder::new(CLUSTER)
        .settings(quartz_testkit::fast_settings())
        .handler("note", move |ctx| {
            let run = (
                index,
                ctx.job_name().to_owned(),
                ctx.scheduled_fire_time(),
                Instant::now(),
            );
            runs.lock().push(run);
            Ok(())
        })
        .start(store)
        .await
        .unwrap()
}

async fn a_node_cut_off_silently(db: &TestDb) {
    let settings = quartz_testkit::fast_settings();
    let proxy = FaultProxy::start(host_port(&db.url));
    let runs = Runs::default();
    let cut_off = node(0, AnyStore::connect(&proxy.url(&db.url)).await.unwrap(), &runs).await;
    let nodes = [
        cut_off,
        node(1, db.store().await, &runs).await,
        node(2, db.store().await, &runs).await,
    ];
    let store = db.store().await;
    let run = quartz_testkit::every_second_jobs(&nodes, JOBS, "note", 3, 15).await;
    let (start, end) = (run.start, run.end);
    let db_at = |ms: i64| {
        let store = store.clone();
        async move { store.now().await.unwrap() >= start.saturating_add_millis(ms) }
    };
    wait_until(Duration::from_secs(20), "three seconds of fires", || db_at(3_300)).await;

    let before = nodes[0].node();
    proxy.set(Mode::Stall);
    let stalled = Instant::now();
    let stalled_db = store.now().await.unwrap();
    let dead_after = settings.dead_after;
    wait_until(Duration::from_secs(30), "the cut-off node declared dead", || async {
        let members = store.scoped(CLUSTER).list_nodes().await.unwrap();
        members
            .iter()
            .any(|m| m.node_id == before.node_id && m.incarnation == before.incarnation && m.state == NodeState::Dead)
    })
    .await;
    let declared = Instant::now();
    // Its last heartbeat may have come up to an interval before the stall.
    assert!(
        declared - stalled >= dead_after.saturating_sub(settings.heartbeat_interval),
        "declared dead {:?} after the stall began, before dead_after",
        declared - stalled
    );
    // Stalled for three times dead_after in all.
    tokio::time::sleep((dead_after * 3).saturating_sub(stalled.elapsed())).await;
    proxy.set(Mode::Pass);
    let healed = Instant::now();
    wait_until(Duration::from_secs(20), "the cut-off node to rejoin", || async {
        let status = nodes[0].status();
        status.node.incarnation != before.incarnation && status.phase == Phase::Running
    })
    .await;
    let rejoined = healed.elapsed();
    quartz_testkit::wait_run_ended(&store, CLUSTER, end, Duration::from_secs(40)).await;
    for n in nodes {
        n.shutdown().await;
    }

    // Once, and every fire time accounted for.
    let rows = ledger(&store, CLUSTER).await;
    let mut once = HashSet::new();
    for f in &rows {
        assert!(
            once.insert((f.execute_id, f.fire_time, f.attempt)),
            "twice in the ledger: {f:?}"
        );
    }
    let runs = audited_once(&store, &run, &runs).await;
    // Nothing started on the cut-off node once it was cut off past its
    // claims' lead, until it had rejoined.
    let lead = settings.claim_lead + Duration::from_millis(200);
    let during: Vec<_> = runs
        .iter()
        .filter(|(node, _, _, at)| *node == 0 && *at > stalled + lead && *at < healed)
        .collect();
    assert!(during.is_empty(), "the cut-off node ran fires: {during:?}");
    // Its fires went on elsewhere meanwhile.
    let cut_span = (
        stalled_db.saturating_add_millis(2_000),
        stalled_db.saturating_add_millis(4_000),
    );
    let elsewhere = rows
        .iter()
        .filter(|f| f.state == FireState::Succeeded && f.fire_time >= cut_span.0 && f.fire_time < cut_span.1)
        .count();
    assert_eq!(
        elsewhere,
        JOBS * 2,
        "every fire of two seconds of the stall ran on the others"
    );
    eprintln!(
        "{:?}: declared dead {:?} after the stall began, rejoined {rejoined:?} after it healed",
        db.kind,
        declared - stalled
    );
}

/// A node asked to stop while its database does not answer (its sockets
/// open and silent): it stops within its shutdown grace and a few seconds,
/// saying what it left behind (claims not given back, the node not marked
/// gone); the other node declares it dead and runs what it left, and the
/// run logs show every fire time run once.
async fn a_node_cut_off_shuts_down_within_its_grace(db: &TestDb) {
    let logs = quartz_testkit::RunLogs::new();
    let grace = Duration::from_secs(2);
    let settings = || Settings {
        shutdown_grace: grace,
        run_log: Some(logs.dir()),
        ..quartz_testkit::fast_settings()
    };
    let build = |store: AnyStore| {
        SchedulerBuilder::new(CLUSTER)
            .settings(settings())
            .handler("note", |_| Ok(()))
            .start(store)
    };
    let proxy = FaultProxy::start(host_port(&db.url));
    let nodes = [
        build(AnyStore::connect(&proxy.url(&db.url)).await.unwrap())
            .await
            .unwrap(),
        build(db.store().await).await.unwrap(),
    ];
    let store = db.store().await;
    let run = quartz_testkit::every_second_jobs(&nodes, JOBS, "note", 2, 8).await;
    let start = run.start;
    wait_until(Duration::from_secs(20), "two seconds of fires", || async {
        store.now().await.unwrap() >= start.saturating_add_millis(2_300)
    })
    .await;
    proxy.set(Mode::Stall);
    let asked = Instant::now();
    let summary = tokio::time::timeout(Duration::from_secs(60), nodes[0].shutdown())
        .await
        .expect("the shutdown of a node cut off from its database ended");
    let took = asked.elapsed();
    assert!(
        took < grace + Duration::from_secs(9),
        "stopped {took:?} after it was asked, its grace {grace:?}: {summary:?}"
    );
    assert!(!summary.marked_gone, "the database could not mark it gone: {summary:?}");
    quartz_testkit::wait_run_ended(&store, CLUSTER, run.end, Duration::from_secs(40)).await;
    nodes[1].shutdown().await;
    proxy.set(Mode::Pass);
    let checked = logs
        .assert_clean(
            &*store.scoped(CLUSTER),
            run.start,
            run.end.saturating_add_millis(1),
            quartz_testkit::fast_settings().misfire.threshold,
        )
        .await;
    eprintln!(
        "{:?}: stopped {took:?} after SIGTERM's equivalent, cut off; {summary:?}; {} fire times run, {} by policy",
        db.kind, checked.fire_times_run, checked.fire_times_by_policy
    );
}

/// A store call to a database that stopped answering (its sockets open
/// and silent) fails at its deadline, and the connection it held is closed
/// once it has not answered the pool's test within `release_test`, rather
/// than handed back to the pool, where it would hold a place until the
/// kernel gave it up; once the network heals, calls go through on new
/// connections.
async fn a_call_past_its_deadline_closes_its_connection(db: &TestDb) {
    let proxy = FaultProxy::start(host_port(&db.url));
    let options = quartz::store::StoreOptions {
        release_test: Duration::from_secs(1),
        ..Default::default()
    };
    let store = AnyStore::connect_with(&proxy.url(&db.url), &options)
        .await
        .unwrap()
        .scoped(CLUSTER);
    let deadlined = quartz::store::Deadline::wrap(store.shared().clone(), Duration::from_millis(300));
    deadlined.now().await.unwrap();
    let pool = store.as_sql().unwrap().pool().clone();
    proxy.set(Mode::Stall);
    let asked = Instant::now();
    let answer = deadlined.now().await;
    assert!(
        matches!(answer, Err(quartz::store::StoreError::TimedOut { call: "now", .. })),
        "{answer:?}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "answered after {:?}",
        asked.elapsed()
    );
    // Held by nothing: the connection the call had is idle again, or gone.
    wait_until(Duration::from_secs(10), "the silent connection closed", || {
        let pool = pool.clone();
        async move { pool.size() == pool.num_idle() as u32 }
    })
    .await;
    proxy.set(Mode::Pass);
    deadlined.now().await.unwrap();
}

/// Readers of a node's admin surface whose reads hang (the change log
/// locked by someone else, as a slow search or a migration would hold it)
/// hold a few of the node's connections, never all: the node keeps
/// heart-beating and holds its lease.
async fn readers_never_starve_a_nodes_heartbeats(db: &TestDb) {
    use sqlx::{Connection as _, Executor as _};
    let node = SchedulerBuilder::new(CLUSTER)
        .settings(quartz_testkit::fast_settings())
        .handler("note", |_| Ok(()))
        .start(db.store().await)
        .await
        .unwrap();
    let store = db.store().await;
    // A connection of its own, without the store's limit on idle
    // transactions.
    let mut locker = sqlx::PgConnection::connect(&db.url).await.unwrap();
    locker.execute("BEGIN").await.unwrap();
    locker
        .execute(sqlx::AssertSqlSafe(
            "LOCK TABLE quartz_change_log IN ACCESS EXCLUSIVE MODE",
        ))
        .await
        .unwrap();
    let readers: Vec<_> = (0..12)
        .map(|_| {
            let admin = node.admin();
            tokio::spawn(async move { admin.changes(&Default::default()).await })
        })
        .collect();
    let before = node.status().counters.lease_lost;
    let heartbeat = |store: AnyStore| async move {
        let nodes = store.scoped(CLUSTER).list_nodes().await.unwrap();
        nodes.iter().map(|n| n.heartbeat_at).max().unwrap()
    };
    let first = heartbeat(store.clone()).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = heartbeat(store.clone()).await;
    assert!(
        later.as_millis() > first.as_millis() + 1_000,
        "heart-beating while readers hang"
    );
    assert_eq!(node.status().counters.lease_lost, before, "the lease held");
    locker.execute("ROLLBACK").await.unwrap();
    for reader in readers {
        reader.await.unwrap().unwrap();
    }
    node.shutdown().await;
}

/// A node whose every packet to the database and back waits 100 ms (a link
/// across regions, a congested one): it stays a member (its heartbeats are
/// slow, not missing), every fire time runs once, and the others take what
/// it is too slow to claim.
async fn a_node_on_a_slow_link(db: &TestDb) {
    let proxy = FaultProxy::start(host_port(&db.url));
    let runs = Runs::default();
    let slow = node(0, AnyStore::connect(&proxy.url(&db.url)).await.unwrap(), &runs).await;
    let incarnation = slow.node().incarnation;
    let nodes = [
        slow,
        node(1, db.store().await, &runs).await,
        node(2, db.store().await, &runs).await,
    ];
    let store = db.store().await;
    // Slow from now on (a node starting over it migrates statement by
    // statement, which takes long, and is not what this test is about).
    proxy.set(Mode::Latency(Duration::from_millis(100)));
    // Added through the others: the slow node's own statements are slow.
    let run = quartz_testkit::every_second_jobs(&nodes[1..], JOBS, "note", 2, 5).await;
    quartz_testkit::wait_run_ended(&store, CLUSTER, run.end, Duration::from_secs(40)).await;
    assert_eq!(
        nodes[0].node().incarnation,
        incarnation,
        "the slow node was never declared dead"
    );
    let counters = nodes[0].status().counters;
    for n in nodes {
        n.shutdown().await;
    }
    eprintln!("slow node: {counters:?}");
    let runs = audited_once(&store, &run, &runs).await;
    assert_eq!(runs.len() as u64, run.fire_times, "every fire time ran");
    let on_slow = runs.iter().filter(|r| r.0 == 0).count();
    eprintln!(
        "slow link (100 ms each way): {on_slow} of {} fires ran on the slow node",
        runs.len()
    );
}

/// The audit of the run's fire times finds nothing, and no handler ran
/// twice for one fire; the handlers' runs.
async fn audited_once(store: &AnyStore, run: &EverySecond, runs: &Runs) -> Vec<(usize, String, Timestamp, Instant)> {
    let params = AuditParams {
        since: run.start,
        until: run.end.saturating_add_millis(1),
        misfire_threshold: quartz_testkit::fast_settings().misfire.threshold,
    };
    let report = audit(&*store.scoped(CLUSTER), &params).await.unwrap();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.fire_times_checked, run.fire_times);
    let runs = runs.lock().clone();
    let mut ran = HashSet::new();
    for (node, job, fire_time, _) in &runs {
        assert!(
            ran.insert((job, fire_time)),
            "{job} at {fire_time} ran twice (node {node})"
        );
    }
    runs
}
