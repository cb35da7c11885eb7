//! The HTTP API on every backend, over a real socket: jobs created, read,
//! changed, fired and deleted; bad input answered with a 4xx naming the
//! field and nothing stored lost; the OpenAPI document complete and
//! consistent.

#![allow(clippy::unwrap_used)]

use crate::http;

use quartz_core::admin::Admin;
use quartz_testkit::{TestDb, backend_tests};
use quartz_web::{Access, Web};
use serde_json::{Value, json};

const CLUSTER: &str = "web-cluster";
const ADMIN: &str = "admin-secret";
const READ: &str = "read-secret";

async fn server(db: &TestDb) -> std::net::SocketAddr {
    let admin = Admin::new(db.store().await, CLUSTER);
    let access = Access::tokens(Some(ADMIN.into()), Some(READ.into()));
    http::serve(Web::new(admin).access(access).router()).await
}

async fn jobs_are_created_read_changed_fired_and_deleted(db: &TestDb) {
    let addr = server(db).await;
    let def = json!({
        "name": "report", "handler": "log", "payload": {"to": "ops"}, "description": "<b>daily</b>",
        "triggers": [{"kind": "cron", "cron": "0 0 6 * * ?", "time_zone": "Europe/Paris"}]
    });
    let created = http::json(addr, "POST", "/api/v1/jobs", Some(ADMIN), &def).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let job = created.json();
    assert_eq!(job["payload"], json!({"to": "ops"}));
    assert_eq!(job["triggers"][0]["upcoming"].as_array().unwrap().len(), 5);

    let list = http::get(addr, "GET", "/api/v1/jobs?search=REP&limit=10", Some(READ)).await;
    assert_eq!(list.status, 200);
    assert_eq!(list.json()["items"][0]["name"], "report");
    assert_eq!(list.json()["next"], Value::Null);

    let patch = json!({"description": "weekly", "triggers": [{"kind": "fixed_rate", "interval_ms": 3600000}]});
    let edited = http::json(addr, "PATCH", "/api/v1/jobs/report", Some(ADMIN), &patch).await;
    assert_eq!(edited.status, 200, "{}", edited.body);
    assert_eq!(edited.json()["triggers"][0]["kind"], "fixed_rate");
    assert_eq!(edited.json()["description"], "weekly");

    // A backfill: previewed by anyone, queued by a writer, bad ranges refused.
    let backfill = |body: Value, token| async move {
        http::json(addr, "POST", "/api/v1/jobs/report/backfill", Some(token), &body).await
    };
    let preview = backfill(json!({"from": 0, "preview": true}), READ).await;
    assert_eq!(preview.status, 200, "{}", preview.body);
    assert_eq!(preview.json()["preview"], true);
    assert_eq!(backfill(json!({"from": 0}), READ).await.status, 403);
    let queued = backfill(json!({"from": 0, "rate": 5}), ADMIN).await;
    assert_eq!(queued.status, 202, "{}", queued.body);
    assert_eq!(
        queued.json()["queued"],
        0,
        "a trigger that starts now has no past times"
    );
    for (body, field) in [
        (json!({"from": 0, "to": 4_000_000_000_000_i64}), "to"),
        (json!({"from": 0, "rate": 0}), "rate"),
        (json!({"to": 0}), "from"),
    ] {
        let refused = backfill(body, ADMIN).await;
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert_eq!(refused.error().1.as_deref(), Some(field), "{}", refused.body);
    }
    let paused = http::get(addr, "POST", "/api/v1/jobs/report/pause", Some(ADMIN)).await;
    assert_eq!((paused.status, paused.json()["state"].clone()), (200, json!("paused")));
    let resumed = http::get(addr, "POST", "/api/v1/jobs/report/resume", Some(ADMIN)).await;
    assert_eq!(resumed.json()["state"], "enabled");
    let fired = http::get(addr, "POST", "/api/v1/jobs/report/trigger", Some(ADMIN)).await;
    assert_eq!(fired.status, 202);
    let fired = fired.json();
    assert!(fired["fire_time"].as_i64().unwrap() > 0);
    assert_eq!(fired["paused"], false);
    assert!(
        fired["note"].as_str().unwrap().contains("schedule is unchanged"),
        "{fired}"
    );

    // A pending fire in the ledger, no trigger added.
    let one = http::get(addr, "GET", "/api/v1/jobs/report", Some(READ)).await;
    assert_eq!(
        one.json()["triggers"].as_array().unwrap().len(),
        1,
        "no one-off trigger"
    );
    let fires = http::get(addr, "GET", "/api/v1/fires?job=report", Some(READ))
        .await
        .json();
    let pending = &fires["items"][0];
    assert_eq!(
        (&pending["id"], &pending["state"], &pending["by_hand"]),
        (&fired["fire_id"], &json!("pending"), &json!(true)),
        "{fires}"
    );

    // Work enqueued: its own payload, unique by a key (a second: 409
    // naming the holder); bad requests name their field; readers cannot.
    let enqueue = |body: Value, token| async move {
        http::json(addr, "POST", "/api/v1/jobs/report/enqueue", Some(token), &body).await
    };
    let work = json!({"payload": {"to": "ada"}, "after_ms": 60000, "unique_key": "ada"});
    let queued = enqueue(work.clone(), ADMIN).await;
    assert_eq!(queued.status, 202, "{}", queued.body);
    let queued = queued.json();
    assert_eq!(queued["outcome"], "queued", "{queued}");
    let again = enqueue(work.clone(), ADMIN).await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert_eq!(
        (again.json()["outcome"].clone(), again.json()["work_id"].clone()),
        (json!("duplicate"), queued["work_id"].clone())
    );
    assert_eq!(enqueue(work, READ).await.status, 403);
    for (body, field) in [
        (json!({"at": 0, "after_ms": 1}), "at"),
        (json!({"unique_for_ms": 5}), "unique_for_ms"),
        (json!({"unique_key": ""}), "unique_key"),
    ] {
        let refused = enqueue(body, ADMIN).await;
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert_eq!(refused.error().1.as_deref(), Some(field), "{}", refused.body);
    }
    let missing = http::json(addr, "POST", "/api/v1/jobs/nobody/enqueue", Some(ADMIN), &json!({})).await;
    assert_eq!(missing.status, 404, "{}", missing.body);
    let fires = http::get(addr, "GET", "/api/v1/fires?job=report", Some(READ))
        .await
        .json();
    assert_eq!(
        fires["items"][0]["id"], queued["fire_id"],
        "pending in the ledger: {fires}"
    );

    // A name with a slash and spaces reaches its job through percent-encoding.
    let odd =
        json!({"name": "a/b c", "handler": "log", "triggers": [{"kind": "once", "start": "2100-01-01T00:00:00Z"}]});
    assert_eq!(
        http::json(addr, "POST", "/api/v1/jobs", Some(ADMIN), &odd).await.status,
        201
    );
    let odd = http::get(addr, "GET", "/api/v1/jobs/a%2Fb%20c", Some(READ)).await;
    assert_eq!(odd.status, 200, "{}", odd.body);
    assert_eq!(odd.json()["triggers"][0]["start"], 4_102_444_800_000_i64);

    let deleted = http::get(addr, "DELETE", "/api/v1/jobs/report", Some(ADMIN)).await;
    assert_eq!(deleted.status, 204);
    let gone = http::get(addr, "GET", "/api/v1/jobs/report", Some(READ)).await;
    assert_eq!(gone.status, 404);
    assert_eq!(gone.error().0, "not_found");

    let changes = http::get(addr, "GET", "/api/v1/changes?job=report", Some(READ))
        .await
        .json();
    let seen: Vec<(&str, &str)> = changes["items"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .map(|c| (c["actor"].as_str().unwrap(), c["action"].as_str().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            ("http:admin", "job.create"),
            ("http:admin", "job.edit"),
            ("http:admin", "job.backfill"),
            ("http:admin", "job.pause"),
            ("http:admin", "job.resume"),
            ("http:admin", "job.trigger"),
            ("http:admin", "job.delete"),
        ]
    );
    let nodes = http::get(addr, "GET", "/api/v1/nodes", Some(READ)).await;
    assert_eq!((nodes.status, nodes.json()), (200, json!([])));
    let preview = http::get(
        addr,
        "GET",
        "/api/v1/cron/preview?cron=0%200%2012%20*%20*%20%3F&time_zone=UTC&after=0&count=2",
        Some(READ),
    )
    .await;
    assert_eq!(preview.json()["fire_times"], json!([43_200_000, 129_600_000]));
    // 01:30 on New York's autumn day 2026, at both occurrences (EDT, EST).
    let both = http::get(
        addr,
        "GET",
        "/api/v1/cron/preview?cron=0%2030%201%20*%20*%20%3F&time_zone=America/New_York&after=1793491200000&count=2&dst_repeated=both",
        Some(READ),
    )
    .await;
    assert_eq!(
        both.json()["fire_times_utc"],
        json!(["2026-11-01T05:30:00.000Z", "2026-11-01T06:30:00.000Z"]),
        "{}",
        both.body
    );
    let audit = http::get(addr, "GET", "/api/v1/audit", Some(READ)).await;
    assert_eq!(audit.status, 200, "{}", audit.body);
    assert_eq!(audit.json()["violations"], json!([]));
    let overview = http::get(addr, "GET", "/api/v1/overview", Some(READ)).await;
    assert_eq!(overview.json()["jobs"], 1);
    let health = http::get(addr, "GET", "/healthz", None).await;
    assert_eq!((health.status, health.json()["status"].clone()), (200, json!("ok")));
}

async fn bad_input_gets_a_4xx_naming_the_field(db: &TestDb) {
    let addr = server(db).await;
    let good = json!({"name": "keep", "handler": "log", "triggers": [{"kind": "fixed_rate", "interval_ms": 60000}]});
    assert_eq!(
        http::json(addr, "POST", "/api/v1/jobs", Some(ADMIN), &good)
            .await
            .status,
        201
    );

    let refused = |body: Value| async move {
        let a = http::json(addr, "POST", "/api/v1/jobs", Some(ADMIN), &body).await;
        (a.status, a.error())
    };
    let invalid = |field: &str| (400, ("invalid".to_owned(), Some(field.to_owned())));

    // What the framework itself refuses is answered in the same JSON shape.
    let raw = |method: &'static str, path: &'static str, content_type: &'static str, body: &'static str| async move {
        let auth = format!("Bearer {ADMIN}");
        http::call(
            addr,
            method,
            path,
            &[("Authorization", &auth), ("Content-Type", content_type)],
            body.as_bytes(),
        )
        .await
    };
    let trailing = raw(
        "POST",
        "/api/v1/jobs",
        "application/json",
        r#"{"name": "t", "handler": "log"} garbage"#,
    )
    .await;
    assert_eq!(trailing.status, 400, "trailing garbage: {}", trailing.body);
    assert_eq!(trailing.error().0, "invalid");
    let two = raw(
        "POST",
        "/api/v1/jobs",
        "application/json",
        r#"{"name": "t", "handler": "log"}{}"#,
    )
    .await;
    assert_eq!(two.status, 400, "two values: {}", two.body);
    let suffixed = raw(
        "POST",
        "/api/v1/jobs",
        "application/jsonfoo",
        r#"{"name": "t", "handler": "log"}"#,
    )
    .await;
    assert_eq!(suffixed.status, 415, "{}", suffixed.body);
    let charset = raw(
        "POST",
        "/api/v1/jobs",
        "Application/JSON; charset=utf-8",
        r#"{"name": "t", "handler": "log", "max_attempts": -1} "#,
    )
    .await;
    assert_eq!(
        charset.error(),
        ("invalid".to_owned(), Some("max_attempts".to_owned())),
        "read as JSON: {}",
        charset.body
    );
    let wrong_method = raw("PUT", "/api/v1/jobs", "application/json", "{}").await;
    assert_eq!(wrong_method.status, 405);
    assert_eq!(wrong_method.error().0, "method_not_allowed", "{}", wrong_method.body);
    assert!(wrong_method.header("allow").is_some());
    let bad_utf8 = raw("GET", "/api/v1/jobs/%FF%FE", "application/json", "").await;
    assert_eq!(bad_utf8.status, 400, "{}", bad_utf8.body);
    assert!(
        bad_utf8.header("content-type").unwrap().starts_with("application/json"),
        "{:?}",
        bad_utf8.headers
    );
    assert_eq!(bad_utf8.error().0, "invalid");
    let cron = json!({"name": "x", "handler": "log", "triggers": [{"kind": "cron", "cron": "0 0 25 * * ?"}]});
    assert_eq!(refused(cron).await, invalid("triggers[0].cron"));
    assert_eq!(refused(json!({"handler": "log"})).await, invalid("name"));
    assert_eq!(
        refused(json!({"name": "x", "handler": "log", "every": 5})).await,
        invalid("every")
    );
    assert_eq!(
        refused(json!({"name": "x", "handler": "log", "triggers": [{"kind": "hourly"}]})).await,
        invalid("triggers[0].kind")
    );
    assert_eq!(
        refused(json!({"name": "x", "handler": "log", "max_attempts": -1, "triggers": []})).await,
        invalid("max_attempts")
    );
    let start = json!({"name": "x", "handler": "log", "triggers": [{"kind": "once", "start": "tomorrow"}]});
    assert_eq!(refused(start).await, invalid("triggers[0].start"));
    assert_eq!(
        refused(json!({"name": "", "handler": "log", "triggers": []})).await,
        invalid("name")
    );
    // Dot segments: no URL can name them (`/jobs/..` is `/`).
    for dots in [".", ".."] {
        assert_eq!(
            refused(json!({"name": dots, "handler": "log", "triggers": []})).await,
            invalid("name"),
            "{dots:?}"
        );
        let renamed = http::json(addr, "PATCH", "/api/v1/jobs/keep", Some(ADMIN), &json!({"name": dots})).await;
        assert_eq!(
            renamed.error(),
            ("invalid".to_owned(), Some("name".to_owned())),
            "{dots:?}"
        );
        let calendar = http::json(
            addr,
            "PUT",
            &format!("/api/v1/calendars/{}", dots.replace('.', "%2E")),
            Some(ADMIN),
            &json!({"kind": "weekly", "days": ["sat"]}),
        )
        .await;
        assert_eq!(calendar.status, 400, "{dots:?}: {}", calendar.body);
    }
    let dotted = json!({"name": "a..b", "handler": "log", "triggers": [{"kind": "fixed_rate", "interval_ms": 60000}]});
    let dotted = http::json(addr, "POST", "/api/v1/jobs", Some(ADMIN), &dotted).await;
    assert_eq!(dotted.status, 201, "dots inside a name are fine: {}", dotted.body);
    let page = http::get(addr, "GET", "/api/v1/jobs/a..b", Some(ADMIN)).await;
    assert_eq!(page.status, 200, "and reachable: {}", page.body);
    assert_eq!(
        http::get(addr, "DELETE", "/api/v1/jobs/a..b", Some(ADMIN)).await.status,
        204
    );
    assert_eq!(refused(good.clone()).await.0, 409);

    let malformed = http::call(
        addr,
        "POST",
        "/api/v1/jobs",
        &[
            ("Content-Type", "application/json"),
            ("Authorization", &format!("Bearer {ADMIN}")),
        ],
        b"{\"name\": ",
    )
    .await;
    assert_eq!((malformed.status, malformed.error().0), (400, "invalid".to_owned()));
    let text = http::call(
        addr,
        "POST",
        "/api/v1/jobs",
        &[
            ("Content-Type", "text/plain"),
            ("Authorization", &format!("Bearer {ADMIN}")),
        ],
        b"name=x",
    )
    .await;
    assert_eq!(
        (text.status, text.error().0),
        (415, "unsupported_media_type".to_owned())
    );
    let huge = json!({"name": "x", "handler": "log", "payload": "x".repeat(3 << 20)});
    let huge = http::json(addr, "POST", "/api/v1/jobs", Some(ADMIN), &huge).await;
    assert_eq!((huge.status, huge.error().0), (413, "too_large".to_owned()));
    let big_payload = json!({"name": "x", "handler": "log", "payload": "x".repeat(1 << 20),
        "triggers": [{"kind": "fixed_rate", "interval_ms": 1000}]});
    assert_eq!(refused(big_payload).await, invalid("payload"));

    for (path, field) in [
        ("/api/v1/jobs?limit=abc", "limit"),
        ("/api/v1/jobs?limit=0", "limit"),
        ("/api/v1/jobs?state=sleeping", "state"),
        ("/api/v1/fires?before=yesterday", "before"),
        ("/api/v1/fires?since=noon", "since"),
        ("/api/v1/fires?state=sleeping", "state"),
        ("/api/v1/cron/preview?cron=nonsense", "cron"),
        (
            "/api/v1/cron/preview?cron=0%20*%20*%20*%20*%20%3F&time_zone=Mars",
            "time_zone",
        ),
        ("/api/v1/cron/preview?time_zone=UTC", "cron"),
        (
            "/api/v1/cron/preview?cron=0%20*%20*%20*%20*%20%3F&dst_skipped=later",
            "dst_skipped",
        ),
        ("/api/v1/overview?window_ms=1", "window_ms"),
    ] {
        let a = http::get(addr, "GET", path, Some(READ)).await;
        assert_eq!((a.status, a.error()), invalid(field), "{path}: {}", a.body);
    }
    let patch = http::json(
        addr,
        "PATCH",
        "/api/v1/jobs/keep",
        Some(ADMIN),
        &json!({"timeout_ms": -5}),
    )
    .await;
    assert_eq!((patch.status, patch.error()), invalid("timeout_ms"));
    let unknown = http::get(addr, "POST", "/api/v1/jobs/nobody/pause", Some(ADMIN)).await;
    assert_eq!(unknown.status, 404);
    let route = http::get(addr, "GET", "/api/v1/nothing-here", Some(READ)).await;
    assert_eq!((route.status, route.error().0), (404, "not_found".to_owned()));

    let jobs = http::get(addr, "GET", "/api/v1/jobs", Some(READ)).await.json();
    let names: Vec<&str> = jobs["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["keep"], "nothing stored but the good job, which is unchanged");
    assert_eq!(jobs["items"][0]["timeout_ms"], Value::Null);
}

async fn calendars_are_put_read_used_and_deleted(db: &TestDb) {
    let addr = server(db).await;
    let holidays = json!({"kind": "holiday", "days": ["2026-12-25"], "time_zone": "Europe/Paris"});
    let put = http::json(addr, "PUT", "/api/v1/calendars/holidays", Some(ADMIN), &holidays).await;
    assert_eq!(put.status, 200, "{}", put.body);
    assert_eq!(put.json()["definition"]["days"], json!(["2026-12-25"]));
    let weekends = json!({"kind": "weekly", "days": ["sat", "sun"], "base": "holidays", "time_zone": "Europe/Paris"});
    let put = http::json(addr, "PUT", "/api/v1/calendars/workdays", Some(ADMIN), &weekends).await;
    assert_eq!(put.status, 200, "{}", put.body);
    let list = http::get(addr, "GET", "/api/v1/calendars", Some(READ)).await.json();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["holidays", "workdays"]);

    // 2026-12-24 is a Thursday; the 25th a holiday, the 26th and 27th a weekend.
    let preview = http::get(
        addr,
        "GET",
        "/api/v1/cron/preview?cron=0%200%209%20*%20*%20%3F&time_zone=Europe/Paris&after=1798070400000&count=2&calendar=workdays",
        Some(READ),
    )
    .await;
    assert_eq!(preview.status, 200, "{}", preview.body);
    assert_eq!(
        preview.json()["fire_times_utc"],
        json!(["2026-12-24T08:00:00.000Z", "2026-12-28T08:00:00.000Z"])
    );

    // A calendar that excludes every second up to 2028: a read-only caller's
    // preview answers within its bounds, saying how far it looked.
    let closed = json!({"kind": "cron", "cron": "* * * * * ? 2026-2027"});
    let put = http::json(addr, "PUT", "/api/v1/calendars/closed", Some(ADMIN), &closed).await;
    assert_eq!(put.status, 200, "{}", put.body);
    let preview = http::get(
        addr,
        "GET",
        "/api/v1/cron/preview?cron=*%20*%20*%20*%20*%20%3F&after=1798070400000&count=2&calendar=closed",
        Some(READ),
    )
    .await;
    assert_eq!(preview.status, 200, "{}", preview.body);
    let answer = preview.json();
    assert_eq!(answer["fire_times"], json!([]), "{answer}");
    assert!(
        answer["searched_until"].as_i64().unwrap() > 1_798_070_400_000,
        "{answer}"
    );
    assert!(answer["note"].as_str().unwrap().contains("search stopped"), "{answer}");
    assert_eq!(
        http::get(addr, "DELETE", "/api/v1/calendars/closed", Some(ADMIN))
            .await
            .status,
        204
    );

    let job = json!({"name": "report", "handler": "log",
        "triggers": [{"kind": "cron", "cron": "0 0 9 * * ?", "time_zone": "Europe/Paris", "calendar": "workdays"}]});
    let created = http::json(addr, "POST", "/api/v1/jobs", Some(ADMIN), &job).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.json()["triggers"][0]["calendar"], "workdays");

    let in_use = http::get(addr, "DELETE", "/api/v1/calendars/holidays", Some(ADMIN)).await;
    assert_eq!(in_use.status, 409, "{}", in_use.body);
    assert!(in_use.body.contains("calendar workdays"), "{}", in_use.body);
    let bad = json!({"kind": "daily", "range": "17:00-09:00"});
    let refused = http::json(addr, "PUT", "/api/v1/calendars/holidays", Some(ADMIN), &bad).await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.json()["error"]["field"], "range");
    let kept = http::get(addr, "GET", "/api/v1/calendars/holidays", Some(READ)).await;
    assert_eq!(kept.json()["definition"]["kind"], "holiday", "nothing stored lost");
    let unknown = json!({"name": "other", "handler": "log",
        "triggers": [{"kind": "fixed_rate", "interval_ms": 1000, "calendar": "nope"}]});
    let refused = http::json(addr, "POST", "/api/v1/jobs", Some(ADMIN), &unknown).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(refused.json()["error"]["field"], "triggers[0].calendar");

    assert_eq!(
        http::get(addr, "DELETE", "/api/v1/jobs/report", Some(ADMIN))
            .await
            .status,
        204
    );
    assert_eq!(
        http::get(addr, "DELETE", "/api/v1/calendars/workdays", Some(ADMIN))
            .await
            .status,
        204
    );
    assert_eq!(
        http::get(addr, "DELETE", "/api/v1/calendars/holidays", Some(ADMIN))
            .await
            .status,
        204
    );
    assert_eq!(
        http::get(addr, "GET", "/api/v1/calendars/holidays", Some(READ))
            .await
            .status,
        404
    );
}

