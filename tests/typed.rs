//! Typed jobs: a type names its kind and payload once; a node registered
//! with it runs its fires with the payload decoded, and a row of its kind
//! whose payload does not fit fails saying which job and which type.

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Kind, TestDb, wait_for};
use quartz::admin::{FireFilter, JobDefinition};
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
