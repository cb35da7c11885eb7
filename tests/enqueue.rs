//! Work enqueued from code on real databases and a real node: in the
//! service's own transaction (it runs if and only if that transaction
//! commits, with its own payload, once), retried with the same payload,
//! unique by a key (two transactions racing for one key: the second waits
//! and answers a duplicate, its transaction still usable), and from the
//! node's own handle.

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;

use std::sync::Arc;
use std::time::Duration;

use common::{Kind, TestDb, wait_until};
use parking_lot::Mutex;
use quartz::admin::JobDefinition;
use quartz::engine::RunKind;
use quartz::prelude::*;
use quartz::store::{Enqueued, Work};

const CLUSTER: &str = "enqueue";

/// What the handler saw of each run: payload, attempt, run kind.
type Runs = Arc<Mutex<Vec<(String, u32, RunKind)>>>;

/// A node with handler `mail` (it fails the first attempt of a payload
/// `"fail once"`), and jobs `mail` (three attempts) and `report`.
async fn node(db: &TestDb, runs: &Runs) -> Scheduler {
    let node = SchedulerBuilder::new(CLUSTER)
        .settings(common::fast_settings())
        .handler("mail", {
            let runs = Arc::clone(runs);
            move |ctx| {
                runs.lock()
                    .push((ctx.payload_json().to_owned(), ctx.attempt(), ctx.run_kind()));
                if ctx.payload_json() == "\"fail once\"" && ctx.attempt() == 1 {
                    return Err("the first attempt fails".into());
                }
                Ok(())
            }
        })
        .start(db.store().await)
        .await
        .unwrap();
    let retried = JobDefinition::new("mail", "mail")
        .with_payload(&"the job's own")
        .unwrap()
        .with_retry(RetryPolicy::fixed(3, Duration::from_millis(100)));
    node.add_job(&retried).await.unwrap();
    node
}

/// The payloads run so far, in order.
fn payloads(runs: &Runs) -> Vec<String> {
    runs.lock().iter().map(|r| r.0.clone()).collect()
}

/// Enqueues `work` in a transaction of the service's own pool, on the
/// driver the test's database has, and commits or rolls back.
macro_rules! in_transaction {
    ($pool:expr, $module:ident, $work:expr, $commit:expr) => {{
        let mut tx = $pool.begin().await.unwrap();
        let enqueued = quartz::store::$module::enqueue(&mut tx, CLUSTER, $work).await.unwrap();
        if $commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
        enqueued
    }};
}

/// The scenario on one driver: `$pool` a pool of the service's, `$module`
/// the facade's module of its transaction function.
macro_rules! scenario {
    ($db:expr, $pool:expr, $module:ident) => {{
        let runs: Runs = Arc::default();
        let node = node($db, &runs).await;
        let pool = $pool;
        // Rolled back: never runs.
        let gone = Work::new("mail").payload(&"rolled back").unwrap();
        assert!(in_transaction!(pool, $module, &gone, false).is_queued());
        // Committed: runs once, with its own payload, as enqueued work.
        let kept = Work::new("mail").payload(&"committed").unwrap().unique("k");
        assert!(in_transaction!(pool, $module, &kept, true).is_queued());
        wait_until(Duration::from_secs(15), "the committed work ran", || async {
            payloads(&runs).contains(&"\"committed\"".to_owned())
        })
        .await;
        // Failed once: retried with the same payload.
        let flaky = Work::new("mail").payload(&"fail once").unwrap();
        assert!(in_transaction!(pool, $module, &flaky, true).is_queued());
        wait_until(Duration::from_secs(15), "the retry ran", || async {
            runs.lock().iter().any(|r| r.0 == "\"fail once\"" && r.1 == 2)
        })
        .await;
        // From the node's handle, without a payload: the job's own.
        assert!(node.enqueue(&Work::new("mail")).await.unwrap().is_queued());
        wait_until(Duration::from_secs(15), "the job's own payload ran", || async {
            payloads(&runs).contains(&"\"the job's own\"".to_owned())
        })
        .await;
        // A key is free again once its work ended.
        assert!(node.enqueue(&kept).await.unwrap().is_queued());
        wait_until(Duration::from_secs(15), "the key's second work ran", || async {
            payloads(&runs).iter().filter(|p| *p == "\"committed\"").count() == 2
        })
        .await;
        // An unknown job: refused, naming it.
        let mut tx = pool.begin().await.unwrap();
        let e = quartz::store::$module::enqueue(&mut tx, CLUSTER, &Work::new("mial"))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("mial"), "{e}");
        tx.rollback().await.unwrap();
        node.shutdown().await;
        let runs = runs.lock().clone();
        assert!(!runs.iter().any(|r| r.0 == "\"rolled back\""), "{runs:?}");
        let kinds: Vec<_> = runs.iter().map(|r| (r.1, r.2)).collect();
        assert!(
            kinds
                .iter()
                .all(|k| *k == (1, RunKind::Enqueued) || *k == (2, RunKind::Retry)),
            "{runs:?}"
        );
        assert_eq!(runs.len(), 5, "each once: {runs:?}");
        pool
    }};
}

