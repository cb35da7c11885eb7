//! The store suite: every test runs on SQLite (memory and file), PostgreSQL and
//! MariaDB, each on a database of its own.

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;
use quartz_testkit::backend_tests;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use common::{Kind, TestDb};
use quartz_core::cron::CronExpression;
use quartz_core::misfire::MisfireSettings;
use quartz_core::store::{
    CHANGE_VISIBILITY_MS, Claim, ExecuteCas, ExecuteSpec, ExecuteState, FireEnd, FireQuery, FireRecord, FireState,
    FollowUp, HandlerSpan, JobSpec, NodeRef, NodeState, Outcome, PendingClaim, SkippedRecord, StoreError,
};
use quartz_core::trigger::{Fire, Overlap, Schedule, Trigger, TriggerState};
use quartz_core::{Error, Timestamp, Tz};
use quartz_store::{AnyStore, StoreOptions};

const S: &str = "suite";

backend_tests!(
    with memory:
    the_clock_is_the_databases,
    jobs_are_created_read_updated_paused_and_deleted,
    bad_input_is_refused_and_nothing_is_stored,
    concurrent_claimers_win_each_fire_exactly_once,
    a_retired_incarnation_is_fenced,
    a_dead_nodes_fires_are_recovered_by_exactly_one_node,
    misfire_decisions_are_compare_and_set_and_recorded,
    a_polls_row_decisions_are_written_together,
    history_filters_and_pages,
    edited_schedules_are_noticed_and_jobs_are_read_by_id,
    fires_start_and_succeed_in_batches_fenced,
    a_fires_end_records_when_its_handler_ran,
    fires_that_never_ran_are_recorded_without_a_start,
    nodes_registering_together_all_register,
    a_node_purged_and_back_is_newer_than_before,
    a_calendar_name_is_added_once,
    due_executes_come_a_page_at_a_time_after_a_cursor,
    the_scheduler_pauses_and_resumes_as_a_recorded_change,
    a_triggers_jitter_and_catch_up_window_are_kept,
    a_backfill_queues_each_past_fire_time_once,
    fires_waiting_under_an_overlap_policy_are_found_by_their_trigger;
    sql: migrations_run_twice_and_concurrently,
    a_start_racing_its_nodes_retirement_starts_nothing,
    a_row_that_cannot_be_decoded_is_set_aside_and_the_rest_served,
    due_executes_come_in_time_order_and_bad_rows_are_set_aside,
    a_job_is_looked_up_by_name_through_its_own_index,
    a_triggers_waiting_fires_are_looked_up_through_their_own_index,
);

fn every_second(start: Timestamp) -> ExecuteSpec {
    ExecuteSpec::new(Trigger::new(Schedule::fixed_rate_millis(1000).unwrap(), start).unwrap())
}

async fn register(store: &AnyStore, node_id: &str) -> NodeRef {
    common::register_node(store, node_id).await
}

fn claim_of(execute_id: i64, fire: &Fire, node: &NodeRef) -> Claim {
    Claim::for_fire(execute_id, fire, node)
}

/// A job firing every second from `start`, and its execute's id and trigger.
async fn ticking_job(store: &AnyStore, name: &str, start: Timestamp) -> (i64, Trigger) {
    store
        .create_job(&JobSpec::new(name, "noop"), &[every_second(start)])
        .await
        .unwrap();
    let executes = store.get_job(name).await.unwrap().unwrap().executes;
    (executes[0].id, executes[0].trigger.clone())
}

async fn count_fires(store: &AnyStore) -> i64 {
    common::ledger(store, S).await.len() as i64
}

async fn migrations_run_twice_and_concurrently(db: &TestDb) {
    if db.kind == Kind::SqliteMemory {
        // One connection, one database: nothing runs concurrently.
        let store = db.store().await.scoped(S);
        store.as_sql().unwrap().migrate().await.unwrap();
        store.as_sql().unwrap().migrate().await.unwrap();
        return;
    }
    // Eight nodes start at the same instant on an empty database.
    let gate = std::sync::Arc::new(tokio::sync::Barrier::new(8));
    let mut starts = Vec::new();
    for _ in 0..8 {
        let url = db.url.clone();
        let gate = gate.clone();
        starts.push(tokio::spawn(async move {
            gate.wait().await;
            AnyStore::connect(&url).await
        }));
    }
    let mut stores = Vec::new();
    for start in starts {
        stores.push(start.await.unwrap().expect("every node starts, whoever migrates first"));
    }
    if db.kind == Kind::MySql {
        mysql_migration_waits_for_the_lock(db).await;
    }
    stores[0].as_sql().unwrap().migrate().await.unwrap();
    stores[1].as_sql().unwrap().migrate().await.unwrap();
    // The schema works after all that.
    stores[2]
        .create_job(&JobSpec::new("after-migrations", "noop"), &[])
        .await
        .unwrap();
    assert_eq!(stores[3].list_jobs().await.unwrap().len(), 1);
    let no_migrate = db
        .store_with(&StoreOptions {
            migrate: false,
            ..StoreOptions::default()
        })
        .await;
    assert_eq!(no_migrate.list_jobs().await.unwrap().len(), 1);
}

/// On MySQL and MariaDB a migrating node holds a named lock, and a node that
/// starts meanwhile waits for it (MariaDB returns at once from the infinite
/// wait sqlx's own migrator asks for, so without our lock it would not).
async fn mysql_migration_waits_for_the_lock(db: &TestDb) {
    use sqlx::{Connection as _, Row as _};
    let mut holder = sqlx::AnyConnection::connect(&db.url).await.unwrap();
    let got: i64 = sqlx::query("SELECT GET_LOCK(LEFT(CONCAT('quartz_migrate_', DATABASE()), 64), 5)")
        .fetch_one(&mut holder)
        .await
        .unwrap()
        .get(0);
    assert_eq!(got, 1);
    let url = db.url.clone();
    let start = tokio::spawn(async move { AnyStore::connect(&url).await });
    let probe = sqlx::AnyPool::connect(&db.url).await.unwrap();
    common::wait_until(
        std::time::Duration::from_secs(10),
        "the node to wait for the lock",
        || {
            let probe = probe.clone();
            let finished = start.is_finished();
            async move {
                let waiting: i64 = sqlx::query(
                    "SELECT COUNT(*) FROM information_schema.processlist \
                 WHERE db = DATABASE() AND info LIKE 'SELECT GET_LOCK%' AND id <> CONNECTION_ID()",
                )
                .fetch_one(&probe)
                .await
                .unwrap()
                .get(0);
                finished || waiting > 0
            }
        },
    )
    .await;
    assert!(
        !start.is_finished(),
        "a node started while another held the migration lock"
    );
    let _ = sqlx::query("SELECT RELEASE_LOCK(LEFT(CONCAT('quartz_migrate_', DATABASE()), 64))")
        .execute(&mut holder)
        .await
        .unwrap();
    start.await.unwrap().expect("the node starts once the lock is free");
}

async fn the_clock_is_the_databases(db: &TestDb) {
    let store = db.store().await.scoped(S);
    let a = store.now().await.unwrap();
    let b = store.now().await.unwrap();
    assert!(b >= a, "{a} then {b}");
    // The servers run on this machine: their clock agrees with ours.
    let ours = Timestamp::from_millis(
        i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis(),
        )
        .unwrap(),
    );
    assert!(
        (ours.as_millis() - b.as_millis()).abs() < 60_000,
        "db {b}, local {ours}"
    );
}

async fn jobs_are_created_read_updated_paused_and_deleted(db: &TestDb) {
    let store = db.store().await.scoped(S);
    let now = store.now().await.unwrap();
    let cron = Trigger::new(
        Schedule::cron(
            CronExpression::parse("0 0 12 ? * MON-FRI").unwrap(),
            "Europe/London".parse::<Tz>().unwrap(),
        ),
        now,
    )
    .unwrap();
    let mut spec = JobSpec::new("report", "shell");
    spec.payload = r#"{"command": "echo", "args": ["hi"]}"#.to_owned();
    spec.description = "the daily report".to_owned();
    spec.requests_recovery = true;
    spec.allow_concurrent = false;
    spec.timeout = Some(std::time::Duration::from_secs(30));
    let job = store
        .create_job(&spec, &[ExecuteSpec::new(cron.clone()), every_second(now)])
        .await
        .unwrap();
    assert_eq!(job.spec, spec);
    let detail = store.get_job("report").await.unwrap().unwrap();
    let (read, executes) = (detail.job, detail.executes);
    assert_eq!(read, job);
    assert_eq!(executes.len(), 2);
    assert_eq!(executes[0].trigger, cron, "the trigger survives the round trip");
    assert_eq!(executes[0].fire_state.next_fire_time, cron.first_fire_time());
    // A trigger starting "now" starts when every node can have seen it.
    let visible = executes[1].trigger.start();
    assert!(
        visible.as_millis() >= now.as_millis() + CHANGE_VISIBILITY_MS,
        "{visible} {now}"
    );
    assert_eq!(executes[1].fire_state.next_fire_time, Some(visible));
    assert!(executes.iter().all(|e| e.state == ExecuteState::Waiting));
    assert!(store.get_job("nope").await.unwrap().is_none());
    assert!(
        store
            .scoped("other-scheduler")
            .get_job("report")
            .await
            .unwrap()
            .is_none()
    );

    let paused = store.set_paused("report", true, None).await.unwrap();
    assert_eq!(paused.state, quartz_core::store::JobState::Paused);
    let far = now.checked_add_millis(86_400_000 * 7).unwrap();
    assert!(
        store.due_executes(far, None, 100).await.unwrap().executes.is_empty(),
        "paused: not due"
    );
    store.set_paused("report", false, None).await.unwrap();
    assert_eq!(store.due_executes(far, None, 100).await.unwrap().executes.len(), 2);

    let mut renamed = spec.clone();
    renamed.name = "report-v2".to_owned();
    let updated = store
        .update_job("report", &renamed, Some(&[every_second(now)]), None)
        .await
        .unwrap();
    assert_eq!((updated.id, updated.spec.name.as_str()), (job.id, "report-v2"));
    assert_eq!(store.get_job("report-v2").await.unwrap().unwrap().executes.len(), 1);

    store.delete_job("report-v2", None).await.unwrap();
    assert!(store.list_jobs().await.unwrap().is_empty());
    assert!(store.due_executes(far, None, 100).await.unwrap().executes.is_empty());
    assert!(matches!(
        store.delete_job("report-v2", None).await,
        Err(StoreError::UnknownJob { .. })
    ));
}