/// Sends `method path` with the admin token, a JSON body and `headers`.
async fn with_headers(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> http::Answer {
    let auth = format!("Bearer {ADMIN}");
    let mut all = vec![("Authorization", auth.as_str()), ("Content-Type", "application/json")];
    all.extend_from_slice(headers);
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    http::call(addr, method, path, &all, body.as_bytes()).await
}

/// A job's and a calendar's version is their ETag; a write with an
/// If-Match naming another version (or a weak tag) gets 412 `stale` and
/// writes nothing; `*` asks only that it exist; If-None-Match: * adds a
/// calendar only.
async fn if_match_refuses_a_stale_write(db: &TestDb) {
    let addr = server(db).await;
    let def = json!({"name": "etag", "handler": "log", "triggers": [{"kind": "fixed_rate", "interval_ms": 60000}]});
    let created = http::json(addr, "POST", "/api/v1/jobs", Some(ADMIN), &def).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.header("etag"), Some("\"1\""));
    let read = http::get(addr, "GET", "/api/v1/jobs/etag", Some(READ)).await;
    assert_eq!(read.header("etag"), Some("\"1\""));
    assert_eq!(read.json()["version"], 1);

    let edit = |text: &str| json!({"description": text});
    let first = with_headers(
        addr,
        "PATCH",
        "/api/v1/jobs/etag",
        &[("If-Match", "\"1\"")],
        &edit("first"),
    )
    .await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.header("etag"), Some("\"2\""));
    for stale in ["\"1\"", "W/\"2\"", "\"one\"", "\"1\", \"3\""] {
        let refused = with_headers(
            addr,
            "PATCH",
            "/api/v1/jobs/etag",
            &[("If-Match", stale)],
            &edit("lost"),
        )
        .await;
        assert_eq!(refused.status, 412, "If-Match {stale}: {}", refused.body);
        assert_eq!(refused.error().0, "stale");
    }
    let listed = with_headers(
        addr,
        "PATCH",
        "/api/v1/jobs/etag",
        &[("If-Match", "\"7\", \"2\"")],
        &edit("listed"),
    )
    .await;
    assert_eq!(
        listed.status, 200,
        "a list holding the version matches: {}",
        listed.body
    );
    let any = with_headers(addr, "PATCH", "/api/v1/jobs/etag", &[("If-Match", "*")], &edit("any")).await;
    assert_eq!(any.status, 200, "{}", any.body);
    assert_eq!(any.header("etag"), Some("\"4\""));
    for (method, path) in [("POST", "/api/v1/jobs/etag/pause"), ("DELETE", "/api/v1/jobs/etag")] {
        let refused = with_headers(addr, method, path, &[("If-Match", "\"3\"")], &Value::Null).await;
        assert_eq!(refused.status, 412, "{method} {path}: {}", refused.body);
    }
    let job = http::get(addr, "GET", "/api/v1/jobs/etag", Some(READ)).await.json();
    assert_eq!(
        (job["description"].as_str(), job["state"].as_str()),
        (Some("any"), Some("enabled"))
    );
    let paused = with_headers(
        addr,
        "POST",
        "/api/v1/jobs/etag/pause",
        &[("If-Match", "\"4\"")],
        &Value::Null,
    )
    .await;
    assert_eq!((paused.status, paused.header("etag")), (200, Some("\"5\"")));
    let deleted = with_headers(
        addr,
        "DELETE",
        "/api/v1/jobs/etag",
        &[("If-Match", "\"5\"")],
        &Value::Null,
    )
    .await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);

    // A declaration (PUT) honours both too.
    let declared = |text: &str| {
        json!({"name": "declared", "handler": "log", "description": text,
            "triggers": [{"kind": "fixed_rate", "interval_ms": 60000}]})
    };
    let path = "/api/v1/jobs/declared";
    let missing = with_headers(addr, "PUT", path, &[("If-Match", "*")], &declared("a")).await;
    assert_eq!(missing.status, 412, "`*` on no job adds none: {}", missing.body);
    let missing = with_headers(addr, "PUT", path, &[("If-Match", "\"1\"")], &declared("a")).await;
    assert_eq!(missing.status, 412, "{}", missing.body);
    let added = with_headers(addr, "PUT", path, &[("If-None-Match", "*")], &declared("a")).await;
    assert_eq!(
        (added.status, added.header("etag")),
        (201, Some("\"1\"")),
        "{}",
        added.body
    );
    let again = with_headers(addr, "PUT", path, &[("If-None-Match", "*")], &declared("b")).await;
    assert_eq!(again.status, 412, "an add only: {}", again.body);
    assert_eq!(again.error().0, "stale");
    let stale = with_headers(addr, "PUT", path, &[("If-Match", "\"7\"")], &declared("b")).await;
    assert_eq!(stale.status, 412, "{}", stale.body);
    let updated = with_headers(addr, "PUT", path, &[("If-Match", "\"1\"")], &declared("b")).await;
    assert_eq!(
        (updated.status, updated.header("etag")),
        (200, Some("\"2\"")),
        "{}",
        updated.body
    );
    let any = with_headers(addr, "PUT", path, &[("If-Match", "*")], &declared("c")).await;
    assert_eq!((any.status, any.header("etag")), (200, Some("\"3\"")), "{}", any.body);
    let job = http::get(addr, "GET", path, Some(READ)).await.json();
    assert_eq!(job["description"], "c", "only the writes whose condition held");

    // Calendars.
    let weekly = |days: &[&str]| json!({"kind": "weekly", "days": days});
    let path = "/api/v1/calendars/weekend";
    let missing = with_headers(addr, "PUT", path, &[("If-Match", "*")], &weekly(&["sat"])).await;
    assert_eq!(missing.status, 412, "`*` on no calendar adds none: {}", missing.body);
    let added = with_headers(addr, "PUT", path, &[("If-None-Match", "*")], &weekly(&["sat"])).await;
    assert_eq!(
        (added.status, added.header("etag")),
        (200, Some("\"1\"")),
        "{}",
        added.body
    );
    let again = with_headers(addr, "PUT", path, &[("If-None-Match", "*")], &weekly(&["sun"])).await;
    assert_eq!(again.status, 412, "{}", again.body);
    let replaced = with_headers(addr, "PUT", path, &[("If-Match", "\"1\"")], &weekly(&["sun"])).await;
    assert_eq!((replaced.status, replaced.header("etag")), (200, Some("\"2\"")));
    let stale = with_headers(addr, "PUT", path, &[("If-Match", "\"1\"")], &weekly(&["mon"])).await;
    assert_eq!(stale.status, 412);
    let stale = with_headers(addr, "DELETE", path, &[("If-Match", "\"1\"")], &Value::Null).await;
    assert_eq!(stale.status, 412);
    let read = http::get(addr, "GET", path, Some(READ)).await;
    assert_eq!(read.header("etag"), Some("\"2\""));
    assert_eq!(read.json()["definition"]["days"], json!(["sun"]));
}

