//! [`AnyStore`]: the store a URL names, SQL or Redis, as one type, for
//! tools (the CLI, the console, benchmarks, test suites) that take any
//! backend at run time.

use quartz_core::Timestamp;
use quartz_core::calendar::CalendarDefinition;
use quartz_core::store::internal::EngineStore;
use quartz_core::store::{
    CalendarRecord, ChainedFire, ChangeQuery, ChangeRecord, Claim, DueBatch, ExecuteCas, ExecuteSpec, FireQuery,
    FireRecord, FireRetry, FireState, FollowUp, HealthCounts, Job, JobDetail, JobQuery, JobSpec, Node, NodeRef,
    NodeRegistration, Outcome, PendingClaim, SkippedRecord, Store, StoreError,
};

#[cfg(feature = "redis")]
use crate::RedisStore;
use crate::{SqlStore, StoreOptions};

/// The store a URL names: [`SqlStore`] for `sqlite:`, `postgres://` and
/// `mysql://` (or `mariadb://`), [`RedisStore`] for `redis://` and
/// `rediss://`. Cheap to clone.
///
/// ```
/// use quartz_core::store::{JobSpec, Store};
/// use quartz_store::AnyStore;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = AnyStore::connect("sqlite::memory:").await?;
/// store.create_job("default", &JobSpec::new("nightly-report", "shell"), &[]).await?;
/// assert_eq!(store.list_jobs("default").await?.len(), 1);
/// # Ok::<(), quartz_core::store::StoreError>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub enum AnyStore {
    /// SQLite, PostgreSQL or MySQL/MariaDB.
    Sql(SqlStore),
    /// Redis (with the `redis` feature).
    #[cfg(feature = "redis")]
    Redis(RedisStore),
}

/// Whether a URL names a Redis server.
pub fn is_redis_url(url: &str) -> bool {
    url.starts_with("redis://") || url.starts_with("rediss://")
}

impl AnyStore {
    /// Connects to the store a URL names (see [`SqlStore::connect`] and
    /// [`RedisStore::connect`]).
    ///
    /// # Errors
    ///
    /// As the chosen store's `connect`.
    pub async fn connect(url: &str) -> Result<AnyStore, StoreError> {
        AnyStore::connect_with(url, &StoreOptions::default()).await
    }

    /// Connects with options (which only the SQL stores take).
    ///
    /// # Errors
    ///
    /// As [`AnyStore::connect`].
    pub async fn connect_with(url: &str, options: &StoreOptions) -> Result<AnyStore, StoreError> {
        if is_redis_url(url) {
            #[cfg(feature = "redis")]
            return Ok(AnyStore::Redis(RedisStore::connect(url).await?));
            #[cfg(not(feature = "redis"))]
            return Err(StoreError::InvalidUrl {
                url: crate::connect::redact(url),
                reason: "this build has no redis support: enable the `redis` feature (for example \
                         `quartz = { version = \"0.1\", features = [\"redis\"] }` in Cargo.toml)"
                    .to_owned(),
            });
        } else {
            Ok(AnyStore::Sql(SqlStore::connect_with(url, options).await?))
        }
    }

    /// The SQL store, if this is one.
    pub fn as_sql(&self) -> Option<&SqlStore> {
        match self {
            AnyStore::Sql(s) => Some(s),
            #[cfg(feature = "redis")]
            AnyStore::Redis(_) => None,
        }
    }

    /// The Redis store, if this is one.
    #[cfg(feature = "redis")]
    pub fn as_redis(&self) -> Option<&RedisStore> {
        match self {
            AnyStore::Redis(r) => Some(r),
            AnyStore::Sql(_) => None,
        }
    }

    /// Closes the SQL store's pool (a Redis connection closes when the last
    /// clone is dropped).
    pub async fn close(&self) {
        #[cfg_attr(not(feature = "redis"), allow(irrefutable_let_patterns))]
        if let AnyStore::Sql(s) = self {
            s.close().await;
        }
    }
}

impl From<SqlStore> for AnyStore {
    fn from(store: SqlStore) -> AnyStore {
        AnyStore::Sql(store)
    }
}

