//! The store conformance suite: what every [`Store`](crate::store::Store) must do for the engine
//! to keep its guarantees (each fire won once, a retired incarnation fenced,
//! compare-and-set decisions, the ledger's pages, the change log, a node's
//! registration), as checks any store runs.
//!
//! [`run`] takes a function that opens a handle on the store under test
//! (a new pool where the store has one: several checks race handles of
//! their own; for a store that lives in one process's memory, a clone of the
//! one store) and runs every check, each on a scheduler of its own, so that
//! one database holds every run and a run leaves what it wrote behind it.
//! This project's SQLite, PostgreSQL, MySQL/MariaDB, Redis and in-memory
//! stores pass it (`quartz-store/tests/store.rs`).
//!
//! ```
//! use quartz_core::store::SharedStore;
//! use quartz_core::testing::MemoryStore;
//! use quartz_core::testing::conformance;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let report = conformance::run(|| {
//!     let store = store.clone();
//!     async move { store }
//! })
//! .await;
//! report.assert_passed();
//! assert_eq!(report.passed.len(), conformance::checks().len());
//! # });
//! ```
//!
//! A few checks race claimers on tasks of their own (`tokio::spawn`): run
//! the suite inside a tokio runtime. The store's clock must be within a
//! minute of this machine's.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

mod claims;
mod fires;
pub mod fixtures;
mod jobs;
mod work;

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::store::{IntoStore, SharedStore};

/// A boxed future of a check or of an opened handle.
type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a check is given: handles on the store under test, scoped to the
/// check's own scheduler.
pub struct Env<'a> {
    open: Arc<dyn Fn() -> Boxed<'a, SharedStore> + Send + Sync + 'a>,
    scheduler: String,
}

impl Env<'_> {
    /// A new handle on the store under test, scoped to this check's
    /// scheduler.
    pub async fn store(&self) -> SharedStore {
        (self.open)().await.scoped(&self.scheduler)
    }

    /// This check's scheduler.
    pub fn scheduler(&self) -> &str {
        &self.scheduler
    }
}

/// One check: its name and its body.
type Check = for<'a, 'b> fn(&'a Env<'b>) -> Boxed<'a, ()>;

macro_rules! checks {
    ($($module:ident :: $name:ident),* $(,)?) => {
        const CHECKS: &[(&str, Check)] = &[$((stringify!($name), |env| Box::pin($module::$name(env)))),*];
    };
}

checks!(
    jobs::the_clock_is_the_databases,
    jobs::jobs_are_created_read_updated_paused_and_deleted,
    jobs::bad_input_is_refused_and_nothing_is_stored,
    jobs::the_scheduler_pauses_and_resumes_as_a_recorded_change,
    jobs::a_calendar_name_is_added_once,
    jobs::a_triggers_jitter_and_catch_up_window_are_kept,
    jobs::history_filters_and_pages,
    jobs::the_schedulers_holding_jobs_or_nodes_are_listed,
    claims::concurrent_claimers_win_each_fire_exactly_once,
    claims::a_retired_incarnation_is_fenced,
    claims::misfire_decisions_are_compare_and_set_and_recorded,
    claims::a_polls_row_decisions_are_written_together,
    claims::due_executes_come_a_page_at_a_time_after_a_cursor,
    claims::a_backfill_queues_each_past_fire_time_once,
    claims::fires_waiting_under_an_overlap_policy_are_found_by_their_trigger,
    fires::fires_start_and_succeed_in_batches_fenced,
    fires::a_fires_end_records_when_its_handler_ran,
    fires::fires_that_never_ran_are_recorded_without_a_start,
    fires::nodes_registering_together_all_register,
    fires::a_node_purged_and_back_is_newer_than_before,
    fires::a_nodes_payload_schemas_are_read_back_while_it_lives,
    work::enqueued_work_is_a_pending_fire_with_its_own_payload,
    work::a_unique_key_is_held_while_its_work_is_open_or_in_its_window,
);

/// The most one check may take before it is reported failed.
const CHECK_LIMIT: Duration = Duration::from_secs(120);

