//! The reliability suite: the guarantees (README, Guarantees) under the faults real
//! services meet, on PostgreSQL, MariaDB and Redis, with three node processes under a
//! steady load of one-second and sub-minute triggers (some requesting
//! recovery), their clocks an hour apart (libfaketime).
//!
//! Faults, one phase each: SIGKILL of a random node at a random moment (then
//! restarted, as a supervisor would), SIGSTOP past `dead_after` then SIGCONT,
//! connections killed server-side, the database server stopped past
//! `dead_after` and started again (Redis: a `redis-server` of the suite's
//! own, append-only with `appendfsync always`, killed with SIGKILL and
//! restarted from its append-only file), the database's commits hung with
//! its connections open, the path between one node (which runs in a
//! network namespace of its own) and the database dropping packets both
//! ways and each way alone, each of these last two with SIGTERM to a node
//! in the middle, a database backend stopped (SIGSTOP) mid-statement
//! (PostgreSQL: one node's backend process; MariaDB and Redis: the server,
//! which serves every connection from one process), the whole
//! cluster down past the misfire threshold, the pool saturated by slow jobs,
//! and bad input through the API, the CLI and rows corrupted by hand, with
//! handlers that panic or never return. Beside the PostgreSQL run, a run of
//! its own (the `reliability/failover.rs` module) puts PostgreSQL on a
//! primary and a synchronous standby of the suite's own and kills the
//! primary under the cluster, then, on a pair of its own, promotes the
//! standby with the old primary left up. After each run the nodes' run
//! logs are judged by the run log checker (`quartz audit --runs`), the
//! ledger by `quartz audit` and by the suite's own checks, and a summary
//! table per backend is written to a results file. The long run injects
//! every fault once, then faults at random.
//!
//! ```text
//! cargo test -p quartz-cli --test reliability -- --nocapture            # short: about 150 s, in CI
//! QUARTZ_RELIABILITY_MINUTES=10 cargo test -p quartz-cli --test reliability -- --nocapture   # long: writes RELIABILITY.md
//! ```
//!
//! Set-up: libfaketime from Debian's packages (`apt-get install -y
//! libfaketime`), installed by the suite when missing; root, for the
//! network namespace (`ip netns`, `tc`, Debian's iproute2). Stopping and starting
//! the database runs `QUARTZ_PG_STOP` / `QUARTZ_PG_START` and
//! `QUARTZ_MYSQL_STOP` / `QUARTZ_MYSQL_START` (shell commands; defaults: the
//! local servers' own commands). Redis runs on a private `redis-server`
//! (Debian's `redis-server` package) started by the suite.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "reliability/failover.rs"]
mod failover;

use quartz_testkit as common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::netns::{Drop as Lose, NetNs};
use common::proxy::FaultProxy;
use common::redis_server::PrivateRedis;
use common::{Kind, RunLogs, TestDb, ledger};
use quartz_core::cron::{CronExpression, parse_time_zone};
use quartz_core::engine::{SchedulerBuilder, Settings, Strategy};
use quartz_core::misfire::MisfireSettings;
use quartz_core::runlog::{RunViolation, RunViolationKind};
use quartz_core::store::{ExecuteSpec, ExecuteState, FireQuery, FireRecord, FireState, JobSpec, NodeState};
use quartz_core::trigger::{Schedule, Trigger};
use quartz_core::{Timestamp, Tz};
use quartz_store::AnyStore;
use sqlx::{AnyConnection, AssertSqlSafe, Connection, Row};

/// The private Redis server's settings: every write on disk before it is
/// answered, so that a crash loses nothing acknowledged.
const REDIS_SERVER: [&str; 4] = ["--appendonly", "yes", "--appendfsync", "always"];

const NODES: usize = 3;
/// FAKETIME of each node: an hour ahead, an hour behind, on time.
const SKEWS: [&str; NODES] = ["+1h", "-1h", ""];
const MISFIRE_MS: i64 = 2_000;
const DEAD_AFTER_MS: i64 = 2_000;
/// Pool of each node: core, max, queue.
const POOL: (usize, usize, usize) = (4, 8, 32);
/// The node that reaches the database over a path of its own, which the
/// lossy-path phases make drop packets.
const LOSSY: usize = 2;
/// The variable that turns this test binary into a node process.
const NODE_ENV: &str = "QUARTZ_RELIABILITY_NODE";

// ---------------------------------------------------------------- the node

