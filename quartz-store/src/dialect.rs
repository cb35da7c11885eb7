//! Every difference between the three backends, in one place: how a query
//! template is rendered (placeholders, the database clock, null-safe
//! equality, a bound set of ids), what each backend can do (`RETURNING`,
//! one-statement claims, `NOTIFY`, row locks), the statements written
//! differently for each, the session each connection opens, and the
//! embedded migrations. The rest of the crate asks the [`Backend`] and never
//! matches on it.

use std::borrow::Cow;

use quartz_core::store::StoreError;
use sqlx::migrate::{Migration, MigrationType};
use sqlx::{AssertSqlSafe, SqlSafeStr};

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
    /// [`StoreError::InvalidUrl`] for any other scheme, and for a backend
    /// this build leaves out (each is a cargo feature of `quartz-store` and
    /// of the `quartz` facade: `sqlite`, on by default, `postgres`, `mysql`).
    pub fn of_url(url: &str) -> Result<Backend, StoreError> {
        let scheme = url.split(':').next().unwrap_or_default().to_ascii_lowercase();
        let backend = match scheme.as_str() {
            "sqlite" => Backend::Sqlite,
            "postgres" | "postgresql" => Backend::Postgres,
            "mysql" | "mariadb" => Backend::MySql,
            _ => {
                return Err(StoreError::InvalidUrl {
                    url: redact(url),
                    reason: "expected a URL starting sqlite:, postgres://, postgresql://, mysql:// or mariadb://"
                        .to_owned(),
                });
            }
        };
        if !backend.built() {
            return Err(StoreError::InvalidUrl {
                url: redact(url),
                reason: format!(
                    "this build has no {0} support: enable the `{0}` feature (for example \
                     `quartz = {{ version = \"0.1\", features = [\"{0}\"] }}` in Cargo.toml)",
                    backend.feature()
                ),
            });
        }
        Ok(backend)
    }

    /// The cargo feature that builds this backend's driver in.
    pub fn feature(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::MySql => "mysql",
        }
    }

    /// Whether this build has the backend's driver (its cargo feature is
    /// on).
    pub fn built(self) -> bool {
        match self {
            Backend::Sqlite => cfg!(feature = "sqlite"),
            Backend::Postgres => cfg!(feature = "postgres"),
            Backend::MySql => cfg!(feature = "mysql"),
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
    pub(crate) fn id_set(self) -> String {
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
    pub(crate) fn null_safe_eq(self) -> &'static str {
        match self {
            Backend::Sqlite => "IS",
            Backend::Postgres => "IS NOT DISTINCT FROM",
            Backend::MySql => "<=>",
        }
    }

    /// `{for_update}`: a row lock on the rows a `SELECT` reads, where the
    /// backend has one (SQLite locks the whole database at the first write
    /// instead).
    pub(crate) fn for_update(self) -> &'static str {
        match self {
            Backend::Sqlite => "",
            Backend::Postgres | Backend::MySql => " FOR UPDATE",
        }
    }

    /// `{for_share}`: a shared row lock on the rows a `SELECT` reads, where
    /// the backend has one: a writer of those rows waits for the reader's
    /// transaction, and the reader waits for a writer's and then reads what
    /// it committed.
    pub(crate) fn for_share(self) -> &'static str {
        match self {
            Backend::Sqlite => "",
            Backend::Postgres => " FOR SHARE",
            Backend::MySql => " LOCK IN SHARE MODE",
        }
    }

    /// The migrations of this backend, embedded in the library.
    pub(crate) fn migrations(self) -> Vec<Migration> {
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
                    (
                        "change log",
                        include_str!(concat!("../../migrations/", $dir, "/0008_change_log.sql")),
                    ),
                    (
                        "calendars",
                        include_str!(concat!("../../migrations/", $dir, "/0009_calendars.sql")),
                    ),
                    (
                        "dst choice",
                        include_str!(concat!("../../migrations/", $dir, "/0010_dst_choice.sql")),
                    ),
                    (
                        "versions",
                        include_str!(concat!("../../migrations/", $dir, "/0011_versions.sql")),
                    ),
                    (
                        "change target id",
                        include_str!(concat!("../../migrations/", $dir, "/0012_change_target_id.sql")),
                    ),
                    (
                        "node dead after",
                        include_str!(concat!("../../migrations/", $dir, "/0013_node_dead_after.sql")),
                    ),
                    (
                        "fire unended",
                        include_str!(concat!("../../migrations/", $dir, "/0014_fire_unended.sql")),
                    ),
                    (
                        "jitter and catch-up",
                        include_str!(concat!("../../migrations/", $dir, "/0015_jitter_catch_up.sql")),
                    ),
                    (
                        "standby",
                        include_str!(concat!("../../migrations/", $dir, "/0016_standby.sql")),
                    ),
                    (
                        "overlap and limits",
                        include_str!(concat!("../../migrations/", $dir, "/0017_overlap_limits.sql")),
                    ),
                    (
                        "lean indexes",
                        include_str!(concat!("../../migrations/", $dir, "/0018_lean_indexes.sql")),
                    ),
                    (
                        "job name lookup",
                        include_str!(concat!("../../migrations/", $dir, "/0019_job_name_lookup.sql")),
                    ),
                    (
                        "waiting fires",
                        include_str!(concat!("../../migrations/", $dir, "/0020_waiting_fires.sql")),
                    ),
                    (
                        "enqueued work",
                        include_str!(concat!("../../migrations/", $dir, "/0021_enqueued_work.sql")),
                    ),
                    (
                        "payload schemas",
                        include_str!(concat!("../../migrations/", $dir, "/0022_payload_schemas.sql")),
                    ),
                    (
                        "work trace parent",
                        include_str!(concat!("../../migrations/", $dir, "/0023_work_trace_parent.sql")),
                    ),
                ]
            };
        }
        let files: [(&str, &'static str); 23] = match self {
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

/// Differences beyond the rendering of a template: what each backend can do,
/// and the statements written differently for it.
impl Backend {
    /// Statements a connection runs when it opens: WAL, a normal sync, foreign
    /// keys and a busy timeout on a SQLite file (only the last two in
    /// memory); a UTC session on MySQL, so that epoch conversions do not
    /// depend on the server's zone; generic plans on PostgreSQL. Every
    /// statement names its rows by key (ids, the due index): the plan the
    /// indexes give is the right one whatever the tables' statistics say, and
    /// a custom plan, made anew for each of the first runs of a statement on
    /// a connection, can pick a sequential scan from missing statistics.
    ///
    /// On PostgreSQL and MariaDB a transaction left idle for a second ends
    /// its session, so a node frozen between two statements of one of ours
    /// (a pause, a stopped process, a lost network) holds its row locks no
    /// longer: the nodes that declare it dead would otherwise wait on the
    /// lock of its own row, and recovery on its fires, until it woke. Our
    /// engine's transactions send their statements back to back (a change
    /// made through the admin surface lifts the limit:
    /// [`change_begin`](Self::change_begin)); MySQL has no such limit (the
    /// `/*M!` comment is MariaDB's alone).
    pub(crate) fn session_setup(self, memory: bool) -> &'static [&'static str] {
        match self {
            Backend::Sqlite if memory => &["PRAGMA foreign_keys = ON", "PRAGMA busy_timeout = 10000"],
            Backend::Sqlite => &[
                "PRAGMA journal_mode = WAL",
                "PRAGMA synchronous = NORMAL",
                "PRAGMA foreign_keys = ON",
                "PRAGMA busy_timeout = 10000",
            ],
            Backend::MySql => &["SET time_zone = '+00:00' /*M!100300 , idle_transaction_timeout = 1 */"],
            // The server notices a node that vanished (a peer gone, a
            // network that drops packets) within seconds, not the kernel's
            // quarter of an hour, and ends its session and its locks.
            // One statement, one round trip: a new connection over a slow
            // link costs no more than it must.
            Backend::Postgres => &["SELECT set_config('plan_cache_mode', 'force_generic_plan', false), \
                 set_config('idle_in_transaction_session_timeout', '1000', false), \
                 set_config('tcp_keepalives_idle', '10', false), \
                 set_config('tcp_keepalives_interval', '2', false), \
                 set_config('tcp_keepalives_count', '3', false), \
                 set_config('tcp_user_timeout', '10000', false)"],
        }
    }

    /// The statement that opens a change's transaction (a job or calendar
    /// written through the admin surface), lifting the idle limit of
    /// [`session_setup`](Self::session_setup) for it: such a transaction
    /// computes between its statements (first fire times past a calendar
    /// that excludes almost everything, a calendar's rescheduling) and
    /// locks no node's row. PostgreSQL lifts it for the transaction;
    /// MariaDB for the session, until [`change_end`](Self::change_end).
    pub(crate) fn change_begin(self) -> Option<&'static str> {
        match self {
            Backend::Postgres => Some("SET LOCAL idle_in_transaction_session_timeout = 0"),
            Backend::MySql => Some("SET @quartz_change = 1 /*M!100300 , SESSION idle_transaction_timeout = 0 */"),
            Backend::Sqlite => None,
        }
    }

    /// The last statement of a change's transaction: the idle limit back
    /// (MariaDB).
    pub(crate) fn change_end(self) -> Option<&'static str> {
        (self == Backend::MySql)
            .then_some("SET @quartz_change = 0 /*M!100300 , SESSION idle_transaction_timeout = 1 */")
    }

    /// A URL as the driver takes it, and whether it names an in-memory
    /// database: `mariadb:` is MySQL's driver; a SQLite file is created when
    /// it does not exist (`mode=rwc`).
    pub(crate) fn driver_url(self, url: &str) -> (String, bool) {
        let mut url = url.to_owned();
        if let Some(rest) = url.strip_prefix("mariadb:") {
            url = format!("mysql:{rest}");
        }
        let memory = self == Backend::Sqlite && (url.contains(":memory:") || url.contains("mode=memory"));
        if self == Backend::Sqlite && !memory && !url.contains("mode=") {
            url.push(if url.contains('?') { '&' } else { '?' });
            url.push_str("mode=rwc");
        }
        (url, memory)
    }

    /// The most connections a pool opens: one on SQLite, whose single writer
    /// one connection feeds in order (several would wait for it in the busy
    /// handler's sleeps, up to 100 ms each), and whose in-memory database
    /// lives in its one connection.
    pub(crate) fn max_connections(self, asked: u32) -> u32 {
        if self == Backend::Sqlite { 1 } else { asked.max(1) }
    }

    /// Whether migrations run under a named lock the store takes itself
    /// (MySQL and MariaDB: MariaDB ignores the infinite wait sqlx's own lock
    /// asks for, so that lock is no lock there).
    pub(crate) fn migrates_under_own_lock(self) -> bool {
        self == Backend::MySql
    }

    /// The statement that begins a writing transaction, when it is not the
    /// driver's own: SQLite's `BEGIN IMMEDIATE`, so that writers queue on the
    /// busy timeout instead of failing when a read lock would be upgraded.
    pub(crate) fn begin_statement(self) -> Option<&'static str> {
        (self == Backend::Sqlite).then_some("BEGIN IMMEDIATE")
    }

    /// Whether `UPDATE`, `INSERT` and `DELETE` take `RETURNING` (PostgreSQL,
    /// SQLite), and an `{ids}` set is one parameter of any size. On MySQL a
    /// statement's rows are read around it in its transaction instead, and
    /// an inserted row's id comes back as the last insert id.
    pub(crate) fn returns_rows(self) -> bool {
        self != Backend::MySql
    }

    /// Whether a batch of claims is one statement (PostgreSQL: JSON rows,
    /// locked in id order, one compare-and-set per run of fires); elsewhere
    /// each claim is its own statements in one transaction.
    pub(crate) fn claims_in_one_statement(self) -> bool {
        self == Backend::Postgres
    }

    /// Whether a batch of claims is four statements joined to JSON rows
    /// (MySQL, MariaDB: no `UPDATE … RETURNING`); SQLite takes each claim
    /// on its own, in one transaction that holds the whole database.
    pub(crate) fn claims_joined(self) -> bool {
        self == Backend::MySql
    }

    /// Whether a change is announced with `NOTIFY` and waited for with
    /// `LISTEN` (PostgreSQL); elsewhere the change counter is read every
    /// [`crate::CHANGE_POLL`].
    pub(crate) fn notifies(self) -> bool {
        self == Backend::Postgres
    }

    /// Whether purges choose their rows by a plain read first and delete them
    /// by primary key (MySQL: a `DELETE` whose own subquery picks its rows
    /// takes shared locks on the rows it reads, stalling claims and
    /// heartbeats).
    pub(crate) fn purges_by_id(self) -> bool {
        self == Backend::MySql
    }

    /// Creates a scheduler's row unless it exists.
    pub(crate) fn insert_scheduler_row(self) -> &'static str {
        match self {
            Backend::MySql => "INSERT IGNORE INTO quartz_scheduler (scheduler) VALUES (?)",
            Backend::Postgres | Backend::Sqlite => {
                "INSERT INTO quartz_scheduler (scheduler) VALUES (?) ON CONFLICT (scheduler) DO NOTHING"
            }
        }
    }

    /// A node's row: a new one, or a returning node's next incarnation
    /// (binds: scheduler, node id, host, pid, weight, handlers).
    pub(crate) fn upsert_node(self) -> &'static str {
        match self {
            Backend::MySql => {
                "INSERT INTO quartz_node (scheduler, node_id, host, pid, weight, handlers, state, incarnation, \
                 registered_at, heartbeat_at) VALUES (?, ?, ?, ?, ?, ?, 'live', {now}, {now}, {now}) \
                 ON DUPLICATE KEY UPDATE host = VALUES(host), pid = VALUES(pid), weight = VALUES(weight), \
                 handlers = VALUES(handlers), state = 'live', incarnation = incarnation + 1, registered_at = VALUES(registered_at), \
                 heartbeat_at = VALUES(heartbeat_at)"
            }
            Backend::Postgres | Backend::Sqlite => {
                "INSERT INTO quartz_node (scheduler, node_id, host, pid, weight, handlers, state, incarnation, \
                 registered_at, heartbeat_at) VALUES (?, ?, ?, ?, ?, ?, 'live', {now}, {now}, {now}) \
                 ON CONFLICT (scheduler, node_id) DO UPDATE SET host = excluded.host, pid = excluded.pid, \
                 weight = excluded.weight, handlers = excluded.handlers, state = 'live', incarnation = quartz_node.incarnation + 1, \
                 registered_at = excluded.registered_at, heartbeat_at = excluded.heartbeat_at"
            }
        }
    }

    /// Of a statement's two texts, the one for this backend: `returning`
    /// (PostgreSQL, SQLite: with `ON CONFLICT ... DO NOTHING` and
    /// `RETURNING`) or `mysql` (`ON DUPLICATE KEY` or none, its rows read
    /// around it). For statements whose two forms differ in a suffix, which
    /// `concat!` joins where they are written.
    pub(crate) fn pick(self, returning: &'static str, mysql: &'static str) -> &'static str {
        if self.returns_rows() { returning } else { mysql }
    }
}

/// How many ids one `{ids}` list names on MySQL.
pub(crate) const IDS_PER_LIST: usize = quartz_core::store::FIRES_PER_BATCH;

/// A query template rendered for a backend: `{now}`, `{is}`, `{ids}` and
/// `{for_update}` and `{for_share}` replaced, and on PostgreSQL its `?`
/// placeholders numbered.
pub(crate) fn render(backend: Backend, template: &str) -> String {
    let text = template
        .replace("{now}", backend.now_sql())
        .replace("{is}", backend.null_safe_eq())
        .replace("{ids}", &backend.id_set())
        .replace("{for_update}", backend.for_update())
        .replace("{for_share}", backend.for_share());
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
    fn rows_are_locked_where_the_backend_locks_rows() {
        let t = "SELECT id FROM t ORDER BY id{for_update}";
        assert_eq!(render(Backend::Sqlite, t), "SELECT id FROM t ORDER BY id");
        assert_eq!(render(Backend::MySql, t), "SELECT id FROM t ORDER BY id FOR UPDATE");
        assert_eq!(render(Backend::Postgres, t), "SELECT id FROM t ORDER BY id FOR UPDATE");
    }
}
