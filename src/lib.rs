//! quartz-rs: a clustered, database-backed job scheduler for Rust services.
//!
//! Jobs and their triggers are rows in a database the service already runs
//! (PostgreSQL, MySQL/MariaDB, embedded SQLite, or Redis); every instance of
//! the service embeds a scheduler node, and each fire runs once across the
//! cluster, on time, through crashes, pauses and clocks that disagree.
//!
//! This facade re-exports the parts a user needs: the [`engine`] (a node of the
//! cluster: [`SchedulerBuilder`], handlers, [`JobContext`]), [`admin`] (jobs
//! declared, listed, changed and fired, the ledger, the nodes, the change
//! log), [`cron`], [`trigger`] and [`misfire`] (the time arithmetic),
//! [`store`] (the store contract and its implementations on SQLite,
//! PostgreSQL, MySQL/MariaDB and Redis), [`pool`] (the elastic
//! worker pool) and, with the `web` feature, `web`: the HTTP API, the web
//! console and `/metrics` as one axum router (the `quartz-web` crate).
//!
//! Each store is a cargo feature: `sqlite` (on by default), `postgres`,
//! `mysql` (MySQL and MariaDB) and `redis`; `web` adds the admin surface's
//! HTTP side. A URL whose store a build leaves out is refused, naming the
//! feature.
//!
//! A node in a few lines: a cluster name, handlers by name, a database URL.
//!
//! ```no_run
//! use std::time::Duration;
//! use quartz::prelude::*;
//!
//! # async fn service() -> Result<(), Box<dyn std::error::Error>> {
//! let node = SchedulerBuilder::new("my-service")
//!     .handler("report", |ctx: JobContext| {
//!         let to: String = ctx.payload()?;
//!         println!("{} fired for {} (to {to})", ctx.job_name(), ctx.scheduled_fire_time());
//!         Ok(())
//!     })
//!     .connect("sqlite://quartz.db")
//!     .await?;
//! let report = JobDefinition::new("nightly-report", "report")
//!     .with_payload("ops@example.com")?
//!     .with_retry(RetryPolicy::fixed(3, Duration::from_secs(10)))
//!     .with_trigger(TriggerDefinition::cron("0 0 2 * * ?", "Europe/Paris")?);
//! node.admin().job_put(&report).await?; // declared on every start
//! // ... serve ...
//! node.shutdown().await;
//! # Ok(()) }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

use std::future::Future;

pub use quartz_core::engine::{
    Cancellation, JobContext, JobError, JobResult, Scheduler, SchedulerBuilder, SchedulerError, Settings, Strategy,
};
/// Tests of a service that embeds the scheduler (the `testing` feature): a
/// handler called alone with a [`JobContext`] a test builds
/// ([`testing::TestContext`]), a node on a clock the test steps
/// ([`SchedulerBuilder::stepped_clock`]) over the in-memory store
/// ([`testing::MemoryStore`]), and the store conformance suite
/// ([`testing::conformance`]).
#[cfg(feature = "testing")]
pub use quartz_core::testing;
pub use quartz_core::{
    Error, Timestamp, Tz, admin, audit, calendar, cron, engine, misfire, retention, runlog, trigger,
};
pub use quartz_pool as pool;
/// The HTTP API, the web console and `/metrics` (the `web` feature).
#[cfg(feature = "web")]
pub use quartz_web as web;

/// Starting a node on a database URL.
pub trait ConnectExt {
    /// Connects to `url` (`sqlite://…`, `postgres://…`, `mysql://…`,
    /// `redis://…`), creating or upgrading the schema, and starts the node on
    /// it.
    ///
    /// # Errors
    ///
    /// An invalid URL, an unreachable database, a failed migration, or what
    /// [`SchedulerBuilder::start`] refuses.
    fn connect(self, url: &str) -> impl Future<Output = Result<Scheduler, SchedulerError>> + Send;
}

impl ConnectExt for SchedulerBuilder {
    async fn connect(self, url: &str) -> Result<Scheduler, SchedulerError> {
        let store = store::AnyStore::connect(url).await?;
        self.start(store).await
    }
}

