//! [`SqlStore`]: the [`Store`] on sqlx, one implementation for the three
//! backends, their differences confined to [`crate::connect`].

use std::collections::HashSet;

use quartz_core::Timestamp;
use quartz_core::store::{
    CalendarStore, ChainedFire, ChangeQuery, ChangeRecord, Claim, DEFAULT_ACTOR, DEFAULT_SCHEDULER, FireEnd, FireQuery,
    FireRecord, FireRetry, FireStore, FollowUp, HealthCounts, HistoryStore, JobStore, Node, NodeRef, NodeState,
    NodeStore, Outcome, PendingClaim, RetryPolicy, ScheduleStore, SharedStore, Store, StoreError, check_name,
};
use quartz_core::trigger::TriggerState;
use sqlx::any::AnyQueryResult;
use sqlx::{Any, Row, Transaction};

use crate::connect::{Backend, Db, StoreOptions};
use crate::dialect::IDS_PER_LIST;

mod changes;
mod retention;

pub use changes::CHANGE_POLL;
use changes::Change;
use changes::ChangeSignal;

macro_rules! node_cols {
    () => {
        "scheduler, node_id, host, pid, weight, state, incarnation, registered_at, heartbeat_at, busy, handlers, \
         dead_after_ms"
    };
}

macro_rules! job_cols {
    () => {
        "id, scheduler, name, handler, payload, description, state, requests_recovery, allow_concurrent, \
         timeout_ms, max_attempts, backoff_ms, backoff_max_ms, parent_job, created_at, updated_at, version, \
         concurrency_limit, concurrency_key"
    };
}
macro_rules! execute_cols {
    () => {
        "id, job_id, scheduler, kind, cron_expression, time_zone, interval_ms, start_time, end_time, \
         repeat_limit, times_triggered, misfire_policy, priority, state, prev_fire_time, next_fire_time, \
         node_id, incarnation, error, schedule_sig, calendar, calendar_stamp, dst_skipped, dst_repeated, \
         jitter_ms, jitter_seed, catch_up_ms, overlap"
    };
}
macro_rules! fire_cols {
    () => {
        "id, execute_id, job_id, fire_time, attempt, node_id, incarnation, state, claimed_at, started_at, \
         finished_at, timed_out_at, error, skipped_until, fire_count, due_at"
    };
}

// After the column lists, which they use.
/// A query under construction, as [`SqlStore::query`] makes it.
type AnyQuery = sqlx::query::Query<'static, Any, sqlx::any::AnyArguments>;

mod calendars;
mod claims;
mod claims_joined;
mod convert;
mod decode;
mod executes;
mod filtered;
mod fires;
mod history;
pub(crate) mod jobs;
mod nodes;
mod overlap;
mod pending;
mod ran;
mod retry;

use crate::common::{CalendarSet, truncate};
use convert::Statement as _;
pub(crate) use convert::db_error;
use convert::{bind_id_list, count_to_i64, first_ids, is_unique_violation, retry_conflicts};
use decode::{RowError, decode_execute, decode_fire, decode_job, decode_node};
use fires::{FAIL_CLAIMED, MISFIRE_CLAIMED, RELEASE_CLAIMED, SKIP_CLAIMED};

/// A [`Store`] on SQLite, PostgreSQL or MySQL/MariaDB, chosen by URL.
///
/// Cheap to clone: clones share one connection pool.
#[derive(Debug, Clone)]
pub struct SqlStore {
    db: Db,
    /// Who the change log says made the changes made through this handle
    /// (see [`Store::acting_as`]).
    actor: std::sync::Arc<str>,
    /// The scheduler whose rows it reads and writes (see [`Store::scoped`]).
    scheduler: std::sync::Arc<str>,
    /// Wake-ups from the PostgreSQL change listener, shared by every clone.
    changes: std::sync::Arc<ChangeSignal>,
}