async fn bad_input_is_refused_and_nothing_is_stored(db: &TestDb) {
    let store = db.store().await.scoped(S);
    let now = store.now().await.unwrap();
    store
        .create_job(&JobSpec::new("kept", "noop"), &[every_second(now)])
        .await
        .unwrap();

    let err = store
        .create_job(&JobSpec::new("kept", "other"), &[every_second(now)])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::DuplicateJob { name, .. } if name == "kept"),
        "{err}"
    );

    let mut bad_payload = JobSpec::new("bad-payload", "noop");
    bad_payload.payload = "{not json".to_owned();
    let err = store.create_job(&bad_payload, &[]).await.unwrap_err();
    assert!(matches!(err, StoreError::Invalid(Error::InvalidJob { .. })), "{err}");

    let mut huge = JobSpec::new("huge", "noop");
    huge.payload = format!("\"{}\"", "x".repeat(2 << 20));
    assert!(matches!(
        store.create_job(&huge, &[]).await,
        Err(StoreError::Invalid(_))
    ));

    for name in ["", " padded", "new\nline", &"n".repeat(201)] {
        let err = store.create_job(&JobSpec::new(name, "noop"), &[]).await.unwrap_err();
        assert!(
            matches!(err, StoreError::Invalid(Error::InvalidJob { .. })),
            "{name:?}: {err}"
        );
    }
    let mut orphan = JobSpec::new("orphan", "noop");
    orphan.parent = Some("no-such-parent".to_owned());
    assert!(matches!(
        store.create_job(&orphan, &[]).await,
        Err(StoreError::UnknownJob { .. })
    ));

    // Odd but valid characters are kept exactly.
    let odd = JobSpec::new("ünï-😀 'quoted' \"dq\" ; DROP TABLE quartz_job; --", "noop");
    store.create_job(&odd, &[]).await.unwrap();
    assert!(store.get_job(&odd.name).await.unwrap().is_some());

    let names: Vec<String> = store
        .list_jobs()
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.spec.name)
        .collect();
    assert_eq!(names.len(), 2, "only the valid jobs were stored: {names:?}");
    let kept = store.get_job("kept").await.unwrap().unwrap();
    assert_eq!(
        (kept.job.spec.handler.as_str(), kept.executes.len()),
        ("noop", 1),
        "the first job is untouched"
    );
}

async fn due_executes_come_in_time_order_and_bad_rows_are_set_aside(db: &TestDb) {
    let store = db.store().await.scoped(S);
    let now = store.now().await.unwrap();
    for (i, name) in ["c", "a", "b"].iter().enumerate() {
        // Beyond the visibility delay, so stored as given.
        let start = now.checked_add_millis(1_000 + 100 * (3 - i as i64)).unwrap();
        store
            .create_job(&JobSpec::new(*name, "noop"), &[every_second(start)])
            .await
            .unwrap();
    }
    let later = store
        .create_job(
            &JobSpec::new("later", "noop"),
            &[every_second(now.checked_add_millis(60_000).unwrap())],
        )
        .await
        .unwrap();
    let job_id = later.id;
    // Rows written by hand: one corrupt, one with no next fire time yet.
    db.sql(
        &store,
        &format!(
            "INSERT INTO quartz_execute (job_id, scheduler, kind, cron_expression, time_zone, start_time, state, \
             next_fire_time, updated_at) VALUES ({job_id}, '{S}', 'cron', '* * * * * *', 'UTC', 0, 'waiting', 1, 0)"
        ),
    )
    .await;
    db.sql(
        &store,
        &format!(
            "INSERT INTO quartz_execute (job_id, scheduler, kind, interval_ms, start_time, state, updated_at) \
             VALUES ({job_id}, '{S}', 'fixed_rate', 5000, 0, 'waiting', 0)"
        ),
    )
    .await;
    let window = now.checked_add_millis(5_000).unwrap();
    let batch = store.due_executes(window, None, 100).await.unwrap();
    assert_eq!(batch.rejected.len(), 1, "{batch:?}");
    assert!(
        batch.rejected[0].reason.contains("day-of-month"),
        "{}",
        batch.rejected[0].reason
    );
    let times: Vec<Option<i64>> = batch
        .executes
        .iter()
        .map(|e| e.fire_state.next_fire_time.map(|t| t.as_millis() - now.as_millis()))
        .collect();
    assert_eq!(
        times,
        [Some(1_100), Some(1_200), Some(1_300), None],
        "in time order, then the uninitialised row"
    );

    // The corrupt row is not served again; the others still are.
    let again = store.due_executes(window, None, 100).await.unwrap();
    assert!(again.rejected.is_empty());
    assert_eq!(again.executes.len(), 4);
    let later = store.get_job("later").await.unwrap().unwrap();
    assert_eq!(later.executes.len(), 2, "the valid rows");
    assert_eq!(later.broken.len(), 1, "the corrupt row, apart, with its reason");
    assert!(later.broken[0].reason.contains("day-of-month"));

    let limited = store.due_executes(window, None, 2).await.unwrap();
    assert_eq!(limited.executes.len(), 2, "bounded batches");
}

/// A poll reads every due execute once, a page at a time: pages after a
/// cursor hold, in order, what one read without a limit holds, ties of next
/// fire time broken by priority (highest first), then by id, none twice.
async fn due_executes_come_a_page_at_a_time_after_a_cursor(db: &TestDb) {
    let store = db.store().await.scoped(S);
    let now = store.now().await.unwrap();
    for i in 0..11_i64 {
        // Three fire times, each shared by several executes of mixed priority.
        let start = now.checked_add_millis(1_000 + 100 * (i % 3)).unwrap();
        let spec = ExecuteSpec {
            priority: i32::try_from(i % 2).unwrap(),
            ..every_second(start)
        };
        store
            .create_job(&JobSpec::new(format!("page-{i:02}"), "noop"), &[spec])
            .await
            .unwrap();
    }
    let window = now.checked_add_millis(5_000).unwrap();
    let key = |e: &quartz_core::store::Execute| (e.fire_state.next_fire_time, -e.priority, e.id);
    let whole = store.due_executes(window, None, 100).await.unwrap().executes;
    assert_eq!(whole.len(), 11);
    assert!(whole.windows(2).all(|w| key(&w[0]) < key(&w[1])), "in order: {whole:?}");
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = store.due_executes(window, after, 3).await.unwrap();
        assert!(page.executes.len() <= 3);
        after = page.cursor();
        let last = page.executes.len() < 3;
        paged.extend(page.executes);
        if last {
            break;
        }
    }
    let ids = |v: &[quartz_core::store::Execute]| v.iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(
        ids(&paged),
        ids(&whole),
        "the pages, one after the other, are the whole"
    );
}

