//! Connecting, the connection pool with its rendered statements, and
//! migrations (the backends' differences are in [`crate::dialect`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use quartz_core::store::StoreError;
use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::migrate::Migrator;
use sqlx::{AnyPool, AssertSqlSafe, Connection as _, Executor, SqlSafeStr, SqlStr};

pub use crate::dialect::Backend;
use crate::dialect::{redact, render};
use crate::hosts::Hosts;

/// The table that records which schema migrations are applied; our own, so
/// that an application's own sqlx migrations in the same database are never
/// confused with ours.
pub const MIGRATIONS_TABLE: &str = "quartz_schema_migrations";

/// How long a node waits for another node's migration to finish.
const MIGRATION_LOCK_WAIT: Duration = Duration::from_secs(300);

/// A connection idle in the pool longer than this is pinged before it is
/// used (a server or a path may have dropped it meanwhile); one used more
/// recently was pinged on its way back.
const IDLE_TEST: Duration = Duration::from_secs(1);

/// How long a heartbeat or a clock reading on a URL naming several hosts
/// may take before the store looks for the primary again.
const FOLLOW_AFTER: Duration = Duration::from_secs(1);

/// How a store connects.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Most connections in the pool to a server (default 10). SQLite always
    /// uses one per process: it has a single writer, which one connection
    /// feeds in order, where several would wait for it in the busy handler's
    /// sleeps (up to 100 ms each); an in-memory database lives in its one
    /// connection.
    pub max_connections: u32,
    /// How long to wait for a connection before failing (default 10 s).
    pub acquire_timeout: Duration,
    /// Create or upgrade the schema on connect (default true).
    pub migrate: bool,
    /// How long a connection on its way back to the pool may take to
    /// answer a ping before it is closed instead (default 30 s): one whose
    /// statement a caller's deadline dropped, on a server or a path that
    /// stopped answering. A server that is only slow (its commits waiting
    /// on a standby, its tables locked) keeps its connections meanwhile:
    /// closing them would leave a session waiting on the server for each,
    /// until it has no connection left to give; a peer that vanished costs
    /// the pool this long, not the kernel's quarter of an hour.
    pub release_test: Duration,
    /// How long the server may spend on a search of the ledger by an
    /// error's text (the history's error search, which no index serves and
    /// which may read the whole ledger) before it ends the search itself
    /// (default 8 s, within the admin surface's 10 s deadline): PostgreSQL's
    /// `statement_timeout` for that read, MariaDB's `max_statement_time`,
    /// MySQL's `MAX_EXECUTION_TIME`. A caller who gave up then leaves no
    /// scan running on the server and no connection held behind it. The
    /// call fails with [`StoreError::TimedOut`].
    pub search_limit: Duration,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            max_connections: 10,
            acquire_timeout: Duration::from_secs(10),
            migrate: true,
            release_test: Duration::from_secs(30),
            search_limit: Duration::from_secs(8),
        }
    }
}

/// The connection pool with its dialect and prepared SQL texts.
#[derive(Debug, Clone)]
pub(crate) struct Db {
    pub(crate) pool: AnyPool,
    pub(crate) backend: Backend,
    sql: Arc<Mutex<HashMap<&'static str, SqlStr>>>,
    /// The server connected to (the change listener opens its own
    /// connection there).
    pub(crate) target: Target,
    /// Schedulers whose `quartz_scheduler` row is known to exist.
    pub(crate) schedulers: Arc<Mutex<std::collections::HashSet<String>>>,
    /// [`StoreOptions::search_limit`].
    pub(crate) search_limit: Duration,
    /// Held by every clone: the primary's watch ([`Hosts::watch`]) ends
    /// when the last is dropped.
    _alive: Arc<()>,
}

/// The server a store connects to: the one a URL names, or the primary
/// among the hosts of a PostgreSQL URL that names several
/// ([`crate::hosts`]).
#[derive(Debug, Clone)]
pub(crate) enum Target {
    One(#[cfg_attr(not(feature = "postgres"), allow(dead_code))] Arc<str>),
    Primary(Arc<Hosts>),
}

impl Target {
    /// The URL of the server in use (the change listener's, on PostgreSQL).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn url(&self) -> Arc<str> {
        match self {
            Target::One(url) => Arc::clone(url),
            Target::Primary(hosts) => hosts.current(),
        }
    }
}