impl SqlStore {
    /// Connects with default options, creating or upgrading the schema.
    ///
    /// URLs: `sqlite://quartz.db` (a file, created if missing, in WAL mode),
    /// `sqlite::memory:`, `postgres://user@host/db`, `mysql://user@host/db`
    /// (`mariadb://` is accepted too).
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidUrl`], [`StoreError::Unavailable`] when the server
    /// cannot be reached, [`StoreError::Migration`].
    pub async fn connect(url: &str) -> Result<SqlStore, StoreError> {
        SqlStore::connect_with(url, &StoreOptions::default()).await
    }

    /// Connects with the given options.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_with(url: &str, options: &StoreOptions) -> Result<SqlStore, StoreError> {
        Ok(SqlStore::on(Db::connect(url, options).await?))
    }

    /// A store on `db`, acting as [`DEFAULT_ACTOR`] on [`DEFAULT_SCHEDULER`].
    pub(crate) fn on(db: Db) -> SqlStore {
        SqlStore {
            db,
            actor: DEFAULT_ACTOR.into(),
            scheduler: DEFAULT_SCHEDULER.into(),
            changes: std::sync::Arc::default(),
        }
    }

    /// Creates or upgrades the schema; idempotent, and safe when several nodes
    /// run it at once.
    ///
    /// # Errors
    ///
    /// [`StoreError::Migration`].
    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.db.migrate().await
    }

    /// The connection pool, for plain SQL beside the store (operators' tools,
    /// tests). Writes here bypass the store's validation.
    pub fn pool(&self) -> &sqlx::AnyPool {
        &self.db.pool
    }

    /// Which database this is.
    pub fn backend(&self) -> Backend {
        self.db.backend
    }

    /// Closes the pool, waiting for connections in use to be returned.
    pub async fn close(&self) {
        self.db.pool.close().await;
    }

    pub(super) async fn begin(&self) -> Result<Transaction<'static, Any>, StoreError> {
        let tx = match self.db.backend.begin_statement() {
            Some(begin) => self.db.pool.begin_with(begin).await,
            None => self.db.pool.begin().await,
        };
        tx.map_err(db_error)
    }

    pub(super) fn query(&self, template: &'static str) -> AnyQuery {
        sqlx::query(self.db.sql(template))
    }

    /// How many ids one `{ids}` set takes: any number where it is one
    /// parameter, [`IDS_PER_LIST`] on MySQL.
    pub(super) fn ids_per_statement(&self) -> usize {
        if self.db.backend.ids_in_one() {
            usize::MAX
        } else {
            IDS_PER_LIST
        }
    }

    /// Binds an `{ids}` set (at most [`SqlStore::ids_per_statement`] ids).
    pub(super) fn bind_id_set(&self, q: AnyQuery, ids: &[i64]) -> AnyQuery {
        if self.db.backend.ids_in_one() {
            q.bind(self.db.backend.encode_ids(ids))
        } else {
            bind_id_list(q, ids)
        }
    }

    /// The database clock, read inside a transaction.
    pub(super) async fn now_in(&self, tx: &mut Transaction<'static, Any>) -> Result<Timestamp, StoreError> {
        let ms: i64 = sqlx::query_scalar(self.db.sql("SELECT {now}"))
            .fetch_one(&mut **tx)
            .await
            .map_err(db_error)?;
        Ok(Timestamp::from_millis(ms))
    }

    /// Runs a statement on the pool; whether it changed exactly one row (a
    /// compare-and-set won).
    pub(super) async fn changed_one(&self, q: AnyQuery) -> Result<bool, StoreError> {
        Ok(q.exec(&self.db.pool).await?.rows_affected() == 1)
    }
}

#[async_trait::async_trait]
impl Store for SqlStore {
    async fn now(&self) -> Result<Timestamp, StoreError> {
        // Every poll reads the clock: a failover is noticed here.
        let row = self
            .db
            .watching(self.query("SELECT {now}").fetch_one(&self.db.pool))
            .await
            .map_err(db_error)?;
        Ok(Timestamp::from_millis(row.try_get::<i64, _>(0).map_err(db_error)?))
    }

    fn scheduler(&self) -> &str {
        &self.scheduler
    }

    fn scoped(&self, scheduler: &str) -> SharedStore {
        std::sync::Arc::new(SqlStore {
            scheduler: scheduler.into(),
            ..self.clone()
        })
    }

    fn acting_as(&self, actor: &str) -> SharedStore {
        std::sync::Arc::new(SqlStore {
            actor: crate::common::actor_name(actor).into(),
            ..self.clone()
        })
    }

    /// On PostgreSQL (one statement) and MySQL/MariaDB (four) a batch's run
    /// is one `UPDATE` of the execute; SQLite claims one by one.
    fn claims_runs_at_once(&self) -> bool {
        self.db.backend.claims_in_one_statement() || self.db.backend.claims_joined()
    }

    async fn close(&self) {
        SqlStore::close(self).await;
    }
}
