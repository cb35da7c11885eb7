//! Three nodes in one process under a steady load, each on a store that fails
//! calls, stalls them, or commits and then loses the answer, at calls chosen
//! by a seed ([`quartz_testkit::faults`]). After each seed the faults stop,
//! the cluster settles, and the guarantees (README, Guarantees) must hold by
//! the nodes' run logs, which they write apart from the store: the run log
//! checker ([`quartz::runlog::check`]) finds nothing lost, run twice,
//! started early or late without a misfire record, or started by a fenced
//! node, and no disagreement between the ledger and the runs. The ledger is
//! compared, not trusted: its audit must find nothing either, and every
//! fire time of the faulted span must have ended there (no fire left
//! claimed or running).
//!
//! ```text
//! cargo test --test integration faults:: -- --nocapture                        # the CI seeds and the regression seeds
//! QUARTZ_FAULT_SEEDS=50 cargo test --test integration faults:: -- --nocapture  # 50 new seeds per backend
//! QUARTZ_FAULT_SEED=1234 cargo test --test integration faults:: -- --nocapture # one seed again
//! QUARTZ_FAULT_RATE=100 cargo test --test integration faults:: -- --nocapture  # 10 % of calls hit (default 4 %)
//! ```
//!
//! A seed that fails is printed with the command that runs it again; add it to
//! [`REGRESSIONS`] once fixed.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use quartz::audit::{AuditParams, audit};
use quartz::prelude::*;
use quartz::store::ExecuteSpec;
use quartz::store::{FireRecord, FireState};
use quartz::trigger::{Schedule, Trigger};
use quartz_testkit::faults::{Faults, FaultyStore, Injected};
use quartz_testkit::{Kind, OnTestClock, TestDb, ledger};

const CLUSTER: &str = "faults";
/// Seeds that once failed, with their rate, run on every backend every time:
/// - a start statement's answer lost, then the confirmation of the fire hit
///   too: the fire stayed running, never run (SQLite, 10 %);
/// - a node declared dead and rejoined started, under its new incarnation, a
///   fire its old incarnation had claimed and the new one had taken over:
///   run twice, and left running (SQLite, 10 %).
const REGRESSIONS: &[(u64, u64)] = &[(1_795_465_245_864, 100), (1_795_465_462_490, 100)];
/// New seeds per backend when `QUARTZ_FAULT_SEEDS` is not set.
const SEEDS: u64 = 2;
/// New seeds on the in-memory store, whose clock the test steps.
const SEEDS_PAUSED: u64 = 16;
/// Calls hit per thousand.
const RATE_PER_MILLE: u64 = 40;
/// How long the faults last; then how long the cluster runs on before the
/// ledger is judged (so that a late second run would be seen), and the most
/// it has to settle (every fire time of the faulted span ended) on a loaded
/// machine.
const FAULTS_FOR: Duration = Duration::from_secs(8);
const SETTLE: Duration = Duration::from_secs(7);
const SETTLE_AT_MOST: Duration = Duration::from_secs(30);
const JOBS: usize = 12;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_file() {
    seeds(Kind::SqliteFile).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    seeds(Kind::Postgres).await;
}

/// On tokio's paused clock, which moves only when the three nodes all wait:
/// a seed's 15 s of faults and settling pass in well under a second, so this
/// backend runs [`SEEDS_PAUSED`] new seeds where the others run [`SEEDS`].
#[tokio::test(start_paused = true)]
async fn memory() {
    seeds(Kind::Memory).await;
}

