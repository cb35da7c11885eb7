//! The fire ledger as an operator works it, on every backend: a failed fire
//! retried by hand is a new attempt, recorded as such, run by a node; what
//! cannot be retried is refused saying why; the history is searched by
//! error text and by node; and a job's success rate and run times come
//! from its ledger.

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{TestDb, backend_tests, wait_for};
use quartz::admin::{AdminError, ChangeFilter, FireFilter, FireView, JobDefinition, TriggerDefinition};
use quartz::engine::RunKind;
use quartz::prelude::*;

const CLUSTER: &str = "history-cluster";

async fn a_failed_fire_is_retried_by_hand_and_the_history_is_searched(db: &TestDb) {
    let healthy = Arc::new(AtomicBool::new(false));
    // While held, a run waits (running) before it ends.
    let held = Arc::new(AtomicBool::new(false));
    // Why each fire ran, by fire id.
    let kinds: Arc<Mutex<HashMap<i64, RunKind>>> = Arc::default();
    let node = SchedulerBuilder::new(CLUSTER)
        .settings(common::fast_settings())
        .handler("disk", {
            let (healthy, held, kinds) = (Arc::clone(&healthy), Arc::clone(&held), Arc::clone(&kinds));
            move |ctx: JobContext| {
                kinds.lock().unwrap().insert(ctx.fire_id(), ctx.run_kind());
                while held.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                if healthy.load(Ordering::SeqCst) {
                    Ok(())
                } else {
                    Err("Disk full on /var".into())
                }
            }
        })
        .start(db.store().await)
        .await
        .unwrap();
    let admin = node.admin();
    let mut job = JobDefinition::new("backup", "disk");
    job.triggers
        .push(TriggerDefinition::cron("0 0 0 1 1 ? 2099", "UTC").unwrap());
    admin.job_add(&job).await.unwrap();
    let fires = |filter: FireFilter| {
        let admin = admin.clone();
        async move { admin.fires(&filter).await.unwrap().items }
    };
    let of_backup = || FireFilter {
        job: Some("backup".into()),
        ..FireFilter::default()
    };
    let wait_state = |id: i64, state: &'static str| {
        let admin = admin.clone();
        async move {
            wait_for(Duration::from_secs(20), state, || async {
                let all = admin.fires(&FireFilter::default()).await.unwrap().items;
                let f = all.iter().find(|f| f.id == id).cloned();
                match f {
                    Some(f) if f.state == state => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            })
            .await;
        }
    };

    let first = admin.job_trigger("backup").await.unwrap();
    wait_state(first.fire_id, "failed").await;

    // A retry is the next attempt of the same fire, pending, then run.
    held.store(true, Ordering::SeqCst);
    let retry = admin.fire_retry(first.fire_id).await.unwrap();
    assert_eq!((retry.attempt, retry.state.as_str()), (2, "pending"));
    let original: Vec<FireView> = fires(of_backup()).await;
    let failed = original.iter().find(|f| f.id == first.fire_id).unwrap();
    assert_eq!(
        (retry.fire_time, retry.execute_id),
        (failed.fire_time, failed.execute_id)
    );
    // Again while that attempt is pending or running: refused.
    let again = admin.fire_retry(first.fire_id).await.unwrap_err();
    assert!(
        matches!(&again, AdminError::Refused { reason } if reason.contains("open")),
        "{again}"
    );
    held.store(false, Ordering::SeqCst);
    wait_state(retry.id, "failed").await;

    healthy.store(true, Ordering::SeqCst);
    let third = admin.fire_retry(retry.id).await.unwrap();
    assert_eq!(third.attempt, 3);
    wait_state(third.id, "succeeded").await;
    let kinds_now = kinds.lock().unwrap().clone();
    assert_eq!(
        (kinds_now[&first.fire_id], kinds_now[&retry.id], kinds_now[&third.id]),
        (RunKind::ByHand, RunKind::Retry, RunKind::Retry),
        "the context says why each ran"
    );
    for (id, why) in [(first.fire_id, "succeeded since"), (third.id, "only a failed")] {
        let refused = admin.fire_retry(id).await.unwrap_err();
        assert!(
            matches!(&refused, AdminError::Refused { reason } if reason.contains(why)),
            "{refused}"
        );
    }
    assert!(matches!(
        admin.fire_retry(999_999).await,
        Err(AdminError::FireNotFound { id: 999_999 })
    ));
    let changes = admin
        .changes(&ChangeFilter {
            job: Some("backup".into()),
            ..ChangeFilter::default()
        })
        .await
        .unwrap()
        .items;
    assert_eq!(
        changes.iter().filter(|c| c.action == "fire.retry").count(),
        2,
        "{changes:?}"
    );

    // Searched by error text (any case) and by node.
    let by_error = fires(FireFilter {
        error: Some("DISK FULL".into()),
        ..FireFilter::default()
    })
    .await;
    assert_eq!(
        by_error.iter().map(|f| f.attempt).collect::<Vec<_>>(),
        [2, 1],
        "{by_error:?}"
    );
    let node_id = by_error[0].node_id.clone().unwrap();
    assert_eq!(
        fires(FireFilter {
            node: Some(node_id),
            ..of_backup()
        })
        .await
        .len(),
        3
    );
    assert!(
        fires(FireFilter {
            node: Some("elsewhere".into()),
            ..FireFilter::default()
        })
        .await
        .is_empty()
    );
    assert!(
        fires(FireFilter {
            error: Some("100%_".into()),
            ..FireFilter::default()
        })
        .await
        .is_empty(),
        "wildcards are text"
    );

    let stats = admin.job_stats("backup").await.unwrap();
    assert_eq!((stats.fires_read, stats.succeeded, stats.failed), (3, 1, 2));
    let rate = stats.success_rate.unwrap();
    assert!((rate - 1.0 / 3.0).abs() < 1e-9, "{rate}");
    assert!(stats.mean_duration_ms.is_some() && stats.last_failure.is_some());

    // A paused job's fire is not retried: resume it, or fire it now.
    healthy.store(false, Ordering::SeqCst);
    let fourth = admin.job_trigger("backup").await.unwrap();
    wait_state(fourth.fire_id, "failed").await;
    admin.job_pause("backup", None).await.unwrap();
    let refused = admin.fire_retry(fourth.fire_id).await.unwrap_err();
    assert!(
        matches!(&refused, AdminError::Refused { reason } if reason.contains("paused")),
        "{refused}"
    );
    node.shutdown().await;
}

