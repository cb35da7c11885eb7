//! Typed jobs: a type names its kind and payload once; a node registered
//! with it runs its fires with the payload decoded, and a row of its kind
//! whose payload does not fit fails saying which job and which type. A type
//! that publishes its payload's JSON Schema has such a row refused when it
//! is written through the admin surface, naming the field.

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Kind, TestDb, wait_for};
use quartz::admin::{AdminError, FireFilter, JobDefinition, JobPatch, WorkRequest};
use quartz::engine::{JobResult, TypedJob};
use quartz::prelude::*;
use serde::{Deserialize, Serialize};

const CLUSTER: &str = "typed-cluster";

/// What the invoices run saw.
static INVOICED: Mutex<Vec<(String, u64)>> = Mutex::new(Vec::new());

#[derive(Debug, Serialize, Deserialize)]
struct Invoice {
    customer: String,
    amount_cents: u64,
}

impl TypedJob for Invoice {
    const KIND: &'static str = "invoice";

    async fn run(self, ctx: JobContext) -> JobResult {
        let tag = ctx.state::<Arc<String>>()?;
        INVOICED
            .lock()
            .unwrap()
            .push((format!("{tag}:{}", self.customer), self.amount_cents));
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_job_runs_with_its_payload_decoded() {
    common::run(Kind::SqliteFile, |db| Box::pin(typed(db))).await;
}

async fn typed(db: &TestDb) {
    let node = SchedulerBuilder::new(CLUSTER)
        .settings(common::fast_settings())
        .state(Arc::new("billing".to_owned()))
        .job::<Invoice>()
        .start(db.store().await)
        .await
        .unwrap();
    let admin = node.admin();
    let acme = Invoice {
        customer: "acme".into(),
        amount_cents: 1_200,
    };
    let defined = JobDefinition::of("invoice-acme", &acme).unwrap();
    assert_eq!(defined.spec.handler, "invoice", "the kind is the handler");
    admin.job_put(&defined).await.unwrap();
    // A row of the kind written by hand (another language, the CLI) whose
    // payload does not fit the type.
    let odd = JobDefinition::new("invoice-odd", "invoice")
        .with_payload(&serde_json::json!({"customer": "odd"}))
        .unwrap();
    admin.job_put(&odd).await.unwrap();
    admin.job_trigger("invoice-acme").await.unwrap();
    let odd_fire = admin.job_trigger("invoice-odd").await.unwrap();

    wait_for(Duration::from_secs(20), "both fires to end", || {
        let admin = admin.clone();
        async move {
            let fires = admin.fires(&FireFilter::default()).await.unwrap().items;
            let ended = fires
                .iter()
                .filter(|f| f.state == "succeeded" || f.state == "failed")
                .count();
            if ended == 2 { Ok(()) } else { Err(format!("{fires:?}")) }
        }
    })
    .await;
    assert_eq!(*INVOICED.lock().unwrap(), [("billing:acme".to_owned(), 1_200)]);
    let fires = admin.fires(&FireFilter::default()).await.unwrap().items;
    let failed = fires.iter().find(|f| f.id == odd_fire.fire_id).unwrap();
    let error = failed.error.as_deref().unwrap();
    // The type's name is its full path, `integration::typed::Invoice`.
    let named = format!("is not a {} (kind \"invoice\")", std::any::type_name::<Invoice>());
    assert!(
        error.contains(&format!("the payload of job \"invoice-odd\" {named}")) && error.contains("amount_cents"),
        "{error}"
    );
    node.shutdown().await;
}

/// A refund: a typed job that publishes its payload's schema.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Refund {
    order: String,
    amount_cents: u64,
    lines: Vec<RefundLine>,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct RefundLine {
    sku: String,
}

impl TypedJob for Refund {
    const KIND: &'static str = "refund";

    fn payload_schema() -> Option<serde_json::Value> {
        Some(schemars::schema_for!(Self).to_value())
    }

    async fn run(self, _ctx: JobContext) -> JobResult {
        Ok(())
    }
}

/// The field a refusal names, and its message.
fn refused(result: Result<impl std::fmt::Debug, AdminError>) -> (String, String) {
    match result {
        Err(AdminError::Invalid { field, message }) => (field, message),
        other => panic!("expected the payload refused, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_that_does_not_fit_its_published_schema_is_refused_naming_the_field() {
    common::run(Kind::SqliteFile, |db| Box::pin(schema_checked(db))).await;
}

async fn schema_checked(db: &TestDb) {
    let node = SchedulerBuilder::new("typed-schema")
        .settings(common::fast_settings())
        .state(Arc::new("billing".to_owned()))
        .job::<Refund>()
        .job::<Invoice>()
        .start(db.store().await)
        .await
        .unwrap();
    let admin = node.admin();
    let published = admin.payload_schema("refund").await.unwrap().unwrap();
    assert_eq!(published.node, node.node().node_id);
    assert_eq!(
        published.schema["required"],
        serde_json::json!(["order", "amount_cents", "lines"])
    );
    assert!(
        admin.payload_schema("invoice").await.unwrap().is_none(),
        "Invoice publishes none"
    );

    let fits = serde_json::json!({ "order": "A-1", "amount_cents": 500, "lines": [{ "sku": "tea" }] });
    let good = JobDefinition::new("refund-a1", "refund").with_payload(&fits).unwrap();
    admin.job_put(&good).await.unwrap();

    let wrong_type = serde_json::json!({ "order": "A-2", "amount_cents": "ten", "lines": [] });
    let bad = JobDefinition::new("refund-a2", "refund")
        .with_payload(&wrong_type)
        .unwrap();
    let (field, message) = refused(admin.job_put(&bad).await);
    assert_eq!(field, "payload.amount_cents", "{message}");
    assert!(
        message.contains("\"ten\"") && message.contains("handler \"refund\"") && message.contains(&node.node().node_id),
        "{message}"
    );
    let nested = serde_json::json!({ "order": "A-2", "amount_cents": 1, "lines": [{ "sku": "tea" }, {}] });
    let bad = JobDefinition::new("refund-a2", "refund").with_payload(&nested).unwrap();
    assert_eq!(refused(admin.job_put(&bad).await).0, "payload.lines[1].sku");
    assert!(
        matches!(admin.job("refund-a2").await, Err(AdminError::NotFound { .. })),
        "nothing stored"
    );
    // An edit to a payload that does not fit is refused, the job kept as it was.
    let patch = JobPatch {
        payload: Some(serde_json::json!({ "order": "A-1" })),
        ..JobPatch::default()
    };
    assert_eq!(
        refused(admin.job_edit("refund-a1", &patch, None).await).0,
        "payload.amount_cents"
    );
    let kept: serde_json::Value = serde_json::from_str(&admin.job("refund-a1").await.unwrap().spec.payload).unwrap();
    assert_eq!(kept, fits);
    // Work enqueued with its own payload is checked the same way; without
    // one it runs with the job's, which was checked when it was written.
    let request = |payload: serde_json::Value| WorkRequest {
        payload: Some(payload),
        ..WorkRequest::default()
    };
    let (field, _) = refused(
        admin
            .enqueue_request(
                "refund-a1",
                &request(serde_json::json!({ "order": 7, "amount_cents": 1, "lines": [] })),
            )
            .await,
    );
    assert_eq!(field, "payload.order");
    let queued = admin
        .enqueue_request("refund-a1", &request(fits.clone()))
        .await
        .unwrap();
    assert_eq!(queued.outcome, "queued", "{queued:?}");
    admin
        .enqueue_request("refund-a1", &WorkRequest::default())
        .await
        .unwrap();
    // A kind that publishes no schema takes any JSON, as before.
    let odd = JobDefinition::new("invoice-any", "invoice")
        .with_payload(&serde_json::json!({ "anything": true }))
        .unwrap();
    admin.job_put(&odd).await.unwrap();
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_that_is_not_one_or_names_no_handler_stops_the_node_starting() {
    common::run(Kind::SqliteFile, |db| {
        Box::pin(async move {
            for (handler, schema, says) in [
                ("invoice", serde_json::json!(42), "not a JSON Schema"),
                (
                    "invoice",
                    serde_json::json!({ "type": "no-such-type" }),
                    "not a valid JSON Schema",
                ),
                (
                    "nobody",
                    serde_json::json!({ "type": "object" }),
                    "no handler of that name",
                ),
            ] {
                let started = SchedulerBuilder::new("typed-bad-schema")
                    .job::<Invoice>()
                    .payload_schema(handler, schema)
                    .start(db.store().await)
                    .await;
                match started {
                    Err(e @ quartz::SchedulerError::InvalidHandler { .. }) => {
                        assert!(e.to_string().contains(says) && e.to_string().contains(handler), "{e}");
                    }
                    other => panic!("expected the start refused, got {other:?}"),
                }
            }
        })
    })
    .await;
}
