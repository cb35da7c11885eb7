//! The store suite: every test runs on SQLite (memory and file), PostgreSQL and
//! MariaDB, each on a database of its own.

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;
use quartz_testkit::backend_tests;

use std::collections::HashMap;

use common::{Kind, TestDb};
use quartz_core::Timestamp;
use quartz_core::store::{
    Claim, ExecuteCas, ExecuteSpec, ExecuteState, FireEnd, FireQuery, FireState, FollowUp, JobSpec, PendingClaim,
};
use quartz_core::testing::conformance;
use quartz_core::testing::conformance::fixtures::{
    assert_claimed_already, claim_of, claimed_fires, every_second, ledger, overlap_claim, overlapping_job, register,
    ticking_fires, ticking_job,
};
use quartz_core::trigger::{Fire, Overlap, Schedule, Trigger, TriggerState};
use quartz_store::{AnyStore, StoreOptions};

const S: &str = "suite";

/// The tests: the store conformance suite's checks
/// (`quartz_core::testing::conformance`), each a test of its own on every
/// backend, then this file's own, on every backend and on the SQL ones.
macro_rules! store_tests {
    (checks: [$($check:ident),* $(,)?] own: [$($own:ident),* $(,)?] sql: [$($sql:ident),* $(,)?]) => {
        $(async fn $check(db: &TestDb) { conformance(db, stringify!($check)).await; })*

        /// Every check of the suite runs here.
        #[test]
        fn every_conformance_check_runs_on_every_backend() {
            assert_eq!(conformance::checks(), [$(stringify!($check)),*]);
        }

        backend_tests!(with memory: $($check,)* $($own),*; sql: $($sql),*);
    };
}

store_tests!(
    checks: [
        the_clock_is_the_databases,
        jobs_are_created_read_updated_paused_and_deleted,
        bad_input_is_refused_and_nothing_is_stored,
        the_scheduler_pauses_and_resumes_as_a_recorded_change,
        a_calendar_name_is_added_once,
        a_triggers_jitter_and_catch_up_window_are_kept,
        history_filters_and_pages,
        the_schedulers_holding_jobs_or_nodes_are_listed,
        concurrent_claimers_win_each_fire_exactly_once,
        a_retired_incarnation_is_fenced,
        misfire_decisions_are_compare_and_set_and_recorded,
        a_polls_row_decisions_are_written_together,
        due_executes_come_a_page_at_a_time_after_a_cursor,
        a_backfill_queues_each_past_fire_time_once,
        fires_waiting_under_an_overlap_policy_are_found_by_their_trigger,
        fires_start_and_succeed_in_batches_fenced,
        a_fires_end_records_when_its_handler_ran,
        fires_that_never_ran_are_recorded_without_a_start,
        nodes_registering_together_all_register,
        a_node_purged_and_back_is_newer_than_before,
        a_nodes_payload_schemas_are_read_back_while_it_lives,
        enqueued_work_is_a_pending_fire_with_its_own_payload,
        a_unique_key_is_held_while_its_work_is_open_or_in_its_window,
    ]
    own: [
        a_dead_nodes_fires_are_recovered_by_exactly_one_node,
        edited_schedules_are_noticed_and_jobs_are_read_by_id,
        a_claim_loses_against_a_row_moved_back_by_hand,
    ]
    sql: [
        migrations_run_twice_and_concurrently,
        a_missing_schema_names_quartz_migrate,
        a_start_racing_its_nodes_retirement_starts_nothing,
        a_row_that_cannot_be_decoded_is_set_aside_and_the_rest_served,
        due_executes_come_in_time_order_and_bad_rows_are_set_aside,
        a_job_is_looked_up_by_name_through_its_own_index,
        a_triggers_waiting_fires_are_looked_up_through_their_own_index,
    ]
);

/// Runs one check of the conformance suite on the test's database (an
/// in-memory SQLite database lives in its one pool: one handle there).
async fn conformance(db: &TestDb, check: &str) {
    let one = db.store().await;
    let report = conformance::run_only(&[check], || async {
        if db.kind == Kind::SqliteMemory {
            one.clone()
        } else {
            db.store().await
        }
    })
    .await;
    report.assert_passed();
}

/// A claim of a fire already won loses even against its execute's row moved
/// back by hand: the ledger's unique key holds.
async fn a_claim_loses_against_a_row_moved_back_by_hand(db: &TestDb) {
    let store = db.store().await.scoped(S);
    let start = store.now().await.unwrap();
    let (execute_id, trigger) = ticking_job(&store, "tick", start).await;
    let fires: Vec<Fire> = trigger
        .fires_until(
            &TriggerState::initial(&trigger),
            start.checked_add_millis(2_000).unwrap(),
        )
        .collect();
    let node = register(&store, "claimer").await;
    for fire in &fires {
        assert!(store.claim(&claim_of(execute_id, fire, &node)).await.unwrap().is_some());
    }
    db.edit_execute(
        &store,
        S,
        execute_id,
        &[
            ("prev_fire_time", None),
            ("next_fire_time", Some(start.as_millis().to_string())),
            ("times_triggered", Some("0".to_owned())),
        ],
    )
    .await;
    assert_claimed_already(&store, execute_id, &fires, &node).await;
    assert_eq!(ledger(&store).await.len(), fires.len(), "no second row for any fire");
}

/// A store on a database without the schema (connected with migrations
/// off) says what to run, not only the server's "relation does not exist".
async fn a_missing_schema_names_quartz_migrate(db: &TestDb) {
    let options = StoreOptions {
        migrate: false,
        ..StoreOptions::default()
    };
    let store = db.store_with(&options).await.scoped(S);
    let error = store.list_jobs().await.unwrap_err().to_string();
    assert!(error.contains("quartz migrate"), "{error}");
    assert!(error.contains("quartz_job"), "names what is missing: {error}");
    assert!(!error.contains(" at line "), "{error}");
}

/// A server that is not there is named as such, with its address, within
/// the pool's acquire timeout, not as "pool timed out".
#[tokio::test]
async fn a_database_that_is_down_is_named_with_the_cause() {
    let options = StoreOptions {
        acquire_timeout: std::time::Duration::from_millis(500),
        ..StoreOptions::default()
    };
    // Port 1 on loopback: nothing listens there.
    for url in ["postgres://quartz@127.0.0.1:1/app", "mysql://quartz@127.0.0.1:1/app"] {
        let error = AnyStore::connect_with(url, &options).await.unwrap_err().to_string();
        assert!(error.contains("connection refused"), "{url}: {error}");
        assert!(error.contains("127.0.0.1:1"), "{url}: {error}");
        assert!(!error.contains("pool timed out"), "{url}: {error}");
    }
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

async fn a_dead_nodes_fires_are_recovered_by_exactly_one_node(db: &TestDb) {
    let store = db.store().await.scoped(S);
    let start = store.now().await.unwrap();
    let (execute_id, fires) = ticking_fires(&store, "recover", start, 4000).await;
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

/// A failure whose retry is pending after `ms`.
fn failed_retry(error: &str, ms: u64) -> FireEnd {
    FireEnd::Failed {
        error: error.to_owned(),
        retry_in: Some(std::time::Duration::from_millis(ms)),
        ran: None,
    }
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
