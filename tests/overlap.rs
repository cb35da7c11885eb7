//! Overlap policies and concurrency limits through the engine, on real
//! databases and three nodes: each trigger's fires that come due while a
//! fire of its job still runs (on any node) are skipped and recorded, wait
//! one at a time, all wait and run in order, stop the running fire, or run
//! alongside, as the trigger says; a tenant's jobs never run more fires at
//! once than their limit, whichever nodes run them, while another tenant's
//! run beside; and the audit finds no fire that ran beside another against
//! its policy or past its limit.
//!
//! Each test runs on SQLite (a file), PostgreSQL, MariaDB and Redis, on a
//! fresh database (see `quartz-testkit`).

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;

use std::time::Duration;

use common::{TestDb, ledger, wait_for};
use quartz::SchedulerError;
use quartz::admin::{AdminError, JobDefinition, TriggerDefinition};
use quartz::prelude::*;
use quartz::store::ExecuteSpec;
use quartz::store::{ConcurrencyLimit, FireRecord, FireState, RetryPolicy};
use quartz::trigger::Overlap;
use quartz::trigger::Trigger;

common::backend_tests!(shared:
    each_overlap_policy_on_three_nodes,
    a_concurrency_limit_per_tenant_holds_across_three_nodes,
    fires_waiting_when_their_trigger_is_replaced_still_wait_their_turn,
);

const CLUSTER: &str = "overlap-cluster";

/// The nodes' settings: the test kit's, with a misfire threshold of 10 s.
/// The fires here come due faster than they run and wait for room by
/// design; on a loaded machine one claimed a second or two late would be
/// misfired and run again by its policy, an extra row these tests do not
/// count on. Misfires have tests of their own.
fn settings() -> Settings {
    let mut settings = common::fast_settings();
    settings.misfire.threshold = Duration::from_secs(10);
    // No node fails here: a loaded machine that holds the heartbeats past
    // the test kit's short lease (three quarters of 1.5 s) would fence the
    // nodes and stop their handlers, which is the partition tests' subject,
    // not this file's.
    settings.dead_after = Duration::from_secs(6);
    settings
}

/// The audit of the last hour, with the nodes' misfire threshold.
async fn audited(store: &AnyStore) -> Vec<quartz::audit::Violation> {
    let now = store.now().await.unwrap();
    let params = quartz::audit::AuditParams {
        misfire_threshold: settings().misfire.threshold,
        ..quartz::audit::AuditParams::last_hour(now)
    };
    quartz::audit::audit(&**store, &params).await.unwrap().violations
}

/// How long a fire of each job runs, unless it is asked to stop.
fn run_ms(job: &str) -> u64 {
    match job {
        "buffer-all" => 1_500,
        "cancel" => 2_500,
        "edited" => 2_000,
        name if name.starts_with("tenant-") => 600,
        _ => 1_200,
    }
}

async fn nodes(db: &TestDb) -> Vec<Scheduler> {
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(
            SchedulerBuilder::new(CLUSTER)
                .settings(settings())
                .async_handler("busy", |ctx: JobContext| async move {
                    let run = Duration::from_millis(run_ms(ctx.job_name()));
                    tokio::select! {
                        () = tokio::time::sleep(run) => Ok(()),
                        () = ctx.cancellation().cancelled() => Err("stopped when asked".into()),
                    }
                })
                .start(db.store().await)
                .await
                .unwrap(),
        );
    }
    nodes
}

/// A job on `every`, `fires` times in all, under `policy`.
fn job(name: &str, every_ms: u64, fires: u64, policy: Overlap) -> JobDefinition {
    JobDefinition::new(name, "busy").with_trigger(
        TriggerDefinition::every(Duration::from_millis(every_ms))
            .repeating(fires)
            .overlap(policy),
    )
}