async fn concurrent_claimers_win_each_fire_exactly_once(db: &TestDb) {
    const FIRES: usize = 40;
    const CLAIMERS: usize = 6;
    let setup = db.store().await.scoped(S);
    let start = setup.now().await.unwrap();
    let (execute_id, trigger) = ticking_job(&setup, "tick", start).await;
    let initial = quartz_core::trigger::TriggerState::initial(&trigger);
    let fires: Arc<Vec<Fire>> = Arc::new(
        trigger
            .fires_until(&initial, start.checked_add_millis(1000 * FIRES as i64).unwrap())
            .collect(),
    );
    assert_eq!(fires.len(), FIRES);
    let mut tasks = Vec::new();
    for c in 0..CLAIMERS {
        // Separate pools (connections) for all but the in-memory database.
        let store = if db.kind == Kind::SqliteMemory {
            setup.clone()
        } else {
            db.store().await.scoped(S)
        };
        let node = register(&store, &format!("claimer-{c}")).await;
        let fires = Arc::clone(&fires);
        tasks.push(tokio::spawn(async move {
            let mut won = Vec::new();
            if c % 2 == 0 {
                for fire in fires.iter() {
                    if let Some(id) = store.claim(&claim_of(execute_id, fire, &node)).await.unwrap() {
                        won.push((fire.fire_time, id));
                    }
                }
            } else {
                // Batched: four fires per transaction.
                for chunk in fires.chunks(4) {
                    let claims: Vec<Claim> = chunk.iter().map(|f| claim_of(execute_id, f, &node)).collect();
                    let results = store.claim_batch(&claims).await.unwrap();
                    for (fire, id) in chunk.iter().zip(results) {
                        if let Some(id) = id {
                            won.push((fire.fire_time, id));
                        }
                    }
                }
            }
            won
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let times: HashSet<Timestamp> = all.iter().map(|(t, _)| *t).collect();
    assert_eq!(all.len(), FIRES, "each fire won exactly once: {} wins", all.len());
    assert_eq!(times.len(), FIRES);
    assert_eq!(count_fires(&setup).await, FIRES as i64, "one ledger row per fire");
    let executes = setup.get_job("tick").await.unwrap().unwrap().executes;
    assert_eq!(
        executes[0].fire_state,
        fires.last().unwrap().after,
        "the row ends where the last fire left it"
    );

    // A stale claim (a fire already won) loses, and the unique key holds even
    // against a row moved back by hand.
    let node = register(&setup, "late").await;
    assert_eq!(
        setup.claim(&claim_of(execute_id, &fires[0], &node)).await.unwrap(),
        None
    );
    db.edit_execute(
        &setup,
        S,
        execute_id,
        &[
            ("prev_fire_time", None),
            ("next_fire_time", Some(start.as_millis().to_string())),
            ("times_triggered", Some("0".to_owned())),
        ],
    )
    .await;
    assert_eq!(
        setup.claim(&claim_of(execute_id, &fires[0], &node)).await.unwrap(),
        None
    );
    let batch = setup
        .claim_batch(&[
            claim_of(execute_id, &fires[0], &node),
            claim_of(execute_id, &fires[1], &node),
        ])
        .await
        .unwrap();
    assert_eq!(batch, [None, None]);
    assert_eq!(count_fires(&setup).await, FIRES as i64, "no second row for any fire");
}

async fn a_retired_incarnation_is_fenced(db: &TestDb) {
    let store = db.store().await.scoped(S);
    let start = store.now().await.unwrap();
    let (execute_id, trigger) = ticking_job(&store, "fenced", start).await;
    let fires: Vec<Fire> = trigger
        .fires_until(
            &quartz_core::trigger::TriggerState::initial(&trigger),
            start.checked_add_millis(3000).unwrap(),
        )
        .collect();
    let old = register(&store, "node-a").await;
    let fire_id = store
        .claim(&claim_of(execute_id, &fires[0], &old))
        .await
        .unwrap()
        .unwrap();
    assert!(store.heartbeat(&old, 0).await.unwrap());

    // Re-registering (a restart) retires the old incarnation.
    let new = register(&store, "node-a").await;
    assert!(new.incarnation > old.incarnation);
    assert!(
        store.mark_running_all(&[fire_id], &old).await.unwrap().is_empty(),
        "stale incarnation refused"
    );
    assert!(!store.heartbeat(&old, 0).await.unwrap());
    assert!(
        store.mark_running_all(&[fire_id], &new).await.unwrap().is_empty(),
        "the new incarnation does not own the old claim"
    );

    // Declared dead: fenced too, and must re-register.
    let b = register(&store, "node-b").await;
    let fire_b = store
        .claim(&claim_of(execute_id, &fires[1], &b))
        .await
        .unwrap()
        .unwrap();
    assert!(!store.retire_node(&b, 60_000).await.unwrap(), "its heartbeat is fresh");
    assert!(store.retire_node(&b, -1).await.unwrap());
    assert!(!store.retire_node(&b, -1).await.unwrap(), "retired once");
    assert!(store.mark_running_all(&[fire_b], &b).await.unwrap().is_empty());
    assert!(!store.heartbeat(&b, 0).await.unwrap());
    let nodes = store.list_nodes().await.unwrap();
    let state_of = |id: &str| nodes.iter().find(|n| n.node_id == id).unwrap().state;
    assert_eq!(
        (state_of("node-a"), state_of("node-b")),
        (NodeState::Live, NodeState::Dead)
    );

    // A live owner runs and finishes its fire.
    let fire_c = store
        .claim(&claim_of(execute_id, &fires[2], &new))
        .await
        .unwrap()
        .unwrap();
    assert!(!store.mark_running_all(&[fire_c], &new).await.unwrap().is_empty());
    assert!(
        store.mark_running_all(&[fire_c], &new).await.unwrap().is_empty(),
        "once"
    );
    assert!(
        store
            .end_fire(fire_c, &new, FireEnd::from(&Outcome::Succeeded))
            .await
            .unwrap()
            .ended()
    );
    assert!(store.leave(&new).await.unwrap());
    assert!(
        !store.heartbeat(&new, 0).await.unwrap(),
        "a node that left must re-register"
    );
}

async fn a_dead_nodes_fires_are_recovered_by_exactly_one_node(db: &TestDb) {
    let store = db.store().await.scoped(S);
    let start = store.now().await.unwrap();
    let (execute_id, trigger) = ticking_job(&store, "recover", start).await;
    let fires: Vec<Fire> = trigger
        .fires_until(
            &quartz_core::trigger::TriggerState::initial(&trigger),
            start.checked_add_millis(4000).unwrap(),
        )
        .collect();
    let dead = register(&store, "dying").await;
    let claimed = store
        .claim(&claim_of(execute_id, &fires[0], &dead))
        .await
        .unwrap()
        .unwrap();
    let running = store
        .claim(&claim_of(execute_id, &fires[1], &dead))
        .await
        .unwrap()
        .unwrap();
    let running_too = store
        .claim(&claim_of(execute_id, &fires[2], &dead))
        .await
        .unwrap()
        .unwrap();
    assert!(!store.mark_running_all(&[running], &dead).await.unwrap().is_empty());
    assert!(!store.mark_running_all(&[running_too], &dead).await.unwrap().is_empty());
    assert!(store.orphaned_fires(100).await.unwrap().is_empty(), "its owner is live");
    assert!(store.retire_node(&dead, -1).await.unwrap());

    let orphans = store.orphaned_fires(100).await.unwrap();
    assert_eq!(
        orphans.iter().map(|f| f.id).collect::<Vec<_>>(),
        [claimed, running, running_too]
    );
    let rescuers = [register(&store, "rescuer-1").await, register(&store, "rescuer-2").await];

    // Claimed, not started: exactly one rescuer takes it over and runs it.
    let mut took = 0;
    for r in &rescuers {
        took += usize::from(store.take_over(&orphans[0], r).await.unwrap());
    }
    assert_eq!(took, 1);
    // Running, recovery requested: re-run once as attempt 2.
    let mut reruns = Vec::new();
    let mut rerun_by = None;
    for r in &rescuers {
        if let Some(id) = store.rerun(&orphans[1], r).await.unwrap() {
            reruns.push(id);
            rerun_by = Some(r.clone());
        }
    }
    assert_eq!(reruns.len(), 1);
    // Running, no recovery: abandoned once.
    assert!(store.abandon(&orphans[2]).await.unwrap());
    assert!(!store.abandon(&orphans[2]).await.unwrap());
    assert!(store.orphaned_fires(100).await.unwrap().is_empty());

    let history = store.fires(&FireQuery::new()).await.unwrap();
    let by_id = |id: i64| history.iter().find(|f| f.id == id).unwrap();
    assert_eq!(by_id(running).state, FireState::Failed);
    assert_eq!(by_id(reruns[0]).attempt, 2);
    assert_eq!(by_id(reruns[0]).fire_time, fires[1].fire_time);
    assert_eq!(by_id(running_too).state, FireState::Abandoned);

    // Released at shutdown: open to any node at once.
    let leaving = &rescuers[0];
    let fire = store
        .claim(&claim_of(execute_id, &fires[3], leaving))
        .await
        .unwrap()
        .unwrap();
    assert!(store.end_fire(fire, leaving, FireEnd::Released).await.unwrap().ended());
    let open = store.orphaned_fires(100).await.unwrap();
    let released = open.iter().find(|f| f.id == fire).expect("a released fire is open");
    assert!(store.take_over(released, &rescuers[1]).await.unwrap());
    assert!(!store.mark_running_all(&[fire], &rescuers[1]).await.unwrap().is_empty());

    // A failure with a retry: the next attempt is a pending row written with
    // it, due after the backoff, claimed once by any node.
    let owner = rerun_by.unwrap();
    assert!(!store.mark_running_all(&[reruns[0]], &owner).await.unwrap().is_empty());
    let stranger = register(&store, "stranger").await;
    assert_eq!(
        store
            .end_fire(reruns[0], &stranger, failed_retry("no", 0))
            .await
            .unwrap(),
        FollowUp::NotOwned,
        "fenced"
    );
    let FollowUp::Pending { fire_id: retry, due_at } = store
        .end_fire(reruns[0], &owner, failed_retry("attempt 2 failed", 60_000))
        .await
        .unwrap()
    else {
        panic!("no pending retry");
    };
    let before = store.now().await.unwrap();
    assert!(
        due_at.as_millis() >= before.as_millis() + 59_000,
        "due after the backoff: {due_at}"
    );
    assert!(store.fires_pending(before, 10).await.unwrap().is_empty(), "not due yet");
    let due = store.fires_pending(due_at.saturating_add_millis(1), 10).await.unwrap();
    assert_eq!(
        due.iter().map(|f| (f.id, f.attempt)).collect::<Vec<_>>(),
        vec![(retry, 3)]
    );
    let mut won = 0;
    for r in &rescuers {
        won += usize::from(store.pending_claim(retry, r, false).await.unwrap() == PendingClaim::Won);
    }
    assert_eq!(won, 1, "claimed once");
    assert_eq!(
        store.pending_claim(retry, &rescuers[0], true).await.unwrap(),
        PendingClaim::Gone
    );

    // An execute left running by the dead node is found, and released once.
    db.edit_execute(
        &store,
        S,
        execute_id,
        &[
            ("state", Some("running".to_owned())),
            ("node_id", Some("dying".to_owned())),
            ("incarnation", Some(dead.incarnation.to_string())),
        ],
    )
    .await;
    let stuck = store.orphaned_executes(10).await.unwrap().executes;
    assert_eq!(stuck.len(), 1);
    let mut release = ExecuteCas {
        execute_id,
        expect_state: ExecuteState::Running,
        expect: stuck[0].fire_state.clone(),
        expect_owner: stuck[0].owner.clone(),
        set_state: ExecuteState::Waiting,
        set: stuck[0].fire_state.clone(),
        set_owner: None,
        set_trigger: None,
        set_signature: None,
    };
    assert!(store.update_execute(&release, &[]).await.unwrap());
    assert!(!store.update_execute(&release, &[]).await.unwrap());
    release.expect_state = ExecuteState::Waiting;
    assert!(store.orphaned_executes(10).await.unwrap().executes.is_empty());
}

async fn misfire_decisions_are_compare_and_set_and_recorded(db: &TestDb) {
    let store = db.store().await.scoped(S);
    let now = store.now().await.unwrap();
    let start = now.checked_add_millis(-60_000).unwrap();
    let cron = Trigger::new(
        Schedule::cron(CronExpression::parse("* * * * * ?").unwrap(), Tz::UTC),
        start,
    )
    .unwrap();
    store
        .create_job(&JobSpec::new("overdue", "noop"), &[ExecuteSpec::new(cron.clone())])
        .await
        .unwrap();
    let executes = store.get_job("overdue").await.unwrap().unwrap().executes;
    let execute = &executes[0];
    let decision = execute
        .trigger
        .on_misfire(&execute.fire_state, now, &MisfireSettings::default())
        .expect("a minute late");
    let skipped = decision.skipped.clone().unwrap();
    let cas = ExecuteCas {
        set_trigger: decision.rescheduled.clone(),
        ..ExecuteCas::from_row(execute, ExecuteState::Waiting, decision.state.clone())
    };
    let record = SkippedRecord {
        from: skipped.from,
        until: skipped.until,
        count: skipped.count,
        state: FireState::Misfired,
        reason: "overdue past the misfire threshold (smart policy: fire once now)".to_owned(),
    };
    assert!(store.update_execute(&cas, std::slice::from_ref(&record)).await.unwrap());
    assert!(
        !store.update_execute(&cas, std::slice::from_ref(&record)).await.unwrap(),
        "decided once"
    );
    let ledger = store.fires(&FireQuery::new()).await.unwrap();
    assert_eq!(ledger.len(), 1, "one row for the whole skipped range");
    assert_eq!(ledger[0].state, FireState::Misfired);
    assert_eq!(
        (ledger[0].fire_time, ledger[0].skipped_until),
        (skipped.from, Some(skipped.until))
    );
    assert_eq!(ledger[0].fire_count, skipped.count);
    assert!(
        ledger[0].finished_at.is_some(),
        "a row written ended is finished: it is not among the fires not ended yet"
    );
    assert!(skipped.count >= 60);
    let executes = store.get_job("overdue").await.unwrap().unwrap().executes;
    assert_eq!(executes[0].fire_state, decision.state);
}

/// A poll's decisions on several rows in one call (on PostgreSQL one
/// statement): each row's compare-and-set alone decides it, a lost one
/// writes nothing, a won one its records and its rescheduled trigger.
async fn a_polls_row_decisions_are_written_together(db: &TestDb) {
    let store = db.store().await.scoped(S);
    let now = store.now().await.unwrap();
    let start = now.checked_add_millis(-60_000).unwrap();
    let cron = Trigger::new(
        Schedule::cron(CronExpression::parse("* * * * * ?").unwrap(), Tz::UTC),
        start,
    )
    .unwrap();
    let mut updates = Vec::new();
    for name in ["late-a", "late-b", "late-c"] {
        store
            .create_job(&JobSpec::new(name, "noop"), &[ExecuteSpec::new(cron.clone())])
            .await
            .unwrap();
        let execute = store.get_job(name).await.unwrap().unwrap().executes.remove(0);
        let decision = execute
            .trigger
            .on_misfire(&execute.fire_state, now, &MisfireSettings::default())
            .expect("a minute late");
        let skipped = decision.skipped.clone().unwrap();
        let record = SkippedRecord {
            from: skipped.from,
            until: skipped.until,
            count: skipped.count,
            state: FireState::Misfired,
            reason: format!("{name} overdue"),
        };
        let cas = ExecuteCas::from_row(&execute, ExecuteState::Waiting, decision.state.clone());
        updates.push((cas, vec![record]));
    }
    // a: rescheduled from now; b: as decided, with a signature; c: expects
    // a state the row no longer has.
    let restarted = Trigger::new(
        Schedule::cron(CronExpression::parse("* * * * * ?").unwrap(), Tz::UTC),
        now,
    )
    .unwrap();
    updates[0].0.set_trigger = Some(restarted);
    updates[1].0.set_signature = Some(42);
    updates[2].0.expect.next_fire_time = Some(now);
    let won = store.update_executes(&updates).await.unwrap();
    assert_eq!(won, [true, true, false]);
    assert_eq!(
        store.update_executes(&updates[..2]).await.unwrap(),
        [false, false],
        "decided once"
    );
    let ledger = store.fires(&FireQuery::new()).await.unwrap();
    let mut reasons: Vec<&str> = ledger.iter().filter_map(|f| f.error.as_deref()).collect();
    reasons.sort_unstable();
    assert_eq!(reasons, ["late-a overdue", "late-b overdue"], "only the rows that won");
    assert!(
        ledger
            .iter()
            .all(|f| f.state == FireState::Misfired && f.finished_at.is_some())
    );
    let a = store.get_job("late-a").await.unwrap().unwrap().executes.remove(0);
    assert_eq!(a.trigger.start(), now, "the rescheduled trigger is written");
    assert_eq!(a.fire_state, updates[0].0.set);
    let c = store.get_job("late-c").await.unwrap().unwrap().executes.remove(0);
    assert_eq!(c.trigger.start(), start, "a lost row is untouched");
    assert_ne!(c.fire_state, updates[2].0.set);
}

async fn history_filters_and_pages(db: &TestDb) {
    let store = db.store().await.scoped(S);
    let start = store.now().await.unwrap();
    let node = register(&store, "historian").await;
    for name in ["h1", "h2"] {
        let (execute_id, trigger) = ticking_job(&store, name, start).await;
        let fires: Vec<Fire> = trigger
            .fires_until(
                &quartz_core::trigger::TriggerState::initial(&trigger),
                start.checked_add_millis(5000).unwrap(),
            )
            .collect();
        for (i, fire) in fires.iter().enumerate() {
            let id = store.claim(&claim_of(execute_id, fire, &node)).await.unwrap().unwrap();
            assert!(!store.mark_running_all(&[id], &node).await.unwrap().is_empty());
            let outcome = if i % 2 == 0 {
                Outcome::Succeeded
            } else {
                Outcome::Failed {
                    error: "é".repeat(10_000),
                }
            };
            assert!(
                store
                    .end_fire(id, &node, FireEnd::from(&outcome))
                    .await
                    .unwrap()
                    .ended()
            );
        }
    }
    let all = store.fires(&FireQuery::new()).await.unwrap();
    assert_eq!(all.len(), 10);
    assert!(all.windows(2).all(|w| w[0].id > w[1].id), "newest first");
    assert!(all.iter().all(|f| f.finished_at.is_some() && f.started_at.is_some()));
    let failed = all.iter().find(|f| f.state == FireState::Failed).unwrap();
    assert!(
        failed.error.as_ref().unwrap().len() <= quartz_core::store::MAX_ERROR_BYTES,
        "error text is cut"
    );

    let mut q = FireQuery::new();
    q.job = Some("h1".to_owned());
    q.state = Some(FireState::Succeeded);
    let h1_ok = store.fires(&q).await.unwrap();
    assert_eq!(h1_ok.len(), 3);
    let mut q = FireQuery::new();
    q.since = Some(start.checked_add_millis(1000).unwrap());
    q.until = Some(start.checked_add_millis(3000).unwrap());
    assert_eq!(store.fires(&q).await.unwrap().len(), 4);
    // Pages of 3.
    let mut q = FireQuery::new();
    q.limit = 3;
    let seen = fire_pages(&store, q).await;
    assert_eq!(seen, all.iter().map(|f| f.id).collect::<Vec<_>>());
    // A state alone, in pages of one and within a time range: the rows of
    // `all` in that state, newest first (a rare state, the common one, and
    // one no row is in: each store may read them by a different index).
    let (since, until) = (
        start.checked_add_millis(1000).unwrap(),
        start.checked_add_millis(3000).unwrap(),
    );
    for state in [FireState::Failed, FireState::Succeeded, FireState::Running] {
        let want: Vec<i64> = all.iter().filter(|f| f.state == state).map(|f| f.id).collect();
        let mut q = FireQuery::new();
        q.state = Some(state);
        q.limit = 1;
        assert_eq!(fire_pages(&store, q).await, want, "{state:?} in pages");
        let mut q = FireQuery::new();
        q.state = Some(state);
        q.since = Some(since);
        q.until = Some(until);
        let want: Vec<i64> = all
            .iter()
            .filter(|f| f.state == state && f.fire_time >= since && f.fire_time < until)
            .map(|f| f.id)
            .collect();
        let got: Vec<i64> = store.fires(&q).await.unwrap().iter().map(|f| f.id).collect();
        assert_eq!(got, want, "{state:?} within a range");
    }
    let mut unknown = FireQuery::new();
    unknown.job = Some("nope".to_owned());
    assert!(matches!(
        store.fires(&unknown).await,
        Err(StoreError::UnknownJob { .. })
    ));
    // The states of fires not ended (read through their own index on the
    // SQL stores): two claimed, one of them then running, newest first.
    let open = claimed_fires(&store, "open", 2, start, &node).await;
    assert!(!store.mark_running_all(&open[..1], &node).await.unwrap().is_empty());
    for (state, want) in [
        (FireState::Claimed, vec![open[1]]),
        (FireState::Running, vec![open[0]]),
        (FireState::Pending, vec![]),
    ] {
        let mut q = FireQuery::new();
        q.state = Some(state);
        let got: Vec<i64> = store.fires(&q).await.unwrap().iter().map(|f| f.id).collect();
        assert_eq!(got, want, "{state:?}");
    }
}

/// The ids of every page of a history query, read by `before_id`.
async fn fire_pages(store: &AnyStore, mut q: FireQuery) -> Vec<i64> {
    let mut seen = Vec::new();
    loop {
        let page = store.fires(&q).await.unwrap();
        if page.is_empty() {
            return seen;
        }
        q.before_id = page.last().map(|f| f.id);
        seen.extend(page.into_iter().map(|f| f.id));
    }
}

async fn edited_schedules_are_noticed_and_jobs_are_read_by_id(db: &TestDb) {
    let store = db.store().await.scoped(S);
    let mut ids = Vec::new();
    for i in 0..40 {
        let job = store
            .create_job(
                &JobSpec::new(format!("sig-{i}"), "h"),
                &[every_second(Timestamp::from_millis(0))],
            )
            .await
            .unwrap();
        ids.push(job.id);
    }
    // Read by id, in chunks, unknown ids ignored.
    let mut wanted = ids.clone();
    wanted.push(-7);
    let mut found: Vec<i64> = store.jobs_by_id(&wanted).await.unwrap().iter().map(|j| j.id).collect();
    found.sort_unstable();
    assert_eq!(found, ids);
    assert!(
        store
            .scoped("another-scheduler")
            .jobs_by_id(&ids)
            .await
            .unwrap()
            .is_empty()
    );

    let detail = store.get_job("sig-0").await.unwrap().unwrap();
    let execute = &detail.executes[0];
    assert!(!execute.schedule_changed, "created by the library: signed");
    db.edit_execute(&store, S, execute.id, &[("interval_ms", Some("2000".to_owned()))])
        .await;
    let edited = store.get_job("sig-0").await.unwrap().unwrap().executes[0].clone();
    assert!(edited.schedule_changed, "an edit by hand is noticed");
    let cas = ExecuteCas {
        set_signature: Some(quartz_core::store::TriggerColumns::from_trigger(&edited.trigger).signature()),
        ..ExecuteCas::from_row(&edited, ExecuteState::Waiting, edited.fire_state.clone())
    };
    assert!(store.update_execute(&cas, &[]).await.unwrap());
    let signed = store.get_job("sig-0").await.unwrap().unwrap().executes[0].clone();
    assert!(!signed.schedule_changed, "recomputed once, then signed again");

    // Fires claimed ahead on the schedule as it was: the recompute that takes
    // the edited schedule unclaims those after the database's now (their
    // rows deleted, their starts refused), and the new schedule may claim
    // their times again; those already due stay claimed. Once through a
    // poll's batch of decisions, once alone.
    let node = register(&store, "ahead").await;
    for (i, batched) in [(0, true), (1, false)] {
        let name = format!("ahead-{i}");
        let now = store.now().await.unwrap();
        let every_10s = Trigger::new(
            Schedule::fixed_rate_millis(10_000).unwrap(),
            now.saturating_add_millis(-15_000),
        )
        .unwrap();
        store
            .create_job(
                &JobSpec::new(name.as_str(), "noop"),
                &[ExecuteSpec::new(every_10s.clone())],
            )
            .await
            .unwrap();
        let execute_id = store.get_job(&name).await.unwrap().unwrap().executes[0].id;
        // now - 15 s, now - 5 s, now + 5 s, now + 15 s.
        let fires: Vec<Fire> = every_10s
            .fires_until(&TriggerState::initial(&every_10s), now.saturating_add_millis(20_000))
            .collect();
        assert_eq!(fires.len(), 4);
        let mut ids = Vec::new();
        for fire in &fires {
            ids.push(store.claim(&claim_of(execute_id, fire, &node)).await.unwrap().unwrap());
        }
        db.edit_execute(&store, S, execute_id, &[("interval_ms", Some("20000".to_owned()))])
            .await;
        let edited = store.get_job(&name).await.unwrap().unwrap().executes[0].clone();
        assert!(edited.schedule_changed);
        let cas = ExecuteCas {
            set_signature: Some(quartz_core::store::TriggerColumns::from_trigger(&edited.trigger).signature()),
            ..ExecuteCas::from_row(&edited, ExecuteState::Waiting, edited.fire_state.clone())
        };
        assert!(cas.recomputes());
        if batched {
            assert_eq!(store.update_executes(&[(cas, Vec::new())]).await.unwrap(), [true]);
        } else {
            assert!(store.update_execute(&cas, &[]).await.unwrap());
        }
        let rows: HashMap<i64, quartz_core::store::FireRecord> =
            common::ledger(&store, S).await.into_iter().map(|f| (f.id, f)).collect();
        for (k, id) in ids.iter().enumerate() {
            match rows.get(id) {
                Some(f) if k < 2 => assert_eq!(f.state, FireState::Claimed, "a due fire stays claimed: {f:?}"),
                None if k >= 2 => {}
                other => panic!("fire {k} of {name}: {other:?}"),
            }
        }
        // A time the new schedule keeps (now + 5 s, every 20 s from
        // now - 15 s) can be claimed again: its old claim holds no key.
        let row = store.get_job(&name).await.unwrap().unwrap().executes[0].clone();
        let again = Fire {
            before: row.fire_state.clone(),
            ..fires[2].clone()
        };
        assert!(
            store
                .claim(&claim_of(execute_id, &again, &node))
                .await
                .unwrap()
                .is_some()
        );
        let mut started: Vec<i64> = store
            .mark_running_all(&ids, &node)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.0)
            .collect();
        started.sort_unstable();
        assert_eq!(started, ids[..2].to_vec(), "the skipped fires do not start");
    }
}

/// `n` ticking jobs named `prefix-i`, the first fire of each claimed by `node`.
async fn claimed_fires(store: &AnyStore, prefix: &str, n: usize, start: Timestamp, node: &NodeRef) -> Vec<i64> {
    let mut ids = Vec::new();
    for i in 0..n {
        let (execute_id, trigger) = ticking_job(store, &format!("{prefix}-{i}"), start).await;
        let fire = trigger
            .fires_until(
                &quartz_core::trigger::TriggerState::initial(&trigger),
                trigger.start().checked_add_millis(1).unwrap(),
            )
            .next()
            .unwrap();
        ids.push(store.claim(&claim_of(execute_id, &fire, node)).await.unwrap().unwrap());
    }
    ids
}

/// Batched starts and successes: fenced like their one-fire forms, and the ids
/// they return are exactly the fires they moved (more than one statement's
/// worth included).
async fn fires_start_and_succeed_in_batches_fenced(db: &TestDb) {
    let store = db.store().await.scoped(S);
    let start = store.now().await.unwrap();
    let node = register(&store, "batcher").await;
    let other = register(&store, "other").await;
    let ids = claimed_fires(&store, "batch", 70, start, &node).await;
    // Another incarnation starts none of them.
    assert!(store.mark_running_all(&ids, &other).await.unwrap().is_empty());
    let mut started = store.mark_running_all(&ids[..69], &node).await.unwrap();
    started.sort_unstable();
    assert_eq!(started.iter().map(|s| s.0).collect::<Vec<_>>(), ids[..69].to_vec());
    // Each with the start time the ledger recorded.
    let recorded: HashMap<i64, Option<Timestamp>> = common::ledger(&store, S)
        .await
        .iter()
        .map(|f| (f.id, f.started_at))
        .collect();
    for (id, at) in &started {
        assert_eq!(recorded[id], Some(*at), "fire {id}");
    }
    // A start confirmed again moves the start time to now and says so; only
    // the owner's, and only of a running fire.
    let confirmed = store.confirm_starts(&[ids[0], ids[69]], &node).await.unwrap();
    assert_eq!(confirmed.len(), 1, "not the unstarted one: {confirmed:?}");
    assert!(
        confirmed[0].0 == ids[0] && confirmed[0].1 >= started[0].1,
        "{confirmed:?}"
    );
    assert!(store.confirm_starts(&[ids[0]], &other).await.unwrap().is_empty());
    assert!(
        store.mark_running_all(&ids[..3], &node).await.unwrap().is_empty(),
        "once"
    );
    // Success only for running fires of this incarnation.
    assert!(succeed_all(&store, &ids, &other).await.is_empty());
    let mut done = succeed_all(&store, &ids, &node).await;
    done.sort_unstable();
    assert_eq!(done, ids[..69].to_vec(), "the unstarted one is not recorded");
    let rows = common::ledger(&store, S).await;
    let succeeded = rows.iter().filter(|f| f.state == FireState::Succeeded).count();
    assert_eq!(succeeded, 69);
    assert!(
        rows.iter()
            .all(|f| f.state != FireState::Succeeded || f.finished_at.is_some())
    );
    // A running fire of an incarnation declared dead is confirmed no more.
    assert_eq!(store.mark_running_all(&ids[69..], &node).await.unwrap().len(), 1);
    assert_eq!(store.confirm_starts(&ids[69..], &node).await.unwrap().len(), 1);
    assert!(store.retire_node(&node, -1).await.unwrap());
    assert!(
        store.confirm_starts(&ids[69..], &node).await.unwrap().is_empty(),
        "fenced by liveness"
    );
}

/// The start and finish a fire's end records are its handler's, as its
/// node saw them, in every form of end (a batch of successes, more than one
/// statement's worth, a success alone, one that starts a chain, a failure
/// with its retry); an end that does not know them keeps the fenced
/// start's time and finishes now.
async fn a_fires_end_records_when_its_handler_ran(db: &TestDb) {
    let store = db.store().await.scoped(S);
    let start = store.now().await.unwrap();
    let node = register(&store, "witness").await;
    let ids = claimed_fires(&store, "ran", 72, start, &node).await;
    let started: HashMap<i64, Timestamp> = store.mark_running_all(&ids, &node).await.unwrap().into_iter().collect();
    assert_eq!(started.len(), 72);
    // Each its own start and finish, after the fenced start.
    let span = |i: usize| {
        let at = started[&ids[i]].as_millis() + 7 + i as i64;
        HandlerSpan {
            started_at: Timestamp::from_millis(at),
            finished_at: Timestamp::from_millis(at + 100 + i as i64),
        }
    };
    let mut ends: Vec<(i64, FireEnd)> = (0..68)
        .map(|i| {
            let ran = (i != 5).then(|| span(i));
            (ids[i], FireEnd::Succeeded { chain: false, ran })
        })
        .collect();
    let done = store.end_fires(&node, &ends).await.unwrap();
    assert!(done.iter().all(|d| *d == FollowUp::Recorded), "{done:?}");
    ends.clear();
    ends.push((
        ids[68],
        FireEnd::Succeeded {
            chain: false,
            ran: Some(span(68)),
        },
    ));
    ends.push((
        ids[69],
        FireEnd::Succeeded {
            chain: true,
            ran: Some(span(69)),
        },
    ));
    ends.push((
        ids[70],
        FireEnd::Failed {
            error: "boom".to_owned(),
            retry_in: Some(std::time::Duration::from_secs(60)),
            ran: Some(span(70)),
        },
    ));
    ends.push((
        ids[71],
        FireEnd::Failed {
            error: "boom".to_owned(),
            retry_in: None,
            ran: Some(span(71)),
        },
    ));
    let done = store.end_fires(&node, &ends).await.unwrap();
    assert!(done.iter().all(FollowUp::ended), "{done:?}");
    let rows: HashMap<i64, FireRecord> = common::ledger(&store, S).await.into_iter().map(|f| (f.id, f)).collect();
    let after = store.now().await.unwrap();
    for (i, id) in ids.iter().enumerate() {
        let row = &rows[id];
        if i == 5 {
            assert_eq!(
                row.started_at,
                Some(started[id]),
                "unknown: the fenced start's time stays"
            );
            let finished = row.finished_at.expect("finished");
            assert!(finished >= start && finished <= after, "finished now: {row:?}");
            continue;
        }
        let ran = span(i);
        assert_eq!(
            (row.started_at, row.finished_at),
            (Some(ran.started_at), Some(ran.finished_at)),
            "fire {i}: {row:?}"
        );
    }
}

/// A fire whose handler never ran: misfired when claimed or marked running
/// (a thread took it past the threshold), failed when claimed (no node has
/// its handler); fenced by incarnation, and with no start time either way.
async fn fires_that_never_ran_are_recorded_without_a_start(db: &TestDb) {
    let store = db.store().await.scoped(S);
    let start = store.now().await.unwrap();
    let node = register(&store, "recorder").await;
    let other = register(&store, "stranger").await;
    let ids = claimed_fires(&store, "unrun", 3, start, &node).await;
    // Marked running, then found late: misfired, its start cleared.
    let started = store.mark_running_all(&ids[..1], &node).await.unwrap();
    assert_eq!(started.iter().map(|s| s.0).collect::<Vec<_>>(), vec![ids[0]]);
    assert!(
        !store
            .end_fire(ids[0], &other, FireEnd::misfired("late"))
            .await
            .unwrap()
            .ended(),
        "fenced"
    );
    assert!(
        store
            .end_fire(ids[0], &node, FireEnd::misfired("late"))
            .await
            .unwrap()
            .ended()
    );
    // Claimed: misfired (refused by the pool) or failed (no handler).
    assert!(
        store
            .end_fire(ids[1], &node, FireEnd::misfired("refused"))
            .await
            .unwrap()
            .ended()
    );
    assert!(
        !store
            .end_fire(
                ids[2],
                &other,
                FireEnd::Refused {
                    reason: "no handler".to_owned()
                }
            )
            .await
            .unwrap()
            .ended(),
        "fenced"
    );
    assert!(
        store
            .end_fire(
                ids[2],
                &node,
                FireEnd::Refused {
                    reason: "no handler".to_owned()
                }
            )
            .await
            .unwrap()
            .ended()
    );
    assert!(
        !store
            .end_fire(
                ids[2],
                &node,
                FireEnd::Refused {
                    reason: "again".to_owned()
                }
            )
            .await
            .unwrap()
            .ended(),
        "once"
    );
    let rows = common::ledger(&store, S).await;
    let state = |id: i64| rows.iter().find(|f| f.id == id).unwrap();
    assert_eq!(state(ids[0]).state, FireState::Misfired);
    assert_eq!(state(ids[1]).state, FireState::Misfired);
    assert_eq!(state(ids[2]).state, FireState::Failed);
    assert_eq!(state(ids[2]).error.as_deref(), Some("no handler"));
    for id in ids {
        assert_eq!(state(id).started_at, None);
        assert!(state(id).finished_at.is_some());
    }
}

/// Nodes starting at the same moment, on connections of their own: every
/// registration succeeds, new ids and returning ones alike (on MySQL their
/// transactions deadlock on gap locks, and are tried again).
async fn nodes_registering_together_all_register(db: &TestDb) {
    // An in-memory database lives in its one connection: one store there.
    let first = db.store().await.scoped(S);
    let mut stores = vec![first.clone()];
    for _ in 1..8 {
        stores.push(if db.kind == Kind::SqliteMemory {
            first.clone()
        } else {
            db.store().await.scoped(S)
        });
    }
    // Each node's incarnation by round: the first is the database's now,
    // each return one more.
    let mut last: Vec<Option<i64>> = vec![None; stores.len()];
    for _round in 1..=3 {
        let barrier = Arc::new(tokio::sync::Barrier::new(stores.len()));
        let tasks: Vec<_> = stores
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, store)| {
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    register(&store, &format!("together-{i}")).await
                })
            })
            .collect();
        for (i, task) in tasks.into_iter().enumerate() {
            let incarnation = task.await.unwrap().incarnation;
            if let Some(before) = last[i] {
                assert_eq!(incarnation, before + 1, "node {i} returns with the next incarnation");
            }
            last[i] = Some(incarnation);
        }
    }
    assert_eq!(stores[0].list_nodes().await.unwrap().len(), 8);
}

