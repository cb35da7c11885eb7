//! Test support for quartz-rs (not published): a fresh database per test on
//! each backend, dropped after, helpers to read the ledger and wait on
//! conditions, a seeded fault-injecting store ([`faults`]), and a
//! fault-injecting TCP proxy between a node and its database ([`proxy`]).
//!
//! PostgreSQL, MariaDB and Redis come from `QUARTZ_PG_URL`, `QUARTZ_MYSQL_URL`
//! and `QUARTZ_REDIS_URL` (defaults: the local servers,
//! `postgres://postgres@127.0.0.1:5432/test`, `mysql://root@127.0.0.1:3306/test`
//! and `redis://127.0.0.1:6379/0`). A Redis test gets a key namespace of its
//! own, deleted after. When a server cannot be reached the test says so
//! loudly on stderr and skips that backend; with `CI=true` it fails.
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
mod helpers;
/// The in-memory store, which lives in `quartz-core` (its `testing` feature).
pub use quartz_core::memory;
pub mod netns;
pub mod pg_pair;
pub mod proxy;
pub mod redis_cluster;
pub mod redis_server;
pub mod tools;

pub use helpers::*;

/// Engine settings for tests: short intervals, the same guarantees. Polls
/// every 500 ms over a 1 s window, heartbeats every 200 ms, a node dead after
/// 1.5 s of silence, store calls cut after as long, misfires past 2 s; the
/// others claim 300 ms after the fire time (with this short window a fire
/// is queued only about when its claim lead begins, so the preferred node
/// needs its poll interval to find it).
pub fn fast_settings() -> quartz_core::engine::Settings {
    quartz_core::engine::Settings {
        poll_interval: std::time::Duration::from_millis(500),
        window: std::time::Duration::from_millis(1_000),
        heartbeat_interval: std::time::Duration::from_millis(200),
        dead_after: std::time::Duration::from_millis(1_500),
        misfire: quartz_core::misfire::MisfireSettings {
            threshold: std::time::Duration::from_millis(2_000),
            ..quartz_core::misfire::MisfireSettings::default()
        },
        strategy_grace: std::time::Duration::from_millis(1_300),
        shutdown_grace: std::time::Duration::from_secs(10),
        // As long as dead_after allows: half of it (the default) would cut
        // the statements of a machine loaded by the rest of the suite.
        store_deadline: Some(std::time::Duration::from_millis(1_500)),
        ..quartz_core::engine::Settings::default()
    }
}

use std::sync::atomic::{AtomicU64, Ordering};

use quartz_store::{AnyStore, StoreOptions};
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
    /// Redis (`QUARTZ_REDIS_URL`), in a key namespace of the test's own.
    Redis,
    /// The in-memory store ([`memory::MemoryStore`]), one per test: every
    /// [`TestDb::store`] is a handle to it. It has no URL.
    Memory,
}

/// The Redis server's URL: `QUARTZ_REDIS_URL`, or the local server.
pub fn redis_url() -> String {
    std::env::var("QUARTZ_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/0".to_owned())
}

/// Says loudly that a server is unreachable and its tests are skipped; with
/// `CI=true`, fails instead.
fn unreachable_server(kind: Kind, url: &str, env: &str, error: &dyn std::fmt::Display) {
    let message = format!(
        "\n\n*** {kind:?} IS UNREACHABLE at {url} ({error}).\n*** Set {env} or start the server; \
         the {kind:?} tests are SKIPPED.\n"
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{message}*** CI=true: failing instead of skipping.");
    }
    // Straight to the terminal: test output capture would hide a message
    // printed with eprintln!.
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{message}");
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
    memory: Option<memory::MemoryStore>,
    /// Its turn on a shared server ([`SERVER_TURNS`]), given back when it
    /// is dropped.
    _turn: Option<tokio::sync::SemaphorePermit<'static>>,
}

/// Test databases at once on each shared server, PostgreSQL's and
/// MariaDB's. A test's three nodes and its own reader, each a store of
/// [`TEST_POOL`] connections, take up to 21 of the server's; PostgreSQL
/// allows 100 by default, and four such tests peaked at 84 in the
/// integration binary. The tests of a binary run eight at a time
/// (`.cargo/config.toml`), most of them waiting on the clock; a test past
/// these waits for a turn, whatever it runs on, before its database is
/// made. At three turns of stores of ten connections, the PostgreSQL tests
/// of the integration binary spent about 90 of their 317 test-seconds
/// waiting for a turn.
const SERVER_TURNS: usize = 4;
/// Connections of each store a test makes ([`TestDb::store`]): the
/// clusters of the tests fire tens of times a second at most, which five
/// connections carry; a store's default is ten.
const TEST_POOL: u32 = 5;
static POSTGRES_TURNS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(SERVER_TURNS);
static MYSQL_TURNS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(SERVER_TURNS);

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

