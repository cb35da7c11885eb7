//! Calendars through the engine, on real databases: triggers pass over the
//! times their calendar excludes, and a calendar changed while three nodes
//! fire reaches every one of them with no fire run twice or lost; a
//! calendar that excluded every time, once mended, lets the triggers it
//! completed fire again.
//!
//! Each test runs on SQLite (a file), PostgreSQL, MariaDB and Redis, on a
//! fresh database (see `quartz-testkit`).

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use common::{TestDb, ledger, wait_until};
use quartz::admin::{Admin, AdminError};
use quartz::calendar::CalendarDefinition;
use quartz::prelude::*;
use quartz::store::ExecuteSpec;
use quartz::store::{CHANGE_VISIBILITY_MS, ExecuteState, FireState};
use quartz::trigger::Trigger;

common::backend_tests!(shared:
    a_calendar_change_reaches_every_node_with_no_fire_twice_or_lost,
    a_mended_calendar_revives_the_triggers_it_completed,
    a_calendar_that_excludes_almost_every_time_stalls_neither_a_node_nor_a_preview,
);

const CLUSTER: &str = "calendar-cluster";

async fn node(db: &TestDb) -> Scheduler {
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
    let store = AnyStore::from(nodes[0].store().clone());
    let admin = nodes[1].admin();
    // First the odd seconds are excluded, then the even ones.
    admin
        .calendar_put("quiet", &seconds("1/2 * * * * ?"), None)
        .await
        .unwrap();
    let now = store.now().await.unwrap().as_millis();
    let start = Timestamp::from_millis((now / 2000 + 2) * 2000);
    let end = start.saturating_add_millis(7_999);
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
            .add_job(&JobDefinition::of_specs(
                &JobSpec::new(name, "noop"),
                &[ExecuteSpec::new(trigger)],
            ))
            .await
            .unwrap();
    }
    let detail = store.get_job("cron").await.unwrap().unwrap();
    assert_eq!(
        detail.executes[0].fire_state.next_fire_time,
        Some(start),
        "an even second"
    );

    // Half a second into an even second, from another node, the calendar
    // flips: the next even time is 1.5 s away, past any claim made ahead.
    let flip = start.saturating_add_millis(2_500);
    wait_until(Duration::from_secs(30), "the flip time", || async {
        store.now().await.unwrap() >= flip
    })
    .await;
    let before = store.now().await.unwrap();
    admin
        .calendar_put("quiet", &seconds("0/2 * * * * ?"), None)
        .await
        .unwrap();
    let after = store.now().await.unwrap();
    let settled = after.saturating_add_millis(CHANGE_VISIBILITY_MS);

    // Every fire time of the grid the calendar in force includes, away from
    // the change's edges.
    let rate_grid: Vec<Timestamp> = (0..32).map(|i| start.saturating_add_millis(i * 250)).collect();
    let cron_grid: Vec<Timestamp> = (0..8).map(|i| start.saturating_add_millis(i * 1000)).collect();
    let expected = |grid: &[Timestamp]| -> BTreeSet<Timestamp> {
        grid.iter()
            .copied()
            .filter(|t| (*t < before && even(*t)) || (*t >= settled && !even(*t)))
            .collect()
    };
    let jobs: std::collections::HashMap<i64, String> = store
        .list_jobs()
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
        times_of(&rows, "rate").len() >= expected(&rate_grid).len() && expected(&rate_grid).len() >= 14,
        "the fixed-rate trigger fired its included times: {:?}",
        times_of(&rows, "rate")
    );

    // A calendar in use is not deleted; once unused, it is.
    let admin = Admin::new(store.clone(), CLUSTER);
    match admin.calendar_delete("quiet", None).await {
        Err(AdminError::InUse { users, .. }) => assert_eq!(users, ["job cron", "job rate"]),
        other => panic!("deleted a calendar in use: {other:?}"),
    }
    admin.job_delete("cron", None).await.unwrap();
    admin.job_delete("rate", None).await.unwrap();
    admin.calendar_delete("quiet", None).await.unwrap();
    assert!(matches!(
        admin.calendar("quiet").await,
        Err(AdminError::CalendarNotFound { .. })
    ));
}

