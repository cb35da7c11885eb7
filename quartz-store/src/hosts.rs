//! PostgreSQL URLs naming several hosts, in libpq's form, the way a
//! deployment follows its primary across a failover:
//! `postgres://user@host1:5432,host2:5432/db?target_session_attrs=read-write`.
//!
//! The store tries the hosts in order and connects to the first that
//! answers as a writable primary (`pg_is_in_recovery()` false; with
//! `target_session_attrs=any`, or none, the first that answers). Every new
//! connection checks it again, so a pool never writes to a standby. When a
//! heartbeat fails (the primary is gone, its connections broken), the store
//! looks for the primary again and points its pool's new connections there:
//! a promoted standby takes over within a heartbeat or two, and the pool's
//! connections to the old host are closed as they come up for use.
//!
//! A primary is a host that takes a commit, not only one that says it is
//! not in recovery: after a promotion the old primary may still be up and
//! reachable, first among the hosts, and answer as a primary while every
//! commit on it waits for a synchronous standby that has left it. The probe
//! commits a transaction that writes (`pg_logical_emit_message(true,
//! 'quartz.probe', '')`: a record in the write-ahead log and nothing in
//! any table; logical decoding sees it under that prefix) within its time
//! limit. A transaction that only takes an id writes no log and does not
//! wait for the standbys.

use std::str::FromStr as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use quartz_core::store::StoreError;
use sqlx::any::AnyConnectOptions;
use sqlx::{AnyConnection, Connection as _};

use crate::dialect::redact;

/// How long one host has to answer the probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often, and for how long, the hosts are probed after a failure until
/// one answers as the primary (a standby's promotion takes a moment).
const FOLLOW_PAUSE: Duration = Duration::from_millis(250);
const FOLLOW_FOR: Duration = Duration::from_secs(60);

/// How often a store checks, from a task of its own, that its pool's server
/// still answers as the primary, and how long the check may take. A store
/// that only reads and edits (the admin surface, the CLI, a service's
/// handle) makes no heartbeat by which to notice a failover.
const WATCH_EVERY: Duration = Duration::from_secs(1);
const WATCH_TIMEOUT: Duration = Duration::from_secs(1);

/// The hosts of a multi-host URL, and the one the store uses now.
#[derive(Debug)]
pub(crate) struct Hosts {
    /// The scheme and the user part, up to the hosts.
    head: String,
    hosts: Vec<String>,
    /// The path and the parameters after the hosts, without
    /// `target_session_attrs` (the driver does not know it).
    tail: String,
    /// Only a writable primary will do.
    pub(crate) read_write: bool,
    /// The URL of the host in use.
    current: RwLock<Arc<str>>,
    /// Set while a task looks for the primary, so that one looks at a time.
    probing: AtomicBool,
    /// When the store last moved to another host: the pool's connections
    /// made before are to the old one. Watched by the connections on their
    /// way back to the pool.
    moved_at: tokio::sync::watch::Sender<Option<Instant>>,
}

