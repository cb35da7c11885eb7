//! Test support for quartz-rs (not published): a fresh database per test on
//! each backend, dropped after, helpers to read the ledger and wait on
//! conditions, and a seeded fault-injecting store ([`faults`]).
//!
//! PostgreSQL and MariaDB come from `QUARTZ_PG_URL` and `QUARTZ_MYSQL_URL`
//! (defaults: the local servers, `postgres://postgres@127.0.0.1:5432/test` and
//! `mysql://root@127.0.0.1:3306/test`). When a server cannot be reached the test
//! says so loudly on stderr and skips that backend; with `CI=true` it fails.
//!
//! ```no_run
//! use quartz_testkit::{Kind, TestDb};
//!
//! # async fn example() {
//! // A fresh PostgreSQL database (None, after a loud message, when the
//! // server is down outside CI).
//! if let Some(db) = TestDb::new(Kind::Postgres).await {
//!     let store = db.store().await;
//!     // ... run the test against `store` ...
//!     # drop(store);
//!     db.drop_db().await;
//! }
//! # }
//! ```

// Set-up failures are test failures: they panic with the cause.
#![allow(clippy::unwrap_used)]

pub mod faketime;
pub mod faults;

/// Engine settings for tests: short intervals, the same guarantees. Polls
/// every 500 ms over a 1 s window, heartbeats every 200 ms, a node dead after
/// 1.5 s of silence, misfires past 2 s; the others claim 300 ms after the
/// fire time (with this short window a fire is queued only about when its
/// claim lead begins, so the preferred node needs its poll interval to find
/// it).
pub fn fast_settings() -> quartz_core::engine::Settings {
    quartz_core::engine::Settings {
        poll_interval: std::time::Duration::from_millis(500),
        window: std::time::Duration::from_millis(1_000),
        heartbeat_interval: std::time::Duration::from_millis(200),
        dead_after: std::time::Duration::from_millis(1_500),
        misfire: quartz_core::misfire::MisfireSettings {
            threshold_ms: 2_000,
            ..quartz_core::misfire::MisfireSettings::default()
        },
        strategy_grace: std::time::Duration::from_millis(1_300),
        shutdown_grace: std::time::Duration::from_secs(10),
        ..quartz_core::engine::Settings::default()
    }
}

use std::sync::atomic::{AtomicU64, Ordering};

use quartz_store::{SqlStore, StoreOptions};
use sqlx::any::install_default_drivers;
use sqlx::{AnyConnection, AssertSqlSafe, Connection, Executor};

/// A backend the suite runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// SQLite in memory.
    SqliteMemory,
    /// SQLite in a file of a temporary directory.
    SqliteFile,
    /// PostgreSQL (`QUARTZ_PG_URL`).
    Postgres,
    /// MySQL or MariaDB (`QUARTZ_MYSQL_URL`).
    MySql,
}