/// A calendar that excluded every time completed the triggers that use it;
/// mended, it revives them: a trigger fires again, a paused job's trigger
/// waits paused until the job resumes, and a trigger past its end stays
/// complete.
async fn a_mended_calendar_revives_the_triggers_it_completed(db: &TestDb) {
    let node = node(db).await;
    let store = AnyStore::from(node.store().clone());
    let admin = node.admin();
    let all_day: CalendarDefinition =
        serde_json::from_value(serde_json::json!({"kind": "daily", "range": "00:00-23:59:59.999"})).unwrap();
    admin.calendar_put("closed", &all_day, None).await.unwrap();
    let now = store.now().await.unwrap();
    let end = now.saturating_add_millis(1_000);
    for (name, end) in [("revived", None), ("held", None), ("ended", Some(end))] {
        let mut trigger = Trigger::every(Duration::from_millis(500), now).unwrap();
        if let Some(end) = end {
            trigger = trigger.with_end(end).unwrap();
        }
        let trigger = trigger.with_calendar("closed").unwrap();
        node.add_job(&JobDefinition::of_specs(
            &JobSpec::new(name, "noop"),
            &[ExecuteSpec::new(trigger)],
        ))
        .await
        .unwrap();
    }
    admin.job_pause("held", None).await.unwrap();
    let state = |name: &'static str| {
        let store = store.clone();
        async move {
            let detail = store.get_job(name).await.unwrap().unwrap();
            let execute = &detail.executes[0];
            (execute.state, execute.fire_state.next_fire_time)
        }
    };
    for name in ["revived", "held", "ended"] {
        assert_eq!(
            state(name).await,
            (ExecuteState::Complete, None),
            "{name}: no time is included"
        );
    }
    wait_until(Duration::from_secs(10), "the end of the ended trigger", || async {
        store.now().await.unwrap() > end
    })
    .await;

    // Mended: one second in 2099 excluded.
    let mended = store.now().await.unwrap();
    admin
        .calendar_put("closed", &seconds("0 0 0 1 1 ? 2099"), None)
        .await
        .unwrap();
    let (revived, next) = state("revived").await;
    assert_eq!(revived, ExecuteState::Waiting);
    assert!(next.is_some_and(|t| t >= mended), "{next:?}");
    let (held, next) = state("held").await;
    assert_eq!(held, ExecuteState::Paused, "paused with its job");
    assert!(next.is_some_and(|t| t >= mended), "{next:?}");
    assert_eq!(state("ended").await, (ExecuteState::Complete, None), "past its end");

    let fired = |name: &'static str| {
        let store = store.clone();
        async move {
            let jobs = store.list_jobs().await.unwrap();
            let id = jobs.iter().find(|j| j.spec.name == name).unwrap().id;
            let rows = ledger(&store, CLUSTER).await;
            rows.iter()
                .filter(|f| f.job_id == id && f.state == FireState::Succeeded)
                .count()
        }
    };
    wait_until(Duration::from_secs(15), "the revived trigger's fires", || async {
        fired("revived").await >= 2
    })
    .await;
    assert_eq!(fired("held").await, 0, "a paused job's trigger fires nothing");
    admin.job_resume("held", None).await.unwrap();
    wait_until(Duration::from_secs(15), "the resumed job's fires", || async {
        fired("held").await >= 2
    })
    .await;
    node.shutdown().await;
    let rows = ledger(&store, CLUSTER).await;
    let mut once = HashSet::new();
    for f in &rows {
        assert!(once.insert((f.execute_id, f.fire_time, f.attempt)), "twice: {f:?}");
        assert!(f.fire_time >= mended, "nothing fired before the mend: {f:?}");
    }
}

