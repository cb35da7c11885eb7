//! [`MemoryStore`]: the whole store contract in one process's memory, for
//! engine tests that must not wait on a database or on the wall clock.
//!
//! Every call is one step under one lock (the lock is the transaction), so
//! a compare-and-set, a claim with its ledger row, or a fire's end with
//! its follow-up is seen whole or not at all, as on the other stores. The
//! domain rules (a new trigger's first row, what a calendar change does to
//! a trigger, the change log's details) are
//! [`crate::store::rules`], the same functions the SQL and Redis
//! stores call. It passes the store conformance suite
//! (`quartz-store/tests/store.rs`) and runs the engine suite
//! (`tests/engine.rs`), as the test kit's kind `Memory`; the engine's own
//! unit tests build its stages on it. Compiled with the `testing` feature
//! (and for this crate's tests).
//!
//! Its clock is tokio's: the wall time when the store was made, moved on by
//! [`tokio::time::Instant`]. Under `tokio::time::pause()` the store's time
//! stands still until the test (or the runtime's auto-advance) moves it, so
//! a test steps the node and its store together (`tests/paused.rs`: a minute
//! of fires in milliseconds). Read it from the runtime's tasks, as the engine
//! does: on a thread outside the runtime (a blocking handler's pool thread)
//! tokio's instant is the real one.
//!
//! ```
//! use quartz_core::store::{JobSpec, JobStore, Store};
//! use quartz_core::memory::MemoryStore;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! store.create_job(&JobSpec::new("report", "shell"), &[]).await?;
//! assert_eq!(store.list_jobs().await?.len(), 1);
//! assert!(store.now().await?.as_millis() > 0);
//! # Ok::<(), quartz_core::store::StoreError>(())
//! # }).unwrap();
//! ```

mod admin;
mod db;
mod ends;
mod engine;
mod history;
mod overlap;
mod row;
mod work;

use std::sync::Arc;

use crate::Timestamp;
use crate::store::rules;
use crate::store::{ChangeAction, DEFAULT_ACTOR, DEFAULT_SCHEDULER, SharedStore, Store, StoreError};
use async_trait::async_trait;
use parking_lot::Mutex;

use db::{Change, Db};

/// The store contract in memory. See the [module docs](self). Cheap to
/// clone: clones share one memory.
#[derive(Clone)]
pub struct MemoryStore {
    shared: Arc<Shared>,
    actor: Arc<str>,
    scheduler: Arc<str>,
}

struct Shared {
    db: Mutex<Db>,
    /// The wall time, in ms, at `base`.
    base_ms: i64,
    base: tokio::time::Instant,
    /// Moved on by every change, for
    /// [`HistoryStore::change_wait`](crate::store::HistoryStore::change_wait).
    changed: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("actor", &self.actor)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryStore {
    fn default() -> MemoryStore {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// An empty store whose clock starts at the wall time now.
    pub fn new() -> MemoryStore {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        MemoryStore::starting_at(Timestamp::from_millis(wall))
    }

    /// An empty store whose clock reads `start` now and moves with tokio's
    /// time from here.
    pub fn starting_at(start: Timestamp) -> MemoryStore {
        MemoryStore {
            shared: Arc::new(Shared {
                db: Mutex::new(Db::default()),
                base_ms: start.as_millis(),
                base: tokio::time::Instant::now(),
                changed: tokio::sync::watch::channel(0).0,
            }),
            actor: DEFAULT_ACTOR.into(),
            scheduler: DEFAULT_SCHEDULER.into(),
        }
    }

    /// The store's time.
    pub fn clock(&self) -> Timestamp {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(self.shared.base);
        Timestamp::from_millis(self.shared.base_ms + i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
    }

    /// Edits an execute's fields by hand, by their SQL column names (`None`
    /// clears one), as an operator edits a row; `false` when there is no
    /// such execute.
    ///
    /// # Panics
    ///
    /// On a column it does not know, or a value that is not of its type.
    pub fn edit_execute(&self, execute_id: i64, fields: &[(&str, Option<String>)]) -> bool {
        let mut db = self.shared.db.lock();
        let Some(row) = db.executes.get_mut(&execute_id) else {
            return false;
        };
        for (column, value) in fields {
            row.set(column, value.clone());
        }
        true
    }

    /// Runs `f` on the memory, in one step, and wakes change waiters when
    /// `f` changed something they wait on.
    fn step<T>(&self, f: impl FnOnce(&mut Db, i64) -> T) -> T {
        let now = self.clock().as_millis();
        let (out, bumped) = {
            let mut db = self.shared.db.lock();
            let before = db.change_total;
            let out = f(&mut db, now);
            (out, db.change_total != before)
        };
        if bumped {
            self.shared.changed.send_modify(|n| *n += 1);
        }
        out
    }

    /// Reads the memory in one step.
    fn read<T>(&self, f: impl FnOnce(&Db) -> T) -> T {
        f(&self.shared.db.lock())
    }

    /// A change log row, as made by this handle's actor.
    fn change(&self, action: ChangeAction, target: &str, detail: &str) -> Change {
        Change {
            actor: self.actor.to_string(),
            action,
            target: target.to_owned(),
            target_id: None,
            detail: rules::truncate(detail),
        }
    }
}

/// Epoch milliseconds of a time, if any.
fn ms(t: Option<Timestamp>) -> Option<i64> {
    t.map(Timestamp::as_millis)
}

#[async_trait]
impl Store for MemoryStore {
    async fn now(&self) -> Result<Timestamp, StoreError> {
        Ok(self.clock())
    }

    fn scheduler(&self) -> &str {
        &self.scheduler
    }

    fn scoped(&self, scheduler: &str) -> SharedStore {
        Arc::new(MemoryStore {
            scheduler: scheduler.into(),
            ..self.clone()
        })
    }

    fn acting_as(&self, actor: &str) -> SharedStore {
        Arc::new(MemoryStore {
            actor: rules::actor_name(actor).into(),
            ..self.clone()
        })
    }

    /// In memory a run costs what its claims do; yes, so that the engine's
    /// tests on this store take runs as a node on PostgreSQL does.
    fn claims_runs_at_once(&self) -> bool {
        true
    }
}
