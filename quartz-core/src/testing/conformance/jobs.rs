//! Checks of the admin side: jobs, triggers, calendars, the scheduler's
//! standby, the ledger's pages, bad input refused.

use super::Env;
use super::fixtures::{claim_of, claimed_fires, every_second, fire_pages, register, ticking_job, wait_until};
use crate::cron::CronExpression;
use crate::store::{
    CHANGE_VISIBILITY_MS, ExecuteSpec, ExecuteState, FireEnd, FireQuery, FireState, JobSpec, Outcome, StoreError,
};
use crate::trigger::{Fire, Schedule, Trigger};
use crate::{Error, Timestamp, Tz};

pub(super) async fn the_clock_is_the_databases(env: &Env<'_>) {
    let store = env.store().await;
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

pub(super) async fn jobs_are_created_read_updated_paused_and_deleted(env: &Env<'_>) {
    let store = env.store().await;
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
    assert_eq!(paused.state, crate::store::JobState::Paused);
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

pub(super) async fn bad_input_is_refused_and_nothing_is_stored(env: &Env<'_>) {
    let store = env.store().await;
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

pub(super) async fn the_scheduler_pauses_and_resumes_as_a_recorded_change(env: &Env<'_>) {
    let store = env.store().await.acting_as("ops");
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
    wait_until(std::time::Duration::from_secs(5), "the clock to move", || async {
        store.now().await.unwrap() > now
    })
    .await;
    assert_eq!(store.set_standby(true).await.unwrap(), Some(since));
    assert_eq!(store.set_standby(false).await.unwrap(), None);
    assert_eq!(store.standby().await.unwrap(), None);
    let mut query = crate::store::ChangeQuery::new();
    query.target = Some(env.scheduler().to_owned());
    let log = store.change_log(&query).await.unwrap();
    let actions: Vec<&str> = log.iter().map(|c| c.action.as_str()).collect();
    assert_eq!(actions, ["scheduler.resume", "scheduler.pause", "scheduler.pause"]);
    assert!(log.iter().all(|c| c.actor == "ops" && c.target == env.scheduler()));
}

/// Adds of one calendar name at once, from two handles (two nodes'
/// connections): one is stored, every other is refused as a duplicate, and
/// the stored definition is the one added. A replace still replaces, and an
/// add after it is refused with the replacement kept.
pub(super) async fn a_calendar_name_is_added_once(env: &Env<'_>) {
    use crate::calendar::CalendarDefinition;
    let weekly = |day: &str| -> CalendarDefinition {
        serde_json::from_value(serde_json::json!({"kind": "weekly", "days": [day]})).unwrap()
    };
    let first = env.store().await;
    let second = env.store().await;
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

pub(super) async fn a_triggers_jitter_and_catch_up_window_are_kept(env: &Env<'_>) {
    use crate::trigger::Jitter;
    let store = env.store().await;
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

pub(super) async fn history_filters_and_pages(env: &Env<'_>) {
    let store = env.store().await;
    let start = store.now().await.unwrap();
    let node = register(&store, "historian").await;
    for name in ["h1", "h2"] {
        let (execute_id, trigger) = ticking_job(&store, name, start).await;
        let fires: Vec<Fire> = trigger
            .fires_until(
                &crate::trigger::TriggerState::initial(&trigger),
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
        failed.error.as_ref().unwrap().len() <= crate::store::MAX_ERROR_BYTES,
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

/// The schedulers holding rows are listed whatever scheduler the handle is
/// scoped to, and one with nothing in it is not.
pub(super) async fn the_schedulers_holding_jobs_or_nodes_are_listed(env: &Env<'_>) {
    let store = env.store().await;
    let empty = format!("{}-empty", env.scheduler());
    let noded = format!("{}-nodes", env.scheduler());
    let listed = |names: &[String], name: &str| names.iter().any(|n| n == name);
    let before = store.schedulers().await.unwrap();
    assert!(!listed(&before, env.scheduler()), "{before:?}");
    store.create_job(&JobSpec::new("listed", "noop"), &[]).await.unwrap();
    register(&store.scoped(&noded), "a-node").await;
    // A read of an empty scheduler leaves nothing that lists it.
    assert!(store.scoped(&empty).list_jobs().await.unwrap().is_empty());
    let names = store.scoped(&empty).schedulers().await.unwrap();
    assert!(listed(&names, env.scheduler()), "{names:?}");
    assert!(listed(&names, &noded), "{names:?}");
    assert!(!listed(&names, &empty), "{names:?}");
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "by name");
}