/// A node row the retention purged: the node that comes back with the same
/// id gets an incarnation newer than every one it had, so a stale process of
/// the old incarnation stays fenced.
async fn a_node_purged_and_back_is_newer_than_before(db: &TestDb) {
    let store = db.store().await.scoped(S);
    let first = register(&store, "returning").await;
    let second = register(&store, "returning").await;
    assert!(second.incarnation > first.incarnation);
    assert!(store.leave(&second).await.unwrap());
    let later = store.now().await.unwrap().saturating_add_millis(1_000);
    assert_eq!(store.nodes_purge(later).await.unwrap(), 1);
    assert!(store.list_nodes().await.unwrap().is_empty());
    // A new row's incarnation is the database clock in milliseconds: newer
    // than the old ones once the clock has passed them, as it has long
    // before a retention purge (a node is purged hours after it left). Two
    // registrations within a millisecond here would not be.
    common::wait_until(
        std::time::Duration::from_secs(5),
        "the clock to pass the last incarnation",
        || {
            let store = store.clone();
            async move { store.now().await.unwrap().as_millis() > second.incarnation }
        },
    )
    .await;
    let back = register(&store, "returning").await;
    assert!(back.incarnation > second.incarnation, "{back:?} after {second:?}");
    assert!(
        !store.heartbeat(&second, 0).await.unwrap(),
        "the old incarnation is fenced"
    );
}

