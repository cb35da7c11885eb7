//! What the history reads hand back beside the ledger: the change log's
//! rows and queries, the health counts, and what a retry by hand did.

use crate::time::Timestamp;

/// The actor a store acts as until told otherwise: code that embeds the
/// library and calls the store directly.
pub const DEFAULT_ACTOR: &str = "library";

/// A change made through the store, as the change log keeps it: written in
/// the change's own transaction, so a change is never stored without its
/// record nor recorded without having been made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeRecord {
    /// Its id (newer changes have larger ids).
    pub id: i64,
    /// The scheduler (cluster) name.
    pub scheduler: String,
    /// When it was made (database time).
    pub at: Timestamp,
    /// Who made it: the actor the store acted as (see
    /// [`Store::acting_as`](super::Store::acting_as)), such as `http:admin`,
    /// `cli` or [`DEFAULT_ACTOR`].
    pub actor: String,
    /// What it did (its name, as [`ChangeAction::as_str`](super::ChangeAction::as_str), kept as stored so
    /// that rows of a later version still read).
    pub action: String,
    /// The job it changed, by name (for an edit that renamed it, the new
    /// name), or the calendar.
    pub target: String,
    /// The id of the job it changed (`None` for a calendar, and for changes
    /// recorded before ids were): how a deleted or renamed job's fires are
    /// found by the name it had.
    pub target_id: Option<i64>,
    /// A short account: the triggers added, the old name of a renamed job.
    pub detail: String,
}

/// A change log query: newest first, paged by key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeQuery {
    /// Only changes to this job (by name).
    pub target: Option<String>,
    /// Only changes with an id below this (the last id of the previous page).
    pub before_id: Option<i64>,
    /// The most rows.
    pub limit: u32,
}

impl Default for ChangeQuery {
    fn default() -> ChangeQuery {
        ChangeQuery::new()
    }
}

impl ChangeQuery {
    /// The newest 100 changes of a scheduler.
    pub fn new() -> ChangeQuery {
        ChangeQuery {
            target: None,
            before_id: None,
            limit: 100,
        }
    }
}

/// What the cluster's health gauges read from the ledger and the triggers
/// ([`HistoryStore::health_counts`](super::HistoryStore::health_counts)): enough to alert
/// on with no node alive to report it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthCounts {
    /// Waiting triggers whose next fire time is before the overdue instant.
    pub overdue_triggers: u64,
    /// The earliest next fire time among them.
    pub oldest_overdue: Option<Timestamp>,
    /// Fires claimed and not started.
    pub claimed: u64,
    /// Fires running.
    pub running: u64,
    /// Pending fires (retries, late runs, fires by hand).
    pub pending: u64,
    /// Pending fires due before the stranded instant and still unclaimed.
    pub stranded: u64,
    /// Fires scheduled since the recent instant that succeeded.
    pub recent_succeeded: u64,
    /// ... that failed.
    pub recent_failed: u64,
    /// ... that misfired.
    pub recent_misfired: u64,
}

/// What a retry of a fire by hand did ([`JobStore::retry_fire`](super::JobStore::retry_fire)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FireRetry {
    /// The new attempt, pending from the database's now.
    Pending {
        /// Its ledger id.
        fire_id: i64,
        /// Its attempt number.
        attempt: u32,
    },
    /// No fire of that id in the scheduler.
    NotFound,
    /// The fire cannot be retried, and why (it did not fail, an attempt of
    /// it is open or succeeded later, its job is gone or paused).
    Refused(String),
}