pub(crate) fn unique(prefix: &str) -> String {
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
                memory: None,
                _turn: None,
            }),
            Kind::Memory => Some(TestDb {
                kind,
                url: "memory:".to_owned(),
                admin_url: None,
                name,
                _dir: None,
                memory: Some(memory::MemoryStore::new()),
                _turn: None,
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
                    memory: None,
                    _turn: None,
                })
            }
            Kind::Redis => {
                let server = redis_url();
                let reachable = async {
                    let client = redis::Client::open(server.as_str())?;
                    let mut conn = client.get_multiplexed_async_connection().await?;
                    redis::cmd("PING").query_async::<String>(&mut conn).await
                };
                if let Err(e) = reachable.await {
                    unreachable_server(kind, &server, "QUARTZ_REDIS_URL", &e);
                    return None;
                }
                Some(TestDb::on_redis(&server))
            }
            Kind::Postgres | Kind::MySql => {
                let (admin_url, env, turns) = if kind == Kind::Postgres {
                    (pg_url(), "QUARTZ_PG_URL", &POSTGRES_TURNS)
                } else {
                    (mysql_url(), "QUARTZ_MYSQL_URL", &MYSQL_TURNS)
                };
                let turn = turns.acquire().await.expect("the turns are never closed");
                let mut admin = match AnyConnection::connect(&admin_url).await {
                    Ok(c) => c,
                    Err(e) => {
                        unreachable_server(kind, &admin_url, env, &e);
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
                    memory: None,
                    _turn: Some(turn),
                })
            }
        }
    }

    /// The database at `url`, made (and removed) by someone else: a
    /// [`pg_pair::PgPair`]'s, say. [`drop_db`](Self::drop_db) leaves it.
    pub fn on_server(kind: Kind, url: &str) -> TestDb {
        TestDb {
            kind,
            url: url.to_owned(),
            admin_url: None,
            name: String::new(),
            _dir: None,
            memory: None,
            _turn: None,
        }
    }

    /// A key namespace of its own on the Redis server at `server` (a
    /// [`redis_server::PrivateRedis`], say), deleted by
    /// [`drop_db`](Self::drop_db).
    pub fn on_redis(server: &str) -> TestDb {
        let name = unique("quartz_test");
        let separator = if server.contains('?') { '&' } else { '?' };
        TestDb {
            kind: Kind::Redis,
            url: format!("{server}{separator}namespace={name}"),
            admin_url: Some(server.to_owned()),
            name,
            _dir: None,
            memory: None,
            _turn: None,
        }
    }

    /// A store on the test database (a new pool of five
    /// connections; for [`Kind::Memory`], a handle to the test's one
    /// store).
    pub async fn store(&self) -> AnyStore {
        if let Some(memory) = &self.memory {
            return AnyStore::new(memory.clone());
        }
        let options = StoreOptions {
            max_connections: TEST_POOL,
            ..StoreOptions::default()
        };
        AnyStore::connect_with(&self.url, &options).await.unwrap()
    }

    /// A store with options (which the in-memory store has none of).
    pub async fn store_with(&self, options: &StoreOptions) -> AnyStore {
        if let Some(memory) = &self.memory {
            return AnyStore::new(memory.clone());
        }
        AnyStore::connect_with(&self.url, options).await.unwrap()
    }

    /// Edits an execute by hand, as an operator would (`None` clears a
    /// field): plain SQL on the SQL backends; on Redis, the execute's hash,
    /// then [`RedisStore::reindex_execute`](quartz_store::RedisStore::reindex_execute).
    pub async fn edit_execute(&self, store: &AnyStore, scheduler: &str, id: i64, fields: &[(&str, Option<String>)]) {
        if let Some(memory) = &self.memory {
            assert!(memory.edit_execute(id, fields), "no execute {id}");
            return;
        }
        match store.as_redis() {
            None => self.update(store, "quartz_execute", id, fields).await,
            Some(redis) => {
                self.edit_hash(&redis.keys(scheduler).unwrap().execute(id), fields)
                    .await;
                assert!(redis.reindex_execute(scheduler, id).await.unwrap());
            }
        }
    }

    /// Edits a job by hand, as an operator would (`None` clears a field):
    /// plain SQL on the SQL backends, the job's hash on Redis.
    pub async fn edit_job(&self, store: &AnyStore, scheduler: &str, id: i64, fields: &[(&str, Option<String>)]) {
        match store.as_redis() {
            None => self.update(store, "quartz_job", id, fields).await,
            Some(redis) => self.edit_hash(&redis.keys(scheduler).unwrap().job(id), fields).await,
        }
    }

    /// `UPDATE table SET fields WHERE id = id`.
    async fn update(&self, store: &AnyStore, table: &str, id: i64, fields: &[(&str, Option<String>)]) {
        let set: Vec<String> = fields
            .iter()
            .map(|(f, v)| match v {
                Some(v) if v.parse::<i64>().is_ok() => format!("{f} = {v}"),
                Some(v) => format!("{f} = '{}'", v.replace('\'', "''")),
                None => format!("{f} = NULL"),
            })
            .collect();
        let text = format!("UPDATE {table} SET {} WHERE id = {id}", set.join(", "));
        self.sql(store, &text).await;
    }

    /// Sets (or, for `None`, deletes) fields of a Redis hash.
    async fn edit_hash(&self, key: &str, fields: &[(&str, Option<String>)]) {
        let client = redis::Client::open(self.admin_url.as_deref().unwrap()).unwrap();
        let mut conn = admin_connection(&client).await;
        for (field, value) in fields {
            let cmd = match value {
                Some(v) => {
                    let mut c = redis::cmd("HSET");
                    c.arg(key).arg(*field).arg(v);
                    c
                }
                None => {
                    let mut c = redis::cmd("HDEL");
                    c.arg(key).arg(*field);
                    c
                }
            };
            cmd.query_async::<()>(&mut conn).await.unwrap();
        }
    }

    /// Runs plain SQL on the test database (as an operator would by hand);
    /// only for tests of the SQL backends.
    pub async fn sql(&self, store: &AnyStore, text: &str) {
        let sql = store.as_sql().expect("plain SQL runs on the SQL backends only");
        sql.pool().execute(AssertSqlSafe(text.to_owned())).await.unwrap();
    }

    /// Drops the database.
    pub async fn drop_db(self) {
        if self.kind == Kind::Redis {
            if let Some(server) = &self.admin_url {
                drop_namespace(server, &self.name).await;
            }
            return;
        }
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

/// A connection for a test's own commands on a Redis server: answers may
/// take seconds on a server the tests keep busy (the client's default
/// limit is half a second).
async fn admin_connection(client: &redis::Client) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(std::time::Duration::from_secs(30)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

/// Deletes every key of a Redis namespace on the server at `server` (the
/// benchmarks start each run on a fresh one with it).
pub async fn drop_namespace(server: &str, namespace: &str) {
    let client = redis::Client::open(server).unwrap();
    let mut conn = admin_connection(&client).await;
    let mut cursor = 0_u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{namespace}:*"))
            .arg("COUNT")
            .arg(1_000)
            .query_async(&mut conn)
            .await
            .unwrap();
        if !keys.is_empty() {
            redis::cmd("DEL").arg(&keys).query_async::<()>(&mut conn).await.unwrap();
        }
        if next == 0 {
            return;
        }
        cursor = next;
    }
}

/// Defines one test per backend: `backend_tests!(a, b; sql: c)` runs `a`
/// and `b` on every backend, Redis included, and `c` (a test of what only
/// SQL has: plain SQL by hand, pool options) on the four SQL ones; each
/// `name(db: &TestDb) -> impl Future`. `backend_tests!(with memory: a, b;
/// sql: c)` runs `a` and `b` on the in-memory store too (the store
/// conformance suite: tests that reach the store through [`TestDb::store`]
/// only, never by URL). `backend_tests!(shared: a, b)` runs `a` and `b`
/// on the backends several nodes share as a cluster does: SQLite in a
/// file, PostgreSQL, MariaDB and Redis.
#[macro_export]
macro_rules! backend_tests {
    (@sql $module:ident, $kind:ident, $($name:ident,)*) => {
        mod $module { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { $crate::run($crate::Kind::$kind, |db| Box::pin(super::$name(db))).await } )* }
    };
    (shared: $($name:ident),* $(,)?) => {
        $crate::backend_tests!(@sql sqlite, SqliteFile, $($name,)*);
        $crate::backend_tests!(@sql postgres, Postgres, $($name,)*);
        $crate::backend_tests!(@sql mysql, MySql, $($name,)*);
        $crate::backend_tests!(@sql redis, Redis, $($name,)*);
    };
    (with memory: $($name:ident),* $(,)? $(; sql: $($sql:ident),* $(,)?)?) => {
        $crate::backend_tests!($($name),* $(; sql: $($sql),*)?);
        $crate::backend_tests!(@sql memory, Memory, $($name,)*);
    };
    ($($name:ident),* $(,)? $(; sql: $($sql:ident),* $(,)?)?) => {
        $crate::backend_tests!(@sql sqlite_memory, SqliteMemory, $($name,)* $($($sql,)*)?);
        $crate::backend_tests!(@sql sqlite_file, SqliteFile, $($name,)* $($($sql,)*)?);
        $crate::backend_tests!(@sql postgres, Postgres, $($name,)* $($($sql,)*)?);
        $crate::backend_tests!(@sql mysql, MySql, $($name,)* $($($sql,)*)?);
        $crate::backend_tests!(@sql redis, Redis, $($name,)*);
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