/// Adds of one calendar name at once, from two handles (two nodes'
/// connections): one is stored, every other is refused as a duplicate, and
/// the stored definition is the one added. A replace still replaces, and an
/// add after it is refused with the replacement kept.
async fn a_calendar_name_is_added_once(db: &TestDb) {
    use quartz_core::calendar::CalendarDefinition;
    let weekly = |day: &str| -> CalendarDefinition {
        serde_json::from_value(serde_json::json!({"kind": "weekly", "days": [day]})).unwrap()
    };
    let first = db.store().await.scoped(S);
    // Separate pools (connections) for all but the in-memory database.
    let second = if db.kind == Kind::SqliteMemory {
        first.clone()
    } else {
        db.store().await.scoped(S)
    };
    let handles = [first, second];
    let days = ["mon", "tue", "wed", "thu", "fri", "sat"];
    let adds: Vec<_> = days
        .iter()
        .enumerate()
        .map(|(i, day)| {
            let store = handles[i % 2].clone();
            let definition = weekly(day);
            tokio::spawn(async move { store.add_calendar("closed", &definition).await })
        })
        .collect();
    let mut added = Vec::new();
    for (add, day) in adds.into_iter().zip(days) {
        match add.await.unwrap() {
            Ok(record) => added.push((day, record)),
            Err(StoreError::DuplicateCalendar { name, .. }) => assert_eq!(name, "closed"),
            Err(other) => panic!("{day}: {other}"),
        }
    }
    assert_eq!(added.len(), 1, "one add stored: {added:?}");
    let (day, record) = &added[0];
    assert_eq!(record.definition.days, [*day]);
    let stored = handles[0].get_calendar("closed").await.unwrap().unwrap();
    assert_eq!(stored.definition.days, [*day], "the stored one is the one added");

    handles[1].put_calendar("closed", &weekly("sun"), None).await.unwrap();
    assert!(matches!(
        handles[0].add_calendar("closed", &weekly("mon")).await,
        Err(StoreError::DuplicateCalendar { .. })
    ));
    let stored = handles[0].get_calendar("closed").await.unwrap().unwrap();
    assert_eq!(stored.definition.days, ["sun"], "the replacement kept");
    assert_eq!(handles[0].list_calendars().await.unwrap().len(), 1);
}