impl Hosts {
    /// The hosts of `url` when it names several or asks for a session kind;
    /// `None` for a plain URL.
    pub(crate) fn parse(url: &str) -> Result<Option<Hosts>, StoreError> {
        let invalid = |reason: String| StoreError::InvalidUrl {
            url: redact(url),
            reason,
        };
        let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
            return Ok(None);
        };
        let after = &url[scheme_end..];
        let authority_end = after.find(['/', '?']).unwrap_or(after.len());
        let authority = &after[..authority_end];
        let (user, host_list) = match authority.rfind('@') {
            Some(at) => (&authority[..=at], &authority[at + 1..]),
            None => ("", authority),
        };
        let rest = &after[authority_end..];
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut attrs = None;
        let mut kept = Vec::new();
        for param in query.split('&').filter(|p| !p.is_empty()) {
            match param.split_once('=') {
                Some(("target_session_attrs", value)) => attrs = Some(value),
                _ => kept.push(param),
            }
        }
        let read_write = match attrs {
            None | Some("any") => false,
            Some("read-write" | "primary") => true,
            Some(other) => {
                return Err(invalid(format!(
                    "target_session_attrs={other}: expected read-write, primary or any"
                )));
            }
        };
        let hosts: Vec<String> = host_list.split(',').map(str::to_owned).collect();
        if hosts.len() < 2 && attrs.is_none() {
            return Ok(None);
        }
        if hosts.iter().any(String::is_empty) {
            return Err(invalid("an empty host in the list of hosts".to_owned()));
        }
        let tail = if kept.is_empty() {
            path.to_owned()
        } else {
            format!("{path}?{}", kept.join("&"))
        };
        let head = format!("{}{user}", &url[..scheme_end]);
        let current = Arc::from(format!("{head}{}{tail}", hosts[0]).as_str());
        Ok(Some(Hosts {
            head,
            hosts,
            tail,
            read_write,
            current: RwLock::new(current),
            probing: AtomicBool::new(false),
            moved_at: tokio::sync::watch::Sender::new(None),
        }))
    }

    /// The URL of one host.
    fn url_of(&self, host: &str) -> String {
        format!("{}{host}{}", self.head, self.tail)
    }

    /// The URL of the host in use.
    pub(crate) fn current(&self) -> Arc<str> {
        Arc::clone(&self.current.read())
    }

    /// Whether a connection of the pool, `age` old, was made before the
    /// store last moved to another host: it is to the old one, and is closed
    /// rather than used (the pool's `before_acquire`).
    pub(crate) fn made_before_move(&self, age: Duration) -> bool {
        self.moved_at.borrow().is_some_and(|moved| moved.elapsed() < age)
    }

    /// Runs `test`, the test of a connection `age` old on its way back to
    /// the pool, and answers whether to keep it: not when it is to a host
    /// the store has left, or leaves meanwhile (an old primary still up
    /// holds a statement of it, and the test would wait behind that until
    /// its limit, the connection kept from the pool all that time).
    pub(crate) async fn keep_unless_moved(
        &self,
        age: Duration,
        test: impl std::future::Future<Output = Result<bool, sqlx::Error>>,
    ) -> Result<bool, sqlx::Error> {
        let mut moves = self.moved_at.subscribe();
        if self.made_before_move(age) {
            return Ok(false);
        }
        tokio::select! {
            kept = test => kept,
            _ = moves.changed() => Ok(false),
        }
    }

    /// The URL of the first host that answers as the kind of server asked
    /// for, which becomes the one in use.
    pub(crate) async fn find(&self) -> Result<Arc<str>, StoreError> {
        let mut tried = Vec::new();
        for host in &self.hosts {
            let url = self.url_of(host);
            match tokio::time::timeout(PROBE_TIMEOUT, probe(&url, self.read_write)).await {
                Ok(Ok(true)) => {
                    let url: Arc<str> = Arc::from(url.as_str());
                    *self.current.write() = Arc::clone(&url);
                    return Ok(url);
                }
                Ok(Ok(false)) => tried.push(format!("{host}: a standby (in recovery)")),
                Ok(Err(e)) => tried.push(format!("{host}: {e}")),
                Err(_) if self.read_write => tried.push(format!(
                    "{host}: no answer, or no commit (a primary waiting for a standby that left it), within \
                     {PROBE_TIMEOUT:?}"
                )),
                Err(_) => tried.push(format!("{host}: no answer within {PROBE_TIMEOUT:?}")),
            }
        }
        Err(StoreError::Unavailable {
            reason: format!(
                "no host of {} is a {}: {}",
                redact(&self.url_of(&self.hosts.join(","))),
                if self.read_write {
                    "writable primary"
                } else {
                    "server that answers"
                },
                tried.join("; ")
            ),
        })
    }

    /// Looks for the primary again, from a task of its own (one at a time;
    /// a call while it runs does nothing), every [`FOLLOW_PAUSE`] until a
    /// host answers as one or [`FOLLOW_FOR`] has passed, and points
    /// `pool`'s new connections at it when it moved. The pool's connection
    /// attempts in progress take the new host at their next try.
    pub(crate) fn follow(self: &Arc<Self>, pool: &sqlx::AnyPool) {
        if self.probing.swap(true, Ordering::SeqCst) {
            return;
        }
        let (hosts, pool) = (Arc::clone(self), pool.clone());
        tokio::spawn(async move {
            let before = hosts.current();
            let deadline = tokio::time::Instant::now() + FOLLOW_FOR;
            loop {
                match hosts.find().await {
                    Ok(url) => {
                        if url != before {
                            match AnyConnectOptions::from_str(&url) {
                                Ok(options) => {
                                    pool.set_connect_options(options);
                                    hosts.moved_at.send_replace(Some(Instant::now()));
                                    tracing::warn!(
                                        from = %redact(&before),
                                        to = %redact(&url),
                                        "the primary moved; following it"
                                    );
                                }
                                Err(e) => tracing::warn!(error = %e, "cannot read the new primary's URL"),
                            }
                        }
                        break;
                    }
                    Err(e) if tokio::time::Instant::now() >= deadline => {
                        tracing::warn!(error = %e, "no primary found; looking again at the next failure");
                        break;
                    }
                    Err(e) => tracing::debug!(error = %e, "looking for the primary"),
                }
                tokio::time::sleep(FOLLOW_PAUSE).await;
            }
            hosts.probing.store(false, Ordering::SeqCst);
        });
    }

    /// Checks every [`WATCH_EVERY`] that a connection of `pool` answers
    /// within [`WATCH_TIMEOUT`], on a primary that takes a commit when one
    /// is asked for (a message in the write-ahead log a second), and
    /// [`follow`](Self::follow)s when not; until the store is dropped (no
    /// strong count left of `alive`) or its pool closed.
    pub(crate) fn watch(self: &Arc<Self>, pool: &sqlx::AnyPool, alive: std::sync::Weak<()>) {
        let (hosts, pool) = (Arc::clone(self), pool.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(WATCH_EVERY).await;
                if alive.strong_count() == 0 || pool.is_closed() {
                    return;
                }
                let check = tokio::time::timeout(WATCH_TIMEOUT, async {
                    let mut conn = pool.acquire().await?;
                    fit(&mut conn, hosts.read_write).await
                })
                .await;
                if !matches!(check, Ok(Ok(true))) {
                    hosts.follow(&pool);
                }
            }
        });
    }
}

