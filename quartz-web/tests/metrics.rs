//! `/metrics` after a short run: a node on a SQLite file fires a job five
//! times a second, and a Prometheus scrape of the server shows its counters
//! moving with the ledger, the outcomes by handler and the pool and cluster
//! gauges.

#![allow(clippy::unwrap_used)]

mod http;

use std::time::Duration;

use quartz_core::admin::{FireFilter, JobDefinition, TriggerDefinition};
use quartz_core::engine::SchedulerBuilder;
use quartz_testkit::{Kind, TestDb, wait_for};
use quartz_web::{Access, Web};

const CLUSTER: &str = "metrics-web";

/// The value of a counter in a Prometheus text exposition.
fn value(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_shows_the_counters_moving() {
    quartz_testkit::run(Kind::SqliteFile, |db| Box::pin(scrape(db))).await;
}

async fn scrape(db: &TestDb) {
    let handle = quartz_web::install_prometheus().unwrap();
    let node = SchedulerBuilder::new(CLUSTER)
        .settings(quartz_testkit::fast_settings())
        .handler("tick", |_| Ok(()))
        .start(db.store().await)
        .await
        .unwrap();
    let access = Access::tokens(None, Some("reader".into()));
    let addr = http::serve(Web::new(node.admin()).access(access).metrics(handle.clone()).router()).await;
    let before = http::get(addr, "GET", "/metrics", Some("reader")).await;
    assert_eq!(before.status, 200, "{}", before.body);
    assert!(before.header("content-type").unwrap().starts_with("text/plain"));

    let mut job = JobDefinition::new("tick", "tick");
    job.triggers.push(TriggerDefinition::every(Duration::from_millis(200)));
    node.admin().job_add(&job).await.unwrap();
    wait_for(Duration::from_secs(20), "5 succeeded fires", || async {
        let filter = FireFilter {
            state: Some("succeeded".into()),
            ..FireFilter::default()
        };
        let n = node.admin().fires(&filter).await.unwrap().items.len();
        if n >= 5 { Ok(()) } else { Err(format!("{n} so far")) }
    })
    .await;
    wait_for(Duration::from_secs(10), "the scrape to count them", || async {
        let text = http::get(addr, "GET", "/metrics", Some("reader")).await.body;
        let succeeded = value(&text, "quartz_fires_succeeded_total");
        let claimed = value(&text, "quartz_fires_claimed_total");
        let polls = value(&text, "quartz_polls_total");
        let by_handler = text.lines().any(|l| {
            l.starts_with("quartz_fire_outcomes_total{")
                && l.contains("handler=\"tick\"")
                && l.contains("outcome=\"succeeded\"")
        });
        let gauges = ["quartz_pool_threads", "quartz_nodes_live", "quartz_node_phase"]
            .iter()
            .all(|g| text.contains(&format!("\n{g}{{")));
        if succeeded >= 5.0
            && claimed >= succeeded
            && polls >= 1.0
            && text.contains("quartz_fire_lateness_seconds")
            && by_handler
            && gauges
        {
            Ok(())
        } else {
            Err(format!("succeeded {succeeded}, claimed {claimed}, polls {polls}"))
        }
    })
    .await;
    assert_eq!(http::get(addr, "GET", "/metrics", None).await.status, 401);

    // The cluster's gauges, read from the database at the scrape.
    let text = http::get(addr, "GET", "/metrics", Some("reader")).await.body;
    let gauge = |name: &str, labels: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(labels))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{name} with {labels}: {text}"))
    };
    assert_eq!(gauge("quartz_cluster_database_up", "scheduler=\"metrics-web\""), 1.0);
    assert_eq!(gauge("quartz_cluster_nodes", "state=\"live\""), 1.0);
    assert_eq!(gauge("quartz_cluster_nodes", "state=\"silent\""), 0.0);
    assert_eq!(gauge("quartz_cluster_overdue_triggers", "scheduler"), 0.0);
    assert!(gauge("quartz_cluster_recent_fires", "state=\"succeeded\"") >= 5.0);
    for name in quartz_web::health::ALL {
        assert!(text.contains(&format!("\n{name}{{")), "{name} exported: {text}");
    }
    // The exposition as Prometheus's own parser reads it.
    if let Some(promtool) = quartz_testkit::tools::debian_program("promtool", "prometheus", "check the exposition") {
        use std::io::Write;
        let mut check = std::process::Command::new(promtool)
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        check.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let out = check.wait_with_output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!said.contains("error while linting"), "{said}");
    }
    node.shutdown().await;
    database_down(&handle).await;
}

/// A scrape while the database does not answer (its sockets open and
/// silent, as behind a network that drops packets) answers within two
/// seconds, well inside Prometheus's scrape timeout, with
/// `quartz_cluster_database_up 0`; `/healthz` says 503 as fast.
async fn database_down(handle: &metrics_exporter_prometheus::PrometheusHandle) {
    use quartz_testkit::proxy::{FaultProxy, Mode};
    let Some(db) = TestDb::new(Kind::Postgres).await else {
        return;
    };
    let upstream = db.url.split_once('@').unwrap().1.split('/').next().unwrap().to_owned();
    let proxy = FaultProxy::start(&upstream);
    let store = quartz_store::AnyStore::connect(&proxy.url(&db.url)).await.unwrap();
    let admin = quartz_core::admin::Admin::new(store.scoped("metrics-down").shared().clone(), "metrics-down");
    let access = Access::tokens(None, Some("reader".into()));
    let addr = http::serve(Web::new(admin).access(access).metrics(handle.clone()).router()).await;
    proxy.set(Mode::Stall);
    let asked = std::time::Instant::now();
    let scrape = http::get(addr, "GET", "/metrics", Some("reader")).await;
    let took = asked.elapsed();
    assert_eq!(scrape.status, 200, "{}", scrape.body);
    assert!(took < Duration::from_secs(2), "the scrape took {took:?}");
    let up = scrape
        .body
        .lines()
        .find(|l| l.starts_with("quartz_cluster_database_up{") && l.contains("scheduler=\"metrics-down\""))
        .unwrap_or_else(|| panic!("{}", scrape.body));
    assert!(up.ends_with(" 0"), "{up}");
    for probe in ["/healthz", "/readyz"] {
        let asked = std::time::Instant::now();
        let health = http::get(addr, "GET", probe, None).await;
        assert_eq!(health.status, 503, "{probe}: {}", health.body);
        assert!(asked.elapsed() < Duration::from_secs(2), "{probe}");
    }
    // The process lives, whatever the database does.
    assert_eq!(http::get(addr, "GET", "/livez", None).await.status, 200);
    proxy.set(Mode::Pass);
    drop(store);
    db.drop_db().await;
}