/// A failure whose retry is pending after `ms`.
fn failed_retry(error: &str, ms: u64) -> FireEnd {
    FireEnd::Failed {
        error: error.to_owned(),
        retry_in: Some(std::time::Duration::from_millis(ms)),
        ran: None,
    }
}

/// Plain successes in one call, as the recorder writes them: the ids
/// recorded.
async fn succeed_all(store: &AnyStore, ids: &[i64], node: &NodeRef) -> Vec<i64> {
    let ends: Vec<(i64, FireEnd)> = ids
        .iter()
        .map(|id| {
            (
                *id,
                FireEnd::Succeeded {
                    chain: false,
                    ran: None,
                },
            )
        })
        .collect();
    let done = store.end_fires(node, &ends).await.unwrap();
    assert_eq!(done.len(), ids.len());
    ids.iter()
        .zip(done)
        .filter(|(_, d)| *d == FollowUp::Recorded)
        .map(|(id, _)| *id)
        .collect()
}

async fn the_scheduler_pauses_and_resumes_as_a_recorded_change(db: &TestDb) {
    let store = db.store().await.scoped(S).acting_as("ops");
    let other = store.scoped("another");
    assert_eq!(store.standby().await.unwrap(), None, "a new scheduler runs");
    let before = store.changes().await.unwrap();
    let since = store.set_standby(true).await.unwrap().expect("on standby");
    assert_eq!(store.standby().await.unwrap(), Some(since));
    assert_eq!(
        other.standby().await.unwrap(),
        None,
        "one scheduler's standby is its own"
    );
    assert!(store.changes().await.unwrap() > before, "a change every node sees");
    // A second pause keeps the first's time.
    let now = store.now().await.unwrap();
    common::wait_until(std::time::Duration::from_secs(5), "the clock to move", || async {
        store.now().await.unwrap() > now
    })
    .await;
    assert_eq!(store.set_standby(true).await.unwrap(), Some(since));
    assert_eq!(store.set_standby(false).await.unwrap(), None);
    assert_eq!(store.standby().await.unwrap(), None);
    let mut query = quartz_core::store::ChangeQuery::new();
    query.target = Some(S.to_owned());
    let log = store.change_log(&query).await.unwrap();
    let actions: Vec<&str> = log.iter().map(|c| c.action.as_str()).collect();
    assert_eq!(actions, ["scheduler.resume", "scheduler.pause", "scheduler.pause"]);
    assert!(log.iter().all(|c| c.actor == "ops" && c.target == S));
}