impl Db {
    pub(crate) async fn connect(url: &str, options: &StoreOptions) -> Result<Db, StoreError> {
        install_default_drivers();
        let backend = Backend::of_url(url)?;
        let hosts = Hosts::parse(url)?.map(Arc::new);
        if hosts.is_some() && backend != Backend::Postgres {
            return Err(StoreError::InvalidUrl {
                url: redact(url),
                reason: "several hosts, or target_session_attrs, are for PostgreSQL URLs".to_owned(),
            });
        }
        let (url, memory) = match &hosts {
            Some(hosts) => (hosts.find().await?.to_string(), false),
            None => backend.driver_url(url),
        };
        let primary_only = hosts.as_ref().is_some_and(|h| h.read_write);
        let release_test = options.release_test;
        let (follows, released) = (hosts.clone(), hosts.clone());
        let mut pool = AnyPoolOptions::new()
            .max_connections(backend.max_connections(options.max_connections))
            .acquire_timeout(options.acquire_timeout);
        if memory {
            // The database lives as long as its one connection.
            pool = pool.min_connections(1).idle_timeout(None).max_lifetime(None);
        }
        // sqlx pings every connection it hands out (`test_before_acquire`),
        // a round trip before each statement; every connection back in the
        // pool has just been pinged twice on its way there (below), so only
        // one that has sat idle a while is tested again before use.
        //
        // After a move to another host, the connections to the old one are
        // closed as they come up for use: an old primary still up would
        // take their statements and never commit them.
        pool = pool.test_before_acquire(false).before_acquire(move |conn, meta| {
            let old = follows.as_ref().is_some_and(|f| f.made_before_move(meta.age));
            Box::pin(async move {
                if old {
                    return Ok(false);
                }
                if meta.idle_for > IDLE_TEST {
                    conn.ping().await?;
                }
                Ok(true)
            })
        });
        let pool = pool
            // sqlx tests a connection on its way back to the pool (a
            // round trip), without a deadline: one whose statement was
            // dropped by a caller's deadline, on a peer that vanished,
            // would hold its place in the pool until the kernel gave the
            // socket up. Tested here within `release_test` first, it is
            // closed instead.
            //
            // After a move to another host, one to the old host is closed
            // at once instead.
            .after_release(move |conn, meta| {
                let hosts = released.clone();
                Box::pin(async move {
                    let test = async {
                        match tokio::time::timeout(release_test, conn.ping()).await {
                            Ok(Ok(())) => Ok(true),
                            Ok(Err(e)) => Err(e),
                            Err(_) => Err(sqlx::Error::PoolTimedOut),
                        }
                    };
                    match hosts {
                        Some(hosts) => hosts.keep_unless_moved(meta.age, test).await,
                        None => test.await,
                    }
                })
            })
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    let setup = backend.session_setup(memory);
                    for statement in setup {
                        conn.execute(*statement).await?;
                    }
                    // A standby (an old primary back as one, or a host the
                    // pool still names after a failover) takes no writes.
                    if primary_only && crate::hosts::in_recovery(conn).await? {
                        return Err(sqlx::Error::Configuration(
                            "connected to a standby, where a writable primary was asked for".into(),
                        ));
                    }
                    Ok(())
                })
            })
            .connect(&url)
            .await;
        let pool = match pool {
            Ok(pool) => pool,
            Err(e) => {
                return Err(StoreError::Unavailable {
                    reason: format!(
                        "cannot connect to {}: {}",
                        redact(&url),
                        connect_cause(&url, e, options.acquire_timeout).await
                    ),
                });
            }
        };
        let alive = Arc::new(());
        if let Some(hosts) = &hosts {
            hosts.watch(&pool, Arc::downgrade(&alive));
        }
        let db = Db {
            pool,
            backend,
            sql: Arc::default(),
            target: match hosts {
                Some(hosts) => Target::Primary(hosts),
                None => Target::One(Arc::from(url.as_str())),
            },
            schedulers: Arc::default(),
            search_limit: options.search_limit,
            _alive: alive,
        };
        if options.migrate {
            db.migrate().await?;
        }
        Ok(db)
    }

    /// After a failed statement that may mean the primary is gone: looks for
    /// it again among the URL's hosts, when it names several.
    pub(crate) fn follow_primary(&self) {
        if let Target::Primary(hosts) = &self.target {
            hosts.follow(&self.pool);
        }
    }

    /// Runs a call that every node makes often (a heartbeat, a reading of
    /// the clock), looking for the primary again when it fails or has not
    /// answered within [`FOLLOW_AFTER`]: the pool's own attempts to
    /// reconnect to a server that is gone only fail at the acquire timeout.
    pub(crate) async fn watching<T, E>(&self, call: impl std::future::Future<Output = Result<T, E>>) -> Result<T, E> {
        if matches!(self.target, Target::One(_)) {
            return call.await;
        }
        tokio::pin!(call);
        let outcome = tokio::select! {
            outcome = &mut call => outcome,
            () = tokio::time::sleep(FOLLOW_AFTER) => {
                self.follow_primary();
                call.await
            }
        };
        if outcome.is_err() {
            self.follow_primary();
        }
        outcome
    }

    /// Applies the schema migrations. Safe when several nodes start at once: on
    /// PostgreSQL the migrator holds an advisory lock; on MySQL and MariaDB we
    /// hold a named lock ourselves (MariaDB ignores the infinite wait sqlx asks
    /// for, so its own lock is no lock there); on SQLite a node that loses the
    /// race finds the work done when it tries again.
    pub(crate) async fn migrate(&self) -> Result<(), StoreError> {
        let mut migrator = Migrator::with_migrations(self.backend.migrations());
        migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
        if self.backend.migrates_under_own_lock() {
            migrator.set_locking(false);
            return self.migrate_mysql(&migrator).await;
        }
        let mut last = None;
        for attempt in 0..5u64 {
            match migrator.run(&self.pool).await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    tracing::debug!(attempt, error = %e, "migration attempt failed; retrying");
                    last = Some(e);
                    tokio::time::sleep(Duration::from_millis(50 * (attempt + 1))).await;
                }
            }
        }
        Err(StoreError::Migration {
            reason: last.map(|e| e.to_string()).unwrap_or_default(),
        })
    }

    /// Runs the migrator on MySQL or MariaDB under a named lock held by the
    /// connection that migrates, so that one node migrates and the others wait
    /// and then find nothing left to do.
    async fn migrate_mysql(&self, migrator: &Migrator) -> Result<(), StoreError> {
        let failed = |what: &str, e: &dyn std::fmt::Display| StoreError::Migration {
            reason: format!("{what}: {e}"),
        };
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| failed("cannot get a connection to migrate", &e))?;
        let locked: Option<i64> =
            sqlx::query_scalar("SELECT GET_LOCK(LEFT(CONCAT('quartz_migrate_', DATABASE()), 64), ?)")
                .bind(MIGRATION_LOCK_WAIT.as_secs() as i64)
                .fetch_one(&mut *conn)
                .await
                .map_err(|e| failed("cannot take the migration lock", &e))?;
        if locked != Some(1) {
            return Err(StoreError::Migration {
                reason: format!(
                    "another node held the migration lock for more than {} s",
                    MIGRATION_LOCK_WAIT.as_secs()
                ),
            });
        }
        // `run_direct` on the connection itself: `run` through `Acquire` would
        // make this future not `Send` (sqlx's documented way around it).
        let outcome = migrator.run_direct(None, &mut *conn, false).await;
        let released = sqlx::query("SELECT RELEASE_LOCK(LEFT(CONCAT('quartz_migrate_', DATABASE()), 64))")
            .execute(&mut *conn)
            .await;
        if released.is_err() {
            // The lock belongs to the session: closing it is the release.
            conn.detach();
        }
        outcome.map_err(|e| failed("migration failed", &e))
    }

    /// The SQL text of a query written with `?` placeholders and three
    /// tokens: `{now}` (the database clock in epoch ms), `{is}` (null-safe
    /// equality) and `{ids}` (an id in a bound set), rendered for this
    /// backend once and cached.
    pub(crate) fn sql(&self, template: &'static str) -> SqlStr {
        let mut cache = self.sql.lock();
        cache
            .entry(template)
            .or_insert_with(|| AssertSqlSafe(Arc::<str>::from(render(self.backend, template))).into_sql_str())
            .clone()
    }

    /// The SQL text of a query composed at run time (a filter's clauses:
    /// only the conditions a query sets, so that every plan, generic ones
    /// included, reaches its rows by an index), rendered as
    /// [`Self::sql`] renders a template. Not cached here: the driver keeps
    /// each text's prepared statement.
    pub(crate) fn sql_composed(&self, template: &str) -> SqlStr {
        AssertSqlSafe(render(self.backend, template)).into_sql_str()
    }
}