/// Five jobs whose fires come due faster than they run, one per policy,
/// added on different nodes.
async fn each_overlap_policy_on_three_nodes(db: &TestDb) {
    common::log_if_asked();
    let nodes = nodes(db).await;
    let store = AnyStore::from(nodes[0].store().clone());

    // A job that disallows concurrency cannot have a trigger that allows it.
    let refused = nodes[0]
        .add_job(&job("refused", 500, 1, Overlap::Allow).with_concurrency(false))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, SchedulerError::Rejected(AdminError::Invalid { field, .. }) if field == "triggers[0].overlap"),
        "{refused:?}"
    );

    let jobs = [
        job("skip", 500, 10, Overlap::Skip),
        job("buffer-one", 500, 10, Overlap::BufferOne),
        job("buffer-all", 1_000, 4, Overlap::BufferAll),
        // Retries allowed: a fire stopped by a newer one is not retried.
        job("cancel", 1_000, 4, Overlap::Cancel).with_retry(RetryPolicy::fixed(3, Duration::from_millis(100))),
        job("allow", 500, 6, Overlap::Allow),
    ];
    let mut ids = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        ids.push(nodes[i % 3].add_job(j).await.unwrap().id);
    }
    let of = |rows: &[FireRecord], i: usize| -> Vec<FireRecord> {
        let mut rows: Vec<FireRecord> = rows.iter().filter(|f| f.job_id == ids[i]).cloned().collect();
        rows.sort_by_key(|f| (f.fire_time, f.attempt));
        rows
    };
    let count = |rows: &[FireRecord], state: FireState| rows.iter().filter(|f| f.state == state).count();
    wait_for(Duration::from_secs(60), "every job's fires ended", || async {
        let rows = ledger(&store, CLUSTER).await;
        let ended = |i: usize, n: usize| {
            let rows = of(&rows, i);
            rows.len() == n && rows.iter().all(|f| f.state.is_ended())
        };
        if ended(0, 10) && ended(1, 10) && ended(2, 4) && ended(3, 4) && ended(4, 6) {
            Ok(())
        } else {
            Err(open_rows(&rows))
        }
    })
    .await;
    for n in nodes {
        n.shutdown().await;
    }
    let rows = ledger(&store, CLUSTER).await;

    // Skip: the fires due while one ran are recorded skipped, with the
    // running fire's id, and never run.
    let skip = of(&rows, 0);
    assert!(count(&skip, FireState::Skipped) >= 3, "{skip:#?}");
    assert!(count(&skip, FireState::Succeeded) >= 2, "{skip:#?}");
    for f in skip.iter().filter(|f| f.state == FireState::Skipped) {
        let reason = f.error.as_deref().unwrap_or_default();
        assert!(reason.starts_with("overlap policy skip: fire "), "{f:?}");
        assert!(f.started_at.is_none(), "{f:?}");
    }

    // Buffer one: one fire waits and runs when the running one ends; the
    // others due meanwhile are skipped.
    let one = of(&rows, 1);
    let waited: Vec<_> = one.iter().filter(|f| f.by_overlap()).collect();
    assert!(!waited.is_empty(), "{one:#?}");
    assert!(waited.iter().all(|f| f.state == FireState::Succeeded), "{one:#?}");
    assert!(
        one.iter().filter(|f| f.state == FireState::Skipped).all(|f| f
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("buffer_one")),
        "{one:#?}"
    );
    assert!(count(&one, FireState::Skipped) >= 2, "{one:#?}");

    // Buffer all: every fire runs, one at a time, in the order of its time.
    let all = of(&rows, 2);
    assert_eq!(count(&all, FireState::Succeeded), 4, "{all:#?}");
    assert!(all.iter().filter(|f| f.by_overlap()).count() >= 2, "{all:#?}");
    for w in all.windows(2) {
        assert!(
            w[1].started_at.unwrap() >= w[0].finished_at.unwrap(),
            "out of turn: {w:#?}"
        );
    }

    // Cancel: each newer fire stops the running one, which is recorded
    // failed and not retried, then runs; the last one runs to its end.
    let cancel = of(&rows, 3);
    assert!(
        cancel.iter().all(|f| f.attempt == 1),
        "a stopped fire was retried: {cancel:#?}"
    );
    assert_eq!(cancel.last().unwrap().state, FireState::Succeeded, "{cancel:#?}");
    let stopped: Vec<_> = cancel.iter().filter(|f| f.state == FireState::Failed).collect();
    assert!(!stopped.is_empty(), "{cancel:#?}");
    for f in &stopped {
        // The handler says so only when asked to stop before its run ends:
        // proof of the stop that no loaded machine's delay can fake, where a
        // bound on how long it ran would be a race with the run's length.
        let error = f.error.as_deref().unwrap_or_default();
        assert!(error.contains("overlap policy cancel"), "{f:?}");
        assert!(
            error.ends_with("the handler returned: stopped when asked"),
            "not stopped: {f:?}"
        );
    }
    // A waiting fire that a newer one replaced is recorded skipped, never
    // started: only the fires that ran take turns.
    let ran: Vec<_> = cancel.iter().filter(|f| f.started_at.is_some()).collect();
    for w in ran.windows(2) {
        assert!(
            w[1].started_at.unwrap() >= w[0].finished_at.unwrap(),
            "ran beside: {w:#?}"
        );
    }

    // Allow: fires run alongside.
    let allow = of(&rows, 4);
    assert_eq!(count(&allow, FireState::Succeeded), 6, "{allow:#?}");
    assert!(
        allow
            .windows(2)
            .any(|w| w[1].started_at.unwrap() < w[0].finished_at.unwrap()),
        "{allow:#?}"
    );

    let violations = audited(&store).await;
    assert!(violations.is_empty(), "{violations:?}");
}

