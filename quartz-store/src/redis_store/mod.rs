//! The [`Store`](quartz_core::store::Store) on Redis, for services without a
//! SQL database: the same contract and guarantees as the SQL backends,
//! checked by the same store and engine suites. Connect with
//! [`RedisStore::connect`] (or [`AnyStore`](crate::AnyStore) and a
//! `redis://` URL).
//!
//! # The client: `redis` (redis-rs), not `fred`
//!
//! Both are maintained async clients with Lua scripts and reconnection. The
//! store needs one multiplexed connection that reconnects by itself, and
//! scripts (and Redis 7's functions) that load themselves when the server
//! has forgotten them (after a restart). `redis`'s `ConnectionManager` and
//! `Script::invoke_async` are exactly that. With the features used here
//! (`tokio-comp`, `connection-manager`, `script`), `redis` 1.8 adds 12
//! crates to the workspace's tree and no proc-macro. `fred` 10.1 with only
//! its script interface adds 19, two of them proc-macro crates, for
//! clustering, sentinel, pooling and client tracking the store does not use
//! (measured with `cargo tree` against this workspace's lock file).
//!
//! # Keys
//!
//! Every key of a scheduler starts with `quartz:{SCHEDULER}:`; the braces
//! are Redis Cluster's hash tag, so on a cluster (`redis+cluster://`) each
//! scheduler's keys are in one slot, on one master, and every script may
//! touch them together. The names are in [`Keys`]. Outside a scheduler:
//! the schema version, `quartz:schema`, and the scheduler registry
//! (two hashes, `quartz:schedulers` and `quartz:scheduler-numbers`; on a
//! cluster `{quartz}:schedulers` and `{quartz}:scheduler-numbers`, one slot).
//!
//! # Data model
//!
//! A record is a hash whose fields are the SQL backends' column names (an
//! absent field is NULL), so that the codecs and the rules are the same:
//!
//! - `ids`: counters (`HINCRBY`) handing out the sequence of jobs, executes,
//!   fires and changes. An id is the scheduler's number (see
//!   [`SEQUENCE_BITS`]) and the sequence, so a call naming a fire or an
//!   execute by id alone finds its scheduler's keys.
//! - `job:ID`; `jobs` (name to id), the unique-name rule; `job-order` (names,
//!   for pages by name); `job-executes:ID`; `children:NAME` and `parents`,
//!   for chains.
//! - `execute:ID`: a trigger's columns (those of
//!   [`TriggerColumns`](quartz_core::store::TriggerColumns)) and where it
//!   stands. Indexes: `due`, the waiting executes by next fire time;
//!   `due-order`, the same scored by next fire time with members that sort
//!   as the poll reads (priority, highest first, then id, in fixed-width
//!   decimals), the poll's window query, whose pages each begin where the
//!   last one ended and read only their own rows (made again from `due`
//!   when the two differ in size or in how many are due within the poll's
//!   window, as on a database written by an older build or beside one of
//!   its nodes; a member such a node moved within the window is mended
//!   where a page meets it);
//!   `due-unset`, `running`, `complete` (by last update, for retention),
//!   `calendared`.
//! - `fire:ID`: a ledger row. `fire-keys` maps `execute:job:fire
//!   time:attempt` to its id: the unique rule, which every script that
//!   inserts a fire checks first, and which the audit reads back through the
//!   ledger. Indexes: `fires` and `job-fires:ID` (by id, the history),
//!   `open` and `job-open:ID` (claimed or running: recovery and jobs that
//!   disallow concurrency), `open-of:NODE:INCARNATION` (those a node's
//!   incarnation holds) and `open-owners` (the incarnations, each added
//!   when its node registers): the sweeps for a dead node's fires and for a
//!   node's own claims read the fires of the incarnations they look for,
//!   and those of `open` in no listed index (a released claim, a fire
//!   written by an older build) found by the server's `SDIFF`, not every
//!   open fire one by one, `pending` (by due time), `execute-pending:ID`
//!   (an execute's pending fires by fire time: what an exclusive claim, a
//!   claim of a pending fire and a late run look up, at a cost that follows
//!   the execute's pending fires, not the scheduler's), `pending-executes`
//!   (the executes with any), `done:STATE` (by fire time, for retention).
//!   The executes' indexes are made again from `pending` where their count
//!   (`meta`'s `pending-indexed`) differs from it, as on a database written
//!   by an older build; beside a live node of an older build (a node of
//!   this build registers with `pending_index`) a lookup reads `pending`.
//! - `node:ID` and `nodes`: membership, each node's incarnation.
//! - `changes` (the counter every node reads), `change:ID` and `change-log`.
//! - `calendar:NAME`, `calendars`, and `calendars-version`, which every
//!   calendar change and every trigger naming a calendar moves.
//! - `meta`: the purge turn, the audit's horizon and `pending-indexed`.
//!
//! Every step is one call of a Lua library (the `lua/` files: on Redis 7 a
//! function loaded at connect and called with `FCALL`, elsewhere a script
//! run by `EVALSHA`; its first argument names the command): the claim with its
//! ledger row, fenced starts and outcomes (the owner's incarnation and
//! liveness compared), take-overs, re-runs, chains, pending fires. The
//! atomicity of a script is the transaction, and a script reads `TIME`
//! itself where the SQL statements read `now()`. What needs the scheduler's
//! own code (first fire times, a calendar's rescheduling) is computed on
//! rows read first, and the script that writes checks that they are
//! unchanged (each row's fire times and stamp, the calendars' version) or
//! answers "retry".
//!
//! # The clock
//!
//! `TIME` on the server is the database clock, the only clock the cluster
//! uses, as `now()` is on the SQL backends.
//!
//! # Durability
//!
//! Redis keeps what its persistence settings keep. At connect the store
//! reads them ([`Durability`]):
//!
//! - `maxmemory-policy` `allkeys-*` could evict the scheduler's keys under
//!   memory pressure, silently losing jobs and the fire ledger: refused
//!   ([`StoreError::UnsafeSettings`]). `noeviction` and the `volatile-*`
//!   policies (which evict only keys with a time to live; the store sets
//!   none) are accepted.
//! - `appendonly no`: a restart of the server loses everything since the
//!   last snapshot (or everything, with snapshots off). Accepted, with a
//!   warning.
//! - `appendfsync everysec`: a crash of the server (not of a node) loses up
//!   to about a second of claims and outcomes. `always` loses none; `no`
//!   leaves it to the kernel (typically up to 30 s).
//!
//! Where `CONFIG` is disabled (some managed services rename it), the store
//! cannot check and says so with a warning.