/// The names of the checks, in the order [`run`] runs them.
pub fn checks() -> Vec<&'static str> {
    CHECKS.iter().map(|(name, _)| *name).collect()
}

/// What a run found: the checks that passed, and those that failed with
/// what they said.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The checks that passed.
    pub passed: Vec<&'static str>,
    /// The checks that failed, each with its panic's message (or that it ran
    /// past two minutes).
    pub failed: Vec<(&'static str, String)>,
}

impl Report {
    /// Whether every check passed.
    pub fn is_ok(&self) -> bool {
        self.failed.is_empty()
    }

    /// Panics, listing every failed check and what it said, unless every
    /// check passed.
    #[track_caller]
    pub fn assert_passed(&self) {
        assert!(self.is_ok(), "{self}");
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "store conformance: {} passed, {} failed",
            self.passed.len(),
            self.failed.len()
        )?;
        for (name, message) in &self.failed {
            write!(f, "\n  {name}: {message}")?;
        }
        Ok(())
    }
}

/// Runs every check ([`checks`]) on the store that `open` opens handles
/// on (any [`Store`](crate::store::Store), or a [`SharedStore`]), one after the other, each on a new scheduler; a check that panics
/// or runs past two minutes is reported failed, and the rest still run.
pub async fn run<'a, F, Fut, S>(open: F) -> Report
where
    F: Fn() -> Fut + Send + Sync + 'a,
    Fut: Future<Output = S> + Send + 'a,
    S: IntoStore + Send + 'a,
{
    run_only(&checks(), open).await
}

/// Runs the named checks only (names as [`checks`] gives them; a name that
/// is no check is reported failed).
pub async fn run_only<'a, F, Fut, S>(names: &[&str], open: F) -> Report
where
    F: Fn() -> Fut + Send + Sync + 'a,
    Fut: Future<Output = S> + Send + 'a,
    S: IntoStore + Send + 'a,
{
    let boxed: Arc<dyn Fn() -> Boxed<'a, SharedStore> + Send + Sync + 'a> =
        Arc::new(move || -> Boxed<'a, SharedStore> {
            let opening = open();
            Box::pin(async move { opening.await.into_store() })
        });
    let mut report = Report::default();
    for name in names {
        let Some((name, check)) = CHECKS.iter().find(|(n, _)| n == name) else {
            report.failed.push(("(unknown)", format!("no check named {name:?}")));
            continue;
        };
        let env = Env {
            open: Arc::clone(&boxed),
            scheduler: fresh_scheduler(),
        };
        match tokio::time::timeout(CHECK_LIMIT, CatchUnwind(check(&env))).await {
            Ok(Ok(())) => report.passed.push(name),
            Ok(Err(panic)) => report.failed.push((name, panic_message(&*panic))),
            Err(_) => report
                .failed
                .push((name, format!("ran past {} s", CHECK_LIMIT.as_secs()))),
        }
    }
    report
}

/// A scheduler name no earlier run used: this process's id, the time and a
/// count.
fn fresh_scheduler() -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!(
        "conformance-{}-{now}-{}",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    )
}

/// What a panic said.
fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "panicked".to_owned())
}

/// A future whose panic is its output instead of unwinding its caller.
struct CatchUnwind<F>(F);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(inner).poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::MemoryStore;

    #[tokio::test]
    async fn a_check_that_panics_or_is_unknown_is_reported_and_the_rest_run() {
        let panicked = CatchUnwind(Box::pin(async { panic!("the store said no") })).await;
        assert_eq!(panic_message(&*panicked.unwrap_err()), "the store said no");
        let store = MemoryStore::new();
        let report = run_only(&["no-such-check", "the_clock_is_the_databases"], || {
            let store = store.clone();
            async move { store }
        })
        .await;
        assert_eq!(report.passed, ["the_clock_is_the_databases"]);
        assert_eq!(report.failed.len(), 1);
        assert!(report.failed[0].1.contains("no-such-check"), "{report}");
        assert!(!report.is_ok());
    }
}