/// The PostgreSQL server's URL: `QUARTZ_PG_URL`, or the local server.
pub fn pg_url() -> String {
    std::env::var("QUARTZ_PG_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// The MySQL server's URL: `QUARTZ_MYSQL_URL`, or the local server.
pub fn mysql_url() -> String {
    std::env::var("QUARTZ_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

/// A database of its own for one test.
pub struct TestDb {
    /// Its backend.
    pub kind: Kind,
    /// Its URL.
    pub url: String,
    admin_url: Option<String>,
    name: String,
    _dir: Option<TempDir>,
}

/// A directory removed when dropped.
pub struct TempDir(
    /// Its path.
    pub std::path::PathBuf,
);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[scheme_end..].find('/').map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{database}", &base[..path_start]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

impl TestDb {
    /// A fresh database, or `None` (after a loud message) when the server is
    /// down outside CI.
    pub async fn new(kind: Kind) -> Option<TestDb> {
        install_default_drivers();
        let name = unique("quartz_test");
        match kind {
            Kind::SqliteMemory => Some(TestDb {
                kind,
                url: "sqlite::memory:".to_owned(),
                admin_url: None,
                name,
                _dir: None,
            }),
            Kind::SqliteFile => {
                let dir = std::env::temp_dir().join(&name);
                std::fs::create_dir_all(&dir).unwrap();
                let url = format!("sqlite://{}", dir.join("quartz.db").display());
                Some(TestDb {
                    kind,
                    url,
                    admin_url: None,
                    name,
                    _dir: Some(TempDir(dir)),
                })
            }
            Kind::Postgres | Kind::MySql => {
                let (admin_url, env) = if kind == Kind::Postgres {
                    (pg_url(), "QUARTZ_PG_URL")
                } else {
                    (mysql_url(), "QUARTZ_MYSQL_URL")
                };
                let mut admin = match AnyConnection::connect(&admin_url).await {
                    Ok(c) => c,
                    Err(e) => {
                        let message = format!(
                            "\n\n*** {kind:?} IS UNREACHABLE at {admin_url} ({e}).\n*** Set {env} or start the server; \
                             the {kind:?} tests are SKIPPED.\n"
                        );
                        if std::env::var("CI").is_ok_and(|v| v == "true") {
                            panic!("{message}*** CI=true: failing instead of skipping.");
                        }
                        // Straight to the terminal: test output capture would
                        // hide a message printed with eprintln!.
                        use std::io::Write as _;
                        let _ = writeln!(std::io::stderr(), "{message}");
                        return None;
                    }
                };
                admin
                    .execute(AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .await
                    .unwrap();
                admin.close().await.unwrap();
                Some(TestDb {
                    kind,
                    url: with_database(&admin_url, &name),
                    admin_url: Some(admin_url),
                    name,
                    _dir: None,
                })
            }
        }
    }

    /// A store on the test database (a new pool).
    pub async fn store(&self) -> SqlStore {
        SqlStore::connect(&self.url).await.unwrap()
    }

    /// A store with options.
    pub async fn store_with(&self, options: &StoreOptions) -> SqlStore {
        SqlStore::connect_with(&self.url, options).await.unwrap()
    }

    /// Runs plain SQL on the test database (as an operator would by hand).
    pub async fn sql(&self, store: &SqlStore, text: &str) {
        store.pool().execute(AssertSqlSafe(text.to_owned())).await.unwrap();
    }

    /// Drops the database.
    pub async fn drop_db(self) {
        if let Some(admin_url) = &self.admin_url {
            let mut admin = AnyConnection::connect(admin_url).await.unwrap();
            let sql = if self.kind == Kind::Postgres {
                format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)
            } else {
                format!("DROP DATABASE IF EXISTS {}", self.name)
            };
            admin.execute(AssertSqlSafe(sql)).await.unwrap();
            admin.close().await.unwrap();
        }
    }
}

/// Defines one test per backend: `backend_tests!(name => body_fn)` where
/// `body_fn(db: &TestDb) -> impl Future`.
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        mod sqlite_memory { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { $crate::run($crate::Kind::SqliteMemory, |db| Box::pin(super::$name(db))).await } )* }
        mod sqlite_file { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { $crate::run($crate::Kind::SqliteFile, |db| Box::pin(super::$name(db))).await } )* }
        mod postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { $crate::run($crate::Kind::Postgres, |db| Box::pin(super::$name(db))).await } )* }
        mod mysql { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { $crate::run($crate::Kind::MySql, |db| Box::pin(super::$name(db))).await } )* }
    };
}

/// Runs a test body on a fresh database of `kind`, then drops the database,
/// whether the body passed or panicked.
pub async fn run(
    kind: Kind,
    body: for<'a> fn(&'a TestDb) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>,
) {
    let Some(db) = TestDb::new(kind).await else {
        return;
    };
    let db = std::sync::Arc::new(db);
    let inner = std::sync::Arc::clone(&db);
    let outcome = tokio::spawn(async move { body(&inner).await }).await;
    if let Ok(db) = std::sync::Arc::try_unwrap(db) {
        db.drop_db().await;
    }
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// Every ledger row of a scheduler, newest first, through the history pages.
pub async fn ledger(store: &SqlStore, scheduler: &str) -> Vec<quartz_core::store::FireRecord> {
    use quartz_core::store::Store as _;
    let mut all = Vec::new();
    let mut query = quartz_core::store::FireQuery::new(scheduler);
    query.limit = 1_000;
    loop {
        let page = store.fires(&query).await.unwrap();
        let Some(last) = page.last() else { break };
        query.before_id = Some(last.id);
        all.extend(page);
    }
    all
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