backend_tests!(a_failed_fire_is_retried_by_hand_and_the_history_is_searched);

/// A search of the ledger by error text that the server cannot finish
/// within the store's search limit (here the ledger locked by another
/// session, as a scan of a large ledger would take long) is ended by the
/// server itself: the caller is told it timed out, at the limit, and no
/// scan goes on for a caller who gave up. Once the lock is gone the search
/// answers.
async fn a_search_by_error_text_is_ended_by_the_server_at_its_limit(db: &TestDb) {
    use quartz::store::{FireQuery, StoreError};
    use sqlx::Connection as _;
    let options = quartz_store::StoreOptions {
        search_limit: Duration::from_secs(1),
        ..quartz_store::StoreOptions::default()
    };
    let store = db.store_with(&options).await.scoped(CLUSTER);
    let mut locker = sqlx::AnyConnection::connect(&db.url).await.unwrap();
    let lock: &[&str] = match db.kind {
        common::Kind::Postgres => &["BEGIN", "LOCK TABLE quartz_fire IN ACCESS EXCLUSIVE MODE"],
        _ => &["LOCK TABLES quartz_fire WRITE"],
    };
    for statement in lock {
        sqlx::Executor::execute(&mut locker, *statement).await.unwrap();
    }
    let search = FireQuery {
        error_contains: Some("disk".into()),
        ..FireQuery::new()
    };
    let asked = std::time::Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(20), store.fires(&search))
        .await
        .expect("the server ended the search");
    assert!(matches!(answer, Err(StoreError::TimedOut { .. })), "{answer:?}");
    assert!(
        asked.elapsed() >= Duration::from_millis(900),
        "ended at its limit, not before: {:?}",
        asked.elapsed()
    );
    let unlock = match db.kind {
        common::Kind::Postgres => "ROLLBACK",
        _ => "UNLOCK TABLES",
    };
    sqlx::Executor::execute(&mut locker, unlock).await.unwrap();
    assert!(store.fires(&search).await.unwrap().is_empty());
    let _ = locker.close().await;
}

mod server_limits {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        common::run(common::Kind::Postgres, |db| {
            Box::pin(super::a_search_by_error_text_is_ended_by_the_server_at_its_limit(db))
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mariadb() {
        common::run(common::Kind::MySql, |db| {
            Box::pin(super::a_search_by_error_text_is_ended_by_the_server_at_its_limit(db))
        })
        .await;
    }

    use crate::common;
}