/// A change names the person behind the token when the caller gives one
/// (X-Quartz-Actor), and an edit's change-log row says what changed.
async fn changes_say_what_changed_and_who_made_them(db: &TestDb) {
    let addr = server(db).await;
    // The whole scheduler paused and resumed: writers only, recorded.
    let refused = http::get(addr, "POST", "/api/v1/scheduler/pause", Some(READ)).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let paused = http::get(addr, "POST", "/api/v1/scheduler/pause", Some(ADMIN)).await;
    assert_eq!(paused.status, 200, "{}", paused.body);
    assert_eq!(paused.json()["on_standby"], true);
    let since = paused.json()["standby_since"].as_i64().unwrap();
    let read = http::get(addr, "GET", "/api/v1/scheduler/standby", Some(READ)).await;
    assert_eq!(read.json(), json!({"on_standby": true, "standby_since": since}));
    let resumed = http::get(addr, "POST", "/api/v1/scheduler/resume", Some(ADMIN)).await;
    assert_eq!(resumed.json(), json!({"on_standby": false, "standby_since": null}));
    let log = http::get(addr, "GET", &format!("/api/v1/changes?job={CLUSTER}"), Some(READ))
        .await
        .json();
    let actions: Vec<&Value> = log["items"].as_array().unwrap().iter().map(|c| &c["action"]).collect();
    assert_eq!(
        actions,
        [&json!("scheduler.resume"), &json!("scheduler.pause")],
        "{log}"
    );

    let def = json!({"name": "report", "handler": "log", "description": "daily",
        "triggers": [{"kind": "fixed_rate", "interval_ms": 60000}]});
    let created = with_headers(addr, "POST", "/api/v1/jobs", &[("X-Quartz-Actor", "alice@ops")], &def).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let edit = json!({"description": "weekly", "timeout_ms": 5000,
        "triggers": [{"kind": "cron", "cron": "0 0 6 ? * MON", "time_zone": "Europe/Paris"}]});
    let edited = with_headers(addr, "PATCH", "/api/v1/jobs/report", &[], &edit).await;
    assert_eq!(edited.status, 200, "{}", edited.body);
    for bad in ["", "al ice", "x/y", "<b>", &"a".repeat(65)] {
        let refused = with_headers(
            addr,
            "POST",
            "/api/v1/jobs/report/pause",
            &[("X-Quartz-Actor", bad)],
            &Value::Null,
        )
        .await;
        assert_eq!(refused.status, 400, "{bad:?}: {}", refused.body);
        assert_eq!(refused.error().1.as_deref(), Some("X-Quartz-Actor"));
    }
    let log = http::get(addr, "GET", "/api/v1/changes?job=report", Some(READ))
        .await
        .json();
    let items = log["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "the refused pauses left no row: {log}");
    assert_eq!(
        (&items[1]["action"], &items[1]["actor"]),
        (&json!("job.create"), &json!("http:admin:alice@ops"))
    );
    assert_eq!(
        (&items[0]["action"], &items[0]["actor"]),
        (&json!("job.edit"), &json!("http:admin"))
    );
    let detail = items[0]["detail"].as_str().unwrap();
    for part in [
        r#"description: "daily" → "weekly""#,
        "timeout: none → 5000 ms",
        "triggers: every 60000 ms → cron 0 0 6 ? * MON Europe/Paris",
    ] {
        assert!(detail.contains(part), "{part} in {detail}");
    }
    assert!(!detail.contains("handler"), "{detail}");
}

/// PUT declares a job: 201 created, then 200 unchanged (nothing written),
/// then 200 updated; a body naming another job is refused.
async fn a_job_is_declared_with_put(db: &TestDb) {
    let addr = server(db).await;
    let def = json!({"name": "declared", "handler": "log", "triggers": [{"kind": "cron", "cron": "0 0 6 * * ?"}]});
    let outcome = |a: &http::Answer| (a.status, a.header("x-quartz-outcome").map(str::to_owned));
    let created = with_headers(addr, "PUT", "/api/v1/jobs/declared", &[], &def).await;
    assert_eq!(outcome(&created), (201, Some("created".into())), "{}", created.body);
    let again = with_headers(addr, "PUT", "/api/v1/jobs/declared", &[], &def).await;
    assert_eq!(outcome(&again), (200, Some("unchanged".into())));
    assert_eq!(again.header("etag"), Some("\"1\""));
    let mut changed = def.clone();
    changed["description"] = json!("at six");
    let updated = with_headers(addr, "PUT", "/api/v1/jobs/declared", &[], &changed).await;
    assert_eq!(outcome(&updated), (200, Some("updated".into())));
    assert_eq!(updated.header("etag"), Some("\"2\""));
    let other = with_headers(
        addr,
        "PUT",
        "/api/v1/jobs/declared",
        &[],
        &json!({"name": "x", "handler": "log"}),
    )
    .await;
    assert_eq!(other.error(), ("invalid".to_owned(), Some("name".to_owned())));
    // A job with no trigger runs on demand: fired by hand.
    let on_demand = json!({"name": "on-demand", "handler": "log"});
    let created = with_headers(addr, "PUT", "/api/v1/jobs/on-demand", &[], &on_demand).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.json()["triggers"], json!([]));
    let fired = with_headers(addr, "POST", "/api/v1/jobs/on-demand/trigger", &[], &Value::Null).await;
    assert_eq!(fired.status, 202, "{}", fired.body);
}