async fn a_triggers_jitter_and_catch_up_window_are_kept(db: &TestDb) {
    use quartz_core::trigger::Jitter;
    let store = db.store().await.scoped(S);
    let now = store.now().await.unwrap();
    let trigger = Trigger::cron("0 0 0 * * ?", "UTC", now)
        .unwrap()
        .with_jitter(Jitter::new(std::time::Duration::from_secs(600), Jitter::seed_of("midnight", 0)).unwrap())
        .with_catch_up(std::time::Duration::from_secs(3_600))
        .unwrap();
    let first = trigger.first_fire_time().unwrap();
    store
        .create_job(&JobSpec::new("midnight", "noop"), &[ExecuteSpec::new(trigger.clone())])
        .await
        .unwrap();
    let detail = store.get_job("midnight").await.unwrap().unwrap();
    let execute = &detail.executes[0];
    assert_eq!(execute.trigger, trigger, "every field read back");
    assert_eq!(
        execute.fire_state.next_fire_time,
        Some(first),
        "the first fire time is the jittered one"
    );
    assert!(!execute.schedule_changed, "its signature matches its columns");
}

async fn a_backfill_queues_each_past_fire_time_once(db: &TestDb) {
    use quartz_core::store::BackfillFire;
    let store = db.store().await.scoped(S);
    let now = store.now().await.unwrap();
    let start = now.saturating_add_millis(-10_000);
    let job = store
        .create_job(&JobSpec::new("late", "noop"), &[every_second(start)])
        .await
        .unwrap();
    let other = store
        .create_job(&JobSpec::new("other", "noop"), &[every_second(start)])
        .await
        .unwrap();
    let execute = store.get_job("late").await.unwrap().unwrap().executes[0].id;
    let foreign = store.get_job("other").await.unwrap().unwrap().executes[0].id;
    let fires: Vec<BackfillFire> = (0..5)
        .map(|i| BackfillFire {
            execute_id: execute,
            fire_time: start.saturating_add_millis(i * 1000),
            due_at: now.saturating_add_millis(i * 100),
        })
        .collect();
    let done = store.backfill("late", &fires).await.unwrap();
    assert_eq!((done.queued.len(), done.already), (5, 0));
    assert!(done.queued.iter().all(|q| q.attempt == 1 && q.execute_id == execute));
    let mut query = FireQuery::new();
    query.job_id = Some(job.id);
    let rows = store.fires(&query).await.unwrap();
    assert_eq!(rows.len(), 5);
    for f in &rows {
        assert_eq!(f.state, FireState::Pending);
        let i = (f.fire_time.as_millis() - start.as_millis()) / 1000;
        assert_eq!(f.due_at, Some(now.saturating_add_millis(i * 100)), "its pace: {f:?}");
    }
    // Again: every time is in the ledger, pending; nothing queued twice.
    let again = store.backfill("late", &fires).await.unwrap();
    assert_eq!((again.queued.len(), again.already), (0, 5));
    // Another job's trigger, an unknown job: refused, nothing written.
    let stray = [BackfillFire {
        execute_id: foreign,
        ..fires[0]
    }];
    assert!(matches!(
        store.backfill("late", &stray).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.backfill("nobody", &fires).await,
        Err(StoreError::UnknownJob { .. })
    ));
    query.job_id = Some(other.id);
    assert!(store.fires(&query).await.unwrap().is_empty());
    let mut changes = quartz_core::store::ChangeQuery::new();
    changes.target = Some("late".to_owned());
    let log = store.change_log(&changes).await.unwrap();
    assert_eq!(log[0].action, "job.backfill");
    assert!(log[0].detail.contains("0 queued, 5 already"), "{}", log[0].detail);
}

/// The planner's plan for `explain`, on one of the store's own
/// connections; on PostgreSQL `prepare` first (the statement `explain`
/// executes, so that the plan is the generic one the store's connections
/// use).
async fn plan_of(store: &AnyStore, prepare: &str, explain: &str) -> Vec<String> {
    use sqlx::{Executor as _, Row as _};
    let mut conn = store.as_sql().unwrap().pool().acquire().await.unwrap();
    if explain.starts_with("EXPLAIN EXECUTE") {
        conn.execute(sqlx::AssertSqlSafe(prepare.to_owned())).await.unwrap();
    }
    let rows = conn.fetch_all(sqlx::AssertSqlSafe(explain.to_owned())).await.unwrap();
    rows.iter()
        .flat_map(|row| (0..row.len()).filter_map(|i| row.try_get::<String, _>(i).ok()))
        .collect()
}

/// A fenced start that meets its node's retirement in flight (another
/// node's transaction has declared it dead, not yet committed) waits for
/// it and starts nothing: no start commits after the retirement that
/// fenced it (on PostgreSQL the start reads the node's row under a shared
/// lock; unlocked, it read the row as it was and started the fire).
async fn a_start_racing_its_nodes_retirement_starts_nothing(db: &TestDb) {
    use sqlx::Executor as _;
    let store = db.store().await.scoped(S);
    let start = store.now().await.unwrap();
    let node = register(&store, "racer").await;
    let ids = claimed_fires(&store, "race", 2, start, &node).await;
    let mut retiring = store.as_sql().unwrap().pool().begin().await.unwrap();
    retiring
        .execute(sqlx::AssertSqlSafe(format!(
            "UPDATE quartz_node SET state = 'dead' WHERE scheduler = '{S}' AND node_id = 'racer'"
        )))
        .await
        .unwrap();
    let starter = store.clone();
    let (fires, by) = (ids.clone(), node.clone());
    let start = tokio::spawn(async move { starter.mark_running_all(&fires, &by).await });
    // The retirement commits while the start is on its way.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    retiring.commit().await.unwrap();
    let started = start.await.unwrap().unwrap();
    assert!(
        started.is_empty(),
        "started after the node was declared dead: {started:?}"
    );
    let rows = common::ledger(&store, S).await;
    assert!(rows.iter().all(|f| f.state == FireState::Claimed), "{rows:?}");
}

/// One node row or open fire row that cannot be decoded (a hand edit, or a
/// newer build's new state during a rolling upgrade) is set aside: the
/// membership and the recovery reads serve every other row, so the others
/// are still judged and a dead node's fires still taken over.
async fn a_row_that_cannot_be_decoded_is_set_aside_and_the_rest_served(db: &TestDb) {
    let store = db.store().await.scoped(S);
    let start = store.now().await.unwrap();
    let dead = register(&store, "dead").await;
    let other = register(&store, "other").await;
    let _newer = register(&store, "newer").await;
    let ids = claimed_fires(&store, "orphan", 3, start, &dead).await;
    assert!(store.retire_node(&dead, -1).await.unwrap());
    // A newer build's state, and an attempt no build writes.
    db.sql(
        &store,
        &format!("UPDATE quartz_node SET state = 'draining' WHERE scheduler = '{S}' AND node_id = 'newer'"),
    )
    .await;
    db.sql(
        &store,
        &format!("UPDATE quartz_fire SET attempt = -1 WHERE id = {}", ids[0]),
    )
    .await;
    let nodes: Vec<String> = store
        .list_nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.node_id)
        .collect();
    assert_eq!(
        nodes,
        ["dead", "other"],
        "the row of a state this build does not know is set aside"
    );
    let orphans: Vec<i64> = store.orphaned_fires(10).await.unwrap().iter().map(|f| f.id).collect();
    assert_eq!(
        orphans,
        ids[1..].to_vec(),
        "the bad fire row is set aside, the others recovered"
    );
    let later = Timestamp::from_millis(i64::MAX / 2);
    assert_eq!(store.claimed_by(&other, later, 10).await.unwrap().len(), 0);
    assert_eq!(store.claimed_by(&dead, later, 10).await.unwrap().len(), 2);
}

/// A job is looked up by name (added, read, edited, paused, fired, deleted)
/// through the unique index on (scheduler, name), on a database without
/// statistics as a new one is: not through another index that begins with
/// the scheduler, which reads every job of it (adding N jobs would cost N
/// squared). On PostgreSQL the plan is the generic one every connection of
/// the store uses.
async fn a_job_is_looked_up_by_name_through_its_own_index(db: &TestDb) {
    let store = db.store().await.scoped(S);
    for i in 0..20 {
        let mut job = JobSpec::new(format!("job-{i}"), "noop");
        if i % 5 == 4 {
            job = job.with_parent("job-1");
        }
        store.create_job(&job, &[]).await.unwrap();
    }
    let lookup = "SELECT id FROM quartz_job WHERE scheduler = 'suite' AND name = 'job-7'";
    let explain = match db.kind {
        Kind::Postgres => "EXPLAIN EXECUTE by_name('suite', 'job-7')".to_owned(),
        Kind::MySql => format!("EXPLAIN FORMAT=JSON {lookup}"),
        _ => format!("EXPLAIN QUERY PLAN {lookup}"),
    };
    let plan = plan_of(
        &store,
        "PREPARE by_name(text, text) AS SELECT id FROM quartz_job WHERE scheduler = $1 AND name = $2",
        &explain,
    )
    .await;
    // SQLite names the unique constraint's own index, and its key.
    let by_name = |line: &String| line.contains("quartz_job_name") || line.contains("(scheduler=? AND name=?)");
    assert!(
        plan.iter().any(by_name),
        "a lookup by name on {:?} does not use the name's index: {plan:?}",
        db.kind
    );
}

