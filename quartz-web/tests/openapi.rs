//! The OpenAPI document: valid by a real validator (`openapi-spec-validator`,
//! in a virtual environment the test makes), and true of the server: every
//! documented operation is called, and each answer's status is one the
//! document lists for it, with a body its schema accepts (`jsonschema`).

#![allow(clippy::unwrap_used)]

use crate::http;

use std::collections::BTreeSet;

use quartz_core::admin::{Admin, JobDefinition, TriggerDefinition};
use quartz_testkit::{Kind, TestDb};
use quartz_web::{Access, Web};
use serde_json::{Value, json};

const CLUSTER: &str = "openapi-cluster";
const ADMIN: &str = "admin-secret";

/// Checks each recorded answer against the document: its status is listed
/// for its operation, and a JSON body validates against that response's
/// schema (the document's own components resolving its references).
const CHECK: &str = r#"
import json, sys
from jsonschema import Draft202012Validator
doc = json.load(open(sys.argv[1]))
answers = json.load(open(sys.argv[2]))
bad = []
for a in answers:
    op = doc["paths"][a["template"]][a["method"].lower()]
    responses = op["responses"]
    spec = responses.get(str(a["status"])) or responses.get("default")
    if spec is None:
        bad.append(f'{a["method"]} {a["path"]}: {a["status"]} is not documented (only {sorted(responses)})')
        continue
    schema = spec.get("content", {}).get("application/json", {}).get("schema")
    if schema is None:
        if a["body"] not in (None, ""):
            bad.append(f'{a["method"]} {a["path"]}: {a["status"]} has a body the document does not describe')
        continue
    root = dict(schema)
    root["components"] = doc["components"]
    for e in Draft202012Validator(root).iter_errors(a["body"]):
        bad.append(f'{a["method"]} {a["path"]} {a["status"]}: {e.message} at {list(e.absolute_path)}')
print("\n".join(bad))
sys.exit(1 if bad else 0)
"#;

/// A call of one documented operation: its template, the path sent, the
/// body, and the status the call is meant to get.
struct Probe {
    method: &'static str,
    template: &'static str,
    path: &'static str,
    body: Option<Value>,
    if_match: Option<&'static str>,
}

fn probe(method: &'static str, template: &'static str, path: &'static str, body: Option<Value>) -> Probe {
    Probe {
        method,
        template,
        path,
        body,
        if_match: None,
    }
}

/// A write made against a version that is not the stored one.
fn stale(method: &'static str, template: &'static str, path: &'static str, body: Option<Value>) -> Probe {
    Probe {
        if_match: Some("\"999\""),
        ..probe(method, template, path, body)
    }
}