mod calendars;
mod conn;
mod decode;
mod engine;
mod history;
mod keys;
mod registry;
mod retention;
mod script;
mod store;

use std::time::Duration;

use quartz_core::Timestamp;
use quartz_core::store::StoreError;

use conn::Conn;

pub use keys::Keys;
pub use registry::{MAX_SCHEDULERS, SEQUENCE_BITS};

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = 1;

/// The key holding the schema version (in the default namespace).
pub const SCHEMA_KEY: &str = "quartz:schema";

/// Sets the schema version when there is none, and answers the version
/// found: atomically, so that nodes starting at once agree.
const SCHEMA_SCRIPT: &str = r"
local found = redis.call('GET', KEYS[1])
if not found then
  redis.call('SET', KEYS[1], ARGV[1])
  return tonumber(ARGV[1])
end
return tonumber(found)
";

/// `TIME` on the master of the slot its one key names.
static TIME_SCRIPT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new("return redis.call('TIME')"));

/// The persistence and eviction settings read at connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Durability {
    /// `appendonly`: `Some(true)` when the append-only file is on; `None`
    /// when `CONFIG` could not be read.
    pub append_only: Option<bool>,
    /// `appendfsync`: `always`, `everysec` or `no`.
    pub append_fsync: Option<String>,
    /// `maxmemory-policy`.
    pub eviction: Option<String>,
}

impl Durability {
    /// What a crash of the Redis server can lose, in words.
    pub fn describe(&self) -> String {
        match (self.append_only, self.append_fsync.as_deref()) {
            (None, _) => "unknown: CONFIG is not available to check the persistence settings".to_owned(),
            (Some(false), _) => "everything since the last snapshot: the append-only file is off".to_owned(),
            (Some(true), Some("always")) => "nothing acknowledged: appendfsync always".to_owned(),
            (Some(true), Some("everysec")) => {
                "up to about a second of claims and outcomes: appendfsync everysec".to_owned()
            }
            (Some(true), other) => format!(
                "what the kernel had not yet written (typically up to 30 s): appendfsync {}",
                other.unwrap_or("?")
            ),
        }
    }
}