/// A handler no node offers: stored with a warning in the answer while no
/// node is live; refused with 400 naming the field once one is.
async fn a_handler_no_node_offers_is_refused_once_a_node_is_live(db: &TestDb) {
    let store = db.store().await;
    let access = Access::tokens(Some(ADMIN.into()), Some(READ.into()));
    let addr = http::serve(Web::new(Admin::new(store.clone(), CLUSTER)).access(access).router()).await;
    let job = |name: &str, handler: &str| json!({"name": name, "handler": handler, "triggers": [{"kind": "fixed_rate", "interval_ms": 3600000}]});
    let early = http::json(addr, "POST", "/api/v1/jobs", Some(ADMIN), &job("early", "tick")).await;
    assert_eq!(early.status, 201, "{}", early.body);
    let warnings = early.json()["warnings"].clone();
    assert!(warnings[0].as_str().unwrap().contains("no node is live"), "{warnings}");
    let read = http::get(addr, "GET", "/api/v1/jobs/early", Some(READ)).await;
    assert_eq!(read.json().get("warnings"), None, "a read has no warnings");

    let node = quartz_core::engine::SchedulerBuilder::new(CLUSTER)
        .handler("tick", |_| Ok(()))
        .start(store)
        .await
        .unwrap();
    let typo = http::json(addr, "POST", "/api/v1/jobs", Some(ADMIN), &job("typo", "tik")).await;
    assert_eq!(typo.status, 400, "{}", typo.body);
    let (code, field) = typo.error();
    assert_eq!(
        (code.as_str(), field.as_deref()),
        ("invalid", Some("handler")),
        "{}",
        typo.body
    );
    assert!(typo.body.contains("tick"), "names what is offered: {}", typo.body);
    let fine = http::json(addr, "POST", "/api/v1/jobs", Some(ADMIN), &job("fine", "tick")).await;
    assert_eq!(fine.status, 201, "{}", fine.body);
    assert_eq!(fine.json().get("warnings"), None);
    node.shutdown().await;
}