/// Calls of every operation, in an order that leaves each one something to
/// act on, with answers that fail as well as succeed.
fn probes() -> Vec<Probe> {
    let job = json!({"name": "made", "handler": "log", "payload": [1, "two"],
        "triggers": [{"kind": "cron", "cron": "0 0 6 * * ?", "time_zone": "Europe/Paris",
            "start": "2026-01-01T00:00:00+01:00", "end": 4_102_444_800_000_i64}]});
    vec![
        probe("GET", "/api/v1/jobs", "/api/v1/jobs?limit=10&search=PRO", None),
        probe("GET", "/api/v1/jobs", "/api/v1/jobs?limit=0", None),
        probe("POST", "/api/v1/jobs", "/api/v1/jobs", Some(job.clone())),
        probe("POST", "/api/v1/jobs", "/api/v1/jobs", Some(job)),
        probe("POST", "/api/v1/jobs", "/api/v1/jobs", Some(json!({"name": "x"}))),
        probe(
            "PUT",
            "/api/v1/jobs/{name}",
            "/api/v1/jobs/declared",
            Some(json!({"name": "declared", "handler": "log",
                "triggers": [{"kind": "fixed_rate", "interval_ms": 60000}]})),
        ),
        probe(
            "PUT",
            "/api/v1/jobs/{name}",
            "/api/v1/jobs/declared",
            Some(json!({"name": "declared", "handler": "log",
                "triggers": [{"kind": "fixed_rate", "interval_ms": 60000}]})),
        ),
        probe(
            "PUT",
            "/api/v1/jobs/{name}",
            "/api/v1/jobs/declared",
            Some(json!({"name": "other", "handler": "log"})),
        ),
        probe("GET", "/api/v1/jobs/{name}", "/api/v1/jobs/probe", None),
        probe("GET", "/api/v1/jobs/{name}", "/api/v1/jobs/missing", None),
        probe(
            "PATCH",
            "/api/v1/jobs/{name}",
            "/api/v1/jobs/probe",
            Some(json!({"description": "changed", "payload": "text"})),
        ),
        probe(
            "PATCH",
            "/api/v1/jobs/{name}",
            "/api/v1/jobs/probe",
            Some(json!({"timeout_ms": "soon"})),
        ),
        stale(
            "PATCH",
            "/api/v1/jobs/{name}",
            "/api/v1/jobs/probe",
            Some(json!({"description": "lost"})),
        ),
        stale("POST", "/api/v1/jobs/{name}/pause", "/api/v1/jobs/probe/pause", None),
        probe("POST", "/api/v1/jobs/{name}/pause", "/api/v1/jobs/probe/pause", None),
        probe("POST", "/api/v1/jobs/{name}/resume", "/api/v1/jobs/probe/resume", None),
        probe(
            "POST",
            "/api/v1/jobs/{name}/backfill",
            "/api/v1/jobs/probe/backfill",
            Some(json!({"from": "2026-01-01T00:00:00Z", "preview": true})),
        ),
        probe(
            "POST",
            "/api/v1/jobs/{name}/backfill",
            "/api/v1/jobs/probe/backfill",
            Some(json!({"from": 0, "rate": 5})),
        ),
        probe(
            "POST",
            "/api/v1/jobs/{name}/backfill",
            "/api/v1/jobs/probe/backfill",
            Some(json!({"from": 0, "rate": 0})),
        ),
        probe("GET", "/api/v1/scheduler/standby", "/api/v1/scheduler/standby", None),
        probe("POST", "/api/v1/scheduler/pause", "/api/v1/scheduler/pause", None),
        probe("POST", "/api/v1/scheduler/resume", "/api/v1/scheduler/resume", None),
        probe(
            "POST",
            "/api/v1/jobs/{name}/trigger",
            "/api/v1/jobs/probe/trigger",
            None,
        ),
        probe(
            "POST",
            "/api/v1/jobs/{name}/trigger",
            "/api/v1/jobs/missing/trigger",
            None,
        ),
        probe(
            "POST",
            "/api/v1/jobs/{name}/enqueue",
            "/api/v1/jobs/probe/enqueue",
            Some(json!({"payload": [1], "unique_key": "k"})),
        ),
        probe(
            "POST",
            "/api/v1/jobs/{name}/enqueue",
            "/api/v1/jobs/probe/enqueue",
            Some(json!({"payload": [1], "unique_key": "k"})),
        ),
        probe(
            "POST",
            "/api/v1/jobs/{name}/enqueue",
            "/api/v1/jobs/probe/enqueue",
            Some(json!({"unique_for_ms": 1})),
        ),
        probe(
            "POST",
            "/api/v1/jobs/{name}/enqueue",
            "/api/v1/jobs/missing/enqueue",
            Some(json!({})),
        ),
        probe(
            "GET",
            "/api/v1/fires",
            "/api/v1/fires?since=2020-01-01T00:00:00Z&until=4102444800000&limit=5",
            None,
        ),
        probe("GET", "/api/v1/fires", "/api/v1/fires?since=yesterday", None),
        probe("GET", "/api/v1/jobs/{name}/stats", "/api/v1/jobs/probe/stats", None),
        probe("GET", "/api/v1/jobs/{name}/stats", "/api/v1/jobs/missing/stats", None),
        // Fire 1 is the probe's fire by hand, pending (no node runs here).
        probe("POST", "/api/v1/fires/{id}/retry", "/api/v1/fires/1/retry", None),
        probe("POST", "/api/v1/fires/{id}/retry", "/api/v1/fires/999999/retry", None),
        probe("POST", "/api/v1/fires/{id}/retry", "/api/v1/fires/one/retry", None),
        probe("GET", "/api/v1/fires", "/api/v1/fires?error=boom&node=n1", None),
        probe("GET", "/api/v1/nodes", "/api/v1/nodes", None),
        // No node publishes a schema here: the documented 404.
        probe(
            "GET",
            "/api/v1/handlers/{name}/payload-schema",
            "/api/v1/handlers/probe/payload-schema",
            None,
        ),
        probe("GET", "/api/v1/health", "/api/v1/health", None),
        probe("GET", "/api/v1/changes", "/api/v1/changes?job=probe&limit=5", None),
        probe("GET", "/api/v1/audit", "/api/v1/audit?since=2026-01-01T00:00:00Z", None),
        probe("GET", "/api/v1/overview", "/api/v1/overview?window_ms=60000", None),
        probe("GET", "/api/v1/overview", "/api/v1/overview?window_ms=1", None),
        probe(
            "GET",
            "/api/v1/cron/preview",
            "/api/v1/cron/preview?cron=0%200%206%20*%20*%20%3F&time_zone=Europe/Paris&after=2026-03-28T00:00:00Z&count=3",
            None,
        ),
        probe(
            "GET",
            "/api/v1/cron/preview",
            "/api/v1/cron/preview?cron=nonsense",
            None,
        ),
        probe(
            "PUT",
            "/api/v1/calendars/{name}",
            "/api/v1/calendars/weekend",
            Some(json!({"kind": "weekly", "days": ["sat", "sun"]})),
        ),
        probe(
            "PUT",
            "/api/v1/calendars/{name}",
            "/api/v1/calendars/weekend",
            Some(json!({"kind": "weekly", "days": ["someday"]})),
        ),
        probe("GET", "/api/v1/calendars", "/api/v1/calendars", None),
        probe("GET", "/api/v1/calendars/{name}", "/api/v1/calendars/weekend", None),
        probe("GET", "/api/v1/calendars/{name}", "/api/v1/calendars/missing", None),
        stale("DELETE", "/api/v1/calendars/{name}", "/api/v1/calendars/weekend", None),
        probe("DELETE", "/api/v1/calendars/{name}", "/api/v1/calendars/weekend", None),
        probe("DELETE", "/api/v1/calendars/{name}", "/api/v1/calendars/weekend", None),
        probe("DELETE", "/api/v1/jobs/{name}", "/api/v1/jobs/made", None),
        probe("DELETE", "/api/v1/jobs/{name}", "/api/v1/jobs/made", None),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_is_valid_and_true_of_every_route() {
    quartz_testkit::run(Kind::SqliteMemory, |db| Box::pin(document(db))).await;
}

async fn document(db: &TestDb) {
    let admin = Admin::new(db.store().await, CLUSTER);
    let probe_job =
        JobDefinition::new("probe", "log").with_trigger(TriggerDefinition::every(std::time::Duration::from_secs(60)));
    admin.job_add(&probe_job).await.unwrap();
    let access = Access::tokens(Some(ADMIN.into()), None);
    let addr = http::serve(Web::new(admin).access(access).router()).await;
    let doc = http::get(addr, "GET", "/api/v1/openapi.json", None).await.json();
    let dir = std::env::temp_dir().join(format!("quartz-openapi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let doc_path = dir.join("openapi.json");
    std::fs::write(&doc_path, doc.to_string()).unwrap();

    // Every documented operation has a probe, and every probe's operation
    // is documented.
    let documented: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| {
            ops.as_object()
                .unwrap()
                .keys()
                .map(move |m| (m.to_uppercase(), path.clone()))
        })
        .collect();
    let probes = probes();
    let probed: BTreeSet<(String, String)> = probes
        .iter()
        .map(|p| (p.method.to_owned(), p.template.to_owned()))
        .collect();
    assert_eq!(documented, probed, "documented operations against the probes");

    let mut answers = Vec::new();
    let mut statuses = BTreeSet::new();
    for p in &probes {
        let auth = format!("Bearer {ADMIN}");
        let mut headers = vec![("Authorization", auth.as_str()), ("Content-Type", "application/json")];
        if let Some(tag) = p.if_match {
            headers.push(("If-Match", tag));
        }
        let body = p.body.as_ref().map(Value::to_string).unwrap_or_default();
        let answer = http::call(addr, p.method, p.path, &headers, body.as_bytes()).await;
        if let Some(etag) = answer.header("etag") {
            assert!(
                etag.starts_with('"') && etag.ends_with('"'),
                "{} {}: ETag {etag}",
                p.method,
                p.path
            );
        }
        statuses.insert(answer.status);
        let body = if answer.body.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&answer.body)
                .unwrap_or_else(|e| panic!("{} {}: not JSON ({e}): {}", p.method, p.path, answer.body))
        };
        answers.push(json!({"method": p.method, "template": p.template, "path": p.path,
            "status": answer.status, "body": body}));
    }
    // The probes reach successes and failures alike.
    for status in [200, 201, 202, 204, 400, 404, 409, 412] {
        assert!(statuses.contains(&status), "no probe answered {status}: {statuses:?}");
    }
    let answers_path = dir.join("answers.json");
    std::fs::write(&answers_path, Value::Array(answers).to_string()).unwrap();

    let Some(python) = quartz_testkit::tools::python_with(
        &["openapi-spec-validator", "jsonschema"],
        "validate the OpenAPI document",
    ) else {
        return;
    };
    let valid = std::process::Command::new(&python)
        .args(["-m", "openapi_spec_validator"])
        .arg(&doc_path)
        .output()
        .unwrap();
    assert!(
        valid.status.success(),
        "openapi-spec-validator refuses the document: {}{}",
        String::from_utf8_lossy(&valid.stdout),
        String::from_utf8_lossy(&valid.stderr)
    );
    let checked = std::process::Command::new(&python)
        .args(["-c", CHECK])
        .arg(&doc_path)
        .arg(&answers_path)
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "answers the document does not describe:\n{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