/// The node process of the suite: this test binary started again with
/// `QUARTZ_RELIABILITY_NODE` set, a scheduler embedded as a service would
/// embed it, until SIGTERM. Without the variable it does nothing.
#[test]
#[ignore = "the suite's node process; the suite starts it itself"]
fn node_process() {
    let Ok(spec) = std::env::var(NODE_ENV) else { return };
    let [url, scheduler, node_id, runs]: [&str; 4] = spec.split('\t').collect::<Vec<_>>().try_into().unwrap();
    // The suite reads this line to check the skew is real.
    eprintln!("wall-clock-ms {}", wall_ms());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let store = loop {
            match AnyStore::connect(url).await {
                Ok(s) => break s,
                Err(e) => {
                    eprintln!("waiting for the database: {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        };
        let settings = Settings {
            node_id: Some(node_id.to_owned()),
            poll_interval: Duration::from_millis(500),
            window: Duration::from_millis(1_000),
            heartbeat_interval: Duration::from_millis(300),
            dead_after: Duration::from_millis(DEAD_AFTER_MS.unsigned_abs()),
            misfire: MisfireSettings {
                threshold: Duration::from_millis(MISFIRE_MS.unsigned_abs()),
                ..MisfireSettings::default()
            },
            pool_core: POOL.0,
            pool_max: POOL.1,
            pool_queue: POOL.2,
            shutdown_grace: Duration::from_secs(3),
            // Each node its share of the executes, so that a killed node
            // holds fires; the others take them over after the grace.
            strategy: Strategy::IdHash,
            // What the handlers did, for the suite's checks.
            run_log: Some(runs.into()),
            ..Settings::default()
        };
        let node = SchedulerBuilder::new(scheduler)
            .settings(settings)
            .handler("noop", |_| Ok(()))
            .handler("sleep", |ctx| {
                let ms: u64 = ctx.payload().unwrap_or(100);
                let until = std::time::Instant::now() + Duration::from_millis(ms);
                while std::time::Instant::now() < until && !ctx.is_cancelled() {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Ok(())
            })
            // Reads its payload as JSON, as a real job would.
            .handler("strict", |ctx| {
                let _: serde_json::Value = ctx.payload()?;
                Ok(())
            })
            .handler("panic", |_| panic!("this handler always panics"))
            // Never returns, and ignores the request to stop.
            .handler("hang", |_| {
                loop {
                    std::thread::sleep(Duration::from_secs(3_600));
                }
            })
            .start(store)
            .await
            .expect("a node");
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
        term.recv().await;
        node.shutdown().await;
    });
    std::process::exit(0);
}

fn wall_ms() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

// ---------------------------------------------------------------- the tests

/// PostgreSQL, and beside it PostgreSQL replaced under the cluster: a
/// primary and its synchronous standby of the suite's own, the nodes on the
/// URL that follows the primary ([`failover`]). The two run at once, each
/// to its end, so that the binary's test threads stay one per backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let failover = tokio::spawn(failover::suite());
    let main = tokio::spawn(suite(Kind::Postgres));
    let (main, failover) = (main.await, failover.await);
    for outcome in [main, failover] {
        if let Err(e) = outcome {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb() {
    suite(Kind::MySql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis() {
    suite(Kind::Redis).await;
}

/// How long the long version runs, from `QUARTZ_RELIABILITY_MINUTES`.
fn long_minutes() -> Option<u64> {
    std::env::var("QUARTZ_RELIABILITY_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
}

async fn suite(kind: Kind) {
    // Redis: a server of the suite's own, to crash and restart.
    let server = (kind == Kind::Redis).then(|| PrivateRedis::start(&REDIS_SERVER));
    let db = match &server {
        Some(server) => TestDb::on_redis(&server.url()),
        None => {
            let Some(db) = TestDb::new(kind).await else { return };
            db
        }
    };
    let faketime = faketime_library();
    let mut run = Run::start(&db, label(kind), faketime, server, true).await;
    run.baseline().await;
    match long_minutes() {
        None => {
            run.sigkill().await;
            run.each_fault().await;
            run.bad_input(&db).await;
        }
        Some(minutes) => {
            // Every fault once, so that each has its row in the results;
            // then faults at random until the time given is up.
            let until = std::time::Instant::now() + Duration::from_secs(minutes * 60);
            run.each_fault().await;
            let mut first_bad_input = true;
            while std::time::Instant::now() < until {
                match run.rng.below(13) {
                    12 => run.backend_stopped().await,
                    8 => run.commits_hang().await,
                    9 => run.path_drops(Lose::Both).await,
                    10 => run.path_drops(Lose::Outgoing).await,
                    11 => run.path_drops(Lose::Incoming).await,
                    0 | 1 => run.sigkill().await,
                    2 => run.sigstop().await,
                    3 => run.connections_killed().await,
                    4 => run.database_restart().await,
                    5 => run.outage().await,
                    6 => run.saturation().await,
                    _ if first_bad_input => {
                        first_bad_input = false;
                        run.bad_input(&db).await;
                    }
                    _ => run.sigkill().await,
                }
            }
            if first_bad_input {
                run.bad_input(&db).await;
            }
        }
    }
    let report = run.finish().await;
    write_results(label(kind), &report.markdown);
    println!("{}", report.markdown);
    // A private Redis server went with the run, its keys with it.
    if kind != Kind::Redis {
        db.drop_db().await;
    }
    assert!(
        report.failures.is_empty(),
        "the guarantees did not hold:\n{}",
        report.failures.join("\n")
    );
}

// ---------------------------------------------------------------- set-up

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// A fault the machine cannot inject: a failure under `CI=true`, else said
/// loudly and left out.
fn cannot_inject(what: &str) -> Option<String> {
    let message = format!("\n*** the reliability suite cannot {what}\n");
    assert!(!in_ci(), "{message}*** CI=true: failing instead of leaving it out.");
    eprintln!("{message}*** left out of this run.\n");
    None
}

/// A network namespace for node [`LOSSY`], and a proxy on its link's
/// machine end to the database `url` names (which listens on loopback).
/// `None`, said loudly (a failure under `CI=true`), where the machine
/// cannot make one.
fn lossy_path(url: &str) -> Option<(NetNs, FaultProxy)> {
    let ns = NetNs::create("the reliability suite's lossy path")?;
    let authority = url
        .split_once("://")
        .map(|(_, rest)| rest)
        .and_then(|rest| rest.split(['/', '?']).next())
        .map(|a| a.rsplit_once('@').map_or(a, |(_, host)| host))
        .expect("a database URL with a host");
    assert!(
        authority.contains(':'),
        "the database URL {url} names no port, which the lossy path's proxy needs"
    );
    let proxy = FaultProxy::start_on(ns.machine_ip(), authority);
    Some((ns, proxy))
}

/// A node's `application_name` on PostgreSQL.
fn app_name(i: usize) -> String {
    format!("reliability-node-{i}")
}

/// The local MariaDB (or MySQL) server's process id.
fn mariadb_pid() -> Option<u32> {
    ["mariadbd", "mysqld"].iter().find_map(|name| {
        let out = Command::new("pidof").arg(name).output().ok()?;
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

/// A process stopped with SIGSTOP until dropped (SIGCONT). A detached
/// shell resumes it after a limit too, in case the suite itself dies
/// first: a database server must not stay stopped for the tests after.
struct Stopped {
    pid: u32,
    watchdog: Child,
}

impl Stopped {
    fn stop(pid: u32, limit: Duration) -> Stopped {
        let watchdog = Command::new("sh")
            .args([
                "-c",
                &format!("sleep {}; kill -CONT {pid} 2>/dev/null", limit.as_secs().max(1)),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh, to resume the stopped process in any case");
        let status = Command::new("kill").args(["-STOP", &pid.to_string()]).status().unwrap();
        assert!(status.success(), "kill -STOP {pid}");
        Stopped { pid, watchdog }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.pid.to_string()]).status();
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
    }
}

/// How long a node took to end after SIGTERM, for a phase's detail.
fn took(exit: Option<Duration>) -> String {
    exit.map_or_else(|| "NOT (killed)".to_owned(), |t| format!("{} ms", t.as_millis()))
}

/// libfaketime's library, installing Debian's package when it is missing
/// (see [`common::faketime::library`]).
fn faketime_library() -> Option<PathBuf> {
    common::faketime::library("skew node clocks")
}

/// A small deterministic generator, seeded from the clock (the seed is in the results).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A node process.
struct Node {
    id: String,
    skew: &'static str,
    child: Option<Child>,
    log: PathBuf,
}

/// One fault phase: its fires are those scheduled in `[start, end)`.
struct Phase {
    fault: &'static str,
    injected: u32,
    start: i64,
    /// When the fault was lifted (the node restarted or resumed, the
    /// database back, the slow jobs over).
    lifted: i64,
    end: i64,
    detail: String,
}

/// A node frozen past `dead_after`: it must start nothing under the
/// incarnation it lost after it was declared dead.
struct Fenced {
    node: String,
    incarnation: i64,
    declared_dead_at: i64,
}

/// What a job is for the checks.
struct JobInfo {
    name: String,
    trigger: Trigger,
    recovery: bool,
    /// Its fire times are counted (a job whose schedule the suite corrupts on
    /// purpose is not).
    counted: bool,
}

/// One bad input and what came of it.
struct BadInput {
    via: &'static str,
    input: String,
    outcome: String,
    ok: bool,
}

struct Report {
    markdown: String,
    failures: Vec<String>,
}

struct Run {
    kind: Kind,
    /// The run's name in its report and logs (`PostgreSQL`, ...).
    label: &'static str,
    url: String,
    /// Redis: the suite's own server.
    redis: Option<PrivateRedis>,
    scheduler: String,
    store: AnyStore,
    faketime: Option<PathBuf>,
    nodes: Vec<Node>,
    jobs: HashMap<i64, JobInfo>,
    phases: Vec<Phase>,
    fenced: Vec<Fenced>,
    /// The network namespace node [`LOSSY`] runs in, and the proxy on its
    /// link's machine end through which it reaches the database.
    lossy: Option<(NetNs, FaultProxy)>,
    /// The nodes' run logs: what their handlers did, from which the suite
    /// counts fires lost, run twice and started by a fenced node.
    runs: RunLogs,
    bad: Vec<BadInput>,
    /// Checks to make once the run is over: (job, expected state, text its error must hold).
    later: Vec<(String, FireState, &'static str)>,
    /// Corrupted execute rows: (job, what was done).
    corrupted: Vec<(String, String)>,
    failures: Vec<String>,
    rng: Rng,
    seed: u64,
    /// Database time minus this process's clock.
    offset: i64,
    t0: i64,
    serial: u32,
}

/// Writes that hang on the database, until [`Hang::lift`] (or, whatever
/// happens to the suite, when it is dropped): on PostgreSQL the server's
/// `synchronous_standby_names` set to a standby that does not exist, and a
/// `psql` session opened before, kept waiting on its input, to set it back
/// (the server may have no connection left to give while its commits
/// hang); on MariaDB a session holding `FLUSH TABLES WITH READ LOCK`; on
/// Redis `CLIENT PAUSE … WRITE`, which the server lifts by itself.
struct Hang {
    postgres: Option<Child>,
    mariadb: Option<AnyConnection>,
}

/// What sets PostgreSQL's commits free again.
const PG_RESET: &str = "ALTER SYSTEM RESET synchronous_standby_names;\nSELECT pg_reload_conf();\n";

impl Hang {
    async fn start(kind: Kind, url: &str, redis: Option<&PrivateRedis>, ms: i64) -> Hang {
        match kind {
            Kind::Postgres => {
                let mut reset = Command::new("psql")
                    .args([url, "-X", "-q"])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("psql, PostgreSQL's client");
                // The reset session is connected before the hang begins: a
                // psql that could not connect has exited by now, and then
                // no hang is made.
                tokio::time::sleep(Duration::from_millis(500)).await;
                if let Ok(Some(status)) = reset.try_wait() {
                    panic!("the session to reset PostgreSQL's standby names could not start ({status}): no hang made");
                }
                let hang = Hang {
                    postgres: Some(reset),
                    mariadb: None,
                };
                psql(
                    url,
                    "ALTER SYSTEM SET synchronous_standby_names = 'quartz_reliability_absent'",
                );
                psql(url, "SELECT pg_reload_conf()");
                hang
            }
            Kind::MySql => {
                let mut session = AnyConnection::connect(url).await.unwrap();
                sqlx::query("FLUSH TABLES WITH READ LOCK")
                    .execute(&mut session)
                    .await
                    .unwrap();
                Hang {
                    postgres: None,
                    mariadb: Some(session),
                }
            }
            _ => {
                let server = redis.expect("the suite's own Redis");
                let answer = server.cli(&["CLIENT", "PAUSE", &ms.to_string(), "WRITE"]);
                assert_eq!(answer.trim(), "OK", "CLIENT PAUSE answered {answer:?}");
                Hang {
                    postgres: None,
                    mariadb: None,
                }
            }
        }
    }

    async fn lift(mut self) {
        if let Some(mut session) = self.mariadb.take() {
            let _ = sqlx::query("UNLOCK TABLES").execute(&mut session).await;
            let _ = session.close().await;
        }
        if let Some(reset) = self.postgres.take() {
            tokio::task::block_in_place(|| reset_standby_names(reset));
        }
    }
}

impl Drop for Hang {
    fn drop(&mut self) {
        if let Some(reset) = self.postgres.take() {
            reset_standby_names(reset);
        }
    }
}

/// Commits wait for no standby again, through the session kept for it.
fn reset_standby_names(mut reset: Child) {
    use std::io::Write as _;
    let mut input = reset.stdin.take().expect("the reset session's input");
    let sent = input.write_all(PG_RESET.as_bytes());
    drop(input);
    let status = reset.wait();
    assert!(
        sent.is_ok() && status.is_ok_and(|s| s.success()),
        "the PostgreSQL server may still wait for a standby on every commit: run {PG_RESET}"
    );
}

/// One statement through `psql`, which needs no runtime.
fn psql(url: &str, statement: &str) {
    let status = Command::new("psql")
        .args([url, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", statement])
        .stdout(Stdio::null())
        .status()
        .expect("psql, PostgreSQL's client");
    assert!(status.success(), "psql -c {statement:?}: {status}");
}

impl Drop for Run {
    /// A suite that fails leaves no node process behind.
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn label(kind: Kind) -> &'static str {
    match kind {
        Kind::Postgres => "PostgreSQL",
        Kind::MySql => "MariaDB",
        Kind::Redis => "Redis",
        _ => "SQLite",
    }
}

impl Run {
    /// The run's nodes started on `db` and the load created; with `lossy`,
    /// node [`LOSSY`] in a network namespace of its own.
    async fn start(
        db: &TestDb,
        label: &'static str,
        faketime: Option<PathBuf>,
        redis: Option<PrivateRedis>,
        lossy: bool,
    ) -> Run {
        let kind = db.kind;
        let store = db.store().await.scoped("reliability");
        let offset = store.now().await.unwrap().as_millis() - wall_ms();
        let seed = u64::try_from(wall_ms()).unwrap() | 1;
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("reliability");
        std::fs::create_dir_all(&dir).unwrap();
        let nodes = (0..NODES)
            .map(|i| Node {
                id: format!("node-{i}"),
                skew: SKEWS[i],
                child: None,
                log: dir.join(format!("{}-node-{i}.log", label.replace(' ', "-"))),
            })
            .collect();
        let mut run = Run {
            kind,
            label,
            url: db.url.clone(),
            redis,
            scheduler: "reliability".to_owned(),
            store,
            faketime,
            nodes,
            jobs: HashMap::new(),
            phases: Vec::new(),
            fenced: Vec::new(),
            lossy: lossy.then(|| lossy_path(&db.url)).flatten(),
            runs: RunLogs::new(),
            bad: Vec::new(),
            later: Vec::new(),
            corrupted: Vec::new(),
            failures: Vec::new(),
            rng: Rng(seed),
            seed,
            offset,
            t0: 0,
            serial: 0,
        };
        for i in 0..NODES {
            let _ = std::fs::remove_file(&run.nodes[i].log);
            run.spawn(i);
        }
        run.t0 = (run.now() / 1_000 + 3) * 1_000;
        run.load().await;
        run
    }

    /// Database time, from this process's clock and the offset measured at
    /// the start (so that it is known while the database is down).
    fn now(&self) -> i64 {
        wall_ms() + self.offset
    }

    async fn sleep_until(&self, at: i64) {
        let wait = at - self.now();
        if wait > 0 {
            tokio::time::sleep(Duration::from_millis(wait.unsigned_abs())).await;
        }
    }

    fn spawn(&mut self, i: usize) {
        let runs = self.runs.dir();
        let node = &mut self.nodes[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .unwrap();
        let (mut command, mut url) = match &self.lossy {
            Some((ns, proxy)) if i == LOSSY => (ns.command(std::env::current_exe().unwrap()), proxy.url(&self.url)),
            _ => (Command::new(std::env::current_exe().unwrap()), self.url.clone()),
        };
        if self.kind == Kind::Postgres {
            // Its sessions known by name on the server, for the stopped-backend phase.
            let join = if url.contains('?') { '&' } else { '?' };
            url = format!("{url}{join}application_name={}", app_name(i));
        }
        command
            .args([
                "node_process",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                NODE_ENV,
                format!("{url}\t{}\t{}\t{}", self.scheduler, node.id, runs.display()),
            )
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(faketime) = &self.faketime
            && !node.skew.is_empty()
        {
            command.env("LD_PRELOAD", faketime).env("FAKETIME", node.skew);
        }
        node.child = Some(command.spawn().unwrap());
    }

    fn signal(&self, i: usize, signal: &str) {
        let pid = self.nodes[i].child.as_ref().unwrap().id().to_string();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {pid}");
    }

    fn kill_node(&mut self, i: usize) {
        self.signal(i, "KILL");
        let _ = self.nodes[i].child.take().unwrap().wait();
    }

    /// A store call that the faults may interrupt: retried for 60 seconds.
    async fn retry<T, F, Fut>(&self, what: &str, mut call: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            match call().await {
                Ok(v) => return v,
                Err(e) if std::time::Instant::now() < deadline => {
                    eprintln!("{}: {what}: {e}; retrying", self.label);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("{what}: {e}"),
            }
        }
    }

    async fn create(&mut self, spec: JobSpec, trigger: Trigger, counted: bool) -> i64 {
        let store = self.store.clone();
        let (s2, t2) = (spec.clone(), trigger.clone());
        let job = self
            .retry("creating a job", || {
                let (store, spec, trigger) = (store.clone(), s2.clone(), t2.clone());
                async move {
                    store
                        .create_job(&spec, &[ExecuteSpec::new(trigger)])
                        .await
                        .map_err(|e| e.to_string())
                }
            })
            .await;
        // The trigger as stored: a start of "now" moves to when every node
        // can have seen the job, and the expected fire times follow it.
        let name = spec.name.clone();
        let stored = self
            .retry("reading the job back", || {
                let (store, name) = (store.clone(), name.clone());
                async move {
                    let detail = store.get_job(&name).await.map_err(|e| e.to_string())?;
                    detail
                        .and_then(|d| d.executes.first().map(|e| e.trigger.clone()))
                        .ok_or_else(|| format!("job {name} has no trigger"))
                }
            })
            .await;
        drop(trigger);
        self.jobs.insert(
            job.id,
            JobInfo {
                name: spec.name,
                trigger: stored,
                recovery: spec.requests_recovery,
                counted,
            },
        );
        job.id
    }

    /// The steady load: one-second triggers and sub-minute ones (cron every 5
    /// seconds in three zones, fixed rate 7 s), some long enough to be
    /// running when a node dies, some requesting recovery; and the victims
    /// of the corrupted-row fault.
    async fn load(&mut self) {
        let start = Timestamp::from_millis(self.t0);
        for i in 0..24 {
            let mut job = if i % 3 == 0 {
                JobSpec::new(format!("second-{i:02}"), "noop")
            } else {
                sleep_job(format!("second-{i:02}"), 200)
            };
            job.requests_recovery = i % 4 == 1;
            let trigger = Trigger::new(Schedule::fixed_rate_millis(1_000).unwrap(), start).unwrap();
            self.create(job, trigger, true).await;
        }
        for (i, zone) in ["UTC", "America/New_York", "Asia/Kolkata"].iter().enumerate() {
            for recovery in [false, true] {
                let mut job = sleep_job(format!("cron-{i}-{recovery}"), 300);
                job.requests_recovery = recovery;
                let schedule = Schedule::cron(
                    CronExpression::parse("*/5 * * * * ?").unwrap(),
                    parse_time_zone(zone).unwrap(),
                );
                self.create(job, Trigger::new(schedule, start).unwrap(), true).await;
            }
        }
        for i in 0..4 {
            let mut job = sleep_job(format!("seven-{i}"), 1_500);
            job.requests_recovery = i % 2 == 1;
            let trigger = Trigger::new(Schedule::fixed_rate_millis(7_000).unwrap(), start).unwrap();
            self.create(job, trigger, true).await;
        }
        // Victims of the corrupted-row fault; counted until then would need
        // knowing when: they are left out of the counts.
        let every_second = || Trigger::new(Schedule::fixed_rate_millis(1_000).unwrap(), start).unwrap();
        let cron_every_second = || {
            Trigger::new(
                Schedule::cron(CronExpression::parse("* * * * * ?").unwrap(), Tz::UTC),
                start,
            )
            .unwrap()
        };
        self.create(JobSpec::new("victim-cron", "noop"), cron_every_second(), false)
            .await;
        self.create(JobSpec::new("victim-zone", "noop"), cron_every_second(), false)
            .await;
        self.create(JobSpec::new("victim-kind", "noop"), every_second(), false)
            .await;
        self.create(JobSpec::new("victim-interval", "noop"), every_second(), false)
            .await;
        self.create(JobSpec::new("victim-policy", "noop"), every_second(), false)
            .await;
        let mut strict = JobSpec::new("victim-payload", "strict");
        strict.payload = r#"{"report":"daily"}"#.to_owned();
        self.create(strict, every_second(), true).await;
    }

    fn begin(&self, fault: &'static str) -> Phase {
        let start = self.now();
        eprintln!("{}: {fault} at +{} ms", self.label, start - self.t0);
        Phase {
            fault,
            injected: 0,
            start,
            lifted: start,
            end: start,
            detail: String::new(),
        }
    }

    fn end(&mut self, mut phase: Phase) {
        phase.end = self.now();
        self.phases.push(phase);
    }

    // ------------------------------------------------------------ the faults

    /// Every fault of the suite once, but the bad input.
    async fn each_fault(&mut self) {
        self.sigkill().await;
        self.sigstop().await;
        self.connections_killed().await;
        self.commits_hang().await;
        self.path_drops(Lose::Both).await;
        self.path_drops(Lose::Outgoing).await;
        self.path_drops(Lose::Incoming).await;
        self.backend_stopped().await;
        self.database_restart().await;
        self.outage().await;
        self.saturation().await;
    }

    /// Quiet running with the clocks skewed; checks the skew is real.
    async fn baseline(&mut self) {
        self.sleep_until(self.t0).await;
        let mut phase = self.begin("clock skew: nodes +1 h, -1 h and 0 (the whole run)");
        if self.faketime.is_none() {
            phase.detail = "NOT injected: libfaketime is missing".to_owned();
            self.sleep_until(phase.start + 6_000).await;
            self.end(phase);
            return;
        }
        phase.injected = 2;
        let mut offsets = Vec::new();
        for node in &self.nodes {
            let text = std::fs::read_to_string(&node.log).unwrap_or_default();
            let Some(wall) = text
                .lines()
                .find_map(|l| l.strip_prefix("wall-clock-ms ").and_then(|n| n.parse::<i64>().ok()))
            else {
                self.failures.push(format!("{} did not report its clock", node.id));
                continue;
            };
            // The node wrote this line within seconds of the run's start.
            let off = wall - self.t0;
            let want = match node.skew {
                "+1h" => 3_600_000,
                "-1h" => -3_600_000,
                _ => 0,
            };
            if (off - want).abs() > 60_000 {
                self.failures.push(format!(
                    "{}: clock {off} ms from the database's, wanted about {want} ms: libfaketime did not take",
                    node.id
                ));
            }
            offsets.push(format!("{} {:+.1} min", node.id, off as f64 / 60_000.0));
        }
        phase.detail = format!("node clocks against the database: {}", offsets.join(", "));
        self.sleep_until(phase.start + 6_000).await;
        self.end(phase);
    }

    /// Every node's row, retried while the database is away.
    async fn nodes(&self) -> Vec<quartz_core::store::Node> {
        let store = self.store.clone();
        self.retry("reading the nodes", || {
            let store = store.clone();
            async move { store.list_nodes().await.map_err(|e| e.to_string()) }
        })
        .await
    }

    /// A node's incarnation, and whether it is live.
    async fn node_incarnation(&self, node: &str) -> (i64, bool) {
        // Its row may not be written yet (a node just started).
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(n) = self.nodes().await.into_iter().find(|n| n.node_id == node) {
                return (n.incarnation, n.state == NodeState::Live);
            }
            assert!(std::time::Instant::now() < deadline, "no row for node {node}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// How many fires in `state` a node's incarnation holds.
    async fn held(&self, node: &str, incarnation: i64, state: FireState) -> usize {
        let query = FireQuery {
            state: Some(state),
            limit: 100_000,
            ..FireQuery::new()
        };
        let store = self.store.clone();
        let fires = self
            .retry("reading the open fires", || {
                let (store, query) = (store.clone(), query.clone());
                async move { store.fires(&query).await.map_err(|e| e.to_string()) }
            })
            .await;
        fires
            .iter()
            .filter(|f| {
                f.owner
                    .as_ref()
                    .is_some_and(|o| o.node_id == node && o.incarnation == incarnation)
            })
            .count()
    }

    /// SIGKILL of a random node at a random moment; restarted a second later.
    async fn sigkill(&mut self) {
        let mut phase = self.begin("SIGKILL of a random node, restarted 1 s later");
        tokio::time::sleep(Duration::from_millis(self.rng.below(1_000))).await;
        let i = usize::try_from(self.rng.below(NODES as u64)).unwrap();
        let id = self.nodes[i].id.clone();
        let (incarnation, _) = self.node_incarnation(&id).await;
        self.kill_node(i);
        let killed = self.now();
        phase.injected = 1;
        // What it held when it died (nothing recovers it before it restarts).
        let claimed = self.held(&id, incarnation, FireState::Claimed).await;
        let running = self.held(&id, incarnation, FireState::Running).await;
        phase.detail = format!(
            "{id} at +{} ms holding {claimed} claimed, {running} running",
            killed - self.t0
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.spawn(i);
        phase.lifted = killed;
        self.sleep_until(phase.start + 6_000).await;
        self.end(phase);
    }

    /// SIGSTOP past `dead_after`, then SIGCONT: the node is declared dead
    /// while frozen, starts nothing it lost, and rejoins.
    async fn sigstop(&mut self) {
        let mut phase = self.begin("SIGSTOP past dead_after, then SIGCONT");
        let i = usize::try_from(self.rng.below(NODES as u64)).unwrap();
        let id = self.nodes[i].id.clone();
        let (incarnation, _) = self.node_incarnation(&id).await;
        self.signal(i, "STOP");
        let stopped = self.now();
        phase.injected = 1;
        // Wait until another node has declared it dead, then a little longer.
        let deadline = stopped + DEAD_AFTER_MS + 10_000;
        let declared = loop {
            let (inc, live) = self.node_incarnation(&id).await;
            if inc != incarnation || !live {
                break Some(self.now());
            }
            if self.now() > deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        self.signal(i, "CONT");
        let resumed = self.now();
        let Some(declared) = declared else {
            self.failures.push(format!(
                "{id} was frozen {} ms and never declared dead",
                resumed - stopped
            ));
            self.end(phase);
            return;
        };
        self.fenced.push(Fenced {
            node: id.clone(),
            incarnation,
            declared_dead_at: declared,
        });
        // It must come back under a new incarnation.
        let back = loop {
            let (inc, live) = self.node_incarnation(&id).await;
            if inc > incarnation && live {
                break Some(self.now());
            }
            if self.now() > resumed + 15_000 {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        phase.detail = format!(
            "{id} frozen {} ms; declared dead after {} ms; {}",
            resumed - stopped,
            declared - stopped,
            back.map_or_else(
                || "did NOT rejoin".to_owned(),
                |b| format!("rejoined {} ms after SIGCONT", b - resumed)
            )
        );
        if back.is_none() {
            self.failures.push(format!("{id} did not rejoin after SIGCONT"));
        }
        phase.lifted = resumed;
        self.sleep_until(resumed + 5_000).await;
        self.end(phase);
    }

    /// Every connection of the nodes to the database killed server-side,
    /// twice, 1.5 s apart.
    async fn connections_killed(&mut self) {
        let fault = match self.kind {
            Kind::Postgres => "connections killed server-side (pg_terminate_backend)",
            Kind::Redis => "connections killed server-side (CLIENT KILL)",
            _ => "connections killed server-side (KILL)",
        };
        let mut phase = self.begin(fault);
        let mut killed = Vec::new();
        for round in 0..2 {
            if round > 0 {
                tokio::time::sleep(Duration::from_millis(1_500)).await;
            }
            killed.push(self.kill_connections().await);
            phase.injected += 1;
        }
        phase.lifted = self.now();
        phase.detail = format!("connections killed: {}", join(&killed));
        self.sleep_until(phase.lifted + 5_000).await;
        self.end(phase);
    }

    /// The database stops answering writes for a while, its connections
    /// open (PostgreSQL: a synchronous standby named that does not exist,
    /// so that every commit waits for it; MariaDB: the tables locked for
    /// reading by another session; Redis: its clients' writes paused). No
    /// node can heartbeat, claim, start or record meanwhile: each's lease
    /// runs out and it fences itself; none may be declared dead for it.
    /// One node is asked to stop (SIGTERM) in the middle of it and must end
    /// within its grace and a few seconds; it is started again once the
    /// database answers.
    async fn commits_hang(&mut self) {
        let mut phase = self.begin("commits hang (the database stops answering writes), SIGTERM meanwhile");
        let hang_ms: i64 = if long_minutes().is_some() { 30_000 } else { 8_000 };
        let before = self.incarnations().await;
        let hung = Hang::start(self.kind, &self.url, self.redis.as_ref(), hang_ms).await;
        let began = self.now();
        phase.injected = 1;
        self.sleep_until(began + DEAD_AFTER_MS + 1_000).await;
        let i = usize::try_from(self.rng.below(NODES as u64)).unwrap();
        let id = self.nodes[i].id.clone();
        let exit = self.terminate(i, "commits hung").await;
        self.sleep_until(began + hang_ms).await;
        hung.lift().await;
        phase.lifted = self.now();
        let _ = self.nodes[i].child.take().map(|mut c| c.wait());
        self.spawn(i);
        self.sleep_until(phase.lifted + 6_000).await;
        let after = self.incarnations().await;
        let declared: Vec<&String> = before
            .iter()
            .filter(|(node, inc)| **node != id && after.get(*node) != Some(inc))
            .map(|(node, _)| node)
            .collect();
        phase.detail = format!(
            "writes hung {} ms; {id} ended {} after SIGTERM in the middle; others declared dead for it: {}",
            phase.lifted - began,
            took(exit),
            declared.len()
        );
        self.end(phase);
    }

    /// SIGTERM to node `i` in the middle of a fault (`during`): it must end
    /// within its grace and a few seconds whatever the database does, or it
    /// is killed after 30 s. How long it took, if it ended.
    async fn terminate(&mut self, i: usize, during: &str) -> Option<Duration> {
        let id = self.nodes[i].id.clone();
        self.signal(i, "TERM");
        let asked = std::time::Instant::now();
        let exit = loop {
            if let Ok(Some(_)) = self.nodes[i].child.as_mut().unwrap().try_wait() {
                break Some(asked.elapsed());
            }
            if asked.elapsed() > Duration::from_secs(30) {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        // The grace the suite's nodes have, and a few seconds whatever the
        // database does.
        let bound = Duration::from_secs(3 + 15);
        match exit {
            Some(took) if took <= bound => {}
            Some(took) => self.failures.push(format!(
                "{id} ended {took:?} after SIGTERM while {during}, past {bound:?}"
            )),
            None => {
                self.failures
                    .push(format!("{id} still ran 30 s after SIGTERM while {during}: killed"));
                self.kill_node(i);
            }
        }
        exit
    }

    /// A database backend stopped (SIGSTOP) in the middle of a statement,
    /// past `dead_after`, then resumed (SIGCONT): on PostgreSQL one node's
    /// backend process (the first seen running a statement, else one of
    /// its idle ones, which its next statement meets); MariaDB and Redis
    /// serve every connection from one process, which is stopped whole.
    /// The node whose backend it is (on MariaDB and Redis, one at random)
    /// is asked to stop (SIGTERM) in the middle and must end within its
    /// grace; it is started again once the backend runs.
    async fn backend_stopped(&mut self) {
        let mut phase = self.begin(match self.kind {
            Kind::Postgres => "a node's PostgreSQL backend stopped (SIGSTOP) mid-statement, SIGTERM meanwhile",
            Kind::Redis => "Redis server stopped (SIGSTOP) mid-statement, SIGTERM meanwhile",
            _ => "MariaDB server stopped (SIGSTOP) mid-statement, SIGTERM meanwhile",
        });
        let stop_ms: i64 = if long_minutes().is_some() { 30_000 } else { 8_000 };
        let target = match self.kind {
            Kind::Postgres => self.pg_node_backend().await,
            Kind::Redis => self.redis.as_ref().and_then(PrivateRedis::pid).map(|pid| {
                let i = usize::try_from(self.rng.below(NODES as u64)).unwrap();
                (pid, i, "the server".to_owned())
            }),
            _ => mariadb_pid().map(|pid| {
                let i = usize::try_from(self.rng.below(NODES as u64)).unwrap();
                (pid, i, "the server".to_owned())
            }),
        };
        let Some((pid, i, what)) = target else {
            phase.detail = cannot_inject("find the database's backend process to stop")
                .unwrap_or_else(|| "NOT injected: no backend process found".to_owned());
            self.end(phase);
            return;
        };
        let id = self.nodes[i].id.clone();
        let stopped = Stopped::stop(
            pid,
            Duration::from_millis(stop_ms.unsigned_abs()) + Duration::from_secs(20),
        );
        let began = self.now();
        phase.injected = 1;
        self.sleep_until(began + DEAD_AFTER_MS + 1_000).await;
        let exit = self.terminate(i, "a backend was stopped").await;
        self.sleep_until(began + stop_ms).await;
        drop(stopped);
        phase.lifted = self.now();
        let _ = self.nodes[i].child.take().map(|mut c| c.wait());
        self.spawn(i);
        phase.detail = format!(
            "{what} (pid {pid}) stopped {} ms; {id} ended {} after SIGTERM in the middle",
            phase.lifted - began,
            took(exit)
        );
        self.sleep_until(phase.lifted + 6_000).await;
        self.end(phase);
    }

    /// A PostgreSQL backend of a node: its pid, the node's index, and what
    /// it was doing. The first seen running a statement within 3 s, else an
    /// idle one.
    async fn pg_node_backend(&self) -> Option<(u32, usize, String)> {
        let mut admin = AnyConnection::connect(&self.url).await.ok()?;
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        let mut idle = None;
        let found = loop {
            let rows = sqlx::query(
                "SELECT pid, application_name, state, LEFT(query, 60) FROM pg_stat_activity \
                 WHERE datname = current_database() AND application_name LIKE 'reliability-node-%'",
            )
            .fetch_all(&mut admin)
            .await
            .ok()?;
            let backend = |r: &sqlx::any::AnyRow| {
                let name: String = r.get(1);
                let i = (0..NODES).find(|i| app_name(*i) == name)?;
                let pid = u32::try_from(r.get::<i32, _>(0)).ok()?;
                Some((pid, i, r.get::<String, _>(2), r.get::<String, _>(3)))
            };
            if let Some((pid, i, _, query)) = rows
                .iter()
                .filter_map(backend)
                .find(|(_, _, state, _)| state == "active")
            {
                break Some((pid, i, format!("{}'s backend running `{query}`", self.nodes[i].id)));
            }
            idle = idle.or_else(|| {
                rows.iter().filter_map(backend).next().map(|(pid, i, state, query)| {
                    (
                        pid,
                        i,
                        format!("{}'s backend, {state} after `{query}`", self.nodes[i].id),
                    )
                })
            });
            if std::time::Instant::now() > deadline {
                break idle;
            }
        };
        let _ = admin.close().await;
        found
    }

    /// The path between node [`LOSSY`] and the database drops `which`
    /// packets (nothing refused, reset or delivered later; TCP retransmits
    /// into the void): past `dead_after`, so that the others declare it
    /// dead while it may still hold fires and run handlers, and its lease
    /// runs out. It is asked to stop (SIGTERM) in the middle and must end
    /// within its grace; the path heals and it is started again.
    async fn path_drops(&mut self, which: Lose) {
        let mut phase = self.begin(match which {
            Lose::Both => "path between a node and the database drops every packet, SIGTERM meanwhile",
            Lose::Outgoing => "path from a node to the database drops packets (one way), SIGTERM meanwhile",
            Lose::Incoming => "path from the database to a node drops packets (one way), SIGTERM meanwhile",
        });
        let Some((ns, _)) = &self.lossy else {
            phase.detail = "NOT injected: no network namespace on this machine".to_owned();
            self.end(phase);
            return;
        };
        let lose_ms: i64 = if long_minutes().is_some() { 30_000 } else { 8_000 };
        let id = self.nodes[LOSSY].id.clone();
        let (incarnation, _) = self.node_incarnation(&id).await;
        ns.lose(which);
        let began = self.now();
        phase.injected = 1;
        // Declared dead by the others, or not within a few seconds.
        let declared = loop {
            let (inc, live) = self.node_incarnation(&id).await;
            if inc != incarnation || !live {
                break Some(self.now());
            }
            if self.now() > began + DEAD_AFTER_MS + 5_000 {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let exit = self.terminate(LOSSY, "its path dropped packets").await;
        self.sleep_until(began + lose_ms).await;
        if let Some((ns, _)) = &self.lossy {
            ns.heal();
        }
        phase.lifted = self.now();
        if let Some(declared) = declared {
            self.fenced.push(Fenced {
                node: id.clone(),
                incarnation,
                declared_dead_at: declared,
            });
        } else {
            self.failures.push(format!(
                "{id} was cut off from the database {} ms and never declared dead",
                phase.lifted - began
            ));
        }
        let _ = self.nodes[LOSSY].child.take().map(|mut c| c.wait());
        self.spawn(LOSSY);
        let back = loop {
            let (inc, live) = self.node_incarnation(&id).await;
            if inc > incarnation && live {
                break Some(self.now());
            }
            if self.now() > phase.lifted + 15_000 {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        if back.is_none() {
            self.failures.push(format!("{id} did not rejoin after its path healed"));
        }
        phase.detail = format!(
            "{id} cut off {} ms; declared dead after {}; ended {} after SIGTERM in the middle; {}",
            phase.lifted - began,
            declared.map_or_else(|| "NEVER".to_owned(), |d| format!("{} ms", d - began)),
            took(exit),
            back.map_or_else(
                || "did NOT rejoin".to_owned(),
                |b| format!("rejoined {} ms after the path healed", b - phase.lifted)
            )
        );
        self.sleep_until(phase.lifted + 5_000).await;
        self.end(phase);
    }

    async fn kill_connections(&self) -> u64 {
        if let Some(server) = &self.redis {
            let killed = server.cli(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
            return killed
                .parse()
                .unwrap_or_else(|_| panic!("CLIENT KILL answered {killed:?}"));
        }
        let mut admin = AnyConnection::connect(&self.url).await.unwrap();
        let n = if self.kind == Kind::Postgres {
            let row = sqlx::query(
                "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
            )
            .fetch_one(&mut admin)
            .await
            .unwrap();
            row.get::<i64, _>(0).unsigned_abs()
        } else {
            let ids: Vec<i64> = sqlx::query(
                "SELECT CAST(id AS SIGNED) FROM information_schema.processlist \
                 WHERE db = DATABASE() AND id <> CONNECTION_ID()",
            )
            .fetch_all(&mut admin)
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<i64, _>(0))
            .collect();
            let mut n = 0;
            for id in ids {
                // A connection may have closed meanwhile.
                if sqlx::query(AssertSqlSafe(format!("KILL {id}")))
                    .execute(&mut admin)
                    .await
                    .is_ok()
                {
                    n += 1;
                }
            }
            n
        };
        let _ = admin.close().await;
        n
    }

    /// The database server restarted under the running cluster: down longer
    /// than `dead_after`, so that no node can heartbeat meanwhile, and none
    /// must be declared dead for it when the database is back.
    async fn database_restart(&mut self) {
        let fault = match self.kind {
            Kind::Redis => "Redis server killed (SIGKILL) past dead_after, then restarted from its append-only file",
            _ => "database server stopped past dead_after, then started",
        };
        let mut phase = self.begin(fault);
        let before = self.incarnations().await;
        let began = self.now();
        let (down, injected) = match self.redis.take() {
            Some(mut server) => {
                tokio::task::block_in_place(|| server.crash());
                let down = self.now();
                self.sleep_until(down + DEAD_AFTER_MS + 1_500).await;
                // Back when it answers, its append-only file read back.
                tokio::task::block_in_place(|| server.restart());
                self.redis = Some(server);
                (down, true)
            }
            None => self.sql_server_restart().await,
        };
        phase.injected = u32::from(injected);
        phase.lifted = self.now();
        self.sleep_until(phase.lifted + 6_000).await;
        let after = self.incarnations().await;
        let declared: Vec<&String> = before
            .iter()
            .filter(|(id, inc)| after.get(*id) != Some(inc))
            .map(|(id, _)| id)
            .collect();
        if !declared.is_empty() && phase.injected > 0 {
            self.failures.push(format!(
                "nodes declared dead for the database's own outage: {declared:?}"
            ));
        }
        phase.detail = format!(
            "stopped {} ms after the phase began, down {} ms; nodes declared dead for it: {}",
            down - began,
            phase.lifted - down,
            declared.len()
        );
        self.end(phase);
    }

    /// Stops the SQL server, waits past `dead_after`, starts it, and waits
    /// until it takes connections: when it went down, and whether both
    /// commands worked.
    async fn sql_server_restart(&self) -> (i64, bool) {
        let (stop_var, stop, start_var, start) = match self.kind {
            Kind::Postgres => (
                "QUARTZ_PG_STOP",
                "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql | sort -V | tail -1) main stop -m fast",
                "QUARTZ_PG_START",
                "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql | sort -V | tail -1) main start",
            ),
            _ => (
                "QUARTZ_MYSQL_STOP",
                "mariadb-admin -uroot shutdown; for i in $(seq 1 300); do pgrep -x mariadbd >/dev/null || break; \
                 sleep 0.1; done",
                "QUARTZ_MYSQL_START",
                "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd",
            ),
        };
        let shell = |var: &str, default: &str| {
            let command = std::env::var(var).unwrap_or_else(|_| default.to_owned());
            tokio::task::spawn_blocking(move || Command::new("sh").args(["-c", &command]).output())
        };
        let stopped = shell(stop_var, stop).await.unwrap().unwrap();
        let down = self.now();
        self.sleep_until(down + DEAD_AFTER_MS + 1_500).await;
        let started = shell(start_var, start).await.unwrap().unwrap();
        for (var, output) in [(stop_var, &stopped), (start_var, &started)] {
            if !output.status.success() {
                cannot_inject(&format!(
                    "stop and start the database (set {var} to a command that does): {}",
                    String::from_utf8_lossy(&output.stderr).trim()
                ));
            }
        }
        // Back when a new connection succeeds.
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        loop {
            if let Ok(c) = AnyConnection::connect(&self.url).await {
                let _ = c.close().await;
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the database did not come back after a restart"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (down, stopped.status.success() && started.status.success())
    }

    /// Each node's incarnation.
    async fn incarnations(&self) -> HashMap<String, i64> {
        self.nodes()
            .await
            .into_iter()
            .map(|n| (n.node_id, n.incarnation))
            .collect()
    }

    /// The whole cluster down (SIGKILL) past the misfire threshold, then
    /// every node restarted.
    async fn outage(&mut self) {
        let mut phase = self.begin("total outage: every node killed, restarted 5 s later");
        for i in 0..NODES {
            self.kill_node(i);
        }
        phase.injected = 1;
        let down = self.now();
        self.sleep_until(down + MISFIRE_MS + 3_000).await;
        for i in 0..NODES {
            self.spawn(i);
        }
        phase.lifted = self.now();
        phase.detail = format!("down {} ms (misfire threshold {MISFIRE_MS} ms)", phase.lifted - down);
        self.sleep_until(phase.lifted + 7_000).await;
        self.end(phase);
    }

    /// 45 slow jobs (1.5 s) every second for 4 seconds, against pools of
    /// 3 x 8 threads with queues of 32: fires wait past the threshold, then
    /// the pools refuse them.
    async fn saturation(&mut self) {
        let mut phase = self.begin("pool saturated by slow jobs");
        self.serial += 1;
        let start = (self.now() / 1_000 + 1) * 1_000;
        let end = start + 3_999;
        for i in 0..45 {
            let mut job = sleep_job(format!("slow-{}-{i:02}", self.serial), 1_500);
            job.requests_recovery = i % 2 == 0;
            let trigger = Trigger::new(
                Schedule::fixed_rate_millis(1_000).unwrap(),
                Timestamp::from_millis(start),
            )
            .unwrap()
            .with_end(Timestamp::from_millis(end))
            .unwrap();
            self.create(job, trigger, true).await;
        }
        phase.injected = 1;
        phase.detail = format!(
            "45 jobs of 1.5 s every second for 4 s; pools {}+{} threads, queue {} per node",
            POOL.0,
            POOL.1 - POOL.0,
            POOL.2
        );
        phase.lifted = end + 1_500;
        self.sleep_until(phase.lifted + 6_000).await;
        self.end(phase);
    }

    /// Bad input through the API and the CLI, rows corrupted by hand, and
    /// handlers that panic or never return, all under the steady load.
    async fn bad_input(&mut self, db: &TestDb) {
        let mut phase = self.begin("bad input: API, CLI, corrupted rows, panicking and hanging handlers");
        self.serial += 1;
        let serial = self.serial;
        // The first bad-input phase of the run (the saturation phases count
        // serials too).
        let first = self.phases.iter().all(|p| !p.fault.starts_with("bad input"));
        // The cron parser and zones: each a typed error.
        let long_cron = "1,".repeat(5_000) + "1 * * * * ?";
        for text in [
            "not a cron",
            "0 0 25 * * ?",
            "*/0 * * * * ?",
            "0 0 0 ? * MON#9",
            "0 0 0 L-40 * ?",
            "\u{663} * * * * ?",
            "0 0 0 * * ? 2100-2099",
            "\0 * * * * ?",
            long_cron.as_str(),
        ] {
            let outcome = CronExpression::parse(text);
            self.bad_case(
                "API: cron",
                shorten(text),
                outcome.map(|_| ()).map_err(|e| e.to_string()),
            );
        }
        for zone in ["Mars/Olympus", "../../../etc/localtime", "", "UTC\0"] {
            let outcome = parse_time_zone(zone);
            self.bad_case(
                "API: zone",
                format!("{zone:?}"),
                outcome.map(|_| ()).map_err(|e| e.to_string()),
            );
        }
        for ms in [-1_000, 0, i64::MAX] {
            let outcome = Schedule::fixed_rate_millis(ms);
            self.bad_case(
                "API: interval",
                format!("{ms} ms"),
                outcome.map(|_| ()).map_err(|e| e.to_string()),
            );
        }
        // Jobs refused whole by the store.
        let now = Timestamp::from_millis(self.now() + 1_000);
        let trigger = Trigger::new(Schedule::fixed_rate_millis(1_000).unwrap(), now).unwrap();
        let mut cases: Vec<(String, JobSpec)> = vec![
            (
                "name of 100,000 bytes".into(),
                JobSpec::new("n".repeat(100_000), "noop"),
            ),
            ("name with a NUL".into(), JobSpec::new("a\0b", "noop")),
            ("name with a newline".into(), JobSpec::new("a\nb", "noop")),
            ("empty handler name".into(), JobSpec::new("empty-handler", "")),
        ];
        let mut job = JobSpec::new("big-payload", "noop");
        job.payload = format!("\"{}\"", "x".repeat(2 << 20));
        cases.push(("payload of 2 MiB".into(), job));
        let mut job = JobSpec::new("broken-payload", "noop");
        job.payload = "{\"unclosed\": ".to_owned();
        cases.push(("payload that is not JSON".into(), job));
        let mut job = JobSpec::new("deep-payload", "noop");
        job.payload = "[".repeat(100_000) + &"]".repeat(100_000);
        cases.push(("payload nested 100,000 deep".into(), job));
        let mut job = JobSpec::new("zero-timeout", "noop");
        job.timeout = Some(Duration::ZERO);
        cases.push(("timeout of 0 ms".into(), job));
        let mut job = JobSpec::new("huge-description", "noop");
        job.description = "d".repeat(10 << 20);
        cases.push(("description of 10 MiB".into(), job));
        for (what, spec) in cases {
            let outcome = self.store.create_job(&spec, &[ExecuteSpec::new(trigger.clone())]).await;
            self.bad_case("API: job", what, outcome.map(|_| ()).map_err(|e| e.to_string()));
        }
        // Odd but valid: stored as given, read back the same, and fired.
        let odd = format!("odd-{serial} ✓ 名前 \u{202e}rtl 🚀 'quote\" \\back");
        let mut job = JobSpec::new(odd.clone(), "strict");
        job.payload = r#"{"emoji":"🚀","nul":"\u0000","quote":"'\""}"#.to_owned();
        let payload = job.payload.clone();
        self.create(
            job,
            trigger
                .clone()
                .with_end(Timestamp::from_millis(now.as_millis() + 2_999))
                .unwrap(),
            true,
        )
        .await;
        let back = self.store.get_job(&odd).await;
        let same = matches!(&back, Ok(Some(d)) if d.job.spec.name == odd && d.job.spec.payload == payload);
        self.bad.push(BadInput {
            via: "API: job",
            input: "odd but valid name and payload (emoji, RTL mark, quotes, escaped NUL)".into(),
            outcome: if same {
                "stored and read back unchanged; fired".into()
            } else {
                format!("{back:?}")
            },
            ok: same,
        });
        self.later.push((odd, FireState::Succeeded, ""));

        // The CLI: a clear one-line error and a failing exit status.
        let huge_every = format!("{}d", u64::MAX / 1_000);
        let cli_cases: Vec<Vec<String>> = vec![
            vec!["--cron".into(), "0 0 25 * * ?".into()],
            vec!["--cron".into(), long_cron.clone()],
            vec![
                "--cron".into(),
                "0 * * * * ?".into(),
                "--tz".into(),
                "Mars/Olympus".into(),
            ],
            vec!["--every".into(), "-5s".into()],
            vec!["--every".into(), "0ms".into()],
            vec!["--every".into(), huge_every],
            vec!["--every".into(), "1s".into(), "--payload".into(), "{not json".into()],
            vec!["--every".into(), "1s".into(), "--timeout".into(), "0ms".into()],
        ];
        for (k, extra) in cli_cases.into_iter().enumerate() {
            let name = format!("cli-bad-{serial}-{k}");
            let mut args = vec![
                "job".to_owned(),
                "add".to_owned(),
                name,
                "--handler".into(),
                "noop".into(),
            ];
            args.extend(extra.iter().cloned());
            let result = self.quartz_outcome(&args);
            self.bad_case("CLI: job add", shorten(&extra.join(" ")), result);
        }
        for (what, name) in [
            ("job name of 300 bytes", "n".repeat(300)),
            ("job name with a control character", "bell\u{7}".to_owned()),
        ] {
            let args = ["job", "add", name.as_str(), "--handler", "noop", "--every", "1s"].map(str::to_owned);
            let result = self.quartz_outcome(&args);
            self.bad_case("CLI: job add", what.to_owned(), result);
        }

        // Handlers that panic, never return, or that no node has; each fires
        // three times and must be recorded failed, the rest keep firing.
        let three = trigger
            .clone()
            .with_end(Timestamp::from_millis(now.as_millis() + 2_999))
            .unwrap();
        self.create(JobSpec::new(format!("panics-{serial}"), "panic"), three.clone(), true)
            .await;
        self.later
            .push((format!("panics-{serial}"), FireState::Failed, "panicked"));
        if first {
            let mut hang = JobSpec::new(format!("hangs-{serial}"), "hang");
            hang.timeout = Some(Duration::from_millis(500));
            self.create(hang, three.clone(), true).await;
            // Its code never returns: the fire stays running, its timeout
            // recorded (or is abandoned with it if its node dies).
            self.later
                .push((format!("hangs-{serial}"), FireState::Running, "timed out"));
        }
        self.create(
            JobSpec::new(format!("no-such-handler-{serial}"), "no-such-handler"),
            three,
            true,
        )
        .await;
        self.later.push((
            format!("no-such-handler-{serial}"),
            FireState::Failed,
            "no-such-handler",
        ));

        // Rows corrupted by hand (only the first time: the victims are gone after).
        if first {
            let corruptions = [
                ("victim-cron", "cron_expression", "61 * * * * ?"),
                ("victim-zone", "time_zone", "Mars/Olympus"),
                ("victim-kind", "kind", "sometimes"),
                ("victim-interval", "interval_ms", "-5"),
                ("victim-policy", "misfire_policy", "whenever"),
            ];
            for (victim, field, value) in corruptions {
                let detail = self.store.get_job(victim).await.unwrap().unwrap();
                let execute = detail.executes[0].id;
                db.edit_execute(
                    &self.store,
                    &self.scheduler,
                    execute,
                    &[(field, Some(value.to_owned()))],
                )
                .await;
                self.corrupted
                    .push((victim.to_owned(), self.by_hand("quartz_execute", field, value)));
            }
            let names: HashMap<&str, i64> = self.jobs.iter().map(|(id, j)| (j.name.as_str(), *id)).collect();
            let (field, value) = ("payload", "{\"report\": daily");
            db.edit_job(
                &self.store,
                &self.scheduler,
                names["victim-payload"],
                &[(field, Some(value.to_owned()))],
            )
            .await;
            self.corrupted
                .push(("victim-payload".to_owned(), self.by_hand("quartz_job", field, value)));
            self.later
                .push(("victim-payload".to_owned(), FireState::Failed, "line 1"));
        }
        phase.injected = u32::try_from(self.bad.len()).unwrap();
        phase.lifted = self.now();
        phase.detail = format!("{} inputs; see the bad-input table", self.bad.len());
        self.sleep_until(phase.lifted + 6_000).await;
        self.end(phase);
    }

    /// How an edit by hand reads: the SQL statement, or the Redis command.
    fn by_hand(&self, table: &str, field: &str, value: &str) -> String {
        let value = if value.parse::<i64>().is_ok() {
            value.to_owned()
        } else {
            format!("'{value}'")
        };
        match self.kind {
            Kind::Redis => format!("HSET {}:N {field} {value}", table.trim_start_matches("quartz_")),
            _ => format!("UPDATE {table} SET {field} = {value}"),
        }
    }

    fn bad_case(&mut self, via: &'static str, input: String, outcome: Result<(), String>) {
        let (outcome, ok) = match outcome {
            Ok(()) => ("ACCEPTED".to_owned(), false),
            Err(e) => (first_line(&e).to_owned(), !e.trim().is_empty()),
        };
        if !ok {
            self.failures.push(format!("{via} {input}: {outcome}"));
        }
        self.bad.push(BadInput {
            via,
            input,
            outcome,
            ok,
        });
    }

    /// `quartz ARGS`: success, or its exit code and the first line it printed
    /// on standard error.
    fn quartz_outcome(&self, args: &[String]) -> Result<(), String> {
        let out = self.quartz(args);
        if out.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        Err(format!(
            "exit {}: {}",
            out.status.code().unwrap_or(-1),
            first_line(stderr.trim())
        ))
    }

    fn quartz(&self, args: &[String]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_quartz"))
            .args(["--database-url", &self.url, "--scheduler", &self.scheduler])
            .args(args)
            .env_remove("QUARTZ_DATABASE_URL")
            .env_remove("QUARTZ_SCHEDULER")
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    }

    // ------------------------------------------------------------ the audit

    async fn finish(mut self) -> Report {
        let cut = self.now();
        eprintln!("{}: faults over at +{} ms; settling", self.label, cut - self.t0);
        // Every counted fire time up to the cut recorded, and none left
        // claimed or running (fires run at most 1.5 s; retries none). A fire
        // past its timeout is over by its timeout: the bad input's handler
        // that never returns keeps its row running for good.
        let settling = std::time::Instant::now();
        let deadline = settling + Duration::from_secs(60);
        let fires = loop {
            let fires = ledger(&self.store, &self.scheduler).await;
            let open = fires
                .iter()
                .filter(|f| {
                    f.fire_time.as_millis() <= cut
                        && f.timed_out_at.is_none()
                        && matches!(f.state, FireState::Claimed | FireState::Running)
                })
                .count();
            let lost = self.lost(&fires, self.t0, cut + 1, cut).len();
            if open == 0 && lost == 0 {
                eprintln!("{}: settled in {} ms", self.label, settling.elapsed().as_millis());
                break fires;
            }
            if std::time::Instant::now() > deadline {
                eprintln!("{}: not settled after 60 s: {open} fires open, {lost} lost", self.label);
                break fires;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        // Every node still up (none died of the bad input), then stopped.
        let mut exits = Vec::new();
        for i in 0..NODES {
            let child = self.nodes[i].child.as_mut().unwrap();
            if let Ok(Some(status)) = child.try_wait() {
                // Its log (beside the run's other logs) says why; the
                // failure is reported with the others, not as a failed kill.
                self.failures
                    .push(format!("{} exited on its own: {status}", self.nodes[i].id));
                continue;
            }
            self.signal(i, "TERM");
        }
        for i in 0..NODES {
            let child = self.nodes[i].child.as_mut().unwrap();
            let until = std::time::Instant::now() + Duration::from_secs(15);
            let exit = loop {
                if let Ok(Some(status)) = child.try_wait() {
                    break format!("{} exited ({status})", self.nodes[i].id);
                }
                if std::time::Instant::now() > until {
                    let _ = child.kill();
                    let _ = child.wait();
                    break format!("{} did not exit within 15 s of SIGTERM: killed", self.nodes[i].id);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            exits.push(exit);
        }

        // `quartz audit` over the run.
        let audit = self.quartz(
            &[
                "--json",
                "audit",
                "--since",
                &self.t0.to_string(),
                "--until",
                &cut.to_string(),
                "--misfire-threshold",
                &format!("{MISFIRE_MS}ms"),
            ]
            .map(str::to_owned),
        );
        let audit_json: serde_json::Value = serde_json::from_slice(&audit.stdout).unwrap_or_default();
        let violations = audit_json["violations"].as_array().cloned().unwrap_or_default();
        let audit_line = format!(
            "`quartz audit --since {} --until {cut} --misfire-threshold {MISFIRE_MS}ms`: exit {}, {} fire times checked, {} violations",
            self.t0,
            audit.status.code().unwrap_or(-1),
            audit_json["fire_times_checked"],
            violations.len()
        );
        if !audit.status.success() || !violations.is_empty() {
            self.failures.push(format!(
                "quartz audit: {} {}",
                String::from_utf8_lossy(&audit.stderr).trim(),
                violations
                    .iter()
                    .take(10)
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }

        // The handlers' own record, checked against the triggers and the
        // ledger: what the suite counts fires lost, run twice and started by
        // a fenced node from.
        let runs = self
            .runs
            .check(
                &*self.store,
                Timestamp::from_millis(self.t0),
                Timestamp::from_millis(cut + 1),
                Duration::from_millis(MISFIRE_MS.unsigned_abs()),
            )
            .await;
        let counted: HashSet<&str> = self
            .jobs
            .values()
            .filter(|j| j.counted)
            .map(|j| j.name.as_str())
            .collect();
        let runs_line = format!(
            "{} run logs, {} handler starts and {} ends; {} counted fire times run, {} ended by policy; {} attempts ran beside the one before; {} recovery re-runs of a success the ledger never recorded (at-least-once, as the job asks); lateness of first attempts p50/p99/max {}/{}/{} ms by the handlers, {}/{}/{} ms by the ledger",
            runs.files,
            runs.starts,
            runs.ends,
            runs.fire_times_run,
            runs.fire_times_by_policy,
            runs.overlapping_attempts,
            runs.rerun_after_unrecorded_success,
            runs.lateness.p50,
            runs.lateness.p99,
            runs.lateness.max,
            runs.ledger_lateness.p50,
            runs.ledger_lateness.p99,
            runs.ledger_lateness.max,
        );
        let (mine, others): (Vec<&RunViolation>, Vec<&RunViolation>) =
            runs.violations.iter().partition(|v| counted.contains(v.job.as_str()));
        if !others.is_empty() {
            eprintln!(
                "{}: the run log checker on the bad input's jobs (not counted): {:#?}",
                self.label,
                &others[..others.len().min(5)]
            );
        }
        let examples: Vec<String> = mine
            .iter()
            .take(10)
            .map(|v| {
                format!(
                    "{} {} at +{} ms: {}",
                    v.kind.as_str(),
                    v.job,
                    v.fire_time.as_millis() - self.t0,
                    v.detail
                )
            })
            .collect();

        // The suite's own checks, per phase.
        let mut table = String::new();
        table.push_str(
            "| fault | times injected | fires expected | observed | run twice | lost | abandoned | abandoned though recovery requested | misfired (by policy) | started by a fenced node | other run log violations | recovery time ms |\n",
        );
        table.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        let mut totals: BTreeMap<&str, Figures> = BTreeMap::new();
        let mut order = Vec::new();
        let mut worst = Vec::new();
        for phase in &self.phases {
            let f = self.figures(&fires, phase, cut, &mine);
            worst.push(f.worst.clone());
            if !totals.contains_key(phase.fault) {
                order.push(phase.fault);
            }
            totals.entry(phase.fault).or_default().add(&f);
        }
        let mut all = Figures::default();
        for fault in order {
            let f = &totals[fault];
            all.add(f);
            table.push_str(&f.row(fault));
        }
        table.push_str(&all.row("**all**"));
        if all.duplicated > 0 || all.lost > 0 || all.wrongly_abandoned > 0 || all.stale > 0 || all.other > 0 {
            self.failures.push(format!(
                "run twice {}, lost {}, abandoned though recovery requested {}, started by a fenced node {}, other run log violations {}: {}",
                all.duplicated,
                all.lost,
                all.wrongly_abandoned,
                all.stale,
                all.other,
                examples.join("; ")
            ));
        }
        let ledger_line = format!(
            "the ledger's own count (the system grading itself): duplicated {}, lost {}, started by a fenced node {}",
            all.ledger_duplicated, all.ledger_lost, all.ledger_stale
        );
        if let Some(example) = self.lost(&fires, self.t0, cut + 1, cut).first() {
            self.failures.push(format!("a lost fire: {example}"));
        }

        // What the bad input must have left in the ledger and the rows.
        let names: HashMap<String, i64> = self.jobs.iter().map(|(id, j)| (j.name.clone(), *id)).collect();
        for (job, state, text) in std::mem::take(&mut self.later) {
            let id = names[&job];
            // A fire past its timeout counts by its timeout, whatever became of
            // the code that ignored it.
            let timed_out = |f: &FireRecord| state == FireState::Running && f.timed_out_at.is_some();
            let rows: Vec<&FireRecord> = fires
                .iter()
                .filter(|f| f.job_id == id && (f.state == state || timed_out(f)))
                .collect();
            let found = rows
                .iter()
                .find(|f| timed_out(f) || f.error.as_deref().unwrap_or("").contains(text));
            let (outcome, ok) = match found {
                Some(f) => (
                    format!(
                        "{} fires {}: {}",
                        rows.len(),
                        state.as_str(),
                        shorten(f.error.as_deref().unwrap_or(""))
                    ),
                    true,
                ),
                None => (format!("no {} fire with {text:?} in its error", state.as_str()), false),
            };
            if !ok {
                self.failures.push(format!("{job}: {outcome}"));
            }
            self.bad.push(BadInput {
                via: "handler / row",
                input: shorten(&job),
                outcome,
                ok,
            });
        }
        for (victim, update) in std::mem::take(&mut self.corrupted) {
            if victim == "victim-payload" {
                continue; // checked above: its fires are recorded failed
            }
            let detail = self.store.get_job(&victim).await.unwrap().unwrap();
            let reason = detail
                .executes
                .iter()
                .find(|e| e.state == ExecuteState::Error)
                .and_then(|e| e.error.clone())
                .or_else(|| detail.broken.first().map(|b| b.reason.clone()));
            let ok = reason.as_ref().is_some_and(|r| !r.is_empty());
            if !ok {
                self.failures
                    .push(format!("{victim} ({update}) was not set aside with a reason"));
            }
            self.bad.push(BadInput {
                via: "row by hand",
                input: update,
                outcome: reason.map_or_else(|| "NOT set aside".to_owned(), |r| format!("set aside: {}", shorten(&r))),
                ok,
            });
        }

        let mut md = String::new();
        let _ = writeln!(md, "## {}\n", self.label);
        let _ = writeln!(
            md,
            "Run of {} s ({} phases), seed {}; three node processes; {} triggers at the start (24 every second, 6 cron every 5 s in three zones, 4 every 7 s, 6 victims); misfire threshold {MISFIRE_MS} ms, dead after {DEAD_AFTER_MS} ms.\n",
            (cut - self.t0) / 1_000,
            self.phases.len(),
            self.seed,
            24 + 6 + 4 + 6
        );
        md.push_str(&table);
        md.push_str("\nPhases:\n\n");
        for (p, worst) in self.phases.iter().zip(&worst) {
            let worst = if worst.is_empty() {
                String::new()
            } else {
                format!("; {worst}")
            };
            let _ = writeln!(
                md,
                "- +{} s {}: {}{worst}",
                (p.start - self.t0) / 1_000,
                p.fault,
                p.detail
            );
        }
        let _ = writeln!(
            md,
            "\nRun logs: {runs_line}; {ledger_line}.\n\nAudit: {audit_line}.\n\nShutdown: {}.\n",
            exits.join("; ")
        );
        if !self.bad.is_empty() {
            md.push_str("| bad input | via | outcome | as required |\n|---|---|---|---|\n");
        }
        for b in &self.bad {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} |",
                cell(&b.input),
                b.via,
                cell(&b.outcome),
                if b.ok { "yes" } else { "**NO**" }
            );
        }
        if !self.failures.is_empty() {
            let _ = writeln!(md, "\n**Failures:**\n");
            for f in &self.failures {
                let _ = writeln!(md, "- {}", cell(f));
            }
        }
        Report {
            markdown: md,
            failures: std::mem::take(&mut self.failures),
        }
    }

    /// Counted fire times scheduled in `[from, to)` (and not after `cut`)
    /// that no ledger row covers.
    fn lost(&self, fires: &[FireRecord], from: i64, to: i64, cut: i64) -> Vec<String> {
        let coverage = Coverage::of(fires);
        let mut lost = Vec::new();
        for (id, job) in &self.jobs {
            if !job.counted {
                continue;
            }
            for t in grid(&job.trigger, from, to.min(cut + 1)) {
                if !coverage.covers(*id, t) {
                    lost.push(format!("{} at {t} (+{} ms)", job.name, t - self.t0));
                }
            }
        }
        lost
    }

    /// A phase's figures: lost, run twice, started by a fenced node and the
    /// other violations from the run log checker's `runs` (counted jobs
    /// only); the rest, and the ledger's own count of the first three for
    /// comparison, from the ledger.
    fn figures(&self, fires: &[FireRecord], phase: &Phase, cut: i64, runs: &[&RunViolation]) -> Figures {
        let mut f = Figures {
            injected: phase.injected,
            ..Figures::default()
        };
        let in_phase = |t: i64| t >= phase.start && t < phase.end && t <= cut;
        for job in self.jobs.values().filter(|j| j.counted) {
            f.expected += grid(&job.trigger, phase.start, phase.end.min(cut + 1)).len() as u64;
        }
        for v in runs.iter().filter(|v| in_phase(v.fire_time.as_millis())) {
            match v.kind {
                RunViolationKind::Lost | RunViolationKind::Unsettled => f.lost += 1,
                RunViolationKind::RunTwice => f.duplicated += 1,
                RunViolationKind::FencedStart => f.stale += 1,
                _ => f.other += 1,
            }
        }
        f.ledger_lost = self.lost(fires, phase.start, phase.end, cut).len() as u64;
        f.observed = f.expected.saturating_sub(f.lost);
        let mut by_fire: HashMap<(i64, i64, i64), Vec<&FireRecord>> = HashMap::new();
        for r in fires {
            let Some(job) = self.jobs.get(&r.job_id) else { continue };
            if !job.counted || !in_phase(r.fire_time.as_millis()) {
                continue;
            }
            by_fire
                .entry((r.execute_id, r.job_id, r.fire_time.as_millis()))
                .or_default()
                .push(r);
            match r.state {
                FireState::Abandoned => {
                    f.abandoned += 1;
                    if job.recovery {
                        f.wrongly_abandoned += 1;
                    }
                }
                FireState::Misfired | FireState::Skipped => f.misfired += r.fire_count,
                _ => {}
            }
            // Handled late: when the fire started, or was recorded misfired.
            let handled = match r.state {
                FireState::Misfired | FireState::Skipped => r.finished_at.map(|t| t.as_millis()),
                _ => r.started_at.map(|t| t.as_millis()),
            };
            if let Some(handled) = handled
                && r.attempt == 1
                && handled - r.fire_time.as_millis() > 1_000
            {
                let after = handled - phase.lifted;
                if after > f.recovery_ms {
                    f.recovery_ms = after;
                    f.worst = format!(
                        "last disturbed fire: {} at +{} ms, {} {} ms after its time",
                        job.name,
                        r.fire_time.as_millis() - self.t0,
                        r.state.as_str(),
                        handled - r.fire_time.as_millis()
                    );
                }
            }
            if let (Some(started), Some(owner)) = (r.started_at, &r.owner)
                && self.fenced.iter().any(|x| {
                    x.node == owner.node_id
                        && x.incarnation == owner.incarnation
                        && started.as_millis() > x.declared_dead_at
                })
            {
                f.ledger_stale += 1;
            }
        }
        // Duplicated: run again after an attempt had succeeded, or two attempts
        // running at once.
        for rows in by_fire.values_mut() {
            rows.sort_by_key(|r| r.attempt);
            let mut succeeded = false;
            for r in rows.iter() {
                if succeeded && r.started_at.is_some() {
                    f.ledger_duplicated += 1;
                }
                succeeded |= r.state == FireState::Succeeded;
            }
        }
        f
    }
}

/// The figures of a phase (or a sum of phases).
#[derive(Default)]
struct Figures {
    injected: u32,
    expected: u64,
    observed: u64,
    duplicated: u64,
    lost: u64,
    abandoned: u64,
    wrongly_abandoned: u64,
    misfired: u64,
    stale: u64,
    /// Early starts, late ones without a misfire record, the ledger and the
    /// runs disagreeing.
    other: u64,
    /// The ledger's own count of fires run twice, lost and started by a
    /// fenced node, beside the run log's.
    ledger_duplicated: u64,
    ledger_lost: u64,
    ledger_stale: u64,
    recovery_ms: i64,
    /// The fire that set `recovery_ms`.
    worst: String,
}

impl Figures {
    fn add(&mut self, o: &Figures) {
        self.injected += o.injected;
        self.expected += o.expected;
        self.observed += o.observed;
        self.duplicated += o.duplicated;
        self.lost += o.lost;
        self.abandoned += o.abandoned;
        self.wrongly_abandoned += o.wrongly_abandoned;
        self.misfired += o.misfired;
        self.stale += o.stale;
        self.other += o.other;
        self.ledger_duplicated += o.ledger_duplicated;
        self.ledger_lost += o.ledger_lost;
        self.ledger_stale += o.ledger_stale;
        self.recovery_ms = self.recovery_ms.max(o.recovery_ms);
    }

    fn row(&self, fault: &str) -> String {
        format!(
            "| {fault} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            self.injected,
            self.expected,
            self.observed,
            self.duplicated,
            self.lost,
            self.abandoned,
            self.wrongly_abandoned,
            self.misfired,
            self.stale,
            self.other,
            self.recovery_ms.max(0)
        )
    }
}

/// The (job, fire time) pairs the ledger covers: each row's own time, and
/// every time inside a recorded range.
struct Coverage {
    points: HashSet<(i64, i64)>,
    ranges: HashMap<i64, Vec<(i64, i64)>>,
}

impl Coverage {
    fn of(fires: &[FireRecord]) -> Coverage {
        let mut out = Coverage {
            points: HashSet::new(),
            ranges: HashMap::new(),
        };
        for f in fires {
            out.points.insert((f.job_id, f.fire_time.as_millis()));
            if let Some(until) = f.skipped_until {
                out.ranges
                    .entry(f.job_id)
                    .or_default()
                    .push((f.fire_time.as_millis(), until.as_millis()));
            }
        }
        out
    }

    fn covers(&self, job: i64, t: i64) -> bool {
        self.points.contains(&(job, t))
            || self
                .ranges
                .get(&job)
                .is_some_and(|r| r.iter().any(|(from, until)| *from <= t && t < *until))
    }
}

/// A trigger's fire times in `[from, to)`.
fn grid(trigger: &Trigger, from: i64, to: i64) -> Vec<i64> {
    let mut out = Vec::new();
    let mut t = trigger.fire_time_after(Timestamp::from_millis(from - 1));
    while let Some(at) = t {
        if at.as_millis() >= to {
            break;
        }
        out.push(at.as_millis());
        t = trigger.fire_time_after(at);
    }
    out
}

fn sleep_job(name: String, ms: u64) -> JobSpec {
    let mut job = JobSpec::new(name, "sleep");
    job.payload = ms.to_string();
    job
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

fn shorten(text: &str) -> String {
    let clean: String = text.chars().map(|c| if c.is_control() { '·' } else { c }).collect();
    if clean.chars().count() > 90 {
        format!("{}… ({} bytes)", clean.chars().take(60).collect::<String>(), text.len())
    } else {
        clean
    }
}

fn cell(text: &str) -> String {
    shorten(text).replace('|', "\\|")
}

fn join(n: &[u64]) -> String {
    n.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// Writes a backend's section into the results file: `RELIABILITY.md` for the
/// long version, a file under the target directory for the short one.
fn write_results(label: &str, section: &str) {
    static LOCK: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
    let _guard = LOCK.lock();
    let path = match long_minutes() {
        Some(_) => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../RELIABILITY.md")),
        None => PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("reliability")
            .join("RELIABILITY-short.md"),
    };
    let mut text = std::fs::read_to_string(&path).unwrap_or_default();
    let commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let date = Timestamp::from_millis(wall_ms())
        .to_datetime()
        .map(|d| d.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_default();
    let command = match long_minutes() {
        Some(m) => format!("QUARTZ_RELIABILITY_MINUTES={m} cargo test -p quartz-cli --test reliability -- --nocapture"),
        None => "cargo test -p quartz-cli --test reliability -- --nocapture".to_owned(),
    };
    let header = "# Reliability: faults, pauses, clock skew, outages and bad input\n\n\
        Written by the reliability suite (`quartz-cli/tests/reliability.rs`); each backend's section is replaced \
        by its latest run.\n\n\
        How to read the tables: a fire belongs to the phase in which it was scheduled. Each node process \
        keeps a run log (every handler start and end, its registrations, the incarnations it declared dead), \
        written apart from the database; the run log checker (`quartz audit --runs`) matches it against the \
        triggers and the ledger, and the columns *run twice*, *lost*, *started by a fenced node* and *other* \
        come from it, not from the ledger (whose own count is given under each table for comparison). \
        *Expected*: every scheduled time of the counted triggers (fixed-rate and cron; the victims of the \
        corrupted-row fault are not counted). *Observed*: expected times not lost. *Run twice*: two handler \
        starts of one fire time and attempt, or an attempt started after another had succeeded. *Lost*: no \
        handler ran it and the ledger records no policy for it (misfired, skipped, abandoned). *Abandoned*: \
        running on a node that died, for a job that did not request recovery. *Misfired*: fire times recorded \
        misfired or skipped by their trigger's policy. *Started by a fenced node*: a handler start under an \
        incarnation after it had been declared dead or replaced. *Other*: a start before its fire time, a \
        first attempt started past the misfire threshold with no misfire record, or the ledger and the runs \
        disagreeing (a run recorded that no handler start shows, a start of a fire recorded misfired). \
        *Recovery time*: from the moment the fault was lifted (node killed or resumed, database back, slow \
        jobs over) to the handling of the phase's last fire that started, or was recorded misfired, more than \
        1 s after its time.\n";
    if !text.starts_with("# Reliability") {
        text = header.to_owned();
    }
    let (open, close) = (format!("<!-- {label} -->"), format!("<!-- /{label} -->"));
    let body = format!("{open}\n{section}\nCommit {commit}, {date}: `{command}`.\n{close}");
    if let (Some(a), Some(b)) = (text.find(&open), text.find(&close)) {
        text.replace_range(a..b + close.len(), &body);
    } else {
        text.push('\n');
        text.push_str(&body);
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
}
