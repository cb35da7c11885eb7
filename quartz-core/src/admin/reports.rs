//! What the admin surface reports beyond a row's view: the cluster's health
//! and a job's figures.

use serde::Serialize;

use crate::store::{FireRecord, FireState};

/// The cluster's health as the database has it, whether or not any node is
/// alive to report it ([`Admin::health`](super::Admin::health)): what
/// `/metrics` exports as the `quartz_cluster_*` gauges, and what alerts
/// are written on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClusterHealth {
    /// The database's now (epoch ms).
    pub now: i64,
    /// Nodes live and heartbeating within their `dead_after`.
    pub live_nodes: usize,
    /// Nodes live by their row whose heartbeat is older than their
    /// `dead_after`.
    pub silent_nodes: usize,
    /// Nodes declared dead.
    pub dead_nodes: usize,
    /// Nodes that left on shutdown.
    pub gone_nodes: usize,
    /// Waiting triggers more than [`HEALTH_OVERDUE_MS`](super::HEALTH_OVERDUE_MS)
    /// past their next fire time: no node is firing them.
    pub overdue_triggers: u64,
    /// How far past its next fire time the oldest of them is (ms).
    pub oldest_overdue_ms: Option<i64>,
    /// Fires claimed and not started.
    pub claimed_fires: u64,
    /// Fires running.
    pub running_fires: u64,
    /// Pending fires: retries, late runs, fires by hand.
    pub pending_fires: u64,
    /// Pending fires more than [`HEALTH_STRANDED_MS`](super::HEALTH_STRANDED_MS)
    /// past their due time, unclaimed.
    pub stranded_fires: u64,
    /// The span of the recent counts, back from `now` (ms).
    pub window_ms: i64,
    /// Fires scheduled in the window that succeeded.
    pub recent_succeeded: u64,
    /// ... that failed.
    pub recent_failed: u64,
    /// ... that misfired.
    pub recent_misfired: u64,
}

/// How a job's recent fires went ([`Admin::job_stats`](super::Admin::job_stats)):
/// over its last [`JOB_STATS_FIRES`](super::JOB_STATS_FIRES) ledger rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobStats {
    /// The job.
    pub job: String,
    /// Ledger rows read (the newest first).
    pub fires_read: usize,
    /// Of them, attempts that succeeded.
    pub succeeded: usize,
    /// ... that failed (an error, a panic, a timeout).
    pub failed: usize,
    /// ... that misfired or were abandoned.
    pub missed: usize,
    /// Succeeded out of succeeded and failed (`None` when neither).
    pub success_rate: Option<f64>,
    /// The mean run time of the attempts that ran to an end, in ms.
    pub mean_duration_ms: Option<i64>,
    /// The longest of them, in ms.
    pub max_duration_ms: Option<i64>,
    /// When the last failed attempt was scheduled (epoch ms).
    pub last_failure: Option<i64>,
}

impl JobStats {
    /// The figures of a job's ledger rows.
    pub fn of(job: &str, fires: &[FireRecord]) -> JobStats {
        let count = |s: FireState| fires.iter().filter(|f| f.state == s).count();
        let (succeeded, failed) = (count(FireState::Succeeded), count(FireState::Failed));
        let durations: Vec<i64> = fires
            .iter()
            .filter_map(|f| Some(f.finished_at?.as_millis() - f.started_at?.as_millis()))
            .collect();
        #[allow(clippy::cast_precision_loss)]
        let rate = (succeeded + failed > 0).then(|| succeeded as f64 / (succeeded + failed) as f64);
        JobStats {
            job: job.to_owned(),
            fires_read: fires.len(),
            succeeded,
            failed,
            missed: count(FireState::Misfired) + count(FireState::Abandoned),
            success_rate: rate,
            mean_duration_ms: (!durations.is_empty())
                .then(|| durations.iter().sum::<i64>() / i64::try_from(durations.len()).unwrap_or(1)),
            max_duration_ms: durations.iter().max().copied(),
            last_failure: fires
                .iter()
                .filter(|f| f.state == FireState::Failed)
                .map(|f| f.fire_time.as_millis())
                .max(),
        }
    }
}
