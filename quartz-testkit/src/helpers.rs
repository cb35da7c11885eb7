//! What the suites share beside their databases: the nodes' logs, a node
//! registered, the ledger read whole, waiting on a condition with a
//! deadline (real or paused time), and jobs that fire every second.

/// The nodes' logs on the test's output, when `RUST_LOG` asks for them.
pub fn log_if_asked() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

pub use quartz_core::testing::conformance::fixtures::register as register_node;

/// Every ledger row of a scheduler, newest first, through the history pages.
pub async fn ledger(
    store: &impl std::ops::Deref<Target = dyn quartz_core::store::Store>,
    scheduler: &str,
) -> Vec<quartz_core::store::FireRecord> {
    quartz_core::testing::conformance::fixtures::ledger(&store.scoped(scheduler)).await
}

/// Whether the test runs on tokio's paused clock (`start_paused`): it does
/// not move while the thread sleeps a millisecond of wall-clock time.
pub fn clock_is_paused() -> bool {
    let before = tokio::time::Instant::now();
    std::thread::sleep(std::time::Duration::from_millis(1));
    tokio::time::Instant::now() == before
}

/// A node on the test's clock: stepped when the test runs on tokio's paused
/// clock ([`clock_is_paused`]), the wall clock otherwise.
pub trait OnTestClock {
    /// The builder, on the stepped clock when the test's clock is paused.
    #[must_use]
    fn on_test_clock(self) -> Self;
}

impl OnTestClock for quartz_core::engine::SchedulerBuilder {
    fn on_test_clock(self) -> Self {
        if clock_is_paused() { self.stepped_clock() } else { self }
    }
}

