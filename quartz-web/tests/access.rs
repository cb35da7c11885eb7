//! Access control for every role and route: no or a wrong token gets 401,
//! the read-only token 403 on any change (and nothing changes), the admin
//! token passes; with no token configured only loopback callers are
//! answered, and a server refuses to listen elsewhere.

#![allow(clippy::unwrap_used)]

use crate::http;

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::ConnectInfo;
use quartz_core::admin::{Admin, JobDefinition, TriggerDefinition};
use quartz_testkit::{Kind, TestDb};
use quartz_web::{Access, Web};
use serde_json::json;
use tower::ServiceExt;

const CLUSTER: &str = "access-cluster";
const ADMIN: &str = "admin-secret";
const READ: &str = "read-secret";

/// Every route, with a body for the ones that take one, and whether it
/// changes anything.
fn routes() -> Vec<(&'static str, &'static str, Option<serde_json::Value>, bool)> {
    let job = json!({"name": "new", "handler": "log", "triggers": [{"kind": "fixed_rate", "interval_ms": 60000}]});
    vec![
        ("GET", "/api/v1/jobs", None, false),
        ("POST", "/api/v1/jobs", Some(job), true),
        ("GET", "/api/v1/jobs/probe", None, false),
        (
            "PATCH",
            "/api/v1/jobs/probe",
            Some(json!({"description": "changed"})),
            true,
        ),
        ("POST", "/api/v1/jobs/probe/pause", None, true),
        ("POST", "/api/v1/jobs/probe/resume", None, true),
        ("POST", "/api/v1/jobs/probe/trigger", None, true),
        ("POST", "/api/v1/jobs/probe/enqueue", Some(json!({})), true),
        ("DELETE", "/api/v1/jobs/probe", None, true),
        ("GET", "/api/v1/fires", None, false),
        ("GET", "/api/v1/nodes", None, false),
        ("GET", "/api/v1/health", None, false),
        ("GET", "/api/v1/jobs/probe/stats", None, false),
        ("POST", "/api/v1/fires/1/retry", None, true),
        ("GET", "/api/v1/changes", None, false),
        ("GET", "/api/v1/audit", None, false),
        ("GET", "/api/v1/overview", None, false),
        ("GET", "/api/v1/cron/preview?cron=0%20*%20*%20*%20*%20%3F", None, false),
        ("GET", "/api/v1/calendars", None, false),
        (
            "PUT",
            "/api/v1/calendars/probe",
            Some(json!({"kind": "weekly", "days": ["sat", "sun"]})),
            true,
        ),
        ("GET", "/api/v1/calendars/probe", None, false),
        ("DELETE", "/api/v1/calendars/probe", None, true),
        ("GET", "/metrics", None, false),
    ]
}

async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &Option<serde_json::Value>,
) -> http::Answer {
    match body {
        Some(body) => http::json(addr, method, path, token, body).await,
        None => http::get(addr, method, path, token).await,
    }
}