/// A node publishes its handler's payload schema: the API serves it, and
/// refuses a job or work whose payload does not fit with a 400 naming the
/// field, nothing written; a handler with no schema takes any payload.
async fn a_payload_that_does_not_fit_its_handlers_schema_is_refused(db: &TestDb) {
    let store = db.store().await;
    let access = Access::tokens(Some(ADMIN.into()), Some(READ.into()));
    let addr = http::serve(Web::new(Admin::new(store.clone(), CLUSTER)).access(access).router()).await;
    let schema = json!({
        "type": "object",
        "properties": {"to": {"type": "string"}, "copies": {"type": "integer", "minimum": 1}},
        "required": ["to"],
    });
    let node = quartz_core::engine::SchedulerBuilder::new(CLUSTER)
        .handler("mail", |_| Ok(()))
        .handler("log", |_| Ok(()))
        .payload_schema("mail", schema.clone())
        .start(store.clone())
        .await
        .unwrap();
    let served = http::get(addr, "GET", "/api/v1/handlers/mail/payload-schema", Some(READ)).await;
    assert_eq!(served.status, 200, "{}", served.body);
    assert_eq!(
        (served.json()["schema"].clone(), served.json()["node"].clone()),
        (schema, json!(node.node().node_id))
    );
    let none = http::get(addr, "GET", "/api/v1/handlers/log/payload-schema", Some(READ)).await;
    assert_eq!(none.status, 404, "{}", none.body);

    let job = |payload: Value| json!({"name": "mail-ops", "handler": "mail", "payload": payload});
    for (payload, field) in [
        (json!({"copies": 2}), "payload.to"),
        (json!({"to": "ops", "copies": 0}), "payload.copies"),
        (json!("ops"), "payload"),
    ] {
        let refused = http::json(addr, "POST", "/api/v1/jobs", Some(ADMIN), &job(payload)).await;
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert_eq!(refused.error().1.as_deref(), Some(field), "{}", refused.body);
        assert!(refused.body.contains("payload schema of handler"), "{}", refused.body);
    }
    assert_eq!(
        http::get(addr, "GET", "/api/v1/jobs/mail-ops", Some(READ)).await.status,
        404,
        "nothing written"
    );
    let created = http::json(addr, "POST", "/api/v1/jobs", Some(ADMIN), &job(json!({"to": "ops"}))).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let edit = json!({"payload": {"to": 5}});
    let refused = http::json(addr, "PATCH", "/api/v1/jobs/mail-ops", Some(ADMIN), &edit).await;
    assert_eq!(
        (refused.status, refused.error().1.as_deref()),
        (400, Some("payload.to")),
        "{}",
        refused.body
    );
    let work = http::json(
        addr,
        "POST",
        "/api/v1/jobs/mail-ops/enqueue",
        Some(ADMIN),
        &json!({"payload": {}}),
    )
    .await;
    assert_eq!(
        (work.status, work.error().1.as_deref()),
        (400, Some("payload.to")),
        "{}",
        work.body
    );
    let work = http::json(
        addr,
        "POST",
        "/api/v1/jobs/mail-ops/enqueue",
        Some(ADMIN),
        &json!({"payload": {"to": "ada"}}),
    )
    .await;
    assert_eq!(work.status, 202, "{}", work.body);
    // A traceparent header is kept with the work (its fires' spans link to
    // it); one that is not a W3C trace context is ignored.
    let traced = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let auth = format!("Bearer {ADMIN}");
    let mut stored = Vec::new();
    for header in [traced, "not-a-trace"] {
        let headers = [
            ("Content-Type", "application/json"),
            ("Authorization", auth.as_str()),
            ("traceparent", header),
        ];
        let body = json!({"payload": {"to": "ada"}}).to_string();
        let work = http::call(addr, "POST", "/api/v1/jobs/mail-ops/enqueue", &headers, body.as_bytes()).await;
        assert_eq!(work.status, 202, "{}", work.body);
        let id = work.json()["work_id"].as_i64().unwrap();
        let run = store.scoped(CLUSTER).work_run(id).await.unwrap();
        stored.push(run.trace_parent);
    }
    assert_eq!(stored, [Some(traced.to_owned()), None]);
    let any = json!({"name": "log-any", "handler": "log", "payload": [1, 2]});
    assert_eq!(
        http::json(addr, "POST", "/api/v1/jobs", Some(ADMIN), &any).await.status,
        201
    );
    node.shutdown().await;
}

backend_tests!(
    a_payload_that_does_not_fit_its_handlers_schema_is_refused,
    a_handler_no_node_offers_is_refused_once_a_node_is_live,
    a_job_is_declared_with_put,
    changes_say_what_changed_and_who_made_them,
    if_match_refuses_a_stale_write,
    jobs_are_created_read_changed_fired_and_deleted,
    bad_input_gets_a_4xx_naming_the_field,
    calendars_are_put_read_used_and_deleted,
);