/// The store on a Redis server (see the [module docs](self)).
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    durability: Durability,
    registry: std::sync::Arc<registry::Registry>,
    /// Who the change log says made the changes made through this handle.
    actor: std::sync::Arc<str>,
    /// The first part of every key (`quartz` unless the URL names another).
    namespace: std::sync::Arc<str>,
    /// Replicas each command of the library waits for (`wait_replicas`).
    wait: Option<Wait>,
    /// Whether the library is a function on this server or a script.
    calls: std::sync::Arc<script::Calls>,
    /// The scheduler whose keys it reads and writes (see
    /// [`Store::scoped`](quartz_core::store::Store::scoped)).
    scheduler: std::sync::Arc<str>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("durability", &self.durability)
            .finish_non_exhaustive()
    }
}

/// How long connecting may take before the server counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a command may wait for its answer. A busy server (a fire storm
/// queues the scripts of every node on its one thread) answers late, not
/// never: the client's default of 500 ms turned load into errors and the
/// errors into retries, more load. A dropped connection still fails at once;
/// this is the SQL store's wait for a connection from its pool.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

impl RedisStore {
    /// Connects to `redis://[:PASSWORD@]HOST[:PORT][/DB][?namespace=NAME]`
    /// (or `rediss://` for TLS), or to a Redis Cluster through some of its
    /// nodes, `redis+cluster://[:PASSWORD@]HOST:PORT,HOST:PORT[/][?namespace=NAME]`
    /// (`rediss+cluster://`); checks the server's persistence and eviction
    /// settings (on a cluster, one node's), and sets or checks the schema
    /// version.
    ///
    /// On a cluster every key of one scheduler is in one hash slot (see
    /// [`Keys`]), so each scheduler lives on one master and its scripts run
    /// there, on that master's clock; schedulers spread over the masters.
    ///
    /// `wait_replicas=N` (with `wait_timeout_ms`, 1000 by default) answers
    /// each command of the store only once `N` replicas of its master hold
    /// what it wrote (`WAIT`, in the same round trip): a master's failover
    /// then loses no answered claim, start or outcome. A write that fewer
    /// replicas acknowledge in time fails as [`StoreError::Unavailable`]
    /// (made on the master, not known to survive it).
    ///
    /// Every key starts with the namespace, `quartz` unless `namespace`
    /// names another: deployments (or test runs) that share one Redis
    /// database keep apart by it.
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidUrl`]; [`StoreError::Unavailable`] when the
    /// server cannot be reached; [`StoreError::UnsafeSettings`] for an
    /// eviction policy that could drop the scheduler's keys;
    /// [`StoreError::Migration`] for data written by a newer schema.
    pub async fn connect(url: &str) -> Result<RedisStore, StoreError> {
        let (url, params) = split_params(url)?;
        let url = url.as_str();
        let conn = match conn::cluster_nodes(url)? {
            Some(nodes) => conn::connect_cluster(url, nodes, CONNECT_TIMEOUT, RESPONSE_TIMEOUT).await?,
            None => Conn::One(connect_one(url).await?),
        };
        let mut store = RedisStore {
            conn,
            durability: Durability {
                append_only: None,
                append_fsync: None,
                eviction: None,
            },
            registry: std::sync::Arc::default(),
            actor: quartz_core::store::DEFAULT_ACTOR.into(),
            scheduler: quartz_core::store::DEFAULT_SCHEDULER.into(),
            namespace: params.namespace.into(),
            wait: params.wait,
            calls: std::sync::Arc::default(),
        };
        store.durability = store.check_durability().await?;
        store.check_schema().await?;
        store.load_library().await;
        Ok(store)
    }

    /// The keys of a scheduler in this store's namespace (for tools that
    /// read or edit them by hand, too).
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a scheduler name with a brace.
    pub fn keys(&self, scheduler: &str) -> Result<Keys, StoreError> {
        Keys::in_namespace(&self.namespace, scheduler)
    }

    /// A key of the namespace outside any scheduler.
    pub(super) fn namespaced(&self, name: &str) -> String {
        format!("{}:{name}", self.namespace)
    }

    /// The namespace every key starts with.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The persistence and eviction settings read at connect.
    pub fn durability(&self) -> &Durability {
        &self.durability
    }

    /// Whether the store is on a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// The server's clock (`TIME`), to the millisecond: on a cluster, the
    /// clock of the master holding this store's scheduler, which its
    /// scripts read.
    pub(super) async fn clock(&self) -> Result<Timestamp, StoreError> {
        let (seconds, micros): (i64, i64) = match &self.conn {
            Conn::One(_) => redis::cmd("TIME").query_async(&mut self.conn.clone()).await,
            Conn::Cluster(_) => {
                TIME_SCRIPT
                    .key(self.keys(&self.scheduler)?.prefix())
                    .invoke_async(&mut self.conn.clone())
                    .await
            }
        }
        .map_err(|e| error(&e))?;
        Ok(Timestamp::from_millis(seconds * 1000 + micros / 1000))
    }

    async fn config(&self, name: &str) -> Result<Option<String>, redis::RedisError> {
        let pairs: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(pairs.get(1).cloned())
    }

    async fn check_durability(&self) -> Result<Durability, StoreError> {
        let read = async {
            Ok::<_, redis::RedisError>(Durability {
                append_only: self.config("appendonly").await?.map(|v| v == "yes"),
                append_fsync: self.config("appendfsync").await?,
                eviction: self.config("maxmemory-policy").await?,
            })
        };
        let durability = match read.await {
            Ok(d) => d,
            Err(e) if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() => {
                return Err(unavailable(&e));
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the Redis server's persistence and eviction settings \
                    (CONFIG GET); the store cannot check that the server keeps the scheduler's keys");
                return Ok(Durability {
                    append_only: None,
                    append_fsync: None,
                    eviction: None,
                });
            }
        };
        if let Some(policy) = durability.eviction.as_deref().filter(|p| p.starts_with("allkeys-")) {
            return Err(StoreError::UnsafeSettings {
                setting: "maxmemory-policy".to_owned(),
                value: policy.to_owned(),
                reason: "under memory pressure Redis would evict the scheduler's keys (jobs, triggers, the fire \
                         ledger) and fires would be lost or run twice; use noeviction (or a volatile-* policy: the \
                         store sets no time to live)"
                    .to_owned(),
            });
        }
        if durability.append_only == Some(false) {
            tracing::warn!(
                "the Redis server's append-only file is off (appendonly no): a restart of the server loses \
                 every job, trigger and fire since its last snapshot; set appendonly yes"
            );
        }
        Ok(durability)
    }

    async fn check_schema(&self) -> Result<(), StoreError> {
        let found: i64 = redis::Script::new(SCHEMA_SCRIPT)
            .key(self.namespaced("schema"))
            .arg(SCHEMA_VERSION)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| error(&e))?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::Migration {
                reason: format!(
                    "the Redis database holds schema version {found}, newer than this build's {SCHEMA_VERSION}: \
                     upgrade this node"
                ),
            });
        }
        Ok(())
    }
}

/// A connection to one server that reconnects by itself.
async fn connect_one(url: &str) -> Result<redis::aio::ConnectionManager, StoreError> {
    use redis::IntoConnectionInfo as _;
    let invalid = |e: redis::RedisError| StoreError::InvalidUrl {
        url: hide_password(url),
        reason: e.to_string(),
    };
    let info = url
        .into_connection_info()
        .map_err(invalid)?
        .set_tcp_settings(tcp_settings());
    let client = redis::Client::open(info).map_err(invalid)?;
    let no_answer = |_| StoreError::Unavailable {
        reason: format!("no answer from {} within {CONNECT_TIMEOUT:?}", hide_password(url)),
    };
    // One plain attempt first, so that a refused connection is reported at
    // once rather than after the manager's retries.
    tokio::time::timeout(CONNECT_TIMEOUT, client.get_multiplexed_async_connection())
        .await
        .map_err(no_answer)?
        .map_err(|e| unavailable(&e))?;
    // Later reconnections: quick retries, capped at a second apart.
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_max_delay(Duration::from_secs(1));
    tokio::time::timeout(CONNECT_TIMEOUT, client.get_connection_manager_with_config(config))
        .await
        .map_err(no_answer)?
        .map_err(|e| unavailable(&e))
}

/// The sockets' settings: a peer that vanished is noticed by keepalive
/// probes (after 10 s of silence, three probes 2 s apart) and one that
/// stopped acknowledging what was sent after [`USER_TIMEOUT`], rather than
/// after the kernel's retransmissions (a quarter of an hour).
pub(super) fn tcp_settings() -> redis::io::tcp::TcpSettings {
    use redis::io::tcp::socket2::TcpKeepalive;
    let keepalive = TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(2))
        .with_retries(3);
    redis::io::tcp::TcpSettings::default()
        .set_keepalive(keepalive)
        .set_user_timeout(USER_TIMEOUT)
}

/// How long a socket may hold data its peer has not acknowledged before
/// the kernel gives the connection up.
pub(super) const USER_TIMEOUT: Duration = Duration::from_secs(10);

/// The store's own URL parameters: the key namespace, and how many
/// replicas must acknowledge each write.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Params {
    namespace: String,
    wait: Option<Wait>,
}

/// `WAIT` after every command of the script library: the write is
/// answered only once `replicas` replicas hold it, or fails after
/// `timeout_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Wait {
    pub(super) replicas: u32,
    pub(super) timeout_ms: u64,
}

/// How long a write waits for its replicas unless `wait_timeout_ms` says.
const WAIT_TIMEOUT_MS: u64 = 1_000;

/// The URL without the store's own parameters (`namespace`,
/// `wait_replicas`, `wait_timeout_ms`), and those parameters.
fn split_params(url: &str) -> Result<(String, Params), StoreError> {
    let mut params = Params {
        namespace: keys::DEFAULT_NAMESPACE.to_owned(),
        wait: None,
    };
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), params));
    };
    let invalid = |reason: String| StoreError::InvalidUrl {
        url: hide_password(url),
        reason,
    };
    let number = |name: &str, value: &str| {
        value
            .parse::<u64>()
            .map_err(|_| invalid(format!("{name} must be a whole number, got {value:?}")))
    };
    let (mut replicas, mut timeout_ms) = (None, None);
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("namespace", name)) => params.namespace = name.to_owned(),
            Some(("wait_replicas", n)) => replicas = Some(number("wait_replicas", n)?),
            Some(("wait_timeout_ms", n)) => timeout_ms = Some(number("wait_timeout_ms", n)?),
            _ => rest.push(pair),
        }
    }
    if params.namespace.is_empty() || params.namespace.contains(['{', '}', ' ']) {
        return Err(invalid(format!(
            "namespace {:?} must be non-empty, without braces or spaces",
            params.namespace
        )));
    }
    match (replicas, timeout_ms) {
        (Some(0) | None, Some(_)) => {
            return Err(invalid("wait_timeout_ms is for wait_replicas of 1 or more".to_owned()));
        }
        (Some(r), _) if r > 16 => return Err(invalid(format!("wait_replicas must be at most 16, got {r}"))),
        (Some(_), Some(0)) => {
            return Err(invalid(
                "wait_timeout_ms must be 1 or more (0 would wait for ever)".to_owned(),
            ));
        }
        (Some(r), t) if r > 0 => {
            params.wait = Some(Wait {
                replicas: u32::try_from(r).unwrap_or(16),
                timeout_ms: t.unwrap_or(WAIT_TIMEOUT_MS),
            });
        }
        _ => {}
    }
    let url = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    Ok((url, params))
}

