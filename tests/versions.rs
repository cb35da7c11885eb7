//! Optimistic concurrency on every backend: a job's and a calendar's
//! version moves on with each change; a write made against a version that
//! is no longer stored is refused and writes nothing; of two writes made
//! at once against one version exactly one wins; and an edit without a
//! version never overwrites a change made between its read and its write.

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;

use std::time::Duration;

use common::{TestDb, backend_tests};
use quartz::admin::{Admin, AdminError, JobDefinition, JobPatch, PutOutcome, TriggerDefinition};
use quartz::calendar::CalendarDefinition;

const CLUSTER: &str = "versions-cluster";

fn job(name: &str) -> JobDefinition {
    JobDefinition::new(name, "noop").with_trigger(TriggerDefinition::every(Duration::from_secs(60)))
}

fn described(text: &str) -> JobPatch {
    JobPatch {
        description: Some(text.to_owned()),
        ..JobPatch::default()
    }
}

fn weekly(days: &[&str]) -> CalendarDefinition {
    serde_json::from_value(serde_json::json!({"kind": "weekly", "days": days})).unwrap()
}

fn assert_stale(e: AdminError, current: Option<i64>) {
    match e {
        AdminError::Stale { current: c, .. } => assert_eq!(c, current, "the stored version"),
        other => panic!("expected a stale write, got {other:?}"),
    }
}

async fn a_stale_write_is_refused_and_writes_nothing(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    let added = admin.job_add(&job("report")).await.unwrap();
    assert_eq!(added.version, 1);

    let edited = admin.job_edit("report", &described("first"), Some(1)).await.unwrap();
    assert_eq!(edited.version, 2);
    assert_stale(
        admin
            .job_edit("report", &described("second"), Some(1))
            .await
            .unwrap_err(),
        Some(2),
    );
    assert_eq!(
        admin.job("report").await.unwrap().spec.description,
        "first",
        "nothing written"
    );

    assert_stale(admin.job_pause("report", Some(1)).await.unwrap_err(), Some(2));
    assert_eq!(admin.job("report").await.unwrap().state, "enabled");
    let paused = admin.job_pause("report", Some(2)).await.unwrap();
    assert_eq!((paused.state.as_str(), paused.version), ("paused", 3));
    let resumed = admin.job_resume("report", None).await.unwrap();
    assert_eq!(resumed.version, 4, "a write without a version moves it on too");

    assert_stale(admin.job_delete("report", Some(3)).await.unwrap_err(), Some(4));
    assert!(admin.job("report").await.is_ok(), "not deleted");
    admin.job_delete("report", Some(4)).await.unwrap();
    assert!(matches!(admin.job("report").await, Err(AdminError::NotFound { .. })));

    // Calendars: added at 1, moved on by each replace.
    let added = admin
        .calendar_put("weekend", &weekly(&["sat", "sun"]), None)
        .await
        .unwrap();
    assert_eq!(added.version, 1);
    let replaced = admin.calendar_put("weekend", &weekly(&["sun"]), Some(1)).await.unwrap();
    assert_eq!(replaced.version, 2);
    assert_stale(
        admin
            .calendar_put("weekend", &weekly(&["mon"]), Some(1))
            .await
            .unwrap_err(),
        Some(2),
    );
    assert_eq!(admin.calendar("weekend").await.unwrap().definition.days, ["sun"]);
    // A replace of a version of a calendar that does not exist adds nothing.
    assert_stale(
        admin
            .calendar_put("holidays", &weekly(&["mon"]), Some(1))
            .await
            .unwrap_err(),
        None,
    );
    assert!(matches!(
        admin.calendar("holidays").await,
        Err(AdminError::CalendarNotFound { .. })
    ));
    assert_stale(admin.calendar_delete("weekend", Some(1)).await.unwrap_err(), Some(2));
    admin.calendar_delete("weekend", Some(2)).await.unwrap();
    assert!(admin.calendars().await.unwrap().is_empty());
}