#[cfg(feature = "redis")]
impl From<RedisStore> for AnyStore {
    fn from(store: RedisStore) -> AnyStore {
        AnyStore::Redis(store)
    }
}

/// Each method, handed to the store inside.
macro_rules! delegate {
    ($(fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty;)*) => {
        $(
            async fn $name(&self $(, $arg: $ty)*) -> $ret {
                match self {
                    AnyStore::Sql(s) => s.$name($($arg),*).await,
                    #[cfg(feature = "redis")]
                    AnyStore::Redis(r) => r.$name($($arg),*).await,
                }
            }
        )*
    };
}

impl Store for AnyStore {
    fn acting_as(&self, actor: &str) -> AnyStore {
        match self {
            AnyStore::Sql(s) => AnyStore::Sql(s.acting_as(actor)),
            #[cfg(feature = "redis")]
            AnyStore::Redis(r) => AnyStore::Redis(r.acting_as(actor)),
        }
    }

    delegate! {
        fn now(&self) -> Result<Timestamp, StoreError>;
        fn list_nodes(&self, scheduler: &str) -> Result<Vec<Node>, StoreError>;
        fn create_job(&self, scheduler: &str, job: &JobSpec, executes: &[ExecuteSpec]) -> Result<Job, StoreError>;
        fn get_job(&self, scheduler: &str, name: &str) -> Result<Option<JobDetail>, StoreError>;
        fn jobs_by_id(&self, scheduler: &str, ids: &[i64]) -> Result<Vec<Job>, StoreError>;
        fn list_jobs(&self, scheduler: &str) -> Result<Vec<Job>, StoreError>;
        fn jobs_page(&self, query: &JobQuery) -> Result<Vec<Job>, StoreError>;
        fn update_job(&self, scheduler: &str, name: &str, job: &JobSpec, executes: Option<&[ExecuteSpec]>, expected_version: Option<i64>) -> Result<Job, StoreError>;
        fn set_paused(&self, scheduler: &str, name: &str, paused: bool, expected_version: Option<i64>) -> Result<Job, StoreError>;
        fn fire_now(&self, scheduler: &str, name: &str) -> Result<(i64, Timestamp), StoreError>;
        fn retry_fire(&self, scheduler: &str, fire_id: i64) -> Result<FireRetry, StoreError>;
        fn health_counts(&self, scheduler: &str, overdue_before: Timestamp, stranded_before: Timestamp, recent_since: Timestamp) -> Result<HealthCounts, StoreError>;
        fn delete_job(&self, scheduler: &str, name: &str, expected_version: Option<i64>) -> Result<(), StoreError>;
        fn fires(&self, query: &FireQuery) -> Result<Vec<FireRecord>, StoreError>;
        fn change_log(&self, query: &ChangeQuery) -> Result<Vec<ChangeRecord>, StoreError>;
        fn put_calendar(&self, scheduler: &str, name: &str, definition: &CalendarDefinition, expected_version: Option<i64>) -> Result<CalendarRecord, StoreError>;
        fn add_calendar(&self, scheduler: &str, name: &str, definition: &CalendarDefinition) -> Result<CalendarRecord, StoreError>;
        fn get_calendar(&self, scheduler: &str, name: &str) -> Result<Option<CalendarRecord>, StoreError>;
        fn list_calendars(&self, scheduler: &str) -> Result<Vec<CalendarRecord>, StoreError>;
        fn delete_calendar(&self, scheduler: &str, name: &str, expected_version: Option<i64>) -> Result<(), StoreError>;
    }
}

