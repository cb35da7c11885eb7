//! OpenTelemetry from `quartz run`: with `OTEL_EXPORTER_OTLP_ENDPOINT` set,
//! a span per fire and the metrics reach an OTLP/HTTP collector (here a
//! fake one in the test, recording what it is sent).

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use parking_lot::Mutex;
use serde_json::Value;

use crate::common::{Kind, TestDb, wait_until};

/// What the collector received: (signal, body).
type Received = Arc<Mutex<Vec<(String, Value)>>>;

/// A fake OTLP/HTTP collector: every `POST /v1/{signal}` recorded.
async fn collector() -> (SocketAddr, Received) {
    let received: Received = Arc::default();
    let app = axum::Router::new()
        .route(
            "/v1/{signal}",
            axum::routing::post(
                |State(received): State<Received>, Path(signal): Path<String>, body: String| async move {
                    let body = serde_json::from_str(&body).unwrap_or(Value::String(body));
                    received.lock().push((signal, body));
                    "{}"
                },
            ),
        )
        .with_state(Arc::clone(&received));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, received)
}

/// A `quartz run` child process, stopped when dropped.
struct Node(Child);

impl Node {
    fn start(url: &str, env: &[(&str, String)]) -> Node {
        let mut command = Command::new(env!("CARGO_BIN_EXE_quartz"));
        command
            .args([
                "run",
                "--database-url",
                url,
                "--scheduler",
                "otel",
                "--poll-interval",
                "300ms",
            ])
            .env("RUST_LOG", "warn")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in env {
            command.env(k, v);
        }
        Node(command.spawn().unwrap())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An attribute's value in OTLP's JSON (`{"key": k, "value": {"stringValue": …}}`).
fn attribute<'a>(attributes: &'a Value, key: &str) -> Option<&'a Value> {
    let found = attributes.as_array()?.iter().find(|a| a["key"] == key)?;
    found["value"].as_object()?.values().next()
}

/// The items received for `signal` (`traces`: `resourceSpans`,
/// `scopeSpans`, `spans`), each with its resource's attributes.
fn items(received: &Received, signal: &str, path: [&str; 3]) -> Vec<(Value, Value)> {
    let [resources, scopes, leaves] = path;
    let mut all = Vec::new();
    for (_, body) in received.lock().iter().filter(|(s, _)| s == signal) {
        for resource in body[resources].as_array().into_iter().flatten() {
            for scope in resource[scopes].as_array().into_iter().flatten() {
                for item in scope[leaves].as_array().into_iter().flatten() {
                    all.push((resource["resource"]["attributes"].clone(), item.clone()));
                }
            }
        }
    }
    all
}

/// The spans received, each with its resource's attributes.
fn spans(received: &Received) -> Vec<(Value, Value)> {
    items(received, "traces", ["resourceSpans", "scopeSpans", "spans"])
}

/// The names of the metrics received (`… (histogram)` for a histogram).
fn metric_names(received: &Received) -> Vec<String> {
    items(received, "metrics", ["resourceMetrics", "scopeMetrics", "metrics"])
        .into_iter()
        .map(|(_, metric)| {
            let name = metric["name"].as_str().unwrap_or_default();
            if metric.get("histogram").is_some() {
                format!("{name} (histogram)")
            } else {
                name.to_owned()
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quartz_run_exports_a_span_per_fire_and_its_metrics_over_otlp() {
    let Some(db) = TestDb::new(Kind::SqliteFile).await else {
        return;
    };
    let added = Command::new(env!("CARGO_BIN_EXE_quartz"))
        .args(["--database-url", &db.url, "--scheduler", "otel", "job", "add", "tick"])
        .args(["--handler", "noop", "--every", "1s"])
        .output()
        .unwrap();
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
    let (addr, received) = collector().await;
    let _node = Node::start(
        &db.url,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}")),
            ("OTEL_METRIC_EXPORT_INTERVAL", "500".to_owned()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        ],
    );
    wait_until(
        Duration::from_secs(60),
        "a fire's span and the lateness histogram",
        || async {
            let fired = spans(&received).iter().any(|(_, s)| {
                s["name"] == "fire" && attribute(&s["attributes"], "outcome").is_some_and(|o| o == "succeeded")
            });
            let lateness = metric_names(&received).contains(&"quartz_fire_lateness_seconds (histogram)".to_owned());
            fired && lateness
        },
    )
    .await;
    let first = spans(&received);
    let (resource, fire) = first
        .iter()
        .find(|(_, s)| s["name"] == "fire" && attribute(&s["attributes"], "outcome").is_some())
        .unwrap();
    assert_eq!(attribute(resource, "service.name").unwrap(), "quartz", "{resource}");
    let attributes = &fire["attributes"];
    assert_eq!(attribute(attributes, "job").unwrap(), "tick", "{fire}");
    assert_eq!(attribute(attributes, "scheduler").unwrap(), "otel", "{fire}");
    assert_eq!(attribute(attributes, "run_kind").unwrap(), "scheduled", "{fire}");
    for key in ["fire_time", "attempt", "fire_id", "late_ms", "node"] {
        assert!(attribute(attributes, key).is_some(), "{key} missing: {fire}");
    }
    assert!(
        first.iter().all(|(_, s)| s["name"] == "fire"),
        "only the fires' spans are exported"
    );
    // Work enqueued with a trace context: its fire's span links to the
    // enqueuer's span.
    let traced = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let enqueued = Command::new(env!("CARGO_BIN_EXE_quartz"))
        .args([
            "--database-url",
            &db.url,
            "--scheduler",
            "otel",
            "job",
            "enqueue",
            "tick",
        ])
        .env("TRACEPARENT", traced)
        .output()
        .unwrap();
    assert!(
        enqueued.status.success(),
        "{}",
        String::from_utf8_lossy(&enqueued.stderr)
    );
    let linked = |s: &Value| {
        s["links"].as_array().is_some_and(|links| {
            links
                .iter()
                .any(|l| l["traceId"] == "4bf92f3577b34da6a3ce929d0e0e4736" && l["spanId"] == "00f067aa0ba902b7")
        })
    };
    wait_until(Duration::from_secs(60), "the enqueued work's linked span", || async {
        spans(&received).iter().any(|(_, s)| linked(s))
    })
    .await;
    let spans_now = spans(&received);
    let (_, work) = spans_now.iter().find(|(_, s)| linked(s)).unwrap();
    assert_eq!(
        attribute(&work["attributes"], "run_kind").unwrap(),
        "enqueued",
        "{work}"
    );
    assert_eq!(
        attribute(&work["attributes"], "trace_parent").unwrap(),
        traced,
        "{work}"
    );
    assert!(
        first
            .iter()
            .all(|(_, s)| s["links"].as_array().is_none_or(Vec::is_empty)),
        "the scheduled fires' spans link nowhere"
    );

    let names = metric_names(&received);
    for name in [
        "quartz_fires_started_total",
        "quartz_fires_succeeded_total",
        "quartz_polls_total",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} missing: {names:?}");
    }
}