/// What most programs import: the builder and its URL start, handler types,
/// triggers and job definitions.
pub mod prelude {
    pub use crate::ConnectExt;
    pub use quartz_core::admin::{JobDefinition, TriggerDefinition};
    pub use quartz_core::cron::CronExpression;
    pub use quartz_core::engine::{JobContext, JobResult, Scheduler, SchedulerBuilder, Settings, Steer, TypedJob};
    pub use quartz_core::misfire::MisfirePolicy;
    pub use quartz_core::store::{CalendarStore as _, HistoryStore as _, JobStore as _};
    pub use quartz_core::store::{Enqueued, JobSpec, RetryPolicy, Store, Work};
    pub use quartz_core::{Timestamp, Tz};
    #[cfg(feature = "redis")]
    pub use quartz_store::RedisStore;
    pub use quartz_store::{AnyStore, SqlStore};
}

/// The store: the contract ([`Store`](store::Store)) and its implementations,
/// [`SqlStore`](store::SqlStore) on SQLite, PostgreSQL and MySQL/MariaDB,
/// `RedisStore` on Redis (with the `redis` feature), and
/// [`AnyStore`](store::AnyStore), whichever a URL names; the rows it reads
/// and writes. What only the engine and a store's implementer use (the
/// engine's calls, its compare-and-set types) is in [`store::spi`].
pub mod store {
    pub use quartz_core::store::prelude;
    pub use quartz_core::store::{
        CHANGE_VISIBILITY_MS, CalendarRecord, CalendarStore, ChangeAction, ChangeQuery, ChangeRecord, ConcurrencyLimit,
        DEFAULT_ACTOR, Deadline, Execute, ExecuteSpec, ExecuteState, FireQuery, FireRecord, FireRetry, FireState,
        HealthCounts, HistoryStore, IntoStore, Job, JobDetail, JobQuery, JobSpec, JobState, JobStore, MANUAL_EXECUTE,
        MAX_ATTEMPTS, MAX_DESCRIPTION_BYTES, MAX_ERROR_BYTES, MAX_NAME_BYTES, MAX_PAYLOAD_BYTES, Node, NodeRef,
        NodeState, RejectedRow, RetryPolicy, START_NOW_GRACE_MS, SharedStore, Store, StoreError, TriggerColumns,
        check_name, millis_of,
    };
    pub use quartz_core::store::{Due, Enqueued, MAX_UNIQUE_KEY_BYTES, Unique, Work, work_execute, work_of_execute};
    pub use quartz_store::*;

    /// For a store's implementer (and tests that drive a store as the
    /// engine does): the engine's four traits of the contract
    /// ([`NodeStore`](spi::NodeStore), [`ScheduleStore`](spi::ScheduleStore),
    /// [`FireStore`](spi::FireStore), [`RetentionStore`](spi::RetentionStore)),
    /// their compare-and-set and result types, how a fire ends
    /// ([`FireEnd`](spi::FireEnd)), and a node's registration.
    pub mod spi {
        pub use quartz_core::store::{
            ChainedFire, Claim, DueBatch, ExecuteCas, FIRES_PER_BATCH, FireEnd, FireStore, FollowUp, HandlerSpan,
            LateRun, NodeRegistration, NodeStore, Outcome, PendingClaim, RetentionStore, ScheduleStore, SkippedRecord,
        };
    }
}

/// The README's Rust examples, compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;

/// The Rust examples of `docs/`, compiled and run as doctests as well.
#[cfg(doctest)]
mod docs {
    #[doc = include_str!("../docs/configuration.md")]
    struct Configuration;
    #[doc = include_str!("../docs/scheduling.md")]
    struct Scheduling;
    #[doc = include_str!("../docs/operations.md")]
    struct Operations;
    #[doc = include_str!("../docs/guarantees.md")]
    struct Guarantees;
    #[doc = include_str!("../docs/stores.md")]
    struct Stores;
}
