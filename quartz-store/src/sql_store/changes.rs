//! Changes seen at once: the per-scheduler change counter that every change
//! made through the store bumps in its own transaction, and how nodes wait on
//! it. PostgreSQL also sends a `NOTIFY` from that transaction, which a
//! listener shared by the store's nodes turns into a wake-up; MySQL, MariaDB
//! and SQLite have no such signal, and nodes read the counter (one primary-key
//! lookup) every [`CHANGE_POLL`]. The same transaction writes the change's
//! row in the change log: who made it, what, to which job, when.

use super::convert::Statement as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use quartz_core::store::{ChangeAction, StoreError};
use sqlx::{Any, Transaction};
use tokio::sync::watch;

use super::{SqlStore, db_error, truncate};
use crate::connect::Target;

/// How often a node reads the change counter where the database cannot notify
/// (well inside [`quartz_core::store::CHANGE_VISIBILITY_MS`]).
pub const CHANGE_POLL: Duration = Duration::from_millis(50);

/// The PostgreSQL channel changes are announced on (payload: the scheduler).
#[cfg(feature = "postgres")]
const CHANNEL: &str = "quartz_changes";

/// How long the listener waits before connecting again after an error.
#[cfg(feature = "postgres")]
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// Wake-ups from the PostgreSQL listener: a number bumped at every
/// notification (and at every reconnection, since notifications may have been
/// missed meanwhile). Shared by every clone of a store.
#[derive(Debug)]
pub(crate) struct ChangeSignal {
    wake: watch::Sender<u64>,
    listening: AtomicBool,
}

impl Default for ChangeSignal {
    fn default() -> ChangeSignal {
        ChangeSignal {
            wake: watch::channel(0).0,
            listening: AtomicBool::new(false),
        }
    }
}

impl ChangeSignal {
    /// A receiver of wake-ups, starting the listener the first time: it lives
    /// as long as the store (it holds only a weak reference).
    fn subscribe(self: &Arc<Self>, target: &Target) -> watch::Receiver<u64> {
        let rx = self.wake.subscribe();
        if !self.listening.swap(true, Ordering::SeqCst) {
            tokio::spawn(listen(target.clone(), Arc::downgrade(self)));
        }
        rx
    }
}

/// The listener task: `LISTEN quartz_changes`, each notification a wake-up;
/// on a lost connection it connects again. Ends once the store is dropped.
#[cfg(feature = "postgres")]
async fn listen(target: Target, signal: Weak<ChangeSignal>) {
    use sqlx::postgres::PgListener;
    loop {
        // The server in use now: after a failover, the new primary.
        let mut listener = match PgListener::connect(&target.url()).await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(error = %e, "change listener cannot connect; retrying");
                tokio::time::sleep(RECONNECT_PAUSE).await;
                if signal.strong_count() == 0 {
                    return;
                }
                continue;
            }
        };
        if let Err(e) = listener.listen(CHANNEL).await {
            tracing::debug!(error = %e, "change listener cannot LISTEN; retrying");
            tokio::time::sleep(RECONNECT_PAUSE).await;
            continue;
        }
        // Connected: notifications sent while it was not were missed.
        let mut woke = true;
        loop {
            let Some(s) = signal.upgrade() else { return };
            if woke {
                s.wake.send_modify(|n| *n = n.wrapping_add(1));
            }
            drop(s);
            match tokio::time::timeout(RECONNECT_PAUSE, listener.recv()).await {
                Ok(Ok(_)) => woke = true,
                Err(_) => woke = false,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "change listener lost its connection; reconnecting");
                    break;
                }
            }
        }
    }
}

/// Without PostgreSQL built in, no store of this build talks to it: there
/// is nothing to listen to.
#[cfg(not(feature = "postgres"))]
async fn listen(_target: Target, _signal: Weak<ChangeSignal>) {}

/// A change, as the change log records it.
pub(super) struct Change<'a> {
    action: ChangeAction,
    target: &'a str,
    target_id: Option<i64>,
    detail: String,
}

impl<'a> Change<'a> {
    pub(super) fn new(action: ChangeAction, target: &'a str, detail: String) -> Change<'a> {
        Change {
            action,
            target,
            target_id: None,
            detail,
        }
    }

    /// The change of the job of this id.
    pub(super) fn of_job(mut self, id: i64) -> Change<'a> {
        self.target_id = Some(id);
        self
    }
}

