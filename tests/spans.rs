//! One tracing span per fire, entered around the handler: a handler's own log
//! lines, sync or async (across its awaits), carry the job, the trigger, the
//! fire time, the attempt, the fire's id and the node.

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use common::{Kind, TestDb, wait_for};
use parking_lot::Mutex;
use quartz::prelude::*;
use quartz::store::ExecuteSpec;
use quartz::trigger::{Schedule, Trigger};

const CLUSTER: &str = "spans-cluster";

/// The log lines written, shared with the subscriber.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

static LINES: std::sync::OnceLock<Lines> = std::sync::OnceLock::new();

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handlers_own_log_lines_carry_its_fire() {
    let lines = LINES.get_or_init(Lines::default).clone();
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || lines.clone())
        .init();
    common::run(Kind::SqliteFile, |db| Box::pin(spans(db))).await;
}

async fn spans(db: &TestDb) {
    let node = SchedulerBuilder::new(CLUSTER)
        .settings(common::fast_settings())
        .handler("sync", |_| {
            tracing::info!("inside the sync handler");
            Ok(())
        })
        .async_handler("async", |_| async {
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            tracing::info!("inside the async handler, after its awaits");
            Ok(())
        })
        .start(db.store().await)
        .await
        .unwrap();
    let once = |at: Timestamp| ExecuteSpec::new(Trigger::new(Schedule::Once, at).unwrap());
    let at = db.store().await.now().await.unwrap().saturating_add_millis(500);
    node.add_job(&JobDefinition::of_specs(&JobSpec::new("sync-job", "sync"), &[once(at)]))
        .await
        .unwrap();
    node.add_job(&JobDefinition::of_specs(
        &JobSpec::new("async-job", "async"),
        &[once(at)],
    ))
    .await
    .unwrap();
    let text = || String::from_utf8_lossy(&LINES.get().unwrap().0.lock()).into_owned();
    wait_for(Duration::from_secs(20), "both handlers' lines", || async {
        let text = text();
        let found = ["inside the sync handler", "inside the async handler"]
            .iter()
            .all(|m| text.contains(m));
        if found { Ok(()) } else { Err(text) }
    })
    .await;
    node.shutdown().await;
    let text = text();
    for (marker, job) in [
        ("inside the sync handler", "sync-job"),
        ("inside the async handler", "async-job"),
    ] {
        let line = text.lines().find(|l| l.contains(marker)).unwrap();
        assert!(line.contains("fire{"), "the line is in the fire's span: {line}");
        for field in [
            job,
            "attempt=1",
            "fire_id=",
            "execute=",
            "fire_time=",
            "node=",
            "run_kind=\"scheduled\"",
            "late_ms=",
            CLUSTER,
        ] {
            assert!(line.contains(field), "{field} missing: {line}");
        }
    }
}