/// A job firing every second from `start` under an overlap policy: its
/// execute's id and its first `n` fires.
async fn overlapping_job(
    store: &AnyStore,
    name: &str,
    start: Timestamp,
    policy: Overlap,
    n: usize,
) -> (i64, Vec<Fire>) {
    let trigger = Trigger::new(Schedule::fixed_rate_millis(1000).unwrap(), start)
        .unwrap()
        .with_overlap(Some(policy));
    store
        .create_job(&JobSpec::new(name, "noop"), &[ExecuteSpec::new(trigger)])
        .await
        .unwrap();
    let execute = store.get_job(name).await.unwrap().unwrap().executes.remove(0);
    let fires = execute
        .trigger
        .fires_until(
            &TriggerState::initial(&execute.trigger),
            start.checked_add_millis(100_000).unwrap(),
        )
        .take(n)
        .collect();
    (execute.id, fires)
}

/// An exclusive claim under the trigger's overlap policy.
fn overlap_claim(execute_id: i64, fire: &Fire, node: &NodeRef, policy: Overlap) -> Claim {
    let mut claim = claim_of(execute_id, fire, node);
    claim.exclusive = true;
    claim.overlap = Some(policy);
    claim
}

/// Fires that wait under an overlap policy are found by their own trigger
/// among other triggers' waiting fires: `buffer_one` keeps one waiting and
/// skips the rest, `cancel` replaces the one waiting, and a pending fire
/// runs only after the older ones of its trigger, whatever waits elsewhere.
async fn fires_waiting_under_an_overlap_policy_are_found_by_their_trigger(db: &TestDb) {
    let store = db.store().await.scoped(S);
    // Fire times in the past, so that every waiting fire is due.
    let start = Timestamp::from_millis(store.now().await.unwrap().as_millis() - 60_000);
    let node = register(&store, "node-a").await;
    let policies = [Overlap::BufferAll, Overlap::BufferOne, Overlap::Cancel];
    let mut jobs = Vec::new();
    for (i, policy) in policies.iter().enumerate() {
        jobs.push(overlapping_job(&store, &format!("job-{i}"), start, *policy, 5).await);
    }
    // Each job's first fire runs; its later ones come while it does, the
    // three triggers' claims interleaved.
    let mut first = Vec::new();
    for ((execute_id, fires), policy) in jobs.iter().zip(policies) {
        let won = store
            .claim(&overlap_claim(*execute_id, &fires[0], &node, policy))
            .await
            .unwrap();
        first.push(won.expect("nothing runs yet"));
    }
    for n in 1..5 {
        for ((execute_id, fires), policy) in jobs.iter().zip(policies) {
            let claim = overlap_claim(*execute_id, &fires[n], &node, policy);
            assert_eq!(
                store.claim(&claim).await.unwrap(),
                None,
                "{policy:?} fire {n} does not run now"
            );
        }
    }
    let ledger = common::ledger(&store, S).await;
    let states = |execute_id: i64| {
        let mut rows: Vec<_> = ledger.iter().filter(|f| f.execute_id == execute_id).collect();
        rows.sort_by_key(|f| f.fire_time);
        rows.iter().map(|f| f.state).collect::<Vec<_>>()
    };
    use FireState::{Claimed, Pending, Skipped};
    assert_eq!(
        states(jobs[0].0),
        [Claimed, Pending, Pending, Pending, Pending],
        "buffer_all"
    );
    assert_eq!(
        states(jobs[1].0),
        [Claimed, Pending, Skipped, Skipped, Skipped],
        "buffer_one"
    );
    assert_eq!(
        states(jobs[2].0),
        [Claimed, Skipped, Skipped, Skipped, Pending],
        "cancel"
    );
    let replaced = ledger
        .iter()
        .find(|f| f.execute_id == jobs[2].0 && f.fire_time == jobs[2].1[1].fire_time)
        .unwrap();
    assert!(
        replaced.error.as_deref().unwrap_or("").contains("replaced by fire"),
        "{:?}",
        replaced.error
    );

    // While the first fires run, the waiting ones stay.
    let waiting = |execute_id: i64, n: usize| {
        ledger
            .iter()
            .find(|f| {
                f.execute_id == execute_id
                    && f.fire_time == jobs.iter().find(|j| j.0 == execute_id).unwrap().1[n].fire_time
            })
            .unwrap()
            .id
    };
    let all_second = waiting(jobs[0].0, 1);
    assert_eq!(
        store.pending_claim(all_second, &node, false).await.unwrap(),
        PendingClaim::Blocked
    );
    let ends: Vec<(i64, FireEnd)> = first
        .iter()
        .map(|id| {
            (
                *id,
                FireEnd::Succeeded {
                    chain: false,
                    ran: None,
                },
            )
        })
        .collect();
    store.mark_running_all(&first, &node).await.unwrap();
    store.end_fires(&node, &ends).await.unwrap();
    // Then they run in the order of their fire times, each trigger's own.
    let all_last = waiting(jobs[0].0, 4);
    assert_eq!(
        store.pending_claim(all_last, &node, false).await.unwrap(),
        PendingClaim::Blocked,
        "three older fires of its trigger wait"
    );
    assert_eq!(
        store.pending_claim(all_second, &node, false).await.unwrap(),
        PendingClaim::Won
    );
    assert_eq!(
        store.pending_claim(waiting(jobs[1].0, 1), &node, false).await.unwrap(),
        PendingClaim::Won,
        "another trigger's waiting fires do not hold it"
    );
    assert_eq!(
        store.pending_claim(waiting(jobs[2].0, 4), &node, false).await.unwrap(),
        PendingClaim::Won
    );
}

/// The lookup of a trigger's waiting fires (by every exclusive claim while
/// its job runs, and by every claim of a pending fire) goes through the
/// index of waiting fires by execute, on a database without statistics:
/// not through the scheduler's pending or unended fires, which it would
/// read all of; and the check for the job's claimed or running fire, which
/// every exclusive claim makes, through the job's fires not ended, not its
/// whole ledger. On PostgreSQL the plan is the generic one every connection
/// of the store uses. MySQL and MariaDB have no such indexes (migration
/// 0020 says why).
async fn a_triggers_waiting_fires_are_looked_up_through_their_own_index(db: &TestDb) {
    if db.kind == Kind::MySql {
        return;
    }
    let store = db.store().await.scoped(S);
    let start = Timestamp::from_millis(store.now().await.unwrap().as_millis() - 60_000);
    let node = register(&store, "node-a").await;
    let (execute_id, fires) = overlapping_job(&store, "waits", start, Overlap::BufferAll, 20).await;
    store
        .claim(&overlap_claim(execute_id, &fires[0], &node, Overlap::BufferAll))
        .await
        .unwrap()
        .unwrap();
    for fire in &fires[1..] {
        store
            .claim(&overlap_claim(execute_id, fire, &node, Overlap::BufferAll))
            .await
            .unwrap();
    }
    let lookup = format!(
        "SELECT id FROM quartz_fire WHERE scheduler = 'suite' AND finished_at IS NULL AND due_at IS NOT NULL \
         AND execute_id = {execute_id} AND state = 'pending' AND attempt = 1 AND due_at = fire_time \
         ORDER BY fire_time, id LIMIT 1"
    );
    let explain = match db.kind {
        Kind::Postgres => format!("EXPLAIN EXECUTE waiting('suite', {execute_id})"),
        _ => format!("EXPLAIN QUERY PLAN {lookup}"),
    };
    let plan = plan_of(
        &store,
        "PREPARE waiting(text, bigint) AS SELECT id FROM quartz_fire WHERE scheduler = $1 \
         AND finished_at IS NULL AND due_at IS NOT NULL AND execute_id = $2 AND state = 'pending' \
         AND attempt = 1 AND due_at = fire_time ORDER BY fire_time, id LIMIT 1",
        &explain,
    )
    .await;
    assert!(
        plan.iter().any(|line| line.contains("quartz_fire_waiting")),
        "the lookup of a trigger's waiting fires on {:?} does not use their index: {plan:?}",
        db.kind
    );
    // The job's claimed or running fire: through the job's fires not ended,
    // beside a thousand claims of another job (fires made ahead).
    let (others, _) = overlapping_job(&store, "others", start, Overlap::Allow, 0).await;
    let trigger = store
        .get_job("others")
        .await
        .unwrap()
        .unwrap()
        .executes
        .remove(0)
        .trigger;
    let ahead: Vec<Fire> = trigger
        .fires_until(
            &TriggerState::initial(&trigger),
            start.checked_add_millis(1_000_000).unwrap(),
        )
        .take(1_000)
        .collect();
    for batch in ahead.chunks(100) {
        let claims: Vec<Claim> = batch.iter().map(|f| claim_of(others, f, &node)).collect();
        store.claim_batch(&claims).await.unwrap();
    }
    let job_id = store.get_job("waits").await.unwrap().unwrap().job.id;
    let open = format!(
        "SELECT id FROM quartz_fire WHERE job_id = {job_id} AND finished_at IS NULL \
         AND state IN ('claimed', 'running') LIMIT 1"
    );
    let explain = match db.kind {
        Kind::Postgres => format!("EXPLAIN EXECUTE open_of({job_id})"),
        _ => format!("EXPLAIN QUERY PLAN {open}"),
    };
    let plan = plan_of(
        &store,
        "PREPARE open_of(bigint) AS SELECT id FROM quartz_fire WHERE job_id = $1 AND finished_at IS NULL \
         AND state IN ('claimed', 'running') LIMIT 1",
        &explain,
    )
    .await;
    assert!(
        plan.iter().any(|line| line.contains("quartz_fire_job_open")),
        "the check for a job's running fire on {:?} does not use the job's fires not ended: {plan:?}",
        db.kind
    );
}