async fn of_two_writes_against_one_version_exactly_one_wins(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    admin.job_add(&job("contended")).await.unwrap();
    admin.calendar_put("contended", &weekly(&["sat"]), None).await.unwrap();
    for round in 0..8 {
        let version = admin.job("contended").await.unwrap().version;
        let (first, second) = (described(&format!("a{round}")), described(&format!("b{round}")));
        let (a, b) = tokio::join!(
            admin.job_edit("contended", &first, Some(version)),
            admin.job_edit("contended", &second, Some(version)),
        );
        let won: Vec<String> = [a, b]
            .into_iter()
            .filter_map(|r| match r {
                Ok(view) => Some(view.spec.description),
                Err(e) => {
                    assert_stale(e, Some(version + 1));
                    None
                }
            })
            .collect();
        assert_eq!(won.len(), 1, "round {round}: one edit wins");
        let stored = admin.job("contended").await.unwrap();
        assert_eq!((stored.spec.description, stored.version), (won[0].clone(), version + 1));

        let version = admin.calendar("contended").await.unwrap().version;
        let (monday, tuesday) = (weekly(&["mon"]), weekly(&["tue"]));
        let (a, b) = tokio::join!(
            admin.calendar_put("contended", &monday, Some(version)),
            admin.calendar_put("contended", &tuesday, Some(version)),
        );
        let winners = [a, b]
            .into_iter()
            .filter_map(|r| r.map_err(|e| assert_stale(e, Some(version + 1))).ok())
            .count();
        assert_eq!(winners, 1, "round {round}: one replace wins");
        assert_eq!(admin.calendar("contended").await.unwrap().version, version + 1);
    }
}

async fn edits_without_a_version_never_undo_each_other(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    admin.job_add(&job("shared")).await.unwrap();
    for round in 0..6_i64 {
        let description = format!("round {round}");
        let timeout = JobPatch {
            timeout: Some(Some(Duration::from_millis(1_000 + round as u64))),
            ..JobPatch::default()
        };
        let text = described(&description);
        let (a, b) = tokio::join!(
            admin.job_edit("shared", &text, None),
            admin.job_edit("shared", &timeout, None),
        );
        a.unwrap();
        b.unwrap();
        let stored = admin.job("shared").await.unwrap();
        assert_eq!(
            (stored.spec.description.as_str(), stored.spec.timeout),
            (description.as_str(), Some(Duration::from_millis(1_000 + round as u64))),
            "both edits of round {round} are kept"
        );
    }
}

/// A service declares its jobs on every start: the first adds, the same
/// again writes nothing (its triggers keep their place), a change in code
/// reaches the stored job, and two instances starting at once add it once.
async fn a_job_declared_on_every_start_is_added_once_and_kept_in_step(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    let mut job = JobDefinition::new("nightly", "report").with_description("the report");
    job.triggers
        .push(TriggerDefinition::cron("0 0 2 * * ?", "Europe/Paris").unwrap());
    let (first, outcome) = admin.job_put(&job).await.unwrap();
    assert_eq!((outcome, first.version), (PutOutcome::Created, 1));

    let changes = || async {
        admin
            .changes(&quartz::admin::ChangeFilter::default())
            .await
            .unwrap()
            .items
            .len()
    };
    let logged = changes().await;
    let (again, outcome) = admin.job_put(&job).await.unwrap();
    assert_eq!((outcome, again.version), (PutOutcome::Unchanged, 1));
    assert_eq!(again.triggers[0].id, first.triggers[0].id, "the trigger kept");
    assert_eq!(changes().await, logged, "nothing written");

    let changed = job.clone().with_description("the nightly report");
    let (updated, outcome) = admin.job_put(&changed).await.unwrap();
    assert_eq!((outcome, updated.version), (PutOutcome::Updated, 2));
    assert_eq!(updated.spec.description, "the nightly report");
    assert_eq!(
        updated.triggers[0].id, first.triggers[0].id,
        "the same trigger keeps its place"
    );

    let mut moved = changed.clone();
    moved.triggers = vec![TriggerDefinition::cron("0 30 2 * * ?", "Europe/Paris").unwrap()];
    let (rescheduled, outcome) = admin.job_put(&moved).await.unwrap();
    assert_eq!(outcome, PutOutcome::Updated);
    assert_ne!(
        rescheduled.triggers[0].id, first.triggers[0].id,
        "a new schedule starts afresh"
    );
    assert_eq!(rescheduled.triggers[0].definition.cron_text(), Some("0 30 2 * * ?"));

    // Two instances starting at once.
    let mut fresh = JobDefinition::new("hourly", "report");
    fresh.triggers.push(TriggerDefinition::every(Duration::from_secs(3600)));
    let (a, b) = tokio::join!(admin.job_put(&fresh), admin.job_put(&fresh));
    let mut outcomes = [a.unwrap().1, b.unwrap().1];
    outcomes.sort_by_key(|o| o.as_str());
    assert_eq!(outcomes, [PutOutcome::Created, PutOutcome::Unchanged]);
}

backend_tests!(
    a_job_declared_on_every_start_is_added_once_and_kept_in_step,
    a_stale_write_is_refused_and_writes_nothing,
    of_two_writes_against_one_version_exactly_one_wins,
    edits_without_a_version_never_undo_each_other,
);