/// Waits until `cond` holds, failing the test with `what` after `limit`.
pub async fn wait_until<F, Fut>(limit: std::time::Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if cond().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Waits until `check` returns `Ok`, failing the test with `what` and the
/// last state `check` described after `limit`.
pub async fn wait_for<F, Fut>(limit: std::time::Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let state = match check().await {
            Ok(()) => return,
            Err(state) => state,
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}; last seen: {state}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A run of jobs firing every second, as [`every_second_jobs`] stored it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EverySecond {
    /// The run's first fire time.
    pub start: quartz_core::Timestamp,
    /// Its last instant (the last fire time plus 999 ms).
    pub end: quartz_core::Timestamp,
    /// The fire times of its triggers as stored ([`scheduled_fire_times`]):
    /// the jobs times the seconds, less the seconds of any trigger the
    /// store started later because it was added too close to its start.
    pub fire_times: u64,
}

/// A steady load for a cluster test: `jobs` jobs of `handler`, each firing
/// every second (cron `* * * * * ?`) for `seconds` seconds from the
/// database's next whole second plus `lead_s`, added through the nodes in
/// turn.
pub async fn every_second_jobs(
    nodes: &[quartz_core::engine::Scheduler],
    jobs: usize,
    handler: &str,
    lead_s: i64,
    seconds: i64,
) -> EverySecond {
    use quartz_core::admin::JobDefinition;
    use quartz_core::store::{ExecuteSpec, JobSpec};
    let now = nodes[0].store().now().await.unwrap().as_millis();
    let start = quartz_core::Timestamp::from_millis((now / 1000 + lead_s) * 1000);
    let end = start.saturating_add_millis(seconds * 1000 - 1);
    for i in 0..jobs {
        let trigger = quartz_core::trigger::Trigger::cron("* * * * * ?", "UTC", start)
            .unwrap()
            .with_end(end)
            .unwrap();
        nodes[i % nodes.len()]
            .add_job(&JobDefinition::of_specs(
                &JobSpec::new(format!("job-{i:02}"), handler),
                &[ExecuteSpec::new(trigger)],
            ))
            .await
            .unwrap();
    }
    let scheduled = scheduled_fire_times(&**nodes[0].store(), start, end.saturating_add_millis(1)).await;
    let fire_times = scheduled.values().map(|t| t.len() as u64).sum();
    EverySecond { start, end, fire_times }
}

/// The fire times of the triggers of `store`'s scheduler from `since` up
/// to (not including) `until`, as the triggers are stored, by execute.
///
/// A trigger whose first fire time is less than
/// [`CHANGE_VISIBILITY_MS`](quartz_core::store::CHANGE_VISIBILITY_MS) away
/// when it is stored starts when every node has seen it instead
/// ([`Trigger::visible_from`](quartz_core::trigger::Trigger::visible_from)):
/// on a loaded machine, jobs added one by one just before a run's start get
/// fewer fire times than the run's grid. What a test expects to run is what
/// this reads.
pub async fn scheduled_fire_times(
    store: &dyn quartz_core::store::Store,
    since: quartz_core::Timestamp,
    until: quartz_core::Timestamp,
) -> std::collections::BTreeMap<i64, Vec<quartz_core::Timestamp>> {
    let mut times = std::collections::BTreeMap::new();
    for job in store.list_jobs().await.unwrap() {
        let detail = store.get_job(&job.spec.name).await.unwrap().expect("a listed job");
        for e in &detail.executes {
            let mut at = Vec::new();
            let mut t = e.trigger.fire_time_after(since.saturating_add_millis(-1));
            while let Some(next) = t.filter(|next| *next < until) {
                at.push(next);
                t = e.trigger.fire_time_after(next);
            }
            times.insert(e.id, at);
        }
    }
    times
}

/// Waits, up to `limit`, until the database's clock is a second past `end`
/// and no fire of `scheduler` is claimed or running: every fire time of a
/// run has ended.
pub async fn wait_run_ended(
    store: &impl std::ops::Deref<Target = dyn quartz_core::store::Store>,
    scheduler: &str,
    end: quartz_core::Timestamp,
    limit: std::time::Duration,
) {
    use quartz_core::store::FireState;
    wait_until(limit, "every fire time of the run ended", || async {
        if store.now().await.is_ok_and(|t| t <= end.saturating_add_millis(1_000)) {
            return false;
        }
        let rows = ledger(store, scheduler).await;
        rows.iter()
            .all(|f| !matches!(f.state, FireState::Claimed | FireState::Running))
    })
    .await;
}

/// A fresh directory for the nodes' run logs, removed when dropped, and the
/// run log checker over it: the suites count lost fires, fires run twice
/// and starts by fenced nodes from what the handlers did, not from the
/// ledger.
pub struct RunLogs(crate::TempDir);

impl Default for RunLogs {
    fn default() -> RunLogs {
        RunLogs::new()
    }
}

impl RunLogs {
    /// A fresh, empty directory.
    pub fn new() -> RunLogs {
        let dir = std::env::temp_dir().join(crate::unique("quartz-runs"));
        std::fs::create_dir_all(&dir).unwrap();
        RunLogs(crate::TempDir(dir))
    }

    /// Its path, for [`Settings::run_log`](quartz_core::engine::Settings::run_log).
    pub fn dir(&self) -> std::path::PathBuf {
        self.0.0.clone()
    }

    /// The checker's report on the fire times in `[since, until)` of the
    /// scheduler `store` is scoped to.
    pub async fn check(
        &self,
        store: &dyn quartz_core::store::Store,
        since: quartz_core::Timestamp,
        until: quartz_core::Timestamp,
        misfire_threshold: std::time::Duration,
    ) -> quartz_core::runlog::RunCheck {
        let files = quartz_core::runlog::read_dir(&self.0.0).unwrap();
        let params = quartz_core::runlog::CheckParams {
            since,
            until,
            misfire_threshold,
            ..quartz_core::runlog::CheckParams::last_hour(until)
        };
        quartz_core::runlog::check(store, &files, &params).await.unwrap()
    }

    /// As [`check`](Self::check), failing the test on any violation (the
    /// first ten listed).
    pub async fn assert_clean(
        &self,
        store: &dyn quartz_core::store::Store,
        since: quartz_core::Timestamp,
        until: quartz_core::Timestamp,
        misfire_threshold: std::time::Duration,
    ) -> quartz_core::runlog::RunCheck {
        let report = self.check(store, since, until, misfire_threshold).await;
        assert!(
            report.violations.is_empty(),
            "the run log checker found {} violation(s): {:#?}",
            report.violations.len(),
            &report.violations[..report.violations.len().min(10)]
        );
        report
    }
}
