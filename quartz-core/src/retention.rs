//! Retention: the ledger, the node table and finished triggers stay bounded.
//!
//! At a thousand fires a second the ledger gains 86 million rows a day; nothing
//! may grow for ever in a scheduler that runs for months. Every node runs a
//! maintenance task: once per [`Retention::every`] one node of the cluster wins
//! the purge turn by compare-and-set ([`RetentionStore::purge_turn`](crate::store::RetentionStore::purge_turn)) and deletes, in
//! batches of [`PURGE_BATCH`] rows, one statement at a time:
//!
//! - succeeded fires scheduled more than [`Retention::succeeded`] ago;
//! - failed, misfired, skipped and abandoned fires scheduled more than
//!   [`Retention::failed`] ago;
//! - but never a job's newest [`Retention::keep_last`] fires, however old, nor a
//!   fire still claimed or running;
//! - node rows dead or gone for more than [`Retention::nodes`] (with no fire or
//!   trigger still naming them);
//! - triggers complete (a one-off that fired, a schedule past its end) for more
//!   than [`Retention::failed`], with no open fire.
//!
//! The audit needs every fire time after the point where it starts checking:
//! the store remembers the fire time before which succeeded fires may be gone
//! ([`RetentionStore::purge_horizon`](crate::store::RetentionStore::purge_horizon)) and the audit starts there.
//!
//! ```
//! use std::time::Duration;
//! use quartz_core::retention::Retention;
//!
//! let retention = Retention {
//!     succeeded: Duration::from_secs(3_600), // an hour of successes
//!     ..Retention::default()                  // failures a week, the last 10 of each job
//! };
//! assert_eq!(retention.keep_last, 10);
//! ```

use std::time::Duration;

use crate::store::{FireState, Store, StoreError};
use crate::time::Timestamp;

/// Rows one purge statement deletes at the most: small enough that no
/// statement holds locks the fire path waits on for long.
pub const PURGE_BATCH: u32 = 1_000;

/// How long the purge pauses between two batches, so that the fire path's
/// statements interleave with it (on SQLite they share one connection).
pub const PURGE_PAUSE: Duration = Duration::from_millis(10);

/// How long the cluster keeps what it no longer needs to run. Each field is a
/// setting; the defaults need no thought for most clusters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// Whether nodes purge at all (an operator may purge by hand instead, with
    /// `quartz history purge`).
    pub enabled: bool,
    /// How long succeeded fires are kept, by fire time (default 24 hours).
    pub succeeded: Duration,
    /// How long failed, misfired, skipped and abandoned fires are kept, and
    /// complete triggers (default 7 days).
    pub failed: Duration,
    /// The newest fires of each job kept whatever their age (default 10), so
    /// that a monthly job's history never empties.
    pub keep_last: u32,
    /// How long rows of nodes that are dead or gone are kept (default 1 day).
    pub nodes: Duration,
    /// How often the cluster purges; one node per turn (default 1 minute).
    pub every: Duration,
}

impl Default for Retention {
    fn default() -> Retention {
        Retention {
            enabled: true,
            succeeded: Duration::from_secs(24 * 3_600),
            failed: Duration::from_secs(7 * 24 * 3_600),
            keep_last: 10,
            nodes: Duration::from_secs(24 * 3_600),
            every: Duration::from_secs(60),
        }
    }
}

/// What one purge deletes: fires in each state scheduled before a cutoff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgePlan {
    /// Per state: fires scheduled before this instant are deleted.
    pub fires: Vec<(FireState, Timestamp)>,
    /// Each job's newest fires kept whatever their age.
    pub keep_last: u32,
    /// Node rows dead or gone whose last heartbeat is before this.
    pub nodes_before: Option<Timestamp>,
    /// Complete triggers last changed before this.
    pub executes_before: Option<Timestamp>,
}

/// The finished states a purge deletes, besides succeeded.
pub const FAILED_STATES: [FireState; 4] = [
    FireState::Failed,
    FireState::Misfired,
    FireState::Skipped,
    FireState::Abandoned,
];

impl PurgePlan {
    /// The plan a node's retention settings give at `now` (database time).
    pub fn from_retention(retention: &Retention, now: Timestamp) -> PurgePlan {
        let before = |d: Duration| now.saturating_add_millis(-i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let mut fires = vec![(FireState::Succeeded, before(retention.succeeded))];
        fires.extend(FAILED_STATES.iter().map(|s| (*s, before(retention.failed))));
        PurgePlan {
            fires,
            keep_last: retention.keep_last,
            nodes_before: Some(before(retention.nodes)),
            executes_before: Some(before(retention.failed)),
        }
    }

    /// Every finished fire scheduled before `before`, whatever its state, and
    /// nothing else (`quartz history purge --older-than`).
    pub fn older_than(before: Timestamp) -> PurgePlan {
        let mut fires = vec![(FireState::Succeeded, before)];
        fires.extend(FAILED_STATES.iter().map(|s| (*s, before)));
        PurgePlan {
            fires,
            keep_last: 0,
            nodes_before: None,
            executes_before: None,
        }
    }
}

/// What a purge deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PurgeReport {
    /// Ledger rows.
    pub fires: u64,
    /// Node rows.
    pub nodes: u64,
    /// Complete triggers.
    pub executes: u64,
}

/// Runs a plan in batches of [`PURGE_BATCH`]: first the audit's horizon moves
/// to the succeeded cutoff (so that an audit never reads a gap the purge is
/// making), then each state's fires, then nodes and complete triggers.
///
/// # Errors
///
/// The first store error; what was deleted before it stays deleted, and the
/// next purge goes on from there.
pub async fn purge(store: &dyn Store, plan: &PurgePlan) -> Result<PurgeReport, StoreError> {
    let mut report = PurgeReport::default();
    if let Some(cutoff) = plan
        .fires
        .iter()
        .filter(|(state, _)| *state == FireState::Succeeded)
        .map(|(_, t)| *t)
        .max()
    {
        store.purge_horizon_advance(cutoff).await?;
    }
    for (state, before) in &plan.fires {
        loop {
            let n = store.fires_purge(*state, *before, plan.keep_last, PURGE_BATCH).await?;
            report.fires += n;
            if n < u64::from(PURGE_BATCH) {
                break;
            }
            tokio::time::sleep(PURGE_PAUSE).await;
        }
    }
    if let Some(before) = plan.nodes_before {
        report.nodes = store.nodes_purge(before).await?;
    }
    if let Some(before) = plan.executes_before {
        loop {
            let n = store.executes_purge(before, PURGE_BATCH).await?;
            report.executes += n;
            if n < u64::from(PURGE_BATCH) {
                break;
            }
            tokio::time::sleep(PURGE_PAUSE).await;
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_cuts_each_state_at_its_own_age() {
        let now = Timestamp::from_millis(10_000_000_000);
        let plan = PurgePlan::from_retention(&Retention::default(), now);
        assert_eq!(
            plan.fires[0],
            (
                FireState::Succeeded,
                Timestamp::from_millis(10_000_000_000 - 86_400_000)
            )
        );
        assert!(
            plan.fires[1..]
                .iter()
                .all(|(_, t)| *t == Timestamp::from_millis(10_000_000_000 - 7 * 86_400_000))
        );
        assert_eq!(plan.keep_last, 10);
        let by_hand = PurgePlan::older_than(now);
        assert_eq!(by_hand.keep_last, 0);
        assert!(by_hand.nodes_before.is_none());
    }
}
