//! A service's own database pool: a node built from it, and a job added in
//! the service's own PostgreSQL transaction (it exists if and only if that
//! transaction commits, and the nodes see it at once when it does).

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Kind, TestDb, wait_until};
use quartz::admin::{AdminError, ChangeFilter, JobDefinition, TriggerDefinition};
use quartz::prelude::*;
use quartz::store::{StoreOptions, postgres};

const CLUSTER: &str = "own-pool";

fn invoice(name: &str) -> JobDefinition {
    JobDefinition::new(name, "invoice").with_trigger(TriggerDefinition::every(Duration::from_millis(200)))
}

async fn a_job_added_in_the_services_transaction_exists_only_if_it_commits(db: &TestDb) {
    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    // The node from the service's pool: its database, its settings.
    let store = SqlStore::connect_like(&pool, &StoreOptions::default()).await.unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let node = SchedulerBuilder::new(CLUSTER)
        .settings(common::fast_settings())
        .handler("invoice", {
            let runs = Arc::clone(&runs);
            move |ctx| {
                assert_eq!(ctx.job_name(), "committed", "only the committed job runs");
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .start(AnyStore::from(store))
        .await
        .unwrap();
    let admin = node.admin();
    sqlx::query("CREATE TABLE customer (name TEXT PRIMARY KEY)")
        .execute(&pool)
        .await
        .unwrap();

    // Rolled back: neither the customer nor its job.
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO customer (name) VALUES ('gone')")
        .execute(&mut *tx)
        .await
        .unwrap();
    postgres::add_job(&mut tx, CLUSTER, &invoice("rolled-back"))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(matches!(
        admin.job("rolled-back").await,
        Err(AdminError::NotFound { .. })
    ));

    // Committed: both, and the node runs the job.
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO customer (name) VALUES ('acme')")
        .execute(&mut *tx)
        .await
        .unwrap();
    let id = postgres::add_job(&mut tx, CLUSTER, &invoice("committed"))
        .await
        .unwrap();
    assert!(
        matches!(admin.job("committed").await, Err(AdminError::NotFound { .. })),
        "not seen before the commit"
    );
    tx.commit().await.unwrap();
    let view = admin.job("committed").await.unwrap();
    assert_eq!((view.id, view.triggers.len()), (id, 1));
    wait_until(Duration::from_secs(15), "three runs of the committed job", || async {
        runs.load(Ordering::SeqCst) >= 3
    })
    .await;
    let changes = admin
        .changes(&ChangeFilter {
            job: Some("committed".into()),
            ..ChangeFilter::default()
        })
        .await
        .unwrap();
    assert!(
        changes.items.iter().any(|c| c.action == "job.create"),
        "the change log has it: {changes:?}"
    );

    // Refused as the admin surface refuses, naming the field; the
    // transaction is the caller's to roll back.
    let mut tx = pool.begin().await.unwrap();
    let e = postgres::add_job(&mut tx, CLUSTER, &invoice("committed"))
        .await
        .unwrap_err();
    assert!(matches!(e, AdminError::Conflict { .. }), "{e}");
    tx.rollback().await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    let bad = JobDefinition::new("bad", "invoice").with_trigger(TriggerDefinition::every(Duration::ZERO));
    let e = postgres::add_job(&mut tx, CLUSTER, &bad).await.unwrap_err();
    assert_eq!(e.field(), Some("triggers[0].interval_ms"), "{e}");
    let away = invoice("away").with_trigger(TriggerDefinition::every(Duration::from_secs(1)).calendar("holidays"));
    let e = postgres::add_job(&mut tx, CLUSTER, &away).await.unwrap_err();
    assert!(matches!(e, AdminError::CalendarNotFound { .. }), "{e}");
    tx.rollback().await.unwrap();
    // A misspelt handler or scheduler, refused naming it.
    let mut tx = pool.begin().await.unwrap();
    let typo = JobDefinition::new("typo", "invoise").with_trigger(TriggerDefinition::every(Duration::from_secs(1)));
    let e = postgres::add_job(&mut tx, CLUSTER, &typo).await.unwrap_err();
    assert_eq!(e.field(), Some("handler"), "{e}");
    assert!(e.to_string().contains("invoice"), "names what the nodes offer: {e}");
    let e = postgres::add_job(&mut tx, &format!("{CLUSTER}-typo"), &invoice("elsewhere"))
        .await
        .unwrap_err();
    assert_eq!(e.field(), Some("scheduler"), "{e}");
    assert!(e.to_string().contains(CLUSTER), "names the schedulers there: {e}");
    tx.rollback().await.unwrap();
    node.shutdown().await;
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_job_added_in_the_services_transaction_exists_only_if_it_commits() {
    common::run(Kind::Postgres, |db| {
        Box::pin(a_job_added_in_the_services_transaction_exists_only_if_it_commits(db))
    })
    .await;
}