impl SqlStore {
    /// The transaction of a change: [`changed_in`](Self::changed_in) bumps
    /// the counter inside it.
    pub(super) async fn begin_change(&self, scheduler: &str) -> Result<Transaction<'static, Any>, StoreError> {
        self.ensure_scheduler_row(scheduler).await?;
        let mut tx = self.begin().await?;
        if let Some(lift) = self.db.backend.change_begin() {
            self.query(lift).exec(&mut *tx).await?;
        }
        Ok(tx)
    }

    /// Moves the change counter in `tx` and, on PostgreSQL, announces it
    /// (delivered at commit): every node's change watcher looks.
    pub(super) async fn bump_changes(
        &self,
        tx: &mut Transaction<'static, Any>,
        scheduler: &str,
    ) -> Result<(), StoreError> {
        self.query("UPDATE quartz_scheduler SET changes = changes + 1 WHERE scheduler = ?")
            .bind(scheduler.to_owned())
            .exec(&mut **tx)
            .await?;
        if self.db.backend.notifies() {
            self.query("SELECT pg_notify('quartz_changes', ?) IS NULL")
                .bind(scheduler.to_owned())
                .exec(&mut **tx)
                .await?;
        }
        Ok(())
    }

    /// Bumps the change counter inside a change's transaction (begun by
    /// [`begin_change`](Self::begin_change)), and on PostgreSQL announces it
    /// (delivered at commit, with the change).
    /// and records the change in the change log, as made by this handle's
    /// actor.
    pub(super) async fn changed_in(
        &self,
        tx: &mut Transaction<'static, Any>,
        scheduler: &str,
        change: Change<'_>,
    ) -> Result<(), StoreError> {
        self.bump_changes(tx, scheduler).await?;
        self.query(
            "INSERT INTO quartz_change_log (scheduler, at, actor, action, target, detail, target_id) \
             VALUES (?, {now}, ?, ?, ?, ?, ?)",
        )
        .bind(scheduler.to_owned())
        .bind(self.actor.to_string())
        .bind(change.action.as_str())
        .bind(change.target.to_owned())
        .bind(truncate(&change.detail))
        .bind(change.target_id)
        .exec(&mut **tx)
        .await?;
        if let Some(restore) = self.db.backend.change_end() {
            self.query(restore).exec(&mut **tx).await?;
        }
        Ok(())
    }

    /// The scheduler's row, created once, outside any change's transaction
    /// (two first inserts in two transactions could deadlock on MySQL's gap
    /// locks).
    pub(super) async fn ensure_scheduler_row(&self, scheduler: &str) -> Result<(), StoreError> {
        if self.db.schedulers.lock().contains(scheduler) {
            return Ok(());
        }
        self.query(self.db.backend.insert_scheduler_row())
            .bind(scheduler.to_owned())
            .exec(&self.db.pool)
            .await?;
        self.db.schedulers.lock().insert(scheduler.to_owned());
        Ok(())
    }

    pub(super) async fn changes_read(&self, scheduler: &str) -> Result<i64, StoreError> {
        let n: Option<i64> =
            sqlx::query_scalar(self.db.sql("SELECT changes FROM quartz_scheduler WHERE scheduler = ?"))
                .bind(scheduler.to_owned())
                .fetch_optional(&self.db.pool)
                .await
                .map_err(db_error)?;
        Ok(n.unwrap_or(0))
    }

    pub(super) async fn changes_wait(&self, scheduler: &str, seen: i64, max_wait: Duration) -> Result<i64, StoreError> {
        let deadline = tokio::time::Instant::now() + max_wait;
        let mut wake = self
            .db
            .backend
            .notifies()
            .then(|| self.changes.subscribe(&self.db.target));
        loop {
            let now = self.changes_read(scheduler).await?;
            if now != seen || tokio::time::Instant::now() >= deadline {
                return Ok(now);
            }
            match &mut wake {
                // A wake-up, or the deadline when the listener is down.
                Some(rx) => {
                    if tokio::time::timeout_at(deadline, rx.changed())
                        .await
                        .is_ok_and(|r| r.is_err())
                    {
                        wake = None;
                    }
                }
                None => tokio::time::sleep(CHANGE_POLL.min(deadline - tokio::time::Instant::now())).await,
            }
        }
    }
}