/// A URL with its password replaced by `***`.
fn hide_password(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

fn unavailable(e: &redis::RedisError) -> StoreError {
    StoreError::Unavailable { reason: e.to_string() }
}

/// A client error as the store's: lost connections may be retried.
fn error(e: &redis::RedisError) -> StoreError {
    if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
        unavailable(e)
    } else {
        StoreError::Database { reason: e.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stores_parameters_are_taken_out_of_the_url() {
        let (url, p) = split_params("redis://h/0?namespace=a&wait_replicas=1").unwrap();
        assert_eq!(url, "redis://h/0");
        assert_eq!(p.namespace, "a");
        assert_eq!(
            p.wait,
            Some(Wait {
                replicas: 1,
                timeout_ms: WAIT_TIMEOUT_MS
            })
        );
        let (url, p) = split_params("redis+cluster://h:1,h:2?wait_replicas=2&wait_timeout_ms=250").unwrap();
        assert_eq!(url, "redis+cluster://h:1,h:2");
        assert_eq!(p.wait.map(|w| (w.replicas, w.timeout_ms)), Some((2, 250)));
        assert_eq!(split_params("redis://h?wait_replicas=0").unwrap().1.wait, None);
        for bad in [
            "redis://:secret@h?wait_replicas=x",
            "redis://:secret@h?wait_timeout_ms=5",
            "redis://:secret@h?wait_replicas=1&wait_timeout_ms=0",
            "redis://:secret@h?wait_replicas=99",
            "redis://:secret@h?namespace=",
        ] {
            let e = split_params(bad).unwrap_err().to_string();
            assert!(!e.contains("secret"), "{e}");
        }
    }

    #[test]
    fn passwords_are_hidden_in_errors() {
        assert_eq!(hide_password("redis://:secret@host:6379/0"), "redis://:***@host:6379/0");
        assert_eq!(hide_password("redis://user:secret@host/0"), "redis://user:***@host/0");
        assert_eq!(hide_password("redis://host:6379"), "redis://host:6379");
    }
}
