//! Connecting, the SQL dialects, and migrations.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use quartz_core::store::StoreError;
use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::{AnyPool, AssertSqlSafe, Executor, SqlSafeStr, SqlStr};

/// The table that records which schema migrations are applied; our own, so
/// that an application's own sqlx migrations in the same database are never
/// confused with ours.
pub const MIGRATIONS_TABLE: &str = "quartz_schema_migrations";

/// How long a node waits for another node's migration to finish.
const MIGRATION_LOCK_WAIT: Duration = Duration::from_secs(300);

/// The database a store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// SQLite, embedded: a file (WAL mode) or memory.
    Sqlite,
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    MySql,
}

impl Backend {
    /// The backend a database URL names: `sqlite:`, `postgres://` (or
    /// `postgresql://`), `mysql://` (or `mariadb://`).
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidUrl`] for any other scheme.
    pub fn of_url(url: &str) -> Result<Backend, StoreError> {
        let scheme = url.split(':').next().unwrap_or_default().to_ascii_lowercase();
        match scheme.as_str() {
            "sqlite" => Ok(Backend::Sqlite),
            "postgres" | "postgresql" => Ok(Backend::Postgres),
            "mysql" | "mariadb" => Ok(Backend::MySql),
            _ => Err(StoreError::InvalidUrl {
                url: redact(url),
                reason: "expected a URL starting sqlite:, postgres://, postgresql://, mysql:// or mariadb://"
                    .to_owned(),
            }),
        }
    }

    /// The expression for the database clock, in epoch milliseconds.
    pub(crate) fn now_sql(self) -> &'static str {
        match self {
            Backend::Sqlite => "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)",
            Backend::Postgres => "CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) AS BIGINT)",
            Backend::MySql => "CAST(FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED)",
        }
    }

    /// `{ids}`: "`id` is one of a bound set". PostgreSQL binds the set as
    /// one array literal (`{1,2}`), unnested once by a subquery (as a plain
    /// `= ANY(CAST(? AS BIGINT[]))`, a sequential scan would parse the
    /// literal again for every row), SQLite as one JSON array (`[1,2]`);
    /// MySQL has no array parameter and takes a list of [`IDS_PER_LIST`]
    /// placeholders (a shorter set repeats its last id).
    fn id_set(self) -> String {
        match self {
            Backend::Postgres => "id IN (SELECT unnest(CAST(? AS BIGINT[])))".to_owned(),
            Backend::Sqlite => "id IN (SELECT value FROM json_each(?))".to_owned(),
            Backend::MySql => format!("id IN ({})", vec!["?"; IDS_PER_LIST].join(", ")),
        }
    }

    /// Whether an `{ids}` set is one parameter, of any size.
    pub(crate) fn ids_in_one(self) -> bool {
        self != Backend::MySql
    }

    /// A set of ids as the one parameter of `{ids}` (PostgreSQL, SQLite).
    pub(crate) fn encode_ids(self, ids: &[i64]) -> String {
        let list = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        match self {
            Backend::Postgres => format!("{{{list}}}"),
            Backend::Sqlite | Backend::MySql => format!("[{list}]"),
        }
    }

    /// The null-safe equality operator.
    fn null_safe_eq(self) -> &'static str {
        match self {
            Backend::Sqlite => "IS",
            Backend::Postgres => "IS NOT DISTINCT FROM",
            Backend::MySql => "<=>",
        }
    }

    /// The migrations of this backend, embedded in the library.
    fn migrations(self) -> Vec<Migration> {
        macro_rules! files {
            ($dir:literal) => {
                [
                    (
                        "schema",
                        include_str!(concat!("../../migrations/", $dir, "/0001_schema.sql")),
                    ),
                    (
                        "schedule signature",
                        include_str!(concat!("../../migrations/", $dir, "/0002_schedule_signature.sql")),
                    ),
                    (
                        "chain fires",
                        include_str!(concat!("../../migrations/", $dir, "/0003_chain_fires.sql")),
                    ),
                    (
                        "node busy",
                        include_str!(concat!("../../migrations/", $dir, "/0004_node_busy.sql")),
                    ),
                    (
                        "operations",
                        include_str!(concat!("../../migrations/", $dir, "/0005_operations.sql")),
                    ),
                    (
                        "pending fires",
                        include_str!(concat!("../../migrations/", $dir, "/0006_pending_fires.sql")),
                    ),
                    (
                        "job parent index",
                        include_str!(concat!("../../migrations/", $dir, "/0007_job_parent_index.sql")),
                    ),
                ]
            };
        }
        let files: [(&str, &'static str); 7] = match self {
            Backend::Sqlite => files!("sqlite"),
            Backend::Postgres => files!("postgres"),
            Backend::MySql => files!("mysql"),
        };
        (1..)
            .zip(files)
            .map(|(version, (name, sql))| {
                Migration::new(
                    version,
                    Cow::Borrowed(name),
                    MigrationType::Simple,
                    AssertSqlSafe(sql).into_sql_str(),
                    false,
                )
            })
            .collect()
    }
}

/// Hides a password in a URL before it is shown in an error.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!("{}{}:***{}", &url[..scheme_end + 3], &userinfo[..colon], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

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
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            max_connections: 10,
            acquire_timeout: Duration::from_secs(10),
            migrate: true,
        }
    }
}

/// The connection pool with its dialect and prepared SQL texts.
#[derive(Debug, Clone)]
pub(crate) struct Db {
    pub(crate) pool: AnyPool,
    pub(crate) backend: Backend,
    sql: Arc<Mutex<HashMap<&'static str, SqlStr>>>,
    /// The URL connected to (the change listener opens its own connection).
    pub(crate) url: Arc<str>,
    /// Wake-ups from the PostgreSQL change listener.
    pub(crate) changes: Arc<crate::sql_store::ChangeSignal>,
    /// Schedulers whose `quartz_scheduler` row is known to exist.
    pub(crate) schedulers: Arc<Mutex<std::collections::HashSet<String>>>,
}

impl Db {
    pub(crate) async fn connect(url: &str, options: &StoreOptions) -> Result<Db, StoreError> {
        install_default_drivers();
        let backend = Backend::of_url(url)?;
        let mut url = url.to_owned();
        if let Some(rest) = url.strip_prefix("mariadb:") {
            url = format!("mysql:{rest}");
        }
        let memory = backend == Backend::Sqlite && (url.contains(":memory:") || url.contains("mode=memory"));
        if backend == Backend::Sqlite && !memory && !url.contains("mode=") {
            // Create the file when it does not exist.
            url.push(if url.contains('?') { '&' } else { '?' });
            url.push_str("mode=rwc");
        }
        let mut pool = AnyPoolOptions::new()
            .max_connections(if backend == Backend::Sqlite {
                1
            } else {
                options.max_connections.max(1)
            })
            .acquire_timeout(options.acquire_timeout);
        if memory {
            // The database lives as long as its one connection.
            pool = pool.min_connections(1).idle_timeout(None).max_lifetime(None);
        }
        let pool = pool
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    let setup: &[&'static str] = match backend {
                        Backend::Sqlite if memory => &["PRAGMA foreign_keys = ON", "PRAGMA busy_timeout = 10000"],
                        Backend::Sqlite => &[
                            "PRAGMA journal_mode = WAL",
                            "PRAGMA synchronous = NORMAL",
                            "PRAGMA foreign_keys = ON",
                            "PRAGMA busy_timeout = 10000",
                        ],
                        // Epoch conversions must not depend on the server's zone.
                        Backend::MySql => &["SET time_zone = '+00:00'"],
                        // Every statement names its rows by key (ids, the
                        // due index): the plan the indexes give is the right
                        // one whatever the table's statistics say, and a
                        // custom plan, made anew for each of the first runs
                        // of a statement on a connection, can pick a
                        // sequential scan from missing statistics.
                        Backend::Postgres => &["SET plan_cache_mode = force_generic_plan"],
                    };
                    for statement in setup {
                        conn.execute(*statement).await?;
                    }
                    Ok(())
                })
            })
            .connect(&url)
            .await
            .map_err(|e| StoreError::Unavailable {
                reason: format!("cannot connect to {}: {e}", redact(&url)),
            })?;
        let db = Db {
            pool,
            backend,
            sql: Arc::default(),
            url: Arc::from(url.as_str()),
            changes: Arc::default(),
            schedulers: Arc::default(),
        };
        if options.migrate {
            db.migrate().await?;
        }
        Ok(db)
    }

    /// Applies the schema migrations. Safe when several nodes start at once: on
    /// PostgreSQL the migrator holds an advisory lock; on MySQL and MariaDB we
    /// hold a named lock ourselves (MariaDB ignores the infinite wait sqlx asks
    /// for, so its own lock is no lock there); on SQLite a node that loses the
    /// race finds the work done when it tries again.
    pub(crate) async fn migrate(&self) -> Result<(), StoreError> {
        let mut migrator = Migrator::with_migrations(self.backend.migrations());
        migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
        if self.backend == Backend::MySql {
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
}

/// How many ids one `{ids}` list names on MySQL.
pub(crate) const IDS_PER_LIST: usize = quartz_core::store::FIRES_PER_BATCH;

fn render(backend: Backend, template: &str) -> String {
    let text = template
        .replace("{now}", backend.now_sql())
        .replace("{is}", backend.null_safe_eq())
        .replace("{ids}", &backend.id_set());
    if backend != Backend::Postgres {
        return text;
    }
    // PostgreSQL numbers its placeholders. The templates hold no `?` inside
    // string literals.
    let mut out = String::with_capacity(text.len() + 16);
    let mut n = 0;
    for c in text.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn placeholders_are_numbered_for_postgres_only() {
        let t = "UPDATE t SET a = ? WHERE b {is} ? AND c < {now}";
        assert_eq!(
            render(Backend::MySql, t),
            format!("UPDATE t SET a = ? WHERE b <=> ? AND c < {}", Backend::MySql.now_sql())
        );
        assert!(render(Backend::Postgres, t).starts_with("UPDATE t SET a = $1 WHERE b IS NOT DISTINCT FROM $2"));
    }

    #[test]
    fn urls_name_their_backend_and_passwords_are_hidden() {
        assert_eq!(Backend::of_url("sqlite::memory:").unwrap(), Backend::Sqlite);
        assert_eq!(Backend::of_url("postgresql://u@h/db").unwrap(), Backend::Postgres);
        assert_eq!(Backend::of_url("mariadb://root@h/db").unwrap(), Backend::MySql);
        let err = Backend::of_url("redis://user:secret@host/0").unwrap_err().to_string();
        assert!(err.contains("user:***@host") && !err.contains("secret"), "{err}");
    }
}