impl crate::SqlStore {
    /// Connects to the database a service's own sqlx pool connects to
    /// (`PgPool`, `MySqlPool` or `SqlitePool`), with the settings its
    /// options give (host, port, user, password, database, TLS mode), so
    /// that a service configures its database once. The store opens its
    /// own connections beside the service's (up to
    /// [`StoreOptions::max_connections`]): sqlx lends a pool's connections
    /// to one driver only. Options a URL cannot carry (a TLS certificate
    /// given in memory, a statement logger) are not carried over.
    ///
    /// ```no_run
    /// # async fn service(pool: sqlx::PgPool) -> Result<(), quartz_core::store::StoreError> {
    /// use quartz_store::{SqlStore, StoreOptions};
    ///
    /// let store = SqlStore::connect_like(&pool, &StoreOptions::default()).await?;
    /// # let _ = store; Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect); a backend this build leaves out.
    pub async fn connect_like<DB: sqlx::Database>(
        pool: &sqlx::Pool<DB>,
        options: &StoreOptions,
    ) -> Result<crate::SqlStore, StoreError> {
        use sqlx::ConnectOptions as _;
        let url = pool.connect_options().to_url_lossy();
        crate::SqlStore::connect_with(url.as_str(), options).await
    }
}

/// Why a pool could not open its first connection, in words. The pool
/// tries again until its acquire timeout and then says only that it timed
/// out: one connection made directly names the cause (refused, no such
/// host, refused credentials, no answer).
async fn connect_cause(url: &str, error: sqlx::Error, waited: Duration) -> String {
    use sqlx::Connection as _;
    if !matches!(error, sqlx::Error::PoolTimedOut) {
        return describe_connect_error(&error);
    }
    match tokio::time::timeout(Duration::from_secs(3), sqlx::AnyConnection::connect(url)).await {
        Ok(Err(e)) => describe_connect_error(&e),
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            format!(
                "the server accepts connections, but the pool got none ready within {} s (too many clients, \
                 or a slow session setup)",
                waited.as_secs()
            )
        }
        Err(_) => format!(
            "no answer within {} s (a stopped server, or a network that drops packets)",
            waited.as_secs()
        ),
    }
}

/// A connection's error, as a person reads it.
fn describe_connect_error(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
            "connection refused: is the server running, and listening on that host and port?".to_owned()
        }
        sqlx::Error::Database(db) => db.message().to_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn urls_name_their_backend_and_passwords_are_hidden() {
        assert_eq!(Backend::of_url("sqlite::memory:").unwrap(), Backend::Sqlite);
        assert_eq!(Backend::of_url("postgresql://u@h/db").unwrap(), Backend::Postgres);
        assert_eq!(Backend::of_url("mariadb://root@h/db").unwrap(), Backend::MySql);
        let err = Backend::of_url("redis://user:secret@host/0").unwrap_err().to_string();
        assert!(err.contains("user:***@host") && !err.contains("secret"), "{err}");
    }
}
