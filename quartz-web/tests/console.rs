//! The console over a real socket: login into a session cookie, every page
//! rendered with names escaped, the job form (errors beside the field,
//! nothing stored on a refusal), and the guards on every form: the CSRF
//! token, the read-only role, another site's page, a rebound host name.

#![allow(clippy::unwrap_used)]

use crate::http;

use std::net::SocketAddr;
use std::time::Duration;

use quartz_core::Timestamp;
use quartz_core::cron::{DstChoice, RepeatedTime, SkippedTime};

use quartz_core::admin::{Admin, ChangeFilter, JobDefinition, JobFilter, TriggerDefinition};
use quartz_testkit::{Kind, TestDb, backend_tests};
use quartz_web::{Access, Web};

const CLUSTER: &str = "console-cluster";
const ADMIN: &str = "admin-secret";
const READ: &str = "read-secret";
const SCRIPT_NAME: &str = "<script>alert(1)</script>";

async fn server(admin: Admin) -> SocketAddr {
    let access = Access::tokens(Some(ADMIN.into()), Some(READ.into()));
    http::serve(Web::new(admin).access(access).router()).await
}

fn form_body(fields: &[(&str, &str)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in fields {
        q.append_pair(k, v);
    }
    q.finish()
}

/// Logs in with a token; the session cookie (`name=value`).
async fn login(addr: SocketAddr, token: &str) -> String {
    let answer = post(addr, "/login", None, &[("token", token), ("next", "/jobs")], &[]).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    assert_eq!(answer.header("location"), Some("/jobs"));
    let cookie = answer.header("set-cookie").unwrap().to_owned();
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    cookie.split(';').next().unwrap().to_owned()
}

async fn page(addr: SocketAddr, path: &str, cookie: Option<&str>) -> http::Answer {
    let headers: Vec<(&str, &str)> = cookie.iter().map(|c| ("Cookie", *c)).collect();
    http::call(addr, "GET", path, &headers, b"").await
}

async fn post(
    addr: SocketAddr,
    path: &str,
    cookie: Option<&str>,
    fields: &[(&str, &str)],
    extra: &[(&str, &str)],
) -> http::Answer {
    let mut headers = vec![("Content-Type", "application/x-www-form-urlencoded")];
    if let Some(cookie) = cookie {
        headers.push(("Cookie", cookie));
    }
    headers.extend_from_slice(extra);
    http::call(addr, "POST", path, &headers, form_body(fields).as_bytes()).await
}

/// The session's CSRF token, as a page carries it.
fn csrf_of(body: &str) -> String {
    let at = body.find("data-csrf=\"").expect("a page carries the CSRF token") + 11;
    body[at..].split('"').next().unwrap().to_owned()
}

fn segment(name: &str) -> String {
    percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// A redirect to `want` with its notice sealed for the session.
fn assert_sealed(location: Option<&str>, want: &str) {
    let location = location.expect("a Location");
    let (path, seal) = location
        .split_once("&seal=")
        .unwrap_or_else(|| panic!("{location}: no seal"));
    assert_eq!(path, want);
    assert_eq!(seal.len(), 32, "{location}");
}

async fn job_state(admin: &Admin, name: &str) -> String {
    admin.job(name).await.unwrap().state
}

async fn pages_render_with_every_name_escaped(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    let mut hostile = JobDefinition::new(SCRIPT_NAME, "log");
    hostile.spec.description = "<img src=x onerror=alert(2)>".into();
    hostile.spec.payload = serde_json::json!({"html": "</pre><script>alert(3)</script>"}).to_string();
    hostile
        .triggers
        .push(TriggerDefinition::cron("0 0 6 * * ?", "Europe/Paris").unwrap());
    admin.job_add(&hostile).await.unwrap();
    let addr = server(admin.clone()).await;

    let away = page(addr, "/jobs", None).await;
    assert_eq!(away.status, 303, "no session: to the login page");
    assert_eq!(away.header("location"), Some("/login?next=%2Fjobs"));
    let wrong = post(addr, "/login", None, &[("token", "guess"), ("next", "/")], &[]).await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("set-cookie").is_none());
    let offsite = post(
        addr,
        "/login",
        None,
        &[("token", ADMIN), ("next", "//evil.example/")],
        &[],
    )
    .await;
    assert_eq!(
        offsite.header("location"),
        Some("/"),
        "a login never sends the browser elsewhere"
    );

    let cookie = login(addr, ADMIN).await;
    let job_path = format!("/jobs/{}", segment(SCRIPT_NAME));
    let delete_path = format!("{job_path}/delete");
    let edit_path = format!("{job_path}/edit");
    for path in [
        "/",
        "/jobs",
        "/fires",
        "/nodes",
        "/changes",
        "/calendars",
        "/new-calendar",
        "/new",
        &job_path,
        &edit_path,
        &delete_path,
    ] {
        let answer = page(addr, path, Some(&cookie)).await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        assert!(
            answer.header("content-type").unwrap().starts_with("text/html"),
            "{path}"
        );
        let csp = answer.header("content-security-policy").unwrap();
        assert!(csp.contains("script-src 'self'"), "{path}: {csp}");
        for raw in ["<script>alert", "<img src=x", "</pre><script>"] {
            assert!(!answer.body.contains(raw), "{path} renders {raw:?} unescaped");
        }
    }
    let jobs = page(addr, "/jobs", Some(&cookie)).await.body;
    assert!(
        jobs.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "the name shows as text"
    );
    assert!(
        jobs.contains(&format!("href=\"{job_path}\"")),
        "links encode the name: {jobs}"
    );
    let detail = page(addr, &job_path, Some(&cookie)).await.body;
    assert!(detail.contains("&lt;img src=x onerror=alert(2)&gt;"));
    assert!(detail.contains("cron 0 0 6 * * ? Europe/Paris"));
    for asset in ["/assets/console.css", "/assets/console.js"] {
        let answer = page(addr, asset, None).await;
        assert_eq!(answer.status, 200, "{asset}");
        assert!(answer.body.len() > 500, "{asset} is embedded");
    }
}

async fn the_form_creates_edits_and_refuses_bad_input(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    let addr = server(admin.clone()).await;
    let cookie = login(addr, ADMIN).await;
    let csrf = csrf_of(&page(addr, "/new", Some(&cookie)).await.body);
    let mut fields = vec![
        ("csrf", csrf.as_str()),
        ("name", "nightly"),
        ("handler", "report"),
        ("payload", "{\"to\": \"ops\"}"),
        ("kind", "cron"),
        ("cron", "0 0 25 * * ?"),
        ("time_zone", "Europe/Paris"),
        ("misfire", "smart"),
        ("max_attempts", "3"),
        ("backoff_ms", "1000"),
        ("allow_concurrent", "on"),
        ("dst_skipped", "quartz"),
        ("dst_repeated", "both"),
    ];
    let refused = post(addr, "/new", Some(&cookie), &fields, &[]).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("data-field=\"cron\""),
        "the error sits beside the cron field"
    );
    assert!(refused.body.contains("value=\"nightly\""), "what was typed is kept");
    fields[5] = ("cron", "0 0 2 * * ?");
    fields[3] = ("payload", "{not json");
    let refused = post(addr, "/new", Some(&cookie), &fields, &[]).await;
    assert_eq!(refused.status, 400);
    assert!(refused.body.contains("data-field=\"payload\""));
    fields[8] = ("max_attempts", "many");
    let refused = post(addr, "/new", Some(&cookie), &fields, &[]).await;
    assert!(refused.body.contains("data-field=\"max_attempts\""));
    assert!(
        admin.jobs(&JobFilter::default()).await.unwrap().items.is_empty(),
        "nothing stored"
    );

    fields[3] = ("payload", "{\"to\": \"ops\"}");
    fields[8] = ("max_attempts", "3");
    let created = post(addr, "/new", Some(&cookie), &fields, &[]).await;
    assert_eq!(created.status, 303, "{}", created.body);
    // No node is live to offer its handler: stored, and the notice says so.
    assert_sealed(
        created.header("location"),
        "/jobs/nightly?notice=created_unoffered&subject=nightly",
    );
    let shown = page(addr, created.header("location").unwrap(), Some(&cookie)).await;
    assert!(
        shown.body.contains("No live node offers its handler now"),
        "{}",
        shown.body
    );
    let job = admin.job("nightly").await.unwrap();
    assert_eq!(job.spec.payload_value(), serde_json::json!({"to": "ops"}));
    assert_eq!(job.spec.retry.max_attempts, 3);
    assert_eq!(job.triggers[0].definition.cron_text(), Some("0 0 2 * * ?"));
    assert_eq!(
        job.triggers[0].definition.dst_choice(),
        Some(DstChoice {
            skipped: SkippedTime::Quartz,
            repeated: RepeatedTime::Both
        }),
        "the DST choice, Quartz's where left so"
    );
    let edit = page(addr, "/jobs/nightly/edit", Some(&cookie)).await;
    assert!(
        edit.body.contains(r#"<option value="both" selected>"#),
        "the edit form shows the choice"
    );
    let trigger_id = job.triggers[0].id;

    // An edit that leaves the schedule alone keeps the trigger.
    fields[2] = ("handler", "report.v2");
    let saved = post(addr, "/jobs/nightly/edit", Some(&cookie), &fields, &[]).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let job = admin.job("nightly").await.unwrap();
    assert_eq!(
        (job.spec.handler.as_str(), job.triggers[0].id),
        ("report.v2", trigger_id)
    );
    // One that changes it replaces it.
    fields[1] = ("name", "nightly-eu");
    fields[5] = ("cron", "0 30 2 * * ?");
    let saved = post(addr, "/jobs/nightly/edit", Some(&cookie), &fields, &[]).await;
    assert_sealed(
        saved.header("location"),
        "/jobs/nightly-eu?notice=saved&subject=nightly-eu",
    );
    let job = admin.job("nightly-eu").await.unwrap();
    assert_eq!(job.triggers[0].definition.cron_text(), Some("0 30 2 * * ?"));
    assert_ne!(job.triggers[0].id, trigger_id);
    let changes = admin.changes(&ChangeFilter::default()).await.unwrap().items;
    assert!(changes.iter().all(|c| c.actor == "http:admin"), "{changes:?}");
    assert_eq!(changes.len(), 3, "created, edited twice: {changes:?}");

    let confirm = page(addr, "/jobs/nightly-eu/delete", Some(&cookie)).await;
    assert!(confirm.body.contains("cannot be undone"));
    let deleted = post(addr, "/jobs/nightly-eu/delete", Some(&cookie), &[("csrf", &csrf)], &[]).await;
    assert_eq!(deleted.status, 303);
    assert!(admin.job("nightly-eu").await.is_err());
}

async fn every_form_needs_the_sessions_csrf_token_and_the_admin_role(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    let mut job = JobDefinition::new("probe", "log");
    job.triggers
        .push(TriggerDefinition::cron("0 0 6 * * ?", "UTC").unwrap());
    admin.job_add(&job).await.unwrap();
    let addr = server(admin.clone()).await;
    let cookie = login(addr, ADMIN).await;
    let csrf = csrf_of(&page(addr, "/jobs", Some(&cookie)).await.body);

    let forms: [(&str, Vec<(&str, &str)>); 10] = [
        ("/jobs/probe/pause", vec![]),
        ("/jobs/probe/backfill", vec![("from", "0"), ("preview", "on")]),
        ("/scheduler/pause", vec![]),
        ("/scheduler/resume", vec![]),
        ("/jobs/probe/resume", vec![]),
        ("/jobs/probe/trigger", vec![]),
        ("/jobs/probe/enqueue", vec![("payload", "{\"to\": \"ada\"}")]),
        ("/jobs/probe/delete", vec![]),
        (
            "/jobs/probe/edit",
            vec![("name", "renamed"), ("handler", "log"), ("kind", "none")],
        ),
        ("/new", vec![("name", "other"), ("handler", "log"), ("kind", "none")]),
    ];
    for (path, fields) in &forms {
        let none = post(addr, path, Some(&cookie), fields, &[]).await;
        assert_eq!(none.status, 403, "{path} without the token: {}", none.body);
        let mut wrong = fields.clone();
        wrong.push(("csrf", "0000"));
        assert_eq!(
            post(addr, path, Some(&cookie), &wrong, &[]).await.status,
            403,
            "{path}, a wrong token"
        );
        let mut right = fields.clone();
        right.push(("csrf", &csrf));
        for foreign in [("Origin", "http://evil.example"), ("Sec-Fetch-Site", "cross-site")] {
            let answer = post(addr, path, Some(&cookie), &right, &[foreign]).await;
            assert_eq!(answer.status, 403, "{path} from another site ({foreign:?})");
        }
        let no_session = post(addr, path, None, &right, &[]).await;
        assert_eq!(no_session.status, 303, "{path} with no session goes to the login");
    }
    // The job's page offers a backfill; its preview lists the times.
    assert!(
        page(addr, "/jobs/probe", Some(&cookie))
            .await
            .body
            .contains("Preview the times")
    );
    let preview = post(
        addr,
        "/jobs/probe/backfill",
        Some(&cookie),
        &[("csrf", &csrf), ("from", "0"), ("preview", "on")],
        &[],
    )
    .await;
    assert_eq!(preview.status, 200, "{}", preview.body);
    assert!(preview.body.contains("nothing queued (a preview)"), "{}", preview.body);
    let bad = post(
        addr,
        "/jobs/probe/backfill",
        Some(&cookie),
        &[("csrf", &csrf), ("rate", "fast")],
        &[],
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    // Work enqueued from the job's page: its own payload, a unique key;
    // the second with the key is refused, saying which work holds it.
    let keyed = [
        ("csrf", csrf.as_str()),
        ("payload", "{\"to\": \"ada\"}"),
        ("unique_key", "ada"),
    ];
    let mut notices = Vec::new();
    for _ in 0..2 {
        let answer = post(addr, "/jobs/probe/enqueue", Some(&cookie), &keyed, &[]).await;
        assert_eq!(answer.status, 303, "{}", answer.body);
        let location = answer.header("location").unwrap().to_owned();
        notices.push(page(addr, &location, Some(&cookie)).await.body);
    }
    assert!(notices[0].contains("Enqueued: work"), "{}", notices[0]);
    assert!(notices[1].contains("Not enqueued: unique key"), "{}", notices[1]);
    let bad = post(
        addr,
        "/jobs/probe/enqueue",
        Some(&cookie),
        &[("csrf", &csrf), ("payload", "{not json")],
        &[],
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("payload"), "{}", bad.body);
    let reader = login(addr, READ).await;
    let read_csrf = csrf_of(&page(addr, "/jobs", Some(&reader)).await.body);
    let jobs = page(addr, "/jobs", Some(&reader)).await.body;
    assert!(
        jobs.contains("disabled"),
        "the read-only role sees the buttons disabled"
    );
    // Its forms show, their buttons disabled, saying why.
    for path in ["/new", "/jobs/probe/edit", "/jobs/probe/delete", "/new-calendar"] {
        let form = page(addr, path, Some(&reader)).await;
        assert_eq!(form.status, 200, "{path}: {}", form.body);
        let button = form
            .body
            .split("<button")
            .find(|b| {
                b.contains("type=\"submit\"") && (b.contains("id=\"save\"") || b.contains("id=\"confirm-delete\""))
            })
            .unwrap_or_else(|| panic!("{path}: no submit button"));
        assert!(
            button.split('>').next().unwrap().contains("disabled"),
            "{path}: an active button for a read-only session"
        );
        assert!(form.body.contains("Read-only session"), "{path}");
    }
    for (path, fields) in &forms {
        let mut right = fields.clone();
        right.push(("csrf", &read_csrf));
        assert_eq!(
            post(addr, path, Some(&reader), &right, &[]).await.status,
            403,
            "{path} as a reader"
        );
    }
    assert_eq!(job_state(&admin, "probe").await, "enabled", "nothing changed");
    assert_eq!(admin.jobs(&JobFilter::default()).await.unwrap().items.len(), 1);
    assert!(
        admin.changes(&ChangeFilter::default()).await.unwrap().items.len() == 1,
        "only the creation"
    );

    // The API by session cookie needs the token in a header.
    let bare = http::call(addr, "POST", "/api/v1/jobs/probe/pause", &[("Cookie", &cookie)], b"").await;
    assert_eq!((bare.status, bare.error().0.as_str()), (403, "csrf"));
    let with = [("Cookie", cookie.as_str()), ("X-CSRF-Token", csrf.as_str())];
    assert_eq!(
        http::call(addr, "POST", "/api/v1/jobs/probe/pause", &with, b"")
            .await
            .status,
        200
    );
    // And the form with it passes.
    let resumed = post(
        addr,
        "/jobs/probe/resume",
        Some(&cookie),
        &[("csrf", &csrf), ("from", "detail")],
        &[],
    )
    .await;
    assert_eq!(resumed.status, 303);
    assert_sealed(resumed.header("location"), "/jobs/probe?notice=resumed&subject=probe");
    assert_eq!(job_state(&admin, "probe").await, "enabled");

    let logout = post(addr, "/logout", Some(&cookie), &[("csrf", &csrf)], &[]).await;
    assert_eq!(logout.status, 303);
    assert_eq!(
        page(addr, "/jobs", Some(&cookie)).await.status,
        303,
        "the session is over"
    );
}

async fn calendars_are_listed_added_replaced_and_deleted(db: &TestDb) {
    use quartz_core::calendar::CalendarDefinition;
    let admin = Admin::new(db.store().await, CLUSTER);
    let definition = |json: &str| serde_json::from_str::<CalendarDefinition>(json).unwrap();
    let holidays = format!(r#"{{"kind": "holiday", "days": ["2026-12-25"], "description": "{SCRIPT_NAME}"}}"#);
    admin
        .calendar_put("holidays", &definition(&holidays), None)
        .await
        .unwrap();
    let mut job = JobDefinition::new("daily", "log");
    job.triggers.push(
        TriggerDefinition::cron("0 0 9 * * ?", "UTC")
            .unwrap()
            .calendar("holidays"),
    );
    admin.job_add(&job).await.unwrap();
    let addr = server(admin.clone()).await;
    let cookie = login(addr, ADMIN).await;

    let list = page(addr, "/calendars", Some(&cookie)).await;
    assert_eq!(list.status, 200, "{}", list.body);
    assert!(list.body.contains("holiday: 2026-12-25"), "{}", list.body);
    assert!(!list.body.contains(SCRIPT_NAME), "escaped");
    assert!(list.body.contains(">Calendars</a>"), "in the navigation");
    let csrf = csrf_of(&page(addr, "/new-calendar", Some(&cookie)).await.body);

    // Refusals keep what was typed, beside the field, and store nothing.
    let add = |name: &'static str, json: &'static str| {
        let csrf = csrf.clone();
        let cookie = cookie.clone();
        async move {
            post(
                addr,
                "/new-calendar",
                Some(&cookie),
                &[("csrf", &csrf), ("name", name), ("definition", json)],
                &[],
            )
            .await
        }
    };
    for (name, json, field, says) in [
        ("weekends", "{not json", "definition", "not a calendar definition"),
        (
            "weekends",
            r#"{"kind": "daily", "range": "25:00-26:00"}"#,
            "definition",
            "range",
        ),
        (
            "weekends",
            r#"{"kind": "weekly", "days": ["sat"], "base": "nope"}"#,
            "definition",
            "nope",
        ),
        ("holidays", r#"{"kind": "weekly", "days": ["sat"]}"#, "name", "exists"),
        ("", r#"{"kind": "weekly", "days": ["sat"]}"#, "name", "needs a name"),
    ] {
        let refused = add(name, json).await;
        assert_eq!(refused.status, 400, "{json}: {}", refused.body);
        assert!(
            refused.body.contains(&format!("data-field=\"{field}\"")),
            "{json}: {}",
            refused.body
        );
        assert!(refused.body.contains(says), "{json}: {}", refused.body);
    }
    assert_eq!(admin.calendars().await.unwrap().len(), 1, "nothing stored");

    let created = add(
        "weekends",
        r#"{"kind": "weekly", "days": ["sat", "sun"], "base": "holidays"}"#,
    )
    .await;
    assert_eq!(created.status, 303, "{}", created.body);
    assert_sealed(
        created.header("location"),
        "/calendars/weekends?notice=created&subject=weekends",
    );
    let shown = page(addr, created.header("location").unwrap(), Some(&cookie)).await;
    assert!(shown.body.contains("weekly: sat, sun"), "{}", shown.body);
    assert!(shown.body.contains("Created weekends."), "the notice");
    // A notice a link makes up is not shown.
    let forged = page(
        addr,
        "/calendars/weekends?notice=deleted&subject=every%20job",
        Some(&cookie),
    )
    .await;
    assert!(!forged.body.contains("Deleted every job"), "{}", forged.body);
    let tampered = created
        .header("location")
        .unwrap()
        .replace("subject=weekends", "subject=everything");
    assert!(
        !page(addr, &tampered, Some(&cookie))
            .await
            .body
            .contains("Created everything")
    );
    assert!(shown.body.contains("href=\"/calendars/holidays\""), "its base, linked");

    let replace = |json: &'static str| {
        let csrf = csrf.clone();
        let cookie = cookie.clone();
        async move {
            post(
                addr,
                "/calendars/weekends",
                Some(&cookie),
                &[("csrf", &csrf), ("definition", json)],
                &[],
            )
            .await
        }
    };
    let saved = replace(r#"{"kind": "weekly", "days": ["sun"], "base": "holidays"}"#).await;
    assert_sealed(
        saved.header("location"),
        "/calendars/weekends?notice=saved&subject=weekends",
    );
    assert_eq!(admin.calendar("weekends").await.unwrap().definition.days, ["sun"]);
    let refused = replace(r#"{"kind": "weekly", "days": ["someday"]}"#).await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.body.contains("someday"),
        "what was typed is kept: {}",
        refused.body
    );
    assert_eq!(
        admin.calendar("weekends").await.unwrap().definition.days,
        ["sun"],
        "unchanged"
    );

    // The read-only role sees it and changes nothing.
    let reader = login(addr, READ).await;
    let read = page(addr, "/calendars/weekends", Some(&reader)).await;
    assert_eq!(read.status, 200);
    assert!(!read.body.contains("Replace"), "{}", read.body);
    let reader_csrf = csrf_of(&read.body);
    let denied = post(
        addr,
        "/calendars/weekends/delete",
        Some(&reader),
        &[("csrf", &reader_csrf)],
        &[],
    )
    .await;
    assert_eq!(denied.status, 403);

    // A calendar in use is not deleted; the refusal names its users.
    let in_use = post(
        addr,
        "/calendars/holidays/delete",
        Some(&cookie),
        &[("csrf", &csrf)],
        &[],
    )
    .await;
    assert_eq!(in_use.status, 409, "{}", in_use.body);
    assert!(in_use.body.contains("weekends"), "{}", in_use.body);
    let deleted = post(
        addr,
        "/calendars/weekends/delete",
        Some(&cookie),
        &[("csrf", &csrf)],
        &[],
    )
    .await;
    assert_sealed(deleted.header("location"), "/calendars?notice=deleted&subject=weekends");
    assert!(admin.calendar("weekends").await.is_err());
    assert_eq!(page(addr, "/calendars/weekends", Some(&cookie)).await.status, 404);
}

/// The job form's cron preview, as the server renders it, passes over the
/// times the form's calendar excludes, on the edit page and on a refused
/// form alike; a calendar that does not exist is said in the preview.
async fn the_forms_preview_passes_over_its_calendars_exclusions(db: &TestDb) {
    use chrono::{DateTime, Datelike, Weekday};
    use quartz_core::calendar::CalendarDefinition;
    let admin = Admin::new(db.store().await, CLUSTER);
    let mondays: CalendarDefinition =
        serde_json::from_str(r#"{"kind": "weekly", "days": ["tue", "wed", "thu", "fri", "sat", "sun"]}"#).unwrap();
    admin.calendar_put("mondays", &mondays, None).await.unwrap();
    let mut job = JobDefinition::new("weekly", "log");
    job.triggers.push(
        TriggerDefinition::cron("0 0 9 * * ?", "UTC")
            .unwrap()
            .calendar("mondays"),
    );
    admin.job_add(&job).await.unwrap();
    let addr = server(admin.clone()).await;
    let cookie = login(addr, ADMIN).await;
    let days = |body: &str| -> Vec<Weekday> {
        let list = body
            .split("<ol id=\"cron-preview\">")
            .nth(1)
            .unwrap()
            .split("</ol>")
            .next()
            .unwrap();
        list.split("<li>")
            .skip(1)
            .map(|item| {
                let at = item.split("</li>").next().unwrap();
                DateTime::parse_from_rfc3339(at)
                    .unwrap_or_else(|e| panic!("{at}: {e}"))
                    .weekday()
            })
            .collect()
    };

    let edit = page(addr, "/jobs/weekly/edit", Some(&cookie)).await;
    assert_eq!(edit.status, 200, "{}", edit.body);
    assert_eq!(days(&edit.body), [Weekday::Mon; 5], "{}", edit.body);

    // A refused form keeps its preview, with the calendar typed.
    let csrf = csrf_of(&page(addr, "/new", Some(&cookie)).await.body);
    let form = |calendar: &'static str| {
        let (csrf, cookie) = (csrf.clone(), cookie.clone());
        async move {
            let fields = [
                ("csrf", csrf.as_str()),
                ("name", ""),
                ("handler", "log"),
                ("kind", "cron"),
                ("cron", "0 0 9 * * ?"),
                ("time_zone", "UTC"),
                ("calendar", calendar),
            ];
            post(addr, "/new", Some(&cookie), &fields, &[]).await
        }
    };
    let refused = form("mondays").await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(days(&refused.body), [Weekday::Mon; 5], "{}", refused.body);
    let unknown = form("someday").await;
    assert_eq!(unknown.status, 400, "{}", unknown.body);
    assert!(days(&unknown.body).is_empty(), "{}", unknown.body);
    let error = unknown.body.split("id=\"cron-preview-error\"").nth(1).unwrap();
    assert!(
        error.split("</p>").next().unwrap().contains("someday"),
        "{}",
        unknown.body
    );
}

/// A payload that does not fit the schema its handler's node published is
/// refused by the job form beside its payload field and by the enqueue
/// form, naming the field inside the payload; the job's page shows the
/// schema.
async fn a_payload_that_does_not_fit_its_schema_is_refused_by_the_forms(db: &TestDb) {
    let store = db.store().await;
    let admin = Admin::new(store.clone(), CLUSTER);
    let addr = server(admin.clone()).await;
    let node = quartz_core::engine::SchedulerBuilder::new(CLUSTER)
        .handler("mail", |_| Ok(()))
        .payload_schema(
            "mail",
            serde_json::json!({"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]}),
        )
        .start(store)
        .await
        .unwrap();
    let cookie = login(addr, ADMIN).await;
    let csrf = csrf_of(&page(addr, "/new", Some(&cookie)).await.body);
    let mut fields = vec![
        ("csrf", csrf.as_str()),
        ("name", "mail-ops"),
        ("handler", "mail"),
        ("payload", "{\"to\": 5}"),
        ("kind", "fixed_rate"),
        ("interval_ms", "3600000"),
        ("misfire", "smart"),
        ("max_attempts", "1"),
        ("backoff_ms", "1000"),
    ];
    let refused = post(addr, "/new", Some(&cookie), &fields, &[]).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("data-field=\"payload\""), "{}", refused.body);
    assert!(refused.body.contains("payload.to"), "{}", refused.body);
    assert!(admin.job("mail-ops").await.is_err(), "nothing stored");
    fields[3] = ("payload", "{\"to\": \"ops\"}");
    let created = post(addr, "/new", Some(&cookie), &fields, &[]).await;
    assert_eq!(created.status, 303, "{}", created.body);
    let shown = page(addr, "/jobs/mail-ops", Some(&cookie)).await;
    assert!(
        shown.body.contains("published by node") && shown.body.contains("&quot;required&quot;"),
        "{}",
        shown.body
    );
    let work = [("csrf", csrf.as_str()), ("payload", "{}")];
    let refused = post(addr, "/jobs/mail-ops/enqueue", Some(&cookie), &work, &[]).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("payload.to"), "{}", refused.body);
    node.shutdown().await;
}

backend_tests!(
    a_payload_that_does_not_fit_its_schema_is_refused_by_the_forms,
    a_triggers_times_show_in_its_zone_with_utc_beside,
    the_history_pages_back_and_forth_and_retries_a_failed_fire,
    deleted_jobs_and_calendars_are_linked_where_they_are,
    an_edit_keeps_every_trigger_field_it_did_not_change,
    two_editors_of_one_job_are_told_not_overwritten,
    calendars_are_listed_added_replaced_and_deleted,
    the_forms_preview_passes_over_its_calendars_exclusions,
    pages_render_with_every_name_escaped,
    the_form_creates_edits_and_refuses_bad_input,
    every_form_needs_the_sessions_csrf_token_and_the_admin_role,
);

/// With no token, loopback callers get a session without logging in, a
/// page under a rebound host name is refused, and a console nested under a
/// prefix links within it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_loopback_gets_a_session_and_a_rebound_host_is_refused() {
    quartz_testkit::run(Kind::SqliteMemory, |db| Box::pin(loopback(db))).await;
}

async fn loopback(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    let mut job = JobDefinition::new("probe", "log");
    job.triggers
        .push(TriggerDefinition::cron("0 0 6 * * ?", "UTC").unwrap());
    admin.job_add(&job).await.unwrap();

    let addr = http::serve(
        axum::Router::new().merge(
            Web::new(admin.clone())
                .access(Access::loopback_only())
                .mounted_at("/quartz"),
        ),
    )
    .await;

    let first = page(addr, "/quartz/jobs", None).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let cookie = first.header("set-cookie").unwrap().to_owned();
    assert!(cookie.contains("Path=/quartz"), "{cookie}");
    assert!(
        first.body.contains("href=\"/quartz/jobs/probe\""),
        "links stay under the prefix"
    );
    assert!(!first.body.contains("Log out"));
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let csrf = csrf_of(&first.body);

    let overview = page(addr, "/quartz", Some(&cookie)).await;
    assert_eq!(overview.status, 200, "{}", overview.body);
    // The mount point with a trailing slash leads home too.
    let slash = page(addr, "/quartz/", Some(&cookie)).await;
    assert_eq!((slash.status, slash.header("location")), (308, Some("/quartz")));
    assert!(overview.body.contains("href=\"/quartz/assets/console.css\""));
    assert!(
        overview.body.contains("<a class=\"brand\" href=\"/quartz\">"),
        "home is the mount point itself"
    );
    let rebound = http::call(addr, "GET", "/quartz/jobs", &[("Host", "evil.example")], b"").await;
    assert_eq!(rebound.status, 403);
    let paused = post(addr, "/quartz/jobs/probe/pause", Some(&cookie), &[("csrf", &csrf)], &[]).await;
    assert_eq!(paused.status, 303, "{}", paused.body);
    assert_sealed(paused.header("location"), "/quartz/jobs?notice=paused&subject=probe");
    assert_eq!(job_state(&admin, "probe").await, "paused");
    let change = &admin.changes(&ChangeFilter::default()).await.unwrap().items[0];
    assert_eq!(
        (change.actor.as_str(), change.action.as_str()),
        ("http:local", "job.pause")
    );
    // Pause everything from the overview's button, and resume.
    assert!(overview.body.contains("Pause everything"), "{}", overview.body);
    let all = post(addr, "/quartz/scheduler/pause", Some(&cookie), &[("csrf", &csrf)], &[]).await;
    assert_eq!(all.status, 303, "{}", all.body);
    let location = all.header("location").unwrap().to_owned();
    assert!(location.starts_with("/quartz?notice=paused_all"), "{location}");
    let home = page(addr, &location, Some(&cookie)).await;
    assert!(home.body.contains("is on standby since"), "{}", home.body);
    assert!(home.body.contains("Paused everything"), "the notice: {}", home.body);
    assert!(home.body.contains("Resume the scheduler"));
    assert!(admin.standby().await.unwrap().on_standby);
    let change = &admin.changes(&ChangeFilter::default()).await.unwrap().items[0];
    assert_eq!(
        (change.actor.as_str(), change.action.as_str()),
        ("http:local", "scheduler.pause")
    );
    let back = post(addr, "/quartz/scheduler/resume", Some(&cookie), &[("csrf", &csrf)], &[]).await;
    assert_eq!(back.status, 303, "{}", back.body);
    assert!(!admin.standby().await.unwrap().on_standby);
    // A form from a page that never had the session is refused.
    let forged = post(addr, "/quartz/jobs/probe/resume", None, &[("csrf", "")], &[]).await;
    assert_eq!(forged.status, 403);
    assert_eq!(job_state(&admin, "probe").await, "paused");
}

/// What a browser posts for the page's first form: every input's value,
/// every checked box, each select's chosen option and each textarea.
fn posted_by_browser(body: &str) -> Vec<(String, String)> {
    fn attr(tag: &str, name: &str) -> Option<String> {
        let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        Some(unescape(tag[at..].split('"').next()?))
    }
    fn unescape(s: &str) -> String {
        s.replace("&quot;", "\"")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&#39;", "'")
            .replace("&amp;", "&")
    }
    let form = &body[body.find("<form class=\"job-form\"").expect("the job form")..];
    let form = &form[..form.find("</form>").unwrap()];
    let mut fields = Vec::new();
    for tag in form.split('<').skip(1) {
        let tag = tag.split('>').next().unwrap();
        if tag.starts_with("input ") {
            let Some(name) = attr(tag, "name") else { continue };
            if attr(tag, "type").as_deref() == Some("checkbox") {
                if tag.contains(" checked") {
                    fields.push((name, "on".to_owned()));
                }
            } else {
                fields.push((name, attr(tag, "value").unwrap_or_default()));
            }
        }
    }
    for select in form.split("<select ").skip(1) {
        let name = attr(select.split('>').next().unwrap(), "name").unwrap();
        let options = &select[..select.find("</select>").unwrap()];
        let chosen = options
            .split("<option ")
            .skip(1)
            .find(|o| o.split('>').next().unwrap().contains(" selected"))
            .or_else(|| options.split("<option ").nth(1))
            .and_then(|o| attr(&format!(" {}", o.split('>').next().unwrap()), "value"))
            .unwrap_or_default();
        fields.push((name, chosen));
    }
    for area in form.split("<textarea ").skip(1) {
        let name = attr(area.split('>').next().unwrap(), "name").unwrap();
        let text = area.split_once('>').unwrap().1;
        fields.push((name, unescape(&text[..text.find("</textarea>").unwrap()])));
    }
    fields
}

/// An edit through the console's form changes only what was changed: a
/// trigger bounded to five fires from 2027, with a priority, a misfire
/// policy, a calendar, a DST choice and an overlap policy, of a job with a
/// concurrency limit, keeps all of them when its cron expression is edited, whether the browser posts every field the page
/// shows or a client posts only the field it changed.
async fn an_edit_keeps_every_trigger_field_it_did_not_change(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    admin
        .calendar_put(
            "holidays",
            &serde_json::from_value(serde_json::json!({"kind": "holiday", "days": ["2027-12-25"]})).unwrap(),
            None,
        )
        .await
        .unwrap();
    let limit = quartz_core::store::ConcurrencyLimit::new(3, "{handler}");
    let mut job = JobDefinition::new("bounded", "report").with_limit(limit.clone());
    let mut trigger = TriggerDefinition::cron("0 0 6 * * ?", "Europe/Paris").unwrap();
    trigger.start = Some(Timestamp::from_millis(1_798_761_600_000)); // 2027-01-01T00:00:00Z
    trigger.end = Some(Timestamp::from_millis(1_811_808_000_000)); // 2027-06-01T00:00:00Z
    trigger.repeat = Some(5);
    trigger.priority = 7;
    trigger.misfire = "do_nothing".parse().unwrap();
    trigger.calendar = Some("holidays".into());
    trigger.jitter = Some(std::time::Duration::from_secs(90));
    trigger.catch_up = Some(std::time::Duration::from_secs(3_600));
    trigger.overlap = Some(quartz_core::trigger::Overlap::BufferOne);
    let trigger = trigger.dst(DstChoice {
        skipped: SkippedTime::Quartz,
        repeated: RepeatedTime::Both,
    });
    job.triggers.push(trigger);
    admin.job_add(&job).await.unwrap();
    let addr = server(admin.clone()).await;
    let cookie = login(addr, ADMIN).await;

    let check = |view: &quartz_core::admin::JobView, cron: &str| {
        // As the API shows it.
        let t = serde_json::to_value(&view.triggers[0]).unwrap();
        assert_eq!(t["cron"], cron);
        assert_eq!(t["start"], 1_798_761_600_000_i64, "start kept: {t}");
        assert_eq!(t["end"], 1_811_808_000_000_i64, "end kept: {t}");
        assert_eq!(t["repeat"], 5, "repeat kept: {t}");
        assert_eq!(t["priority"], 7, "priority kept: {t}");
        assert_eq!(t["misfire"], "do_nothing");
        assert_eq!(t["calendar"], "holidays");
        assert_eq!(t["dst_repeated"], "both");
        assert_eq!(t["time_zone"], "Europe/Paris");
        assert_eq!(t["jitter_ms"], 90_000, "jitter kept: {t}");
        assert_eq!(t["catch_up_ms"], 3_600_000, "catch-up window kept: {t}");
        assert_eq!(t["overlap"], "buffer_one", "overlap policy kept: {t}");
        assert_eq!(view.spec.limit.as_ref(), Some(&limit), "concurrency limit kept");
    };

    // The browser: every field as the edit page shows it, the cron changed.
    let edit = page(addr, "/jobs/bounded/edit", Some(&cookie)).await;
    assert_eq!(edit.status, 200, "{}", edit.body);
    let mut fields = posted_by_browser(&edit.body);
    for (name, shown) in [
        ("start", "2027-01-01T00:00:00.000Z"),
        ("end", "2027-06-01T00:00:00.000Z"),
        ("repeat", "5"),
        ("priority", "7"),
        ("overlap", "buffer_one"),
        ("concurrency_limit", "3"),
        ("concurrency_key", "{handler}"),
    ] {
        assert!(
            fields.iter().any(|(n, v)| n == name && v == shown),
            "the form shows {name} = {shown}: {fields:?}"
        );
    }
    for (name, value) in &mut fields {
        if name == "cron" {
            *value = "0 30 6 * * ?".into();
        }
    }
    let borrowed: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let saved = post(addr, "/jobs/bounded/edit", Some(&cookie), &borrowed, &[]).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    check(&admin.job("bounded").await.unwrap(), "0 30 6 * * ?");

    // A client that posts only what it changes.
    let csrf = csrf_of(&edit.body);
    let saved = post(
        addr,
        "/jobs/bounded/edit",
        Some(&cookie),
        &[("csrf", &csrf), ("cron", "0 45 6 * * ?"), ("allow_concurrent", "on")],
        &[],
    )
    .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let view = admin.job("bounded").await.unwrap();
    check(&view, "0 45 6 * * ?");
    assert_eq!(view.spec.handler, "report", "the handler kept");
}

/// Sets a field of a posted form.
fn set(fields: &mut [(String, String)], name: &str, value: &str) {
    let field = fields
        .iter_mut()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("{name}"));
    field.1 = value.to_owned();
}

/// Two people edit one job: the second save is not written over the first
/// but answered with what changed meanwhile, its own change carried over
/// onto the job as it is now, and saving that keeps both; a delete
/// confirmed from a page shown before a change is refused; a calendar
/// replaced from a stale page is refused with its definition kept.
async fn two_editors_of_one_job_are_told_not_overwritten(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    let mut job = JobDefinition::new("shared", "report");
    job.spec.description = "as added".into();
    job.triggers
        .push(TriggerDefinition::cron("0 0 6 * * ?", "UTC").unwrap());
    admin.job_add(&job).await.unwrap();
    admin
        .calendar_put(
            "weekend",
            &serde_json::from_value(serde_json::json!({"kind": "weekly", "days": ["sat", "sun"]})).unwrap(),
            None,
        )
        .await
        .unwrap();
    let addr = server(admin.clone()).await;
    let alice = login(addr, ADMIN).await;
    let bob = login(addr, ADMIN).await;
    let alice_page = page(addr, "/jobs/shared/edit", Some(&alice)).await;
    let bob_page = page(addr, "/jobs/shared/edit", Some(&bob)).await;
    let delete_page = page(addr, "/jobs/shared/delete", Some(&bob)).await;
    assert_eq!(delete_page.status, 200, "{}", delete_page.body);

    let mut fields = posted_by_browser(&alice_page.body);
    set(&mut fields, "description", "Alice's");
    let borrowed: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let saved = post(addr, "/jobs/shared/edit", Some(&alice), &borrowed, &[]).await;
    assert_eq!(saved.status, 303, "{}", saved.body);

    let mut fields = posted_by_browser(&bob_page.body);
    set(&mut fields, "timeout_ms", "5000");
    let borrowed: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let refused = post(addr, "/jobs/shared/edit", Some(&bob), &borrowed, &[]).await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert!(refused.body.contains("Nothing was saved"), "{}", refused.body);
    let meanwhile = refused.body.split("class=\"meanwhile\"").nth(1).unwrap();
    let meanwhile = meanwhile.split("</ul>").next().unwrap();
    assert!(
        meanwhile.contains("data-field=\"description\"")
            && (meanwhile.contains("Alice&#39;s") || meanwhile.contains("Alice's")),
        "{meanwhile}"
    );
    assert!(
        !meanwhile.contains("timeout_ms"),
        "Bob's own change is not news: {meanwhile}"
    );
    let stored = admin.job("shared").await.unwrap();
    assert_eq!(
        (stored.spec.description.as_str(), stored.spec.timeout),
        ("Alice's", None)
    );

    // The form shown carries Bob's change onto Alice's; saving it keeps both.
    let fields = posted_by_browser(&refused.body);
    let value = |name: &str| fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    assert_eq!(value("description").as_deref(), Some("Alice's"));
    assert_eq!(value("timeout_ms").as_deref(), Some("5000"));
    assert_eq!(value("version"), Some(stored.version.to_string()));
    let borrowed: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let saved = post(addr, "/jobs/shared/edit", Some(&bob), &borrowed, &[]).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let stored = admin.job("shared").await.unwrap();
    assert_eq!(
        (stored.spec.description.as_str(), stored.spec.timeout),
        ("Alice's", Some(Duration::from_secs(5)))
    );

    // A delete confirmed on a page shown before those changes.
    let version = delete_page.body.split("name=\"version\" value=\"").nth(1).unwrap();
    let version = version.split('"').next().unwrap();
    let csrf = csrf_of(&delete_page.body);
    let refused = post(
        addr,
        "/jobs/shared/delete",
        Some(&bob),
        &[("csrf", &csrf), ("version", version)],
        &[],
    )
    .await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert!(refused.body.contains("changed since it was read"), "{}", refused.body);
    assert!(admin.job("shared").await.is_ok(), "not deleted");

    // A calendar replaced from a page shown before another replace.
    let shown = page(addr, "/calendars/weekend", Some(&bob)).await;
    admin
        .calendar_put(
            "weekend",
            &serde_json::from_value(serde_json::json!({"kind": "weekly", "days": ["sun"]})).unwrap(),
            None,
        )
        .await
        .unwrap();
    let version = shown.body.split("name=\"version\" value=\"").nth(1).unwrap();
    let version = version.split('"').next().unwrap();
    let csrf = csrf_of(&shown.body);
    let mine = r#"{"kind": "weekly", "days": ["mon"]}"#;
    let refused = post(
        addr,
        "/calendars/weekend",
        Some(&bob),
        &[("csrf", &csrf), ("version", version), ("definition", mine)],
        &[],
    )
    .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("while you edited, this calendar was replaced"),
        "{}",
        refused.body
    );
    assert!(
        refused.body.contains("&quot;mon&quot;") || refused.body.contains("\"mon\""),
        "kept as typed"
    );
    assert_eq!(admin.calendar("weekend").await.unwrap().definition.days, ["sun"]);
}

/// The history of a deleted job is linked by its id and filtered by the
/// name it had; a fire by hand says so; a calendar's change links to the
/// calendar, not to a job of its name.
async fn deleted_jobs_and_calendars_are_linked_where_they_are(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    let mut job = JobDefinition::new("gone", "report");
    job.triggers
        .push(TriggerDefinition::cron("0 0 6 * * ?", "UTC").unwrap());
    let added = admin.job_add(&job).await.unwrap();
    admin.job_trigger("gone").await.unwrap();
    admin.job_delete("gone", None).await.unwrap();
    admin
        .calendar_put(
            "holidays",
            &serde_json::from_value(serde_json::json!({"kind": "holiday", "days": ["2027-12-25"]})).unwrap(),
            None,
        )
        .await
        .unwrap();
    let addr = server(admin.clone()).await;
    let cookie = login(addr, READ).await;

    let history = page(addr, "/fires", Some(&cookie)).await;
    let link = format!("href=\"/fires?job_id={}\"", added.id);
    assert!(history.body.contains(&link), "{}", history.body);
    assert!(history.body.contains(&format!("deleted job #{}", added.id)));
    assert!(history.body.contains("by hand"), "{}", history.body);
    for path in [format!("/fires?job_id={}", added.id), "/fires?job=gone".to_owned()] {
        let filtered = page(addr, &path, Some(&cookie)).await;
        assert_eq!(filtered.status, 200, "{path}: {}", filtered.body);
        assert_eq!(
            filtered.body.matches("<tr data-state=").count(),
            1,
            "{path}: {}",
            filtered.body
        );
    }

    let changes = page(addr, "/changes", Some(&cookie)).await;
    assert!(
        changes.body.contains("href=\"/calendars/holidays\""),
        "{}",
        changes.body
    );
    assert!(!changes.body.contains("href=\"/jobs/holidays\""), "{}", changes.body);
    assert!(
        changes.body.contains(&link),
        "a job's change links its fires: {}",
        changes.body
    );
}

/// The history page: searched by error text and node, paged forward and
/// back, a failed fire retried from its row; a job's page shows its
/// success rate.
async fn the_history_pages_back_and_forth_and_retries_a_failed_fire(db: &TestDb) {
    let node = quartz_core::engine::SchedulerBuilder::new(CLUSTER)
        .settings(quartz_testkit::fast_settings())
        .handler("disk", |_| Err("Disk full on /var".into()))
        .start(db.store().await)
        .await
        .unwrap();
    let admin = node.admin();
    let mut job = JobDefinition::new("backup", "disk");
    job.triggers
        .push(TriggerDefinition::cron("0 0 0 1 1 ? 2099", "UTC").unwrap());
    admin.job_add(&job).await.unwrap();
    for _ in 0..105 {
        admin.job_trigger("backup").await.unwrap();
    }
    quartz_testkit::wait_for(std::time::Duration::from_secs(30), "105 failed fires", || async {
        let filter = quartz_core::admin::FireFilter {
            state: Some("failed".into()),
            limit: Some(500),
            ..Default::default()
        };
        let n = admin.fires(&filter).await.unwrap().items.len();
        if n >= 105 { Ok(()) } else { Err(format!("{n} so far")) }
    })
    .await;
    // No node from here: a retry stays pending.
    node.shutdown().await;
    let addr = server(admin.clone()).await;
    let cookie = login(addr, ADMIN).await;
    let first_row = |body: &str| {
        let row = body.split("<tr data-state=").nth(1).unwrap();
        row.split("<td>").nth(1).unwrap().split('<').next().unwrap().to_owned()
    };
    let href = |body: &str, class: &str| {
        let link = body.split(&format!("<a class=\"{class}\" href=\"")).nth(1)?;
        Some(link.split('"').next().unwrap().replace("&amp;", "&"))
    };

    let one = page(addr, "/fires?error=DISK%20full", Some(&cookie)).await;
    assert_eq!(one.status, 200, "{}", one.body);
    assert_eq!(one.body.matches("<tr data-state=").count(), 100);
    assert!(href(&one.body, "back").is_none(), "no page before the first");
    let two = page(addr, &href(&one.body, "next").unwrap(), Some(&cookie)).await;
    assert_eq!(two.body.matches("<tr data-state=").count(), 5, "{}", two.body);
    assert!(href(&two.body, "next").is_none());
    let back = page(addr, &href(&two.body, "back").unwrap(), Some(&cookie)).await;
    assert_eq!(first_row(&back.body), first_row(&one.body), "back to the first page");
    assert!(back.body.contains("error=DISK"), "the filter kept: {}", back.body);
    let elsewhere = page(addr, "/fires?node=elsewhere", Some(&cookie)).await;
    assert!(elsewhere.body.contains("No fires match."), "{}", elsewhere.body);

    // Retry the newest from its row.
    let id = first_row(&one.body);
    assert!(
        one.body.contains(&format!("action=\"/fires/{id}/retry\"")),
        "a Retry button"
    );
    let csrf = csrf_of(&one.body);
    let retried = post(
        addr,
        &format!("/fires/{id}/retry"),
        Some(&cookie),
        &[("csrf", &csrf)],
        &[],
    )
    .await;
    assert_eq!(retried.status, 303, "{}", retried.body);
    let notice = page(addr, retried.header("location").unwrap(), Some(&cookie)).await;
    assert!(
        notice.body.contains(&format!("Retried fire {id}: attempt 2")),
        "{}",
        notice.body
    );
    let again = post(
        addr,
        &format!("/fires/{id}/retry"),
        Some(&cookie),
        &[("csrf", &csrf)],
        &[],
    )
    .await;
    assert_eq!(again.status, 409, "{}", again.body);

    let job_page = page(addr, "/jobs/backup", Some(&cookie)).await;
    let stats = job_page.body.split("id=\"job-stats\"").nth(1).unwrap();
    assert!(stats.contains("0.0%</strong> succeeded"), "{stats}");
}

/// A trigger's times in its own zone, with the offset and UTC beside; the
/// API gives them as RFC 3339 with the offset too.
async fn a_triggers_times_show_in_its_zone_with_utc_beside(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    let mut job = JobDefinition::new("paris", "report");
    let mut trigger = TriggerDefinition::cron("0 0 6 * * ?", "Europe/Paris").unwrap();
    trigger.start = Some(Timestamp::from_millis(4_040_150_400_000)); // 2098-01-10T00:00:00Z
    job.triggers.push(trigger);
    let view = admin.job_add(&job).await.unwrap();
    assert_eq!(
        view.triggers[0].upcoming_local[0], "2098-01-10T06:00:00.000+01:00",
        "{:?}",
        view.triggers[0]
    );
    let addr = server(admin.clone()).await;
    let cookie = login(addr, READ).await;
    let shown = page(addr, "/jobs/paris", Some(&cookie)).await;
    let upcoming = shown.body.split("class=\"upcoming\"").nth(1).unwrap();
    let first = upcoming.split("</li>").next().unwrap();
    assert!(first.contains("2098-01-10 06:00:00.000"), "{first}");
    assert!(first.contains("+01:00") && first.contains("Europe/Paris"), "{first}");
    assert!(first.contains("05:00:00 UTC"), "{first}");
}