async fn probe(admin: &Admin) {
    let mut job = JobDefinition::new("probe", "log");
    job.triggers
        .push(TriggerDefinition::every(std::time::Duration::from_secs(60)));
    admin.job_add(&job).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_checks_the_callers_role() {
    quartz_testkit::run(Kind::SqliteFile, |db| Box::pin(roles(db))).await;
}

async fn roles(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    probe(&admin).await;
    // A wrong token on every route: more than a client may send by default.
    let access = Access::tokens(Some(ADMIN.into()), Some(READ.into())).with_max_guesses(1_000);
    let addr = http::serve(Web::new(admin.clone()).access(access).router()).await;

    for (method, path, body, writes) in routes() {
        let none = send(addr, method, path, None, &body).await;
        assert_eq!(none.status, 401, "{method} {path} with no token: {}", none.body);
        assert_eq!(none.error().0, "unauthorized");
        assert_eq!(none.header("www-authenticate"), Some("Bearer"));
        let wrong = send(addr, method, path, Some("guess"), &body).await;
        assert_eq!(wrong.status, 401, "{method} {path} with a wrong token");
        let read = send(addr, method, path, Some(READ), &body).await;
        if writes {
            assert_eq!(read.status, 403, "{method} {path} with the read token: {}", read.body);
            assert_eq!(read.error().0, "forbidden");
        } else {
            assert!(
                ![401, 403].contains(&read.status),
                "{method} {path} with the read token: {}",
                read.status
            );
        }
    }
    let probe_job = admin.job("probe").await.unwrap();
    assert_eq!(probe_job.state, "enabled");
    assert_eq!(
        probe_job.spec.description, "",
        "no change got through with the read token"
    );
    assert_eq!(probe_job.triggers.len(), 1);
    assert!(admin.job("new").await.is_err());

    for (method, path, body, _) in routes() {
        let a = send(addr, method, path, Some(ADMIN), &body).await;
        assert!(
            ![401, 403].contains(&a.status),
            "{method} {path} with the admin token: {}",
            a.body
        );
        assert!(a.status < 500, "{method} {path}: {}", a.body);
    }
    assert!(admin.job("probe").await.is_err(), "the admin token deleted it");
    assert_eq!(admin.job("new").await.unwrap().spec.name, "new");

    // What needs no token: health and the API's description.
    assert_eq!(http::get(addr, "GET", "/healthz", None).await.status, 200);
    assert_eq!(http::get(addr, "GET", "/api/v1/openapi.json", None).await.status, 200);
    // A malformed Authorization header is a 401 too.
    let basic = http::call(addr, "GET", "/api/v1/jobs", &[("Authorization", "Basic YWRtaW4=")], b"").await;
    assert_eq!(basic.status, 401);
    // The scheme's name is case-insensitive.
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let auth = format!("{scheme} {READ}");
        let lower = http::call(addr, "GET", "/api/v1/jobs", &[("Authorization", &auth)], b"").await;
        assert_eq!(lower.status, 200, "{scheme}: {}", lower.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_guessing_is_slowed_and_login_redirects_stay_on_the_server() {
    quartz_testkit::run(Kind::SqliteFile, |db| Box::pin(guessing(db))).await;
}

async fn guessing(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    let access = Access::tokens(Some(ADMIN.into()), Some(READ.into()));
    let addr = http::serve(Web::new(admin.clone()).access(access).router()).await;
    let login = |token: &'static str, next: &'static str| async move {
        let body = form_urlencoded::Serializer::new(String::new())
            .append_pair("token", token)
            .append_pair("next", next)
            .finish();
        http::call(
            addr,
            "POST",
            "/login",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            body.as_bytes(),
        )
        .await
    };
    // A redirect after login stays on this server, whatever `next` holds:
    // browsers drop a tab or a line break, and `/\t/evil.com` would be
    // `//evil.com`.
    for next in [
        "/\t/evil.com",
        "/\n/evil.com",
        "/\r\nSet-Cookie:x=1",
        "//evil.com",
        "/\\evil.com",
        "https://evil.com",
        "/ /evil.com",
    ] {
        let answer = login(READ, next).await;
        assert_eq!(answer.status, 303, "{next:?}: {}", answer.body);
        assert_eq!(answer.header("location"), Some("/"), "{next:?}");
    }
    assert_eq!(
        login(READ, "/jobs?state=paused").await.header("location"),
        Some("/jobs?state=paused")
    );

    // Ten refused tokens from one address (behind a proxy, every client's),
    // then every further wrong token waits and is answered 429 with
    // Retry-After, for the API and the login alike, until the minute ends;
    // the right token is never refused.
    for i in 0..quartz_web::sessions::MAX_GUESSES {
        let wrong = if i % 2 == 0 {
            http::get(addr, "GET", "/api/v1/jobs", Some("guess")).await
        } else {
            login("guess", "/").await
        };
        assert_eq!(wrong.status, 401, "guess {i}: {}", wrong.body);
    }
    let asked = std::time::Instant::now();
    let api = http::get(addr, "GET", "/api/v1/jobs", Some("guess")).await;
    assert_eq!(api.status, 429, "{}", api.body);
    assert_eq!(api.error().0, "too_many_requests");
    assert!(
        api.header("retry-after")
            .is_some_and(|s| s.parse::<u64>().is_ok_and(|s| s >= 1))
    );
    assert!(
        asked.elapsed() >= quartz_web::access::GUESS_DELAY,
        "the guesser is slowed"
    );
    let page = login("guess", "/").await;
    assert_eq!(page.status, 429, "{}", page.body);
    assert!(page.header("retry-after").is_some());
    let right = http::get(addr, "GET", "/api/v1/jobs", Some(ADMIN)).await;
    assert_eq!(right.status, 200, "the right token passes: {}", right.body);
    let read = http::get(addr, "GET", "/api/v1/jobs", Some(READ)).await;
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(login(ADMIN, "/").await.status, 303, "and logs in");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_token_only_loopback_is_answered() {
    quartz_testkit::run(Kind::SqliteFile, |db| Box::pin(loopback(db))).await;
}

async fn loopback(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    probe(&admin).await;
    let router = Web::new(admin.clone()).access(Access::loopback_only()).router();
    let addr = http::serve(router.clone()).await;
    let local = http::get(addr, "POST", "/api/v1/jobs/probe/pause", None).await;
    assert_eq!(local.status, 200, "{}", local.body);
    let changes = http::get(addr, "GET", "/api/v1/changes", None).await.json();
    assert_eq!(changes["items"][0]["actor"], "http:local");

    let from = |peer: Option<&str>| {
        let mut request = axum::http::Request::get("/api/v1/jobs").body(Body::empty()).unwrap();
        if let Some(peer) = peer {
            request
                .extensions_mut()
                .insert(ConnectInfo(peer.parse::<SocketAddr>().unwrap()));
        }
        request
    };
    let remote = router.clone().oneshot(from(Some("10.1.2.3:5555"))).await.unwrap();
    assert_eq!(remote.status(), 403, "not loopback");
    // Forwarded by a proxy on this machine: loopback, but not this machine's.
    for header in ["X-Forwarded-For", "Forwarded", "X-Real-IP"] {
        let mut request = from(Some("127.0.0.1:5555"));
        request
            .headers_mut()
            .insert(header, axum::http::HeaderValue::from_static("203.0.113.7"));
        let forwarded = router.clone().oneshot(request).await.unwrap();
        assert_eq!(forwarded.status(), 403, "{header}");
    }
    let unknown = router.clone().oneshot(from(None)).await.unwrap();
    assert_eq!(unknown.status(), 403, "a router served without the peer's address");
    let v6 = router.oneshot(from(Some("[::1]:5555"))).await.unwrap();
    assert_eq!(v6.status(), 200, "IPv6 loopback");

    let open = Access::loopback_only();
    assert!(open.check_listen("127.0.0.1:8080".parse().unwrap()).is_ok());
    let refused = open.check_listen("0.0.0.0:8080".parse().unwrap()).unwrap_err();
    assert!(refused.contains("QUARTZ_ADMIN_TOKEN"), "{refused}");
    let with_token = Access::tokens(Some(ADMIN.into()), None);
    assert!(with_token.check_listen("0.0.0.0:8080".parse().unwrap()).is_ok());
    let err = quartz_web::serve(
        Web::new(admin).access(open.clone()).router(),
        "0.0.0.0:0".parse().unwrap(),
        &open,
        async {},
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
}