/// A job under buffer-all whose fires come due four times faster than they
/// run has its schedule edited while some of its fires wait: the edit
/// replaces the trigger whose overlap policy held them, and they still run
/// one at a time, after the running fire, never beside it.
async fn fires_waiting_when_their_trigger_is_replaced_still_wait_their_turn(db: &TestDb) {
    common::log_if_asked();
    let nodes = nodes(db).await;
    let store = AnyStore::from(nodes[0].store().clone());
    let id = nodes[0]
        .add_job(&job("edited", 500, 12, Overlap::BufferAll))
        .await
        .unwrap()
        .id;
    let of = |rows: &[FireRecord]| -> Vec<FireRecord> { rows.iter().filter(|f| f.job_id == id).cloned().collect() };
    wait_for(
        Duration::from_secs(30),
        "fires waiting behind a running one",
        || async {
            let rows = of(&ledger(&store, CLUSTER).await);
            let waiting = rows.iter().filter(|f| f.state == FireState::Pending).count();
            let running = rows.iter().any(|f| f.state == FireState::Running);
            if waiting >= 2 && running {
                Ok(())
            } else {
                Err(open_rows(&rows))
            }
        },
    )
    .await;
    // The schedule edited: one fire, a minute on.
    let detail = store.get_job("edited").await.unwrap().unwrap();
    let later = store.now().await.unwrap().saturating_add_millis(60_000);
    let once = ExecuteSpec::new(Trigger::once(later).with_overlap(Some(Overlap::BufferAll)));
    store
        .update_job("edited", &detail.job.spec, Some(&[once]), None)
        .await
        .unwrap();
    wait_for(Duration::from_secs(60), "the waiting fires ran", || async {
        let rows = of(&ledger(&store, CLUSTER).await);
        if rows.iter().all(|f| f.state.is_ended()) {
            Ok(())
        } else {
            Err(open_rows(&rows))
        }
    })
    .await;
    for n in nodes {
        n.shutdown().await;
    }
    let rows = of(&ledger(&store, CLUSTER).await);
    let ran: Vec<&FireRecord> = rows.iter().filter(|f| f.started_at.is_some()).collect();
    assert!(ran.len() >= 3, "{rows:#?}");
    assert_eq!(
        most_at_once(&ran),
        1,
        "fires of the replaced trigger ran beside each other: {rows:#?}"
    );
}

/// A job of `tenant`, limited with the tenant's other jobs.
fn tenant_job(tenant: &str, i: usize, max: u32, policy: Overlap) -> JobDefinition {
    JobDefinition::new(format!("tenant-{tenant}-{i}"), "busy")
        .with_payload(&serde_json::json!({ "tenant": tenant }))
        .unwrap()
        .with_limit(ConcurrencyLimit::new(max, "tenant:{/tenant}"))
        .with_trigger(
            TriggerDefinition::every(Duration::from_millis(500))
                .repeating(4)
                .overlap(policy),
        )
}