/// Two transactions racing for one key: the second waits for the first,
/// then answers a duplicate naming the holder, and its transaction goes on.
macro_rules! race {
    ($pool:expr, $module:ident, $blocked:literal) => {{
        let pool = $pool;
        let keyed = Work::new("mail").payload(&"raced").unwrap().unique("race");
        let mut first = pool.begin().await.unwrap();
        let won = quartz::store::$module::enqueue(&mut first, CLUSTER, &keyed).await.unwrap();
        let Enqueued::Queued { work_id, .. } = won else {
            panic!("{won:?}")
        };
        let second = tokio::spawn({
            let pool = pool.clone();
            let keyed = keyed.clone();
            async move {
                let mut tx = pool.begin().await.unwrap();
                let answer = quartz::store::$module::enqueue(&mut tx, CLUSTER, &keyed).await.unwrap();
                sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap();
                tx.commit().await.unwrap();
                answer
            }
        });
        wait_until(Duration::from_secs(15), "the second waits on the first's key", || async {
            sqlx::query_scalar::<_, i64>($blocked).fetch_one(&pool).await.unwrap() > 0
        })
        .await;
        assert!(!second.is_finished(), "the second waits for the first's key");
        first.commit().await.unwrap();
        let answer = second.await.unwrap();
        assert!(
            matches!(answer, Enqueued::Duplicate { work_id: Some(id), .. } if id == work_id),
            "{answer:?}"
        );
    }};
}

async fn postgres_work(db: &TestDb) {
    let pool = scenario!(db, sqlx::PgPool::connect(&db.url).await.unwrap(), postgres);
    race!(
        pool,
        postgres,
        "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
    );
}

async fn mysql_work(db: &TestDb) {
    let pool = scenario!(db, sqlx::MySqlPool::connect(&db.url).await.unwrap(), mysql);
    race!(
        pool,
        mysql,
        "SELECT COUNT(*) FROM information_schema.processlist WHERE info LIKE 'INSERT IGNORE INTO quartz_work%'"
    );
}

async fn sqlite_work(db: &TestDb) {
    let _pool = scenario!(db, sqlx::SqlitePool::connect(&db.url).await.unwrap(), sqlite);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_enqueued_work_runs_once_if_its_transaction_commits() {
    common::run(Kind::Postgres, |db| Box::pin(postgres_work(db))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_enqueued_work_runs_once_if_its_transaction_commits() {
    common::run(Kind::MySql, |db| Box::pin(mysql_work(db))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_enqueued_work_runs_once_if_its_transaction_commits() {
    common::run(Kind::SqliteFile, |db| Box::pin(sqlite_work(db))).await;
}
