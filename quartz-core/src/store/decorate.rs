//! Decorators of a store: the contract's methods listed once
//! ([`store_methods!`](crate::store_methods)), for a type that wraps a
//! store and runs each call of the one inside in some way, and the one the
//! engine puts around its store, [`Deadline`]: every call has a deadline.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::*;
use crate::time::Timestamp;

/// Calls `$decorate!` with every async method of the store contract but
/// [`Store::now`], trait by trait, as
/// `impl Trait { fn name(&self, arg: Type, ...) -> Output; ... }`, the
/// types written with `$crate::` paths. A decorator writes one macro that
/// turns that list into its impls, instead of writing every method out
/// again.
#[doc(hidden)]
#[macro_export]
macro_rules! store_methods {
    ($decorate:ident) => {
        $decorate! {
            impl JobStore {
                fn create_job(&self, job: &$crate::store::JobSpec, executes: &[$crate::store::ExecuteSpec]) -> $crate::store::Job;
                fn get_job(&self, name: &str) -> Option<$crate::store::JobDetail>;
                fn jobs_by_id(&self, ids: &[i64]) -> Vec<$crate::store::Job>;
                fn list_jobs(&self) -> Vec<$crate::store::Job>;
                fn jobs_page(&self, query: &$crate::store::JobQuery) -> Vec<$crate::store::Job>;
                fn update_job(&self, name: &str, job: &$crate::store::JobSpec, executes: Option<&[$crate::store::ExecuteSpec]>, expected_version: Option<i64>) -> $crate::store::Job;
                fn set_paused(&self, name: &str, paused: bool, expected_version: Option<i64>) -> $crate::store::Job;
                fn fire_now(&self, name: &str) -> (i64, $crate::Timestamp);
                fn enqueue(&self, work: &$crate::store::Work) -> $crate::store::Enqueued;
                fn delete_job(&self, name: &str, expected_version: Option<i64>) -> ();
                fn retry_fire(&self, fire_id: i64) -> $crate::store::FireRetry;
                fn set_standby(&self, on: bool) -> Option<$crate::Timestamp>;
                fn standby(&self) -> Option<$crate::Timestamp>;
                fn backfill(&self, name: &str, fires: &[$crate::store::BackfillFire]) -> $crate::store::Backfilled;
            }
            impl CalendarStore {
                fn put_calendar(&self, name: &str, definition: &$crate::calendar::CalendarDefinition, expected_version: Option<i64>) -> $crate::store::CalendarRecord;
                fn add_calendar(&self, name: &str, definition: &$crate::calendar::CalendarDefinition) -> $crate::store::CalendarRecord;
                fn get_calendar(&self, name: &str) -> Option<$crate::store::CalendarRecord>;
                fn list_calendars(&self) -> Vec<$crate::store::CalendarRecord>;
                fn delete_calendar(&self, name: &str, expected_version: Option<i64>) -> ();
            }
            impl HistoryStore {
                fn list_nodes(&self) -> Vec<$crate::store::Node>;
                fn payload_schemas(&self) -> Vec<(String, $crate::store::PayloadSchemas)>;
                fn fires(&self, query: &$crate::store::FireQuery) -> Vec<$crate::store::FireRecord>;
                fn change_log(&self, query: &$crate::store::ChangeQuery) -> Vec<$crate::store::ChangeRecord>;
                fn health_counts(&self, overdue_before: $crate::Timestamp, stranded_before: $crate::Timestamp, recent_since: $crate::Timestamp) -> $crate::store::HealthCounts;
                fn changes(&self) -> i64;
                fn change_wait(&self, seen: i64, max_wait: std::time::Duration) -> i64;
                fn schedulers(&self) -> Vec<String>;
            }
            impl NodeStore {
                fn register_node(&self, node: &$crate::store::NodeRegistration) -> $crate::store::Node;
                fn heartbeat(&self, node: &$crate::store::NodeRef, busy: u64) -> bool;
                fn retire_node(&self, node: &$crate::store::NodeRef, dead_after_ms: i64) -> bool;
                fn leave(&self, node: &$crate::store::NodeRef) -> bool;
            }
            impl ScheduleStore {
                fn due_executes(&self, before: $crate::Timestamp, after: Option<$crate::store::DueCursor>, limit: u32) -> $crate::store::DueBatch;
                fn orphaned_executes(&self, limit: u32) -> $crate::store::DueBatch;
                fn update_execute(&self, cas: &$crate::store::ExecuteCas, records: &[$crate::store::SkippedRecord]) -> bool;
                fn update_executes(&self, updates: &[($crate::store::ExecuteCas, Vec<$crate::store::SkippedRecord>)]) -> Vec<bool>;
                fn claim(&self, claim: &$crate::store::Claim) -> Option<i64>;
                fn claim_batch(&self, claims: &[$crate::store::Claim]) -> Vec<Option<i64>>;
                fn chain_parents(&self) -> Vec<i64>;
            }
            impl FireStore {
                fn mark_running_all(&self, fire_ids: &[i64], node: &$crate::store::NodeRef) -> Vec<(i64, $crate::Timestamp)>;
                fn confirm_starts(&self, fire_ids: &[i64], node: &$crate::store::NodeRef) -> Vec<(i64, $crate::Timestamp)>;
                fn end_fires(&self, node: &$crate::store::NodeRef, ends: &[(i64, $crate::store::FireEnd)]) -> Vec<$crate::store::FollowUp>;
                fn fire_time_out(&self, fire_id: i64, node: &$crate::store::NodeRef, error: &str) -> bool;
                fn orphaned_fires(&self, limit: u32) -> Vec<$crate::store::FireRecord>;
                fn claimed_by(&self, node: &$crate::store::NodeRef, before: $crate::Timestamp, limit: u32) -> Vec<$crate::store::FireRecord>;
                fn take_over(&self, fire: &$crate::store::FireRecord, node: &$crate::store::NodeRef) -> bool;
                fn rerun(&self, fire: &$crate::store::FireRecord, node: &$crate::store::NodeRef) -> Option<i64>;
                fn abandon(&self, fire: &$crate::store::FireRecord) -> bool;
                fn fires_pending(&self, before: $crate::Timestamp, limit: u32) -> Vec<$crate::store::FireRecord>;
                fn pending_claim(&self, fire_id: i64, node: &$crate::store::NodeRef, exclusive: bool) -> $crate::store::PendingClaim;
                fn cancel_requests(&self, node: &$crate::store::NodeRef) -> Vec<i64>;
                fn work_run(&self, work_id: i64) -> $crate::store::WorkRun;
            }
            impl RetentionStore {
                fn purge_turn(&self, every_ms: i64) -> bool;
                fn purge_horizon(&self) -> Option<$crate::Timestamp>;
                fn purge_horizon_advance(&self, before: $crate::Timestamp) -> ();
                fn fires_purge(&self, state: $crate::store::FireState, before: $crate::Timestamp, keep_last: u32, limit: u32) -> u64;
                fn nodes_purge(&self, before: $crate::Timestamp) -> u64;
                fn executes_purge(&self, before: $crate::Timestamp, limit: u32) -> u64;
            }
        }
    };
}