/// How many rows the ledger holds and those not ended yet, for a test that
/// times out waiting for them.
fn open_rows(rows: &[FireRecord]) -> String {
    let open: Vec<&FireRecord> = rows.iter().filter(|f| !f.state.is_ended()).collect();
    format!("{} rows, {} not ended: {open:#?}", rows.len(), open.len())
}

/// The most fires of `rows` running at one instant.
fn most_at_once(rows: &[&FireRecord]) -> usize {
    let mut edges: Vec<(i64, i32)> = Vec::new();
    for f in rows {
        if let (Some(s), Some(e)) = (f.started_at, f.finished_at) {
            edges.push((s.as_millis(), 1));
            edges.push((e.as_millis(), -1));
        }
    }
    // An end before a start at the same instant.
    edges.sort_unstable();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

/// Tenant a: four jobs every 500 ms, at most two fires at once; tenant b:
/// two such jobs with their own limit of two; tenant c: two jobs with a
/// limit of one that skip what the limit holds back. Jobs added on every
/// node.
async fn a_concurrency_limit_per_tenant_holds_across_three_nodes(db: &TestDb) {
    common::log_if_asked();
    let nodes = nodes(db).await;
    let store = AnyStore::from(nodes[0].store().clone());

    let refused = nodes[0]
        .add_job(&JobDefinition::new("no-tenant", "busy").with_limit(ConcurrencyLimit::new(1, "tenant:{/tenant}")))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, SchedulerError::Rejected(AdminError::Invalid { field, .. }) if field == "concurrency_key"),
        "{refused:?}"
    );

    let mut jobs = Vec::new();
    for i in 0..4 {
        jobs.push(tenant_job("a", i, 2, Overlap::Allow));
    }
    for i in 0..2 {
        jobs.push(tenant_job("b", i, 2, Overlap::Allow));
        jobs.push(tenant_job("c", i, 1, Overlap::Skip));
    }
    let mut tenant_of = std::collections::HashMap::new();
    for (i, j) in jobs.iter().enumerate() {
        let id = nodes[i % 3].add_job(j).await.unwrap().id;
        tenant_of.insert(id, j.spec.name[7..8].to_owned());
    }
    wait_for(Duration::from_secs(60), "every limited fire ended", || async {
        let rows = ledger(&store, CLUSTER).await;
        if rows.len() >= 32 && rows.iter().all(|f| f.state.is_ended()) {
            Ok(())
        } else {
            Err(open_rows(&rows))
        }
    })
    .await;
    for n in nodes {
        n.shutdown().await;
    }
    let rows = ledger(&store, CLUSTER).await;
    assert_eq!(rows.len(), 32, "four fire times of each of eight jobs: {rows:#?}");
    let of = |tenant: &str| -> Vec<&FireRecord> { rows.iter().filter(|f| tenant_of[&f.job_id] == tenant).collect() };

    let a = of("a");
    assert!(a.iter().all(|f| f.state == FireState::Succeeded), "{a:#?}");
    assert_eq!(most_at_once(&a), 2, "tenant a at its limit, never past it: {a:#?}");
    assert!(a.iter().any(|f| f.by_overlap()), "some waited for room: {a:#?}");
    let b = of("b");
    assert!(b.iter().all(|f| f.state == FireState::Succeeded), "{b:#?}");
    assert!(most_at_once(&b) <= 2, "{b:#?}");
    let ab: Vec<&FireRecord> = a.iter().chain(b.iter()).copied().collect();
    assert!(most_at_once(&ab) > 2, "another tenant's fires run beside: {ab:#?}");

    let c = of("c");
    assert_eq!(most_at_once(&c), 1, "{c:#?}");
    let skipped: Vec<_> = c.iter().filter(|f| f.state == FireState::Skipped).collect();
    assert!(
        skipped.iter().any(|f| f
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("concurrency limit \"tenant:c\" full")),
        "{c:#?}"
    );

    let violations = audited(&store).await;
    assert!(violations.is_empty(), "{violations:?}");
}
