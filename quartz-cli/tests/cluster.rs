//! Failover with real processes: `quartz run` children killed with SIGKILL
//! or frozen with SIGSTOP, on SQLite (a file shared by the processes),
//! PostgreSQL and MariaDB. A node in the test process survives them.

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{TestDb, ledger, wait_for, wait_until};
use quartz_core::cron::CronExpression;
use quartz_core::engine::{Scheduler, SchedulerBuilder, Settings};
use quartz_core::misfire::MisfireSettings;
use quartz_core::store::{ExecuteSpec, FireRecord, FireState, JobSpec, NodeState};
use quartz_core::trigger::{Schedule, Trigger};
use quartz_core::{Timestamp, Tz};
use quartz_store::AnyStore;

macro_rules! process_tests {
    ($($name:ident),* $(,)?) => {
        mod sqlite { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { $crate::common::run($crate::common::Kind::SqliteFile, |db| Box::pin(super::$name(db))).await } )* }
        mod postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { $crate::common::run($crate::common::Kind::Postgres, |db| Box::pin(super::$name(db))).await } )* }
        mod mysql { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { $crate::common::run($crate::common::Kind::MySql, |db| Box::pin(super::$name(db))).await } )* }
    };
}

process_tests!(
    a_killed_node_s_fires_run_elsewhere_or_are_recorded_abandoned,
    a_frozen_node_runs_nothing_it_lost_and_rejoins,
);

const CLUSTER: &str = "process-cluster";