/// The seeds of this run, with their rates: one asked for, or the
/// regressions and new ones.
fn chosen_seeds(kind: Kind) -> Vec<(u64, u64)> {
    if let Some(seed) = std::env::var("QUARTZ_FAULT_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![(seed, rate())];
    }
    let fresh = std::env::var("QUARTZ_FAULT_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if kind == Kind::Memory { SEEDS_PAUSED } else { SEEDS });
    let base = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    REGRESSIONS
        .iter()
        .copied()
        .chain((0..fresh).map(|i| (base + i, rate())))
        .collect()
}

/// Calls hit per thousand: `QUARTZ_FAULT_RATE`, or the default.
fn rate() -> u64 {
    std::env::var("QUARTZ_FAULT_RATE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(RATE_PER_MILLE)
}

async fn seeds(kind: Kind) {
    quartz_testkit::log_if_asked();
    let began = Instant::now();
    let (mut fires, mut faults) = (0, Injected::default());
    let mut seeds = chosen_seeds(kind);
    if std::env::var_os("QUARTZ_FAULT_SEED").is_none() {
        // The backends run at once: each its own new seeds.
        let apart = match kind {
            Kind::Postgres => 1_000,
            Kind::Memory => 2_000,
            _ => 0,
        };
        for (s, _) in seeds.iter_mut().skip(REGRESSIONS.len()) {
            *s += apart;
        }
    }
    // On a server the seeds run at once, each on a database of its own: a
    // seed waits on the clock far more than it works. On the paused clock
    // (the in-memory store) they run one after another.
    // Two at a time on PostgreSQL: a seed's three nodes and its reader take
    // up to 21 of the server's connections, and other tests take turns on
    // it meanwhile (four at a time at most, quartz_testkit's turns).
    let at_once = Arc::new(tokio::sync::Semaphore::new(if kind == Kind::Postgres { 2 } else { 4 }));
    let (mut runs, mut running) = (Vec::new(), Vec::new());
    for &(seed, rate) in &seeds {
        let at_once = Arc::clone(&at_once);
        let run = async move {
            let _turn = at_once.acquire_owned().await.ok()?;
            let db = TestDb::new(kind).await?;
            let outcome = one_seed(&db, seed, rate).await;
            db.drop_db().await;
            Some((seed, rate, outcome))
        };
        if kind == Kind::Memory {
            runs.push(run.await);
        } else {
            running.push(tokio::spawn(run));
        }
    }
    for seed in running {
        match seed.await {
            Ok(run) => runs.push(run),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    for run in runs {
        let Some((seed, rate, outcome)) = run else { return };
        match outcome {
            Ok((n, injected)) => {
                fires += n;
                faults.errors += injected.errors;
                faults.delays += injected.delays;
                faults.stalls += injected.stalls;
                faults.lost_answers += injected.lost_answers;
            }
            Err(why) => panic!(
                "{kind:?}, seed {seed} at {rate}/1000: {why}\nrun it again: QUARTZ_FAULT_SEED={seed} QUARTZ_FAULT_RATE={rate} \
                 cargo test --test integration faults::{} -- --nocapture",
                test_name(kind)
            ),
        }
    }
    println!(
        "{kind:?}: {} seeds, {fires} fires checked, faults injected: {} errors, {} delays ({} past a second), \
         {} lost answers; {:.1} s",
        seeds.len(),
        faults.errors,
        faults.delays,
        faults.stalls,
        faults.lost_answers,
        began.elapsed().as_secs_f64()
    );
}

fn test_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Postgres => "postgres",
        Kind::Memory => "memory",
        _ => "sqlite_file",
    }
}

/// Even-numbered jobs request recovery.
fn requests_recovery(job: &str) -> bool {
    job.trim_start_matches("job-")
        .parse::<usize>()
        .is_ok_and(|i| i % 2 == 0)
}

fn settings() -> Settings {
    quartz_testkit::fast_settings()
}

/// One seed: the cluster under faults, then settled, then checked. Returns
/// the fire times checked and the faults injected, or what broke.
async fn one_seed(db: &TestDb, seed: u64, rate: u64) -> Result<(usize, Injected), String> {
    let logs = quartz_testkit::RunLogs::new();
    let settings = || Settings {
        run_log: Some(logs.dir()),
        ..settings()
    };
    let plans: Vec<Arc<Faults>> = (0..3)
        .map(|i| Faults::new(seed.wrapping_mul(31).wrapping_add(i), rate))
        .collect();
    for plan in &plans {
        plan.set_enabled(false);
    }
    let mut nodes = Vec::new();
    for plan in &plans {
        let node = SchedulerBuilder::new(CLUSTER)
            .settings(settings())
            .on_test_clock()
            .handler("record", |_| Ok(()))
            .start(FaultyStore::new(db.store().await, Arc::clone(plan)))
            .await
            .map_err(|e| format!("a node did not start: {e}"))?;
        nodes.push(node);
    }
    let store = db.store().await.scoped(CLUSTER);
    let now = store.now().await.unwrap().as_millis();
    let start = Timestamp::from_millis((now / 1_000 + 2) * 1_000);
    for i in 0..JOBS {
        let mut job = JobSpec::new(format!("job-{i:02}"), "record");
        job.requests_recovery = requests_recovery(&job.name);
        let cron = if i % 4 == 3 { "*/2 * * * * ?" } else { "* * * * * ?" };
        let trigger = Trigger::new(Schedule::cron(CronExpression::parse(cron).unwrap(), Tz::UTC), start).unwrap();
        nodes[i % 3]
            .add_job(&JobDefinition::of_specs(&job, &[ExecuteSpec::new(trigger)]))
            .await
            .unwrap();
    }
    for plan in &plans {
        plan.set_enabled(true);
    }
    tokio::time::sleep_until(tokio::time::Instant::now() + FAULTS_FOR).await;
    for plan in &plans {
        plan.set_enabled(false);
    }
    let faults_end = store.now().await.unwrap();
    let params = AuditParams {
        since: start,
        until: faults_end,
        misfire_threshold: settings().misfire.threshold,
    };
    // The cluster settles: every fire time of the faulted span ends, or the
    // deadline passes and what is still wrong is the answer. A loaded
    // machine takes longer; a fire lost for good stays lost.
    let settled = tokio::time::Instant::now() + SETTLE;
    let deadline = tokio::time::Instant::now() + SETTLE_AT_MOST;
    tokio::time::sleep_until(settled).await;
    let (report, broken) = loop {
        let rows = ledger(&store, CLUSTER).await;
        let report = audit(&*store, &params).await.unwrap();
        let mut broken: Vec<String> = report
            .violations
            .iter()
            .map(|v| format!("audit: {} {} at {}: {}", v.kind.as_str(), v.job, v.fire_time, v.detail))
            .collect();
        broken.extend(unended(&rows, faults_end));
        let runs = logs
            .check(&*store, start, faults_end, settings().misfire.threshold)
            .await;
        broken.extend(runs.violations.iter().map(|v| format!("run log: {v:?}")));
        if broken.is_empty() || tokio::time::Instant::now() >= deadline {
            break (report, broken);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for node in nodes {
        node.shutdown().await;
    }
    let injected = plans
        .iter()
        .map(|p| p.injected())
        .fold(Injected::default(), |a, b| Injected {
            errors: a.errors + b.errors,
            delays: a.delays + b.delays,
            stalls: a.stalls + b.stalls,
            lost_answers: a.lost_answers + b.lost_answers,
        });
    if broken.is_empty() {
        Ok((usize::try_from(report.fire_times_checked).unwrap(), injected))
    } else {
        Err(format!(
            "{injected:?}, fire times from {start} to {faults_end} audited\n{}",
            broken.join("\n")
        ))
    }
}

/// Fires of the faulted span still claimed or running after the settling
/// time: a fire that never ends is a fire lost.
fn unended(rows: &[FireRecord], faults_end: Timestamp) -> Vec<String> {
    rows.iter()
        .filter(|f| f.fire_time < faults_end && matches!(f.state, FireState::Claimed | FireState::Running))
        .map(|f| {
            format!(
                "fire {} (execute {}, {}) still {:?} after settling",
                f.id, f.execute_id, f.fire_time, f.state
            )
        })
        .collect()
}
