//! The probes a kubelet (or any supervisor) asks, over a real socket:
//! `/livez` without the database, `/startupz` once serving, `/readyz` the
//! database and the node beside the server a live member, each without a
//! token; a failed one a 503 saying why.

use crate::http;

use quartz_core::engine::SchedulerBuilder;
use quartz_testkit::{Kind, TestDb};
use quartz_web::{Access, Web};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probes_follow_the_node_and_need_no_token() {
    quartz_testkit::run(Kind::SqliteFile, |db| Box::pin(probes(db))).await;
}

async fn probes(db: &TestDb) {
    let node = SchedulerBuilder::new("probes")
        .settings(quartz_testkit::fast_settings())
        .start(db.store().await)
        .await
        .unwrap();
    let access = Access::tokens(Some("admin".into()), Some("reader".into()));
    let addr = http::serve(Web::new(node.admin()).access(access).node(node.probe()).router()).await;
    for path in ["/livez", "/startupz", "/readyz", "/healthz"] {
        let answer = http::get(addr, "GET", path, None).await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    }
    let ready = http::get(addr, "GET", "/readyz", None).await;
    assert!(ready.body.contains(&node.node().node_id), "{}", ready.body);

    // A node that stopped is not ready; the process still lives.
    node.shutdown().await;
    let ready = http::get(addr, "GET", "/readyz", None).await;
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert!(ready.body.contains("stopped"), "{}", ready.body);
    assert_eq!(http::get(addr, "GET", "/livez", None).await.status, 200);

    // Without a node beside it, ready is the database answering.
    let admin = quartz_core::admin::Admin::new(db.store().await, "probes");
    let web_only = http::serve(
        Web::new(admin)
            .access(Access::tokens(None, Some("reader".into())))
            .router(),
    )
    .await;
    let ready = http::get(web_only, "GET", "/readyz", None).await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    assert!(ready.body.contains("database_now"), "{}", ready.body);
}
