//! Calendars through the engine, on real databases: triggers pass over the
//! times their calendar excludes, and a calendar changed while three nodes
//! fire reaches every one of them with no fire run twice or lost.
//!
//! Each test runs on SQLite (a file), PostgreSQL and MariaDB, on a fresh
//! database (see `quartz-testkit`).

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use common::{TestDb, ledger, wait_until};
use quartz::admin::{Admin, AdminError};
use quartz::calendar::CalendarDefinition;
use quartz::prelude::*;
use quartz::store::{CHANGE_VISIBILITY_MS, FireState};

/// One test per backend: SQLite (file), PostgreSQL, MariaDB.
macro_rules! calendar_tests {
    ($($name:ident),* $(,)?) => {
        mod sqlite { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { $crate::common::run($crate::common::Kind::SqliteFile, |db| Box::pin(super::$name(db))).await } )* }
        mod postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { $crate::common::run($crate::common::Kind::Postgres, |db| Box::pin(super::$name(db))).await } )* }
        mod mysql { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { $crate::common::run($crate::common::Kind::MySql, |db| Box::pin(super::$name(db))).await } )* }
    };
}

calendar_tests!(a_calendar_change_reaches_every_node_with_no_fire_twice_or_lost);

const CLUSTER: &str = "calendar-cluster";

async fn node(db: &TestDb) -> Scheduler<AnyStore> {
    SchedulerBuilder::new(CLUSTER)
        .settings(common::fast_settings())
        .handler("noop", |_| Ok(()))
        .start(db.store().await)
        .await
        .unwrap()
}

/// A cron calendar: the seconds `expr` matches are excluded.
fn seconds(expr: &str) -> CalendarDefinition {
    serde_json::from_value(serde_json::json!({"kind": "cron", "cron": expr})).unwrap()
}

fn even(t: Timestamp) -> bool {
    t.as_millis().div_euclid(1000) % 2 == 0
}

async fn a_calendar_change_reaches_every_node_with_no_fire_twice_or_lost(db: &TestDb) {
    let nodes = [node(db).await, node(db).await, node(db).await];
    let store = nodes[0].store().clone();
    let admin = nodes[1].admin();
    // First the odd seconds are excluded, then the even ones.
    admin.calendar_put("quiet", &seconds("1/2 * * * * ?")).await.unwrap();
    let now = store.now().await.unwrap().as_millis();
    let start = Timestamp::from_millis((now / 2000 + 2) * 2000);
    let end = start.saturating_add_millis(9_999);
    let rate = Trigger::every(Duration::from_millis(250), start)
        .unwrap()
        .with_end(end)
        .unwrap()
        .with_calendar("quiet")
        .unwrap();
    let cron = Trigger::cron("* * * * * ?", "UTC", start)
        .unwrap()
        .with_end(end)
        .unwrap()
        .with_calendar("quiet")
        .unwrap();
    for (name, trigger) in [("rate", rate), ("cron", cron)] {
        nodes[0]
            .add_job(&JobSpec::new(name, "noop"), &[ExecuteSpec::new(trigger)])
            .await
            .unwrap();
    }
    let detail = store.get_job(CLUSTER, "cron").await.unwrap().unwrap();
    assert_eq!(
        detail.executes[0].fire_state.next_fire_time,
        Some(start),
        "an even second"
    );

    // Halfway, from another node, the calendar flips.
    let flip = start.saturating_add_millis(4_500);
    wait_until(Duration::from_secs(30), "the flip time", || async {
        store.now().await.unwrap() >= flip
    })
    .await;
    let before = store.now().await.unwrap();
    admin.calendar_put("quiet", &seconds("0/2 * * * * ?")).await.unwrap();
    let after = store.now().await.unwrap();
    let settled = after.saturating_add_millis(CHANGE_VISIBILITY_MS);

    // Every fire time of the grid the calendar in force includes, away from
    // the change's edges.
    let rate_grid: Vec<Timestamp> = (0..40).map(|i| start.saturating_add_millis(i * 250)).collect();
    let cron_grid: Vec<Timestamp> = (0..10).map(|i| start.saturating_add_millis(i * 1000)).collect();
    let expected = |grid: &[Timestamp]| -> BTreeSet<Timestamp> {
        grid.iter()
            .copied()
            .filter(|t| (*t < before && even(*t)) || (*t >= settled && !even(*t)))
            .collect()
    };
    let jobs: std::collections::HashMap<i64, String> = store
        .list_jobs(CLUSTER)
        .await
        .unwrap()
        .into_iter()
        .map(|j| (j.id, j.spec.name))
        .collect();
    let times_of = |rows: &[quartz::store::FireRecord], name: &str| -> BTreeSet<Timestamp> {
        rows.iter()
            .filter(|f| jobs.get(&f.job_id).map(String::as_str) == Some(name))
            .map(|f| f.fire_time)
            .collect()
    };
    wait_until(Duration::from_secs(40), "every fire up to the end", || async {
        let rows = ledger(&store, CLUSTER).await;
        let done = rows.iter().filter(|f| f.state == FireState::Succeeded).count() == rows.len();
        done && times_of(&rows, "rate").is_superset(&expected(&rate_grid))
            && times_of(&rows, "cron").is_superset(&expected(&cron_grid))
            && store.now().await.unwrap() > end
    })
    .await;
    for n in nodes {
        n.shutdown().await;
    }

    let rows = ledger(&store, CLUSTER).await;
    let mut once = HashSet::new();
    for f in &rows {
        assert!(once.insert((f.execute_id, f.fire_time, f.attempt)), "twice: {f:?}");
        assert_eq!(f.state, FireState::Succeeded, "{f:?}");
        // Before the change only even seconds, once every node has seen it
        // only odd ones; a fire between the two may follow either.
        if f.fire_time < before {
            assert!(even(f.fire_time), "an excluded odd second before the change: {f:?}");
        }
        if f.fire_time >= settled {
            assert!(!even(f.fire_time), "an excluded even second after the change: {f:?}");
        }
    }
    assert!(
        times_of(&rows, "rate").len() >= expected(&rate_grid).len() && expected(&rate_grid).len() >= 20,
        "the fixed-rate trigger fired its included times: {:?}",
        times_of(&rows, "rate")
    );

    // A calendar in use is not deleted; once unused, it is.
    let admin = Admin::new(store.clone(), CLUSTER);
    match admin.calendar_delete("quiet").await {
        Err(AdminError::InUse { users, .. }) => assert_eq!(users, ["job cron", "job rate"]),
        other => panic!("deleted a calendar in use: {other:?}"),
    }
    admin.job_delete("cron").await.unwrap();
    admin.job_delete("rate").await.unwrap();
    admin.calendar_delete("quiet").await.unwrap();
    assert!(matches!(
        admin.calendar("quiet").await,
        Err(AdminError::CalendarNotFound { .. })
    ));
}