/// A store whose every call has a deadline: a call the database has not
/// answered by then fails with [`StoreError::TimedOut`] (whether it was
/// done is unknown, as for a lost answer), its future dropped. The engine
/// wraps its store in one ([`Settings::store_deadline`](crate::engine::Settings::store_deadline)),
/// so that no stage of a node waits on its database for longer, whatever
/// the database or the network does; a long poll of the change counter
/// ([`HistoryStore::change_wait`]) has its own wait added.
///
/// A connection whose statement was dropped is not handed to the next call
/// as it is: the SQL stores test it on its way back to their pool, within a
/// limit of their own (`StoreOptions::release_test`), and close it when it
/// does not answer.
#[derive(Debug)]
pub struct Deadline {
    inner: SharedStore,
    limit: Duration,
}

impl Deadline {
    /// `inner`, every call of which fails after `limit`.
    pub fn wrap(inner: SharedStore, limit: Duration) -> SharedStore {
        Arc::new(Deadline { inner, limit })
    }

    /// Runs `call` within `limit`.
    async fn within<T>(
        &self,
        name: &'static str,
        limit: Duration,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(limit, call).await {
            Ok(answer) => answer,
            Err(_) => Err(StoreError::TimedOut {
                call: name,
                after_ms: u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
            }),
        }
    }

    /// The deadline of a call: a long poll's wait is its own.
    fn limit_of(&self, name: &str, wait: Option<Duration>) -> Duration {
        match (name, wait) {
            ("change_wait", Some(wait)) => self.limit.saturating_add(wait),
            _ => self.limit,
        }
    }
}