impl EngineStore for AnyStore {
    delegate! {
        fn register_node(&self, node: &NodeRegistration) -> Result<Node, StoreError>;
        fn heartbeat(&self, scheduler: &str, node: &NodeRef, busy: u64) -> Result<bool, StoreError>;
        fn retire_node(&self, scheduler: &str, node: &NodeRef, dead_after_ms: i64) -> Result<bool, StoreError>;
        fn leave(&self, scheduler: &str, node: &NodeRef) -> Result<bool, StoreError>;
        fn due_executes(&self, scheduler: &str, before: Timestamp, limit: u32) -> Result<DueBatch, StoreError>;
        fn orphaned_executes(&self, scheduler: &str, limit: u32) -> Result<DueBatch, StoreError>;
        fn update_execute(&self, cas: &ExecuteCas, records: &[SkippedRecord]) -> Result<bool, StoreError>;
        fn update_executes(&self, updates: &[(ExecuteCas, Vec<SkippedRecord>)]) -> Result<Vec<bool>, StoreError>;
        fn claim(&self, claim: &Claim) -> Result<Option<i64>, StoreError>;
        fn claim_batch(&self, claims: &[Claim]) -> Result<Vec<Option<i64>>, StoreError>;
        fn mark_running_all(&self, fire_ids: &[i64], node: &NodeRef) -> Result<Vec<(i64, Timestamp)>, StoreError>;
        fn confirm_starts(&self, fire_ids: &[i64], node: &NodeRef) -> Result<Vec<(i64, Timestamp)>, StoreError>;
        fn succeed_all(&self, fire_ids: &[i64], node: &NodeRef) -> Result<Vec<i64>, StoreError>;
        fn finish(&self, fire_id: i64, node: &NodeRef, outcome: &Outcome) -> Result<bool, StoreError>;
        fn succeed_and_chain(&self, fire_id: i64, node: &NodeRef) -> Result<Option<Vec<ChainedFire>>, StoreError>;
        fn chain_parents(&self, scheduler: &str) -> Result<Vec<i64>, StoreError>;
        fn misfire_claimed(&self, fire_id: i64, node: &NodeRef, reason: &str) -> Result<bool, StoreError>;
        fn skip_claimed(&self, fire_id: i64, node: &NodeRef, reason: &str) -> Result<bool, StoreError>;
        fn fail_claimed(&self, fire_id: i64, node: &NodeRef, reason: &str) -> Result<bool, StoreError>;
        fn release_fire(&self, fire_id: i64, node: &NodeRef) -> Result<bool, StoreError>;
        fn orphaned_fires(&self, scheduler: &str, limit: u32) -> Result<Vec<FireRecord>, StoreError>;
        fn claimed_by(&self, scheduler: &str, node: &NodeRef, before: Timestamp, limit: u32) -> Result<Vec<FireRecord>, StoreError>;
        fn take_over(&self, fire: &FireRecord, node: &NodeRef) -> Result<bool, StoreError>;
        fn rerun(&self, fire: &FireRecord, node: &NodeRef) -> Result<Option<i64>, StoreError>;
        fn abandon(&self, fire: &FireRecord) -> Result<bool, StoreError>;
        fn fire_time_out(&self, fire_id: i64, node: &NodeRef, error: &str) -> Result<bool, StoreError>;
        fn fire_fail_and_retry(&self, fire_id: i64, node: &NodeRef, error: &str, retry_in_ms: i64) -> Result<FollowUp, StoreError>;
        fn fire_misfire_and_run_late(&self, fire_id: i64, node: &NodeRef, reason: &str, one_per_execute: bool) -> Result<FollowUp, StoreError>;
        fn fires_pending(&self, scheduler: &str, before: Timestamp, limit: u32) -> Result<Vec<FireRecord>, StoreError>;
        fn pending_claim(&self, fire_id: i64, node: &NodeRef, exclusive: bool) -> Result<PendingClaim, StoreError>;
        fn changes(&self, scheduler: &str) -> Result<i64, StoreError>;
        fn change_wait(&self, scheduler: &str, seen: i64, max_wait: std::time::Duration) -> Result<i64, StoreError>;
        fn purge_turn(&self, scheduler: &str, every_ms: i64) -> Result<bool, StoreError>;
        fn purge_horizon(&self, scheduler: &str) -> Result<Option<Timestamp>, StoreError>;
        fn purge_horizon_advance(&self, scheduler: &str, before: Timestamp) -> Result<(), StoreError>;
        fn fires_purge(&self, scheduler: &str, state: FireState, before: Timestamp, keep_last: u32, limit: u32) -> Result<u64, StoreError>;
        fn nodes_purge(&self, scheduler: &str, before: Timestamp) -> Result<u64, StoreError>;
        fn executes_purge(&self, scheduler: &str, before: Timestamp, limit: u32) -> Result<u64, StoreError>;
    }
}