/// Whether the server at `url` answers, as a primary that takes a commit
/// when `read_write` (the caller bounds the time).
async fn probe(url: &str, read_write: bool) -> Result<bool, sqlx::Error> {
    let mut conn = AnyConnection::connect(url).await?;
    let fit = fit(&mut conn, read_write).await?;
    let _ = conn.close().await;
    Ok(fit)
}

/// Whether a connection's server is one to use: when `read_write`, a
/// primary whose commits return (the caller bounds the time). The
/// message is written in a transaction of its own, whose commit waits for
/// the synchronous standbys the server names.
async fn fit(conn: &mut AnyConnection, read_write: bool) -> Result<bool, sqlx::Error> {
    if !read_write {
        return Ok(true);
    }
    if in_recovery(conn).await? {
        return Ok(false);
    }
    sqlx::query("SELECT pg_logical_emit_message(true, 'quartz.probe', '')::text")
        .execute(conn)
        .await?;
    Ok(true)
}

/// Whether the server of a connection is a standby.
pub(crate) async fn in_recovery(conn: &mut AnyConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar::<_, bool>("SELECT pg_is_in_recovery()")
        .fetch_one(conn)
        .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reads_libpq_host_lists() {
        let hosts = Hosts::parse("postgres://u:pw@a:5432,b:5433/db?sslmode=disable&target_session_attrs=read-write")
            .unwrap()
            .unwrap();
        assert_eq!(hosts.hosts, ["a:5432", "b:5433"]);
        assert!(hosts.read_write);
        assert_eq!(hosts.url_of("b:5433"), "postgres://u:pw@b:5433/db?sslmode=disable");
        assert_eq!(&*hosts.current(), "postgres://u:pw@a:5432/db?sslmode=disable");

        let any = Hosts::parse("postgresql://a,b/db").unwrap().unwrap();
        assert!(!any.read_write);
        assert_eq!(any.url_of("b"), "postgresql://b/db");
        let one = Hosts::parse("postgres://u@a:1/db?target_session_attrs=primary")
            .unwrap()
            .unwrap();
        assert_eq!(one.hosts, ["a:1"]);

        assert!(Hosts::parse("postgres://u@a:5432/db").unwrap().is_none(), "a plain URL");
        assert!(matches!(
            Hosts::parse("postgres://u:secret@a,b/db?target_session_attrs=standby"),
            Err(StoreError::InvalidUrl { url, reason }) if reason.contains("standby") && !url.contains("secret")
        ));
        assert!(matches!(
            Hosts::parse("postgres://a,,b/db"),
            Err(StoreError::InvalidUrl { reason, .. }) if reason.contains("empty host")
        ));
    }
}
