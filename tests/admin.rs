//! The admin surface on every backend: jobs listed, filtered, searched and
//! paged by key; every change recorded with its actor in the change's own
//! transaction; bad input refused with the field at fault and nothing stored
//! lost; next fire times, the ledger, the nodes and the overview as a running
//! node leaves them.

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;

use std::time::Duration;

use common::{TestDb, backend_tests, wait_for};
use quartz::admin::{
    Admin, AdminError, ChangeFilter, FireFilter, JobDefinition, JobFilter, JobPatch, TriggerDefinition,
};
use quartz::prelude::*;
use quartz::store::ExecuteSpec;
use quartz::trigger::{Schedule, Trigger};

const CLUSTER: &str = "admin-cluster";

fn every(ms: u64) -> TriggerDefinition {
    TriggerDefinition::every(Duration::from_millis(ms))
}

fn job(name: &str, handler: &str) -> JobDefinition {
    let mut job = JobDefinition::new(name, handler);
    job.triggers.push(every(60_000));
    job
}

async fn jobs_are_listed_filtered_searched_and_paged_by_key(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    for i in 0..23 {
        let handler = if i % 2 == 0 { "even" } else { "odd" };
        admin.job_add(&job(&format!("report-{i:02}"), handler)).await.unwrap();
    }
    admin.job_add(&job("cleanup_100%", "odd")).await.unwrap();
    admin.job_pause("report-03", None).await.unwrap();

    let mut names = Vec::new();
    let mut filter = JobFilter {
        limit: Some(10),
        ..JobFilter::default()
    };
    loop {
        let page = admin.jobs(&filter).await.unwrap();
        assert!(page.items.len() <= 10);
        names.extend(page.items.iter().map(|j| j.spec.name.clone()));
        match page.next {
            Some(next) => filter.after = Some(next),
            None => break,
        }
    }
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "by name");
    assert_eq!(names.len(), 24, "every job once across the pages");

    let search = |text: &str| JobFilter {
        search: Some(text.to_owned()),
        ..JobFilter::default()
    };
    assert_eq!(admin.jobs(&search("REPORT-1")).await.unwrap().items.len(), 10);
    // LIKE's wildcards are searched for as text.
    let percent = admin.jobs(&search("100%")).await.unwrap();
    assert_eq!(percent.items.len(), 1);
    assert_eq!(admin.jobs(&search("_")).await.unwrap().items.len(), 1);
    let paused = admin
        .jobs(&JobFilter {
            state: Some("paused".into()),
            ..JobFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(
        paused.items.iter().map(|j| j.spec.name.as_str()).collect::<Vec<_>>(),
        ["report-03"]
    );
    let odd = admin
        .jobs(&JobFilter {
            handler: Some("odd".into()),
            ..JobFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(odd.items.len(), 12);
    let bad = admin
        .jobs(&JobFilter {
            state: Some("sleeping".into()),
            ..JobFilter::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.field(), Some("state"));
}

async fn every_change_is_recorded_with_its_actor(db: &TestDb) {
    let store = db.store().await.scoped(CLUSTER);
    let admin = Admin::new(store.clone(), CLUSTER).acting_as("http:admin");
    admin.job_add(&job("nightly", "log")).await.unwrap();
    let patch = JobPatch {
        name: Some("nightly-report".into()),
        triggers: Some(vec![TriggerDefinition::cron("0 0 2 * * ?", "Europe/Paris").unwrap()]),
        ..JobPatch::default()
    };
    admin.job_edit("nightly", &patch, None).await.unwrap();
    admin.job_pause("nightly-report", None).await.unwrap();
    admin.job_resume("nightly-report", None).await.unwrap();
    admin.job_trigger("nightly-report").await.unwrap();
    admin.job_delete("nightly-report", None).await.unwrap();
    // The library's own calls are recorded too, as the library's.
    store
        .create_job(&JobSpec::new(" padded", "log"), &[])
        .await
        .unwrap_err();
    let mut spec = JobSpec::new("direct", "log");
    spec.description = "made by the embedding service".into();
    let trigger = Trigger::new(Schedule::fixed_rate_millis(60_000).unwrap(), Timestamp::from_millis(0)).unwrap();
    store.create_job(&spec, &[ExecuteSpec::new(trigger)]).await.unwrap();

    let log = admin.changes(&ChangeFilter::default()).await.unwrap().items;
    let seen: Vec<(&str, &str, &str)> = log
        .iter()
        .rev()
        .map(|c| (c.actor.as_str(), c.action.as_str(), c.target.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("http:admin", "job.create", "nightly"),
            ("http:admin", "job.edit", "nightly-report"),
            ("http:admin", "job.pause", "nightly-report"),
            ("http:admin", "job.resume", "nightly-report"),
            ("http:admin", "job.trigger", "nightly-report"),
            ("http:admin", "job.delete", "nightly-report"),
            ("library", "job.create", "direct"),
        ],
        "a refused change leaves no record"
    );
    // An edit says what changed, was → now.
    let edit = &log[5].detail;
    assert!(edit.contains(r#"name: "nightly" → "nightly-report""#), "{edit}");
    assert!(
        edit.contains("triggers: every 60000 ms → cron 0 0 2 * * ? Europe/Paris"),
        "{edit}"
    );
    assert!(!edit.contains("handler"), "only what changed: {edit}");
    assert!(
        log.windows(2).all(|w| w[0].id > w[1].id && w[0].at >= w[1].at),
        "newest first"
    );
    let now = admin.now().await.unwrap().as_millis();
    assert!(
        log.iter().all(|c| (now - 60_000..=now).contains(&c.at)),
        "database time"
    );

    let page = admin
        .changes(&ChangeFilter {
            job: Some("nightly-report".into()),
            limit: Some(2),
            ..ChangeFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(page.items.len(), 2);
    let rest = admin
        .changes(&ChangeFilter {
            job: Some("nightly-report".into()),
            before: page.next.clone(),
            limit: Some(10),
        })
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 3, "the rest of its five changes");
    assert!(rest.next.is_none());
}

async fn bad_input_names_the_field_and_keeps_what_is_stored(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    admin.job_add(&job("keep", "log")).await.unwrap();
    let field_of = |e: AdminError| (e.code(), e.field().map(str::to_owned));

    // A value alone that is wrong is refused where the definition is made:
    // in code by its constructor, from JSON by its reading, naming the field.
    let made = |e: AdminError| e.field().map(str::to_owned);
    assert_eq!(
        made(TriggerDefinition::cron("0 0 25 * * ?", "UTC").unwrap_err()).as_deref(),
        Some("cron")
    );
    assert_eq!(
        made(TriggerDefinition::cron("0 0 * * * ?", "Mars/Olympus").unwrap_err()).as_deref(),
        Some("time_zone")
    );
    let read = |json: serde_json::Value| serde_json::from_value::<JobDefinition>(json).unwrap_err().to_string();
    let e = read(
        serde_json::json!({"name": "x", "handler": "log", "triggers": [{"kind": "cron", "cron": "0 0 25 * * ?"}]}),
    );
    assert!(e.starts_with("`cron`: "), "{e}");
    let e = read(serde_json::json!({"name": "x", "handler": "log", "timeout_ms": -1}));
    assert!(e.starts_with("`timeout_ms`: "), "{e}");
    // What depends on the write is refused by it, naming the trigger.
    let mut bad = job("x", "log");
    bad.triggers = vec![every(1_000), every(0)];
    assert_eq!(
        field_of(admin.job_add(&bad).await.unwrap_err()),
        ("invalid", Some("triggers[1].interval_ms".into()))
    );
    bad.triggers = vec![every(1_000).ending(quartz::Timestamp::from_millis(0))];
    assert_eq!(
        field_of(admin.job_add(&bad).await.unwrap_err()),
        ("invalid", Some("triggers[0].end".into()))
    );
    let mut bad = job(" padded", "log");
    assert_eq!(
        field_of(admin.job_add(&bad).await.unwrap_err()).1.as_deref(),
        Some("name")
    );
    bad.spec.name = "x".into();
    bad.spec.payload = serde_json::Value::String("x".repeat(2 << 20)).to_string();
    assert_eq!(
        field_of(admin.job_add(&bad).await.unwrap_err()).1.as_deref(),
        Some("payload")
    );
    bad.spec.payload = "null".into();
    bad.spec.retry.max_attempts = 0;
    assert_eq!(
        field_of(admin.job_add(&bad).await.unwrap_err()).1.as_deref(),
        Some("max_attempts")
    );
    bad.spec.retry.max_attempts = 1;
    bad.triggers.clear();
    bad.spec.parent = Some("nobody".into());
    assert_eq!(
        field_of(admin.job_add(&bad).await.unwrap_err()).1.as_deref(),
        Some("parent")
    );
    assert_eq!(
        field_of(admin.job_add(&job("keep", "log")).await.unwrap_err()).0,
        "conflict"
    );
    assert_eq!(
        field_of(admin.job_pause("nobody", None).await.unwrap_err()).0,
        "not_found"
    );
    assert_eq!(field_of(admin.job("nobody").await.unwrap_err()).0, "not_found");
    let patch = JobPatch {
        timeout: Some(Some(Duration::from_secs(200 * 366 * 86_400))),
        ..JobPatch::default()
    };
    assert_eq!(
        field_of(admin.job_edit("keep", &patch, None).await.unwrap_err())
            .1
            .as_deref(),
        Some("timeout_ms")
    );
    let negative = serde_json::from_str::<JobPatch>(r#"{"timeout_ms": -5}"#)
        .unwrap_err()
        .to_string();
    assert!(negative.starts_with("`timeout_ms`: "), "{negative}");
    // An unknown field in JSON is refused by the definition itself.
    let unknown = serde_json::from_str::<JobDefinition>(r#"{"name": "y", "handler": "log", "cron": "0 * * * * ?"}"#);
    assert!(unknown.unwrap_err().to_string().contains("cron"));

    let jobs = admin.jobs(&JobFilter::default()).await.unwrap().items;
    assert_eq!(jobs.len(), 1, "nothing stored but the one good job");
    assert_eq!(jobs[0].spec.name, "keep");
    assert_eq!(jobs[0].state, "enabled");
    assert_eq!(admin.changes(&ChangeFilter::default()).await.unwrap().items.len(), 1);
}

async fn a_job_shows_its_next_fire_times(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    let mut def = JobDefinition::new("ticker", "log");
    let mut t = every(1_000);
    t.start = Some(quartz::Timestamp::from_millis(4_102_444_800_000)); // 2100-01-01T00:00:00Z
    t.repeat = Some(3);
    def.triggers.push(t);
    def.triggers
        .push(TriggerDefinition::cron("0 0 12 ? * MON-FRI", "America/New_York").unwrap());
    let view = admin.job_add(&def).await.unwrap();
    assert_eq!(
        view.triggers[0].upcoming,
        [4_102_444_800_000, 4_102_444_801_000, 4_102_444_802_000],
        "the repeat limit ends the list"
    );
    let weekdays = &view.triggers[1].upcoming;
    assert_eq!(weekdays.len(), quartz::admin::UPCOMING);
    assert!(weekdays.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(view.next_fire_time, Some(weekdays[0]));
    let preview = quartz::admin::cron_preview(
        "0 0 12 ? * MON-FRI",
        "America/New_York",
        quartz::cron::DstChoice::QUARTZ,
        Timestamp::from_millis(weekdays[0]),
        2,
    )
    .unwrap();
    assert_eq!(preview[0].as_millis(), weekdays[1]);
    let bad = quartz::admin::cron_preview(
        "0 0 12 ? * MON-FRI",
        "UTC",
        quartz::cron::DstChoice::QUARTZ,
        Timestamp::from_millis(0),
        0,
    )
    .unwrap_err();
    assert_eq!(bad.field(), Some("count"));
}

async fn a_cron_trigger_keeps_its_dst_choice(db: &TestDb) {
    use quartz::cron::{DstChoice, RepeatedTime, SkippedTime};
    let admin = Admin::new(db.store().await, CLUSTER);
    // 01:30 in New York, from 31 October 2026: 1 November has it twice.
    let trigger = |dst: Option<DstChoice>| {
        let t = TriggerDefinition::cron("0 30 1 * * ?", "America/New_York")
            .unwrap()
            .starting(Timestamp::from_millis(1793448000000 /* 2026-10-31T12:00:00Z */));
        match dst {
            Some(dst) => t.dst(dst),
            None => t,
        }
    };
    let both = DstChoice {
        skipped: SkippedTime::Skip,
        repeated: RepeatedTime::Both,
    };
    let mut def = JobDefinition::new("dst-both", "log");
    def.triggers.push(trigger(Some(both)));
    admin.job_add(&def).await.unwrap();
    let mut quartz = JobDefinition::new("dst-quartz", "log");
    quartz.triggers.push(trigger(None));
    admin.job_add(&quartz).await.unwrap();

    // Read back from the store.
    let view = admin.job("dst-both").await.unwrap();
    let t = &view.triggers[0];
    assert_eq!(t.definition.dst_choice(), Some(both));
    assert!(
        t.summary.ends_with("(DST: skipped skip, repeated both)"),
        "{}",
        t.summary
    );
    assert_eq!(
        t.upcoming[..3],
        [
            1793511000000, /* 2026-11-01T05:30:00Z */
            1793514600000, /* 2026-11-01T06:30:00Z */
            1793601000000  /* 2026-11-02T06:30:00Z */
        ]
    );
    let view = admin.job("dst-quartz").await.unwrap();
    let t = &view.triggers[0];
    assert_eq!(t.definition.dst_choice(), Some(DstChoice::QUARTZ));
    assert_eq!(
        t.upcoming[..2],
        [
            1793514600000, /* 2026-11-01T06:30:00Z */
            1793601000000  /* 2026-11-02T06:30:00Z */
        ],
        "Quartz: the later, once"
    );

    // Edited to the first occurrence.
    let first = DstChoice {
        skipped: SkippedTime::Quartz,
        repeated: RepeatedTime::First,
    };
    let patch = JobPatch {
        triggers: Some(vec![trigger(Some(first))]),
        ..JobPatch::default()
    };
    let view = admin.job_edit("dst-both", &patch, None).await.unwrap();
    assert_eq!(
        view.triggers[0].upcoming[..2],
        [
            1793511000000, /* 2026-11-01T05:30:00Z */
            1793601000000  /* 2026-11-02T06:30:00Z */
        ]
    );
    assert_eq!(view.triggers[0].definition.dst_choice(), Some(first));

    // Refused where it is read, naming the field.
    let read = |trigger: serde_json::Value| {
        serde_json::from_value::<JobDefinition>(
            serde_json::json!({"name": "dst-bad", "handler": "log", "triggers": [trigger]}),
        )
        .unwrap_err()
        .to_string()
    };
    let e = read(serde_json::json!({"kind": "cron", "cron": "0 30 1 * * ?", "dst_repeated": "later"}));
    assert!(e.starts_with("`dst_repeated`: "), "{e}");
    let e = read(serde_json::json!({"kind": "fixed_rate", "interval_ms": 1000, "dst_skipped": "skip"}));
    assert!(e.starts_with("`dst_skipped`: "), "{e}");
    assert!(matches!(admin.job("dst-bad").await, Err(AdminError::NotFound { .. })));
}

async fn the_ledger_nodes_and_overview_follow_a_running_node(db: &TestDb) {
    let node = SchedulerBuilder::new(CLUSTER)
        .settings(common::fast_settings())
        .handler("tick", |_| Ok(()))
        .start(db.store().await)
        .await
        .unwrap();
    let admin = node.admin();
    let mut def = JobDefinition::new("tick", "tick");
    def.triggers.push(every(200));
    admin.job_add(&def).await.unwrap();
    wait_for(Duration::from_secs(20), "6 succeeded fires of tick", || async {
        let filter = FireFilter {
            job: Some("tick".into()),
            state: Some("succeeded".into()),
            ..FireFilter::default()
        };
        let page = admin.fires(&filter).await.unwrap();
        (page.items.len() >= 6)
            .then_some(())
            .ok_or(format!("{} so far", page.items.len()))
    })
    .await;
    let first = admin
        .fires(&FireFilter {
            limit: Some(2),
            ..FireFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(first.items.len(), 2);
    let second = admin
        .fires(&FireFilter {
            limit: Some(2),
            before: first.next.clone(),
            ..FireFilter::default()
        })
        .await
        .unwrap();
    assert!(second.items[0].id < first.items[1].id, "keyset pages do not overlap");
    assert!(first.items.iter().all(|f| f.job.as_deref() == Some("tick")));

    let nodes = admin.nodes().await.unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].state, "live");
    assert_eq!(nodes[0].handlers, ["tick"]);
    let overview = admin.overview(600_000).await.unwrap();
    assert_eq!(overview.live_nodes, 1);
    assert_eq!(overview.jobs, 1);
    assert!(overview.succeeded >= 6, "{overview:?}");
    assert_eq!(overview.fires_per_minute.len(), 10);
    assert!(overview.lateness_ms.is_some());
    let bad = admin
        .fires(&FireFilter {
            before: Some("yesterday".into()),
            ..FireFilter::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.field(), Some("before"));
    node.shutdown().await;
}

/// Fire now is a pending fire of the job, not a trigger: it runs once on a
/// node, beside a schedule it leaves as it is; on a paused job it runs
/// too and the job stays paused; two asked for at once are two fires.
async fn fire_now_runs_once_beside_the_schedule_and_on_a_paused_job(db: &TestDb) {
    let node = SchedulerBuilder::new(CLUSTER)
        .settings(common::fast_settings())
        .handler("count", |_| Ok(()))
        .start(db.store().await)
        .await
        .unwrap();
    let admin = node.admin();
    let mut def = JobDefinition::new("yearly", "count");
    def.triggers
        .push(TriggerDefinition::cron("0 0 0 1 1 ? 2099", "UTC").unwrap());
    let added = admin.job_add(&def).await.unwrap();
    let succeeded = |n: usize| {
        let admin = admin.clone();
        async move {
            let page = admin
                .fires(&FireFilter {
                    job: Some("yearly".into()),
                    ..FireFilter::default()
                })
                .await
                .unwrap();
            let done = page
                .items
                .iter()
                .filter(|f| f.state == "succeeded" && f.by_hand)
                .count();
            (done >= n)
                .then_some(())
                .ok_or(format!("{done} of {n} fires by hand succeeded so far"))
        }
    };

    let fired = admin.job_trigger("yearly").await.unwrap();
    assert!(!fired.paused);
    assert!(fired.note.contains("schedule is unchanged"), "{}", fired.note);
    wait_for(Duration::from_secs(20), "the fire by hand", || succeeded(1)).await;
    let job = admin.job("yearly").await.unwrap();
    assert_eq!(job.triggers.len(), 1, "no trigger added");
    assert_eq!(
        job.triggers[0].upcoming, added.triggers[0].upcoming,
        "the schedule as it was"
    );

    admin.job_pause("yearly", None).await.unwrap();
    let fired = admin.job_trigger("yearly").await.unwrap();
    assert!(fired.paused);
    assert!(fired.note.contains("stays paused"), "{}", fired.note);
    wait_for(Duration::from_secs(20), "the fire by hand of a paused job", || {
        succeeded(2)
    })
    .await;
    assert_eq!(admin.job("yearly").await.unwrap().state, "paused", "still paused");

    let (a, b) = tokio::join!(admin.job_trigger("yearly"), admin.job_trigger("yearly"));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a.fire_id, b.fire_id);
    wait_for(Duration::from_secs(20), "two more", || succeeded(4)).await;
    let filter = FireFilter {
        job: Some("yearly".into()),
        ..FireFilter::default()
    };
    let fires = admin.fires(&filter).await.unwrap().items;
    assert_eq!(fires.len(), 4, "each fire by hand ran once: {fires:?}");
    assert!(fires.iter().all(|f| f.attempt == 1 && f.execute_id == 0));
    node.shutdown().await;
}

/// A deleted job's history is found by the name it had (and by its id), a
/// renamed job's by its old name too; a name no job ever had is 404.
async fn a_deleted_or_renamed_jobs_history_is_found_by_its_name(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    admin.job_add(&job("gone", "log")).await.unwrap();
    admin.job_add(&job("old", "log")).await.unwrap();
    let gone = admin.job_trigger("gone").await.unwrap();
    let old = admin.job_trigger("old").await.unwrap();
    admin.job_delete("gone", None).await.unwrap();
    let rename = JobPatch {
        name: Some("new".into()),
        ..JobPatch::default()
    };
    admin.job_edit("old", &rename, None).await.unwrap();

    let by = |job: &str| FireFilter {
        job: Some(job.into()),
        ..FireFilter::default()
    };
    let fires = admin.fires(&by("gone")).await.unwrap().items;
    assert_eq!(fires.len(), 1, "{fires:?}");
    assert_eq!((fires[0].id, fires[0].job.as_deref()), (gone.fire_id, None));
    let by_id = FireFilter {
        job_id: Some(fires[0].job_id),
        ..FireFilter::default()
    };
    assert_eq!(admin.fires(&by_id).await.unwrap().items, fires);
    for name in ["old", "new"] {
        let fires = admin.fires(&by(name)).await.unwrap().items;
        assert_eq!(fires.len(), 1, "{name}: {fires:?}");
        assert_eq!((fires[0].id, fires[0].job.as_deref()), (old.fire_id, Some("new")));
    }
    assert!(matches!(
        admin.fires(&by("never")).await,
        Err(AdminError::NotFound { .. })
    ));
    let changes = admin.changes(&ChangeFilter::default()).await.unwrap().items;
    assert!(
        changes
            .iter()
            .filter(|c| c.action.starts_with("job."))
            .all(|c| c.target_id.is_some()),
        "{changes:?}"
    );
}

/// A handler no node offers is refused when the job is written while a node
/// is live (naming what the live nodes offer), so that a misspelt handler
/// fails at once and not at its first fire; with no node live, it is
/// stored with a warning; a handler a node that is down offered is known.
async fn a_handler_no_node_offers_is_refused_while_one_is_live(db: &TestDb) {
    let store = db.store().await.scoped(CLUSTER);
    let admin = Admin::new(store.clone(), CLUSTER);
    let early = admin.job_add(&job("early", "invoice")).await.unwrap();
    assert!(
        early.warnings.iter().any(|w| w.contains("no node is live")),
        "{:?}",
        early.warnings
    );

    let node = SchedulerBuilder::new(CLUSTER)
        .settings(common::fast_settings())
        .handler("tick", |_| Ok(()))
        .handler("tock", |_| Ok(()))
        .start(store)
        .await
        .unwrap();
    let e = admin.job_add(&job("typo", "tik")).await.unwrap_err();
    assert_eq!(e.field(), Some("handler"), "{e}");
    assert!(e.to_string().contains("tick, tock"), "names what is offered: {e}");
    assert!(matches!(admin.job("typo").await, Err(AdminError::NotFound { .. })));
    let fine = admin.job_add(&job("fine", "tick")).await.unwrap();
    assert!(fine.warnings.is_empty(), "{:?}", fine.warnings);

    // An edit to a handler no node offers is refused and changes nothing;
    // an edit that keeps the handler is not checked again.
    let patch = JobPatch {
        handler: Some("tik".into()),
        ..JobPatch::default()
    };
    let e = admin.job_edit("fine", &patch, None).await.unwrap_err();
    assert_eq!(e.field(), Some("handler"), "{e}");
    assert_eq!(
        admin.job("fine").await.unwrap().version,
        fine.version,
        "nothing written"
    );
    let patch = JobPatch {
        description: Some("kept as it was".into()),
        ..JobPatch::default()
    };
    admin.job_edit("early", &patch, None).await.unwrap();
    let e = admin.job_put(&job("declared", "tok")).await.unwrap_err();
    assert_eq!(e.field(), Some("handler"), "{e}");

    // The node is down: what it offered is still known, with a warning.
    node.shutdown().await;
    let later = admin.job_add(&job("later", "tock")).await.unwrap();
    assert!(
        later
            .warnings
            .iter()
            .any(|w| w.contains("a node that is down offered it")),
        "{:?}",
        later.warnings
    );
}

backend_tests!(
    a_handler_no_node_offers_is_refused_while_one_is_live,
    a_deleted_or_renamed_jobs_history_is_found_by_its_name,
    fire_now_runs_once_beside_the_schedule_and_on_a_paused_job,
    jobs_are_listed_filtered_searched_and_paged_by_key,
    every_change_is_recorded_with_its_actor,
    bad_input_names_the_field_and_keeps_what_is_stored,
    a_job_shows_its_next_fire_times,
    a_cron_trigger_keeps_its_dst_choice,
    the_ledger_nodes_and_overview_follow_a_running_node,
);