/// The deadline decorator's methods of one trait of the contract.
macro_rules! deadlined {
    ($(impl $tr:ident { $( fn $name:ident(&self $(, $arg:ident : $ty:ty)* ) -> $ret:ty; )* })*) => {
        $(
            #[async_trait]
            impl $tr for Deadline {
                $(
                    #[allow(unused_variables)]
                    async fn $name(&self $(, $arg: $ty)*) -> Result<$ret, StoreError> {
                        let limit = self.limit_of(stringify!($name), deadlined!(@wait $($arg)*));
                        self.within(stringify!($name), limit, self.inner.$name($($arg),*)).await
                    }
                )*
            }
        )*
    };
    (@wait seen $wait:ident) => { Some($wait) };
    (@wait $($other:ident)*) => { None };
}

crate::store_methods!(deadlined);

#[async_trait]
impl Store for Deadline {
    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.within("now", self.limit, self.inner.now()).await
    }

    fn scheduler(&self) -> &str {
        self.inner.scheduler()
    }

    fn scoped(&self, scheduler: &str) -> SharedStore {
        Deadline::wrap(self.inner.scoped(scheduler), self.limit)
    }

    fn acting_as(&self, actor: &str) -> SharedStore {
        Deadline::wrap(self.inner.acting_as(actor), self.limit)
    }

    fn claims_runs_at_once(&self) -> bool {
        self.inner.claims_runs_at_once()
    }
}

/// A store shared by a node's engine and its admin surface, as the admin
/// surface sees it ([`Scheduler::admin`](crate::engine::Scheduler::admin)):
/// at most [`ADMIN_CALLS`] of its calls at once, each within
/// [`ADMIN_DEADLINE`]. The node's pool of connections is shared with its
/// heartbeats and its starts; however many callers read its history or
/// list its jobs, they hold a few connections at most, and a slow read
/// (a search through a large ledger) ends at its deadline. A call that
/// finds every place taken waits for one, within the same deadline.
#[derive(Debug)]
pub struct AdminBound {
    inner: SharedStore,
    places: Arc<tokio::sync::Semaphore>,
}

/// How many calls of a node's admin surface run at once.
pub const ADMIN_CALLS: usize = 3;

/// How long a call of a node's admin surface may take, its wait for a
/// place included.
pub const ADMIN_DEADLINE: Duration = Duration::from_secs(10);

impl AdminBound {
    /// `inner`, for the admin surface of a node.
    pub fn wrap(inner: SharedStore) -> SharedStore {
        Arc::new(AdminBound {
            inner,
            places: Arc::new(tokio::sync::Semaphore::new(ADMIN_CALLS)),
        })
    }

    async fn bounded<T>(
        &self,
        name: &'static str,
        limit: Duration,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let timed_out = || StoreError::TimedOut {
            call: name,
            after_ms: u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
        };
        tokio::time::timeout(limit, async {
            let _place = self.places.acquire().await.map_err(|_| timed_out())?;
            call.await
        })
        .await
        .unwrap_or_else(|_| Err(timed_out()))
    }
}

/// The admin bound's methods of one trait of the contract.
macro_rules! admin_bound {
    ($(impl $tr:ident { $( fn $name:ident(&self $(, $arg:ident : $ty:ty)* ) -> $ret:ty; )* })*) => {
        $(
            #[async_trait]
            impl $tr for AdminBound {
                $(
                    #[allow(unused_variables)]
                    async fn $name(&self $(, $arg: $ty)*) -> Result<$ret, StoreError> {
                        let limit = match deadlined!(@wait $($arg)*) {
                            Some(wait) => ADMIN_DEADLINE.saturating_add(wait),
                            None => ADMIN_DEADLINE,
                        };
                        self.bounded(stringify!($name), limit, self.inner.$name($($arg),*)).await
                    }
                )*
            }
        )*
    };
}

crate::store_methods!(admin_bound);

#[async_trait]
impl Store for AdminBound {
    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.bounded("now", ADMIN_DEADLINE, self.inner.now()).await
    }

    fn scheduler(&self) -> &str {
        self.inner.scheduler()
    }

    fn scoped(&self, scheduler: &str) -> SharedStore {
        Arc::new(AdminBound {
            inner: self.inner.scoped(scheduler),
            places: Arc::clone(&self.places),
        })
    }

    fn acting_as(&self, actor: &str) -> SharedStore {
        Arc::new(AdminBound {
            inner: self.inner.acting_as(actor),
            places: Arc::clone(&self.places),
        })
    }

    fn claims_runs_at_once(&self) -> bool {
        self.inner.claims_runs_at_once()
    }
}