/// A calendar that excludes every second of this year and the next (tens of
/// millions of excluded seconds before a per-second trigger's first fire
/// time): adding a job behind it, the polls that come to its row and cron
/// previews through the admin surface each cost a bounded search, never one
/// over the whole closed range. The node keeps firing its other job; the
/// trigger waits at a checkpoint, fires nothing, and a checkpoint that
/// comes due is resumed by the poll, not fired.
async fn a_calendar_that_excludes_almost_every_time_stalls_neither_a_node_nor_a_preview(db: &TestDb) {
    use quartz::store::spi::ExecuteCas;
    let bound = Duration::from_secs(30);
    let node = node(db).await;
    let store = AnyStore::from(node.store().clone());
    let admin = node.admin();
    let now = store.now().await.unwrap();
    let year: i32 = now.to_string()[..4].parse().unwrap();
    let closed = seconds(&format!("* * * * * ? {year}-{}", year + 1));
    admin.calendar_put("closed", &closed, None).await.unwrap();
    let rare = Trigger::cron("* * * * * ?", "UTC", now)
        .unwrap()
        .with_calendar("closed")
        .unwrap();
    let steady = Trigger::cron("* * * * * ?", "UTC", now).unwrap();
    for (name, trigger) in [("rare", rare), ("steady", steady)] {
        tokio::time::timeout(
            bound,
            node.add_job(&JobDefinition::of_specs(
                &JobSpec::new(name, "noop"),
                &[ExecuteSpec::new(trigger)],
            )),
        )
        .await
        .unwrap_or_else(|_| panic!("adding {name} searched past {bound:?}"))
        .unwrap();
    }
    // Previews of the closed calendar, four at once: each answers within its
    // limits (a note saying how far it looked) or is told to come back.
    let previews = (0..4).map(|_| {
        let admin = admin.clone();
        tokio::spawn(async move {
            admin
                .cron_preview_with("* * * * * ?", "UTC", Default::default(), Some("closed"), now, 5)
                .await
        })
    });
    let answers = tokio::time::timeout(bound, futures_join(previews))
        .await
        .expect("previews bounded");
    let mut answered = 0;
    for answer in answers {
        match answer.unwrap() {
            Ok(preview) => {
                answered += 1;
                assert!(preview.times.is_empty(), "{preview:?}");
                let until = preview.searched_until.expect("how far it looked");
                assert!(until > now, "{preview:?}");
                assert!(preview.note.unwrap().contains("search stopped"));
            }
            Err(AdminError::Busy { .. }) => {}
            Err(other) => panic!("preview failed: {other}"),
        }
    }
    assert!(answered >= 1, "at least one preview ran");

    // A backfill (its preview, as a read-only caller may ask) of the closed
    // months of a job that started the first of January: answered within
    // its limits, saying how far the search got, not after a search over
    // millions of excluded seconds.
    let january = Timestamp::from_millis(quartz::admin::parse_instant(&format!("{year}-01-01T00:00:00Z")).unwrap());
    let past = Trigger::cron("* * * * * ?", "UTC", january)
        .unwrap()
        .with_calendar("closed")
        .unwrap();
    node.add_job(&JobDefinition::of_specs(
        &JobSpec::new("past", "noop"),
        &[ExecuteSpec::new(past)],
    ))
    .await
    .unwrap();
    let request = quartz::admin::BackfillRequest {
        from: Some(january.as_millis()),
        to: Some(now.as_millis()),
        rate: None,
        preview: true,
    };
    // Bounded, not fast: the search stops at its 0.5 s limit, where an
    // unbounded one ran for minutes; a loaded machine adds its own delays
    // (the benchmarks, not this test, say how fast).
    let asked = std::time::Instant::now();
    let answer = admin.job_backfill("past", &request).await;
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "answered after {:?}",
        asked.elapsed()
    );
    match answer {
        Err(AdminError::Invalid { field, message }) => {
            assert_eq!(field, "to");
            assert!(
                message.contains("search for the range's fire times stopped"),
                "{message}"
            );
        }
        Err(AdminError::Busy { .. }) => {}
        other => panic!("{other:?}"),
    }

    // Jobs behind the closed calendar added, and the calendar replaced:
    // each trigger's search is cut short at a checkpoint the polls resume,
    // so neither holds the store's write for long whatever the calendar
    // excludes (a full search of each took about 0.1 s, and the replace
    // held the write that long for every trigger using the calendar).
    for i in 0..8 {
        let trigger = Trigger::cron("* * * * * ?", "UTC", now)
            .unwrap()
            .with_calendar("closed")
            .unwrap();
        node.add_job(&JobDefinition::of_specs(
            &JobSpec::new(format!("behind-{i}"), "noop"),
            &[ExecuteSpec::new(trigger)],
        ))
        .await
        .unwrap();
    }
    let replaced = seconds(&format!("* * * * * ? {year}-{}", year + 2));
    let asked = std::time::Instant::now();
    admin.calendar_put("closed", &replaced, None).await.unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "the calendar of 10 triggers replaced in {:?}",
        asked.elapsed()
    );

    // The node fires its other job meanwhile, every second.
    wait_until(bound, "steady fires", || async {
        let rows = ledger(&store, CLUSTER).await;
        rows.iter().filter(|f| f.state == FireState::Succeeded).count() >= 3
    })
    .await;
    let detail = store.get_job("rare").await.unwrap().unwrap();
    let execute = &detail.executes[0];
    assert_eq!(
        execute.state,
        ExecuteState::Waiting,
        "not completed: it has a time in {}",
        year + 3
    );
    let checkpoint = execute.fire_state.next_fire_time.expect("a checkpoint");
    assert!(execute.trigger.is_checkpoint(checkpoint) && checkpoint > now);

    // A checkpoint that comes due (here moved into the poll's window) is
    // resumed by the poll, further ahead, and never fired.
    let due = store.now().await.unwrap().saturating_add_millis(300);
    let mut moved = execute.fire_state.clone();
    moved.next_fire_time = Some(due);
    let cas = ExecuteCas::from_row(execute, ExecuteState::Waiting, moved);
    assert!(store.update_execute(&cas, &[]).await.unwrap());
    wait_until(bound, "the due checkpoint resumed", || async {
        let detail = store.get_job("rare").await.unwrap().unwrap();
        detail.executes[0]
            .fire_state
            .next_fire_time
            .is_some_and(|t| t > due.saturating_add_millis(60_000))
    })
    .await;
    let rows = ledger(&store, CLUSTER).await;
    assert!(
        rows.iter().all(|f| f.execute_id != execute.id),
        "an excluded time fired: {rows:?}"
    );
    node.shutdown().await;
}

/// Every future's output, in order.
async fn futures_join<T>(
    handles: impl Iterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<Result<T, tokio::task::JoinError>> {
    let mut out = Vec::new();
    for h in handles.collect::<Vec<_>>() {
        out.push(h.await);
    }
    out
}