/// Freezes the node (SIGSTOP) and waits for the survivor to declare it
/// dead. On SQLite a node stopped inside a write transaction keeps the
/// database's one write lock: no node writes, not even the survivor's
/// heartbeat, and none can declare it dead until it runs again. There, and
/// only when the survivor's heartbeat stood still, such a freeze is let go
/// and tried again, at most three times; anywhere else the wait fails.
async fn freeze_until_declared_dead(db: &TestDb, store: &AnyStore, frozen: &NodeProcess) {
    let node = |name: &'static str| async move {
        store
            .list_nodes()
            .await
            .unwrap()
            .into_iter()
            .find(|n| n.node_id == name)
            .unwrap()
    };
    for _ in 0..3 {
        frozen.signal("STOP");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while tokio::time::Instant::now() < deadline {
            if node("frozen").await.state == NodeState::Dead {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let survivor_silent_ms =
            store.now().await.unwrap().as_millis() - node("survivor").await.heartbeat_at.as_millis();
        assert!(
            db.kind == common::Kind::SqliteFile && survivor_silent_ms > 5_000,
            "timed out after 10s waiting for the frozen node declared dead (the survivor's last heartbeat {survivor_silent_ms} ms ago)"
        );
        eprintln!("the freeze held SQLite's write lock (the survivor silent {survivor_silent_ms} ms): trying again");
        frozen.signal("CONT");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("three freezes of the node on SQLite each held the write lock");
}

/// A `quartz run` child process, killed when dropped.
struct NodeProcess(Child);

impl NodeProcess {
    fn start(db: &TestDb, node_id: &str, claim_lead_ms: u64, window_ms: u64) -> NodeProcess {
        let child = Command::new(env!("CARGO_BIN_EXE_quartz"))
            .args([
                "run",
                "--database-url",
                &db.url,
                "--scheduler",
                CLUSTER,
                "--node-id",
                node_id,
            ])
            .args(["--poll-interval", "300ms", "--heartbeat", "200ms"])
            .args(["--dead-after", "1500ms", "--misfire-threshold", "2s"])
            .args([
                "--claim-lead",
                &format!("{claim_lead_ms}ms"),
                "--window",
                &format!("{window_ms}ms"),
            ])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        NodeProcess(child)
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.0.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn settings() -> Settings {
    Settings {
        poll_interval: Duration::from_millis(300),
        window: Duration::from_millis(1_000),
        heartbeat_interval: Duration::from_millis(200),
        dead_after: Duration::from_millis(1_500),
        misfire: MisfireSettings {
            threshold: Duration::from_millis(2_000),
            ..MisfireSettings::default()
        },
        ..Settings::default()
    }
}

/// The survivor: a node in this process with the same handler names.
async fn survivor(db: &TestDb) -> Scheduler {
    SchedulerBuilder::new(CLUSTER)
        .settings(Settings {
            node_id: Some("survivor".to_owned()),
            ..settings()
        })
        .handler("noop", |_| Ok(()))
        .handler("sleep", |_| {
            std::thread::sleep(Duration::from_millis(100));
            Ok(())
        })
        .start(db.store().await)
        .await
        .unwrap()
}

async fn job_ids(store: &AnyStore) -> HashMap<String, i64> {
    store
        .list_jobs()
        .await
        .unwrap()
        .into_iter()
        .map(|j| (j.spec.name, j.id))
        .collect()
}

async fn a_killed_node_s_fires_run_elsewhere_or_are_recorded_abandoned(db: &TestDb) {
    let store = db.store().await.scoped(CLUSTER);
    // The victim claims 3 s ahead, so it holds claimed fires when it dies.
    let victim = NodeProcess::start(db, "victim", 3_000, 4_000);
    wait_until(Duration::from_secs(20), "the victim to join", || async {
        store
            .list_nodes()
            .await
            .unwrap()
            .iter()
            .any(|n| n.state == NodeState::Live)
    })
    .await;
    let now = store.now().await.unwrap();
    let soon = Trigger::new(Schedule::Once, now.saturating_add_millis(500)).unwrap();
    let later = Trigger::new(Schedule::Once, now.saturating_add_millis(3_000)).unwrap();
    let mut recovering = JobSpec::new("recovering", "sleep");
    recovering.payload = "60000".to_owned();
    recovering.requests_recovery = true;
    let mut abandoned = JobSpec::new("abandoned", "sleep");
    abandoned.payload = "60000".to_owned();
    for job in [recovering, abandoned] {
        store.create_job(&job, &[ExecuteSpec::new(soon.clone())]).await.unwrap();
    }
    store
        .create_job(&JobSpec::new("claimed", "noop"), &[ExecuteSpec::new(later)])
        .await
        .unwrap();
    wait_until(Duration::from_secs(15), "two running fires and one claimed", || async {
        let rows = ledger(&store, CLUSTER).await;
        rows.iter().filter(|f| f.state == FireState::Running).count() == 2
            && rows.iter().filter(|f| f.state == FireState::Claimed).count() == 1
    })
    .await;
    victim.signal("KILL");
    drop(victim);
    let survivor = survivor(db).await;
    wait_until(Duration::from_secs(20), "recovery of the victim's fires", || async {
        let rows = ledger(&store, CLUSTER).await;
        rows.iter().filter(|f| f.state == FireState::Succeeded).count() == 2
            && rows.iter().any(|f| f.state == FireState::Abandoned)
    })
    .await;
    let ids = job_ids(&store).await;
    let rows = ledger(&store, CLUSTER).await;
    let of = |name: &str| -> Vec<&FireRecord> {
        let mut v: Vec<_> = rows.iter().filter(|f| f.job_id == ids[name]).collect();
        v.sort_by_key(|f| f.attempt);
        v
    };
    let claimed = of("claimed");
    assert_eq!(claimed.len(), 1, "the claimed fire ran on its own row");
    assert_eq!(claimed[0].state, FireState::Succeeded);
    assert_eq!(claimed[0].owner.as_ref().unwrap().node_id, "survivor");
    assert!(
        claimed[0].started_at.unwrap() >= claimed[0].fire_time,
        "not before its time"
    );
    let recovered = of("recovering");
    assert_eq!(
        recovered.iter().map(|f| (f.attempt, f.state)).collect::<Vec<_>>(),
        [(1, FireState::Failed), (2, FireState::Succeeded)],
        "re-run as attempt 2 (at least once)"
    );
    let gone = of("abandoned");
    assert_eq!(gone.len(), 1, "not re-run (at most once)");
    assert_eq!(gone[0].state, FireState::Abandoned);
    let nodes = store.list_nodes().await.unwrap();
    assert!(
        nodes
            .iter()
            .any(|n| n.node_id == "victim" && n.state == NodeState::Dead)
    );
    survivor.shutdown().await;
}

/// The fire times a ledger row of an every-second trigger stands for: its
/// own, and for a misfired range (the times its policy skipped when it was
/// found late), every second up to the range's end.
fn every_second_of(f: &FireRecord) -> Vec<Timestamp> {
    let times: Vec<Timestamp> = (0..f.fire_count)
        .map(|k| f.fire_time.saturating_add_millis(k as i64 * 1_000))
        .collect();
    if let Some(until) = f.skipped_until {
        assert!(
            times.iter().all(|t| *t < until),
            "a range holds more seconds than it spans: {f:?}"
        );
    }
    times
}

async fn a_frozen_node_runs_nothing_it_lost_and_rejoins(db: &TestDb) {
    let store = db.store().await.scoped(CLUSTER);
    let frozen = NodeProcess::start(db, "frozen", 20, 1_000);
    let survivor = survivor(db).await;
    wait_until(Duration::from_secs(20), "both nodes live", || async {
        store
            .list_nodes()
            .await
            .unwrap()
            .iter()
            .filter(|n| n.state == NodeState::Live)
            .count()
            == 2
    })
    .await;
    let now = store.now().await.unwrap().as_millis();
    // Whole seconds, past the moment every node can see the jobs.
    let start = Timestamp::from_millis((now / 1000 + 2) * 1000);
    let end = start.saturating_add_millis(9_999);
    for i in 0..10 {
        let trigger = Trigger::new(
            Schedule::cron(CronExpression::parse("* * * * * ?").unwrap(), Tz::UTC),
            start,
        )
        .unwrap()
        .with_end(end)
        .unwrap();
        store
            .create_job(&JobSpec::new(format!("tick-{i}"), "noop"), &[ExecuteSpec::new(trigger)])
            .await
            .unwrap();
    }
    let old = store
        .list_nodes()
        .await
        .unwrap()
        .into_iter()
        .find(|n| n.node_id == "frozen")
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let frozen_at = store.now().await.unwrap();
    freeze_until_declared_dead(db, &store, &frozen).await;
    let declared_dead = store.now().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    frozen.signal("CONT");
    wait_until(Duration::from_secs(10), "the frozen node to re-register", || async {
        store
            .list_nodes()
            .await
            .unwrap()
            .iter()
            .any(|n| n.node_id == "frozen" && n.state == NodeState::Live && n.incarnation > old.incarnation)
    })
    .await;
    // The survivor leaves: the rest of the fires are the rejoined node's.
    survivor.shutdown().await;
    // Every fire time ends once, most of them succeeded. Two ends depend on
    // when the freeze and the survivor's leaving fall, and are the policy's:
    // a fire the old incarnation was running when it froze is recorded
    // abandoned (the job does not request recovery); a claimed fire taken
    // over (the old incarnation's when it is declared dead, the survivor's
    // given back when it leaves) and found past the misfire threshold (2 s)
    // is recorded misfired; so are the times of a trigger its next poll found
    // more than 2 s late (the rejoined node slow to poll on a loaded
    // machine): one row for the range its policy (smart: fire once now)
    // skipped.
    wait_for(Duration::from_secs(20), "all 100 fires ended", || async {
        let rows = ledger(&store, CLUSTER).await;
        let ended: u64 = rows.iter().filter(|f| f.state.is_ended()).map(|f| f.fire_count).sum();
        if ended == 100 {
            return Ok(());
        }
        let open: Vec<String> = rows
            .iter()
            .filter(|f| !f.state.is_ended())
            .take(10)
            .map(|f| format!("{f:?}"))
            .collect();
        let mut missing = Vec::new();
        for i in 0..10 {
            let detail = store.get_job(&format!("tick-{i}")).await.unwrap().unwrap();
            for e in &detail.executes {
                let seen: HashSet<Timestamp> = rows
                    .iter()
                    .filter(|f| f.execute_id == e.id)
                    .map(|f| f.fire_time)
                    .collect();
                let gone: Vec<i64> = (0..10)
                    .map(|s| start.saturating_add_millis(s * 1_000))
                    .filter(|t| !seen.contains(t))
                    .map(|t| (t.as_millis() - start.as_millis()) / 1_000)
                    .collect();
                if !gone.is_empty() {
                    missing.push(format!(
                        "tick-{i} seconds {gone:?} (execute {:?} {:?} {:?})",
                        e.state, e.fire_state, e.owner
                    ));
                }
            }
        }
        Err(format!(
            "{} rows, {ended} ended; not ended: {open:?}; missing: {missing:?}",
            rows.len()
        ))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rows = ledger(&store, CLUSTER).await;
    let mut seen = HashSet::new();
    for f in &rows {
        for t in every_second_of(f) {
            assert!(seen.insert((f.execute_id, t)), "twice: {f:?}");
        }
        let old_incarnation = f
            .owner
            .as_ref()
            .is_some_and(|o| o.node_id == "frozen" && o.incarnation == old.incarnation);
        match f.state {
            FireState::Succeeded => assert!(f.started_at.unwrap() >= f.fire_time, "{f:?}"),
            FireState::Abandoned if old_incarnation && f.fire_time >= frozen_at.saturating_add_millis(-1_000) => {}
            FireState::Misfired if f.started_at.is_none() => {}
            _ => panic!("a fire ended otherwise than the scenario allows: {f:?}"),
        }
        if f.state != FireState::Succeeded {
            eprintln!("not succeeded (frozen at {frozen_at:?}, declared dead at {declared_dead:?}): {f:?}");
        }
        if let Some(owner) = &f.owner
            && owner.node_id == "frozen"
            && owner.incarnation == old.incarnation
            && let Some(started_at) = f.started_at
        {
            assert!(
                started_at < declared_dead,
                "the retired incarnation started a fire after it was declared dead: {f:?}"
            );
        }
    }
    assert_eq!(seen.len(), 100, "every second of every job, once");
    let owners: HashSet<(String, i64)> = rows
        .iter()
        .filter_map(|f| f.owner.clone().map(|o| (o.node_id, o.incarnation)))
        .collect();
    assert!(
        owners.iter().any(|(id, inc)| id == "frozen" && *inc > old.incarnation),
        "the frozen node rejoined and fires again: {owners:?}"
    );
    drop(frozen);
}
