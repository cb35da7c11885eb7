//! The metrics a node records, through the [`metrics`](https://docs.rs/metrics)
//! facade. The library never installs a recorder or an exporter: a service
//! that installs one (for example `metrics-exporter-prometheus`) gets these;
//! one that does not pays a relaxed atomic load per record.
//!
//! Every metric carries the label `scheduler` (the cluster's name); a few
//! carry one more of bounded cardinality: `handler` and `outcome` on
//! [`OUTCOMES`], `policy` on [`MISFIRES`], `phase` on [`PHASE`]. The job's
//! name is a label only where the operator opts in
//! ([`Settings::metrics_job_label`](super::Settings::metrics_job_label)): a
//! cluster may hold millions of jobs. Counters end in `_total`; durations
//! are histograms in seconds; gauges are set at each heartbeat.
//!
//! | metric | kind | what |
//! |---|---|---|
//! | [`POLLS`] | counter | polls made |
//! | [`POLL_ROWS`] | counter | due executes the polls read |
//! | [`POLL_DURATION`] | histogram | how long a poll took |
//! | [`CLAIMED`] | counter | fires this node won |
//! | [`CLAIMS_LOST`] | counter | claims lost to another node or a changed row |
//! | [`STARTED`] | counter | fires started (marked running) on time |
//! | [`LATENESS`] | histogram | when a fire's handler started less its fire time (the start the ledger records) |
//! | [`SUCCEEDED`] | counter | fires that ran to success |
//! | [`OUTCOMES`] | counter | recorded outcomes by `handler` and `outcome` (`succeeded`, `failed`), and `job` when opted in |
//! | [`FAILED`] | counter | fires that failed (error, panic, timeout) |
//! | [`TIMED_OUT`] | counter | fires that passed their job's timeout |
//! | [`REJECTED`] | counter | fires the pool refused, recorded misfired |
//! | [`MISFIRES`] | counter | misfire decisions applied to overdue executes, by `policy` |
//! | [`FENCED`] | counter | fires not started because this incarnation was fenced |
//! | [`RECOVERED`] | counter | dead nodes' fires taken over, re-run or recorded abandoned |
//! | [`ABANDONED`] | counter | of those, fires recorded abandoned (the job does not request recovery) |
//! | [`RECOMPUTED`] | counter | rows written by hand, initialised or recomputed |
//! | [`CHAINED`] | counter | child jobs' fires started after their parent succeeded |
//! | [`PURGED`] | counter | ledger rows purged under the retention settings |
//! | [`POOL_THREADS`], [`POOL_BUSY`], [`POOL_QUEUED`] | gauge | the worker pool's threads, busy threads and queued fires |
//! | [`POOL_REJECTED`] | counter | submissions the pool refused |
//! | [`LIVE_NODES`] | gauge | live nodes of the cluster, as this node saw them |
//! | [`PHASE`] | gauge | 1 for this node's phase (`running`, `fenced`, `shutting_down`, `stopped`), 0 for the others |

use super::status::{Counters, Phase};

/// Every metric a node records, by name.
pub const ALL: [&str; 25] = [
    POLLS,
    POLL_ROWS,
    POLL_DURATION,
    CLAIMED,
    CLAIMS_LOST,
    STARTED,
    LATENESS,
    SUCCEEDED,
    FAILED,
    TIMED_OUT,
    REJECTED,
    MISFIRES,
    FENCED,
    RECOVERED,
    RECOMPUTED,
    CHAINED,
    PURGED,
    OUTCOMES,
    ABANDONED,
    POOL_THREADS,
    POOL_BUSY,
    POOL_QUEUED,
    POOL_REJECTED,
    LIVE_NODES,
    PHASE,
];

/// Polls made.
pub const POLLS: &str = "quartz_polls_total";
/// Due executes the polls read.
pub const POLL_ROWS: &str = "quartz_poll_rows_total";
/// How long a poll took, in seconds.
pub const POLL_DURATION: &str = "quartz_poll_duration_seconds";
/// Fires this node won.
pub const CLAIMED: &str = "quartz_fires_claimed_total";
/// Claims lost to another node (or to a changed row).
pub const CLAIMS_LOST: &str = "quartz_claims_lost_total";
/// Fires started: marked running, and not past the misfire threshold.
pub const STARTED: &str = "quartz_fires_started_total";
/// A fire's lateness: when its handler started (the node's estimate of
/// database time, the start the ledger records with its outcome) less its
/// fire time, in seconds.
pub const LATENESS: &str = "quartz_fire_lateness_seconds";
/// Fires that ran to success.
pub const SUCCEEDED: &str = "quartz_fires_succeeded_total";
/// Fires that failed (error, panic, timeout).
pub const FAILED: &str = "quartz_fires_failed_total";
/// Fires that passed their job's timeout.
pub const TIMED_OUT: &str = "quartz_fires_timed_out_total";
/// Fires the pool refused, recorded as misfired.
pub const REJECTED: &str = "quartz_fires_rejected_total";
/// Misfire decisions this node applied to overdue executes.
pub const MISFIRES: &str = "quartz_misfires_total";
/// Fires not started because this incarnation had been fenced.
pub const FENCED: &str = "quartz_fires_fenced_total";
/// Dead nodes' fires this node took over, re-ran or recorded abandoned.
pub const RECOVERED: &str = "quartz_fires_recovered_total";
/// Rows written by hand that this node initialised or recomputed.
pub const RECOMPUTED: &str = "quartz_executes_recomputed_total";
/// Child jobs' fires this node started after their parent succeeded.
pub const CHAINED: &str = "quartz_fires_chained_total";
/// Ledger rows this node purged under the retention settings.
pub const PURGED: &str = "quartz_fires_purged_total";
/// Recorded outcomes, labelled `handler` and `outcome` (`succeeded` or
/// `failed`), and `job` when the operator opts in.
pub const OUTCOMES: &str = "quartz_fire_outcomes_total";
/// Dead nodes' running fires recorded abandoned (their job does not request
/// recovery).
pub const ABANDONED: &str = "quartz_fires_abandoned_total";
/// The worker pool's threads alive.
pub const POOL_THREADS: &str = "quartz_pool_threads";
/// The worker pool's threads running a fire.
pub const POOL_BUSY: &str = "quartz_pool_busy";
/// Fires waiting in the worker pool's queue.
pub const POOL_QUEUED: &str = "quartz_pool_queued";
/// Submissions the worker pool refused since it started.
pub const POOL_REJECTED: &str = "quartz_pool_rejected_total";
/// Live nodes of the cluster at this node's last heartbeat.
pub const LIVE_NODES: &str = "quartz_nodes_live";
/// This node's phase: 1 on the label of the current one.
pub const PHASE: &str = "quartz_node_phase";

/// The phases, as [`PHASE`] labels them.
const PHASES: [(Phase, &str); 4] = [
    (Phase::Running, "running"),
    (Phase::Fenced, "fenced"),
    (Phase::ShuttingDown, "shutting_down"),
    (Phase::Stopped, "stopped"),
];

/// Records an outcome by handler (and job, when opted in).
pub(super) fn outcome(scheduler: &str, handler: &str, job: Option<&str>, outcome: &'static str) {
    let mut labels = vec![
        ::metrics::Label::new("scheduler", scheduler.to_owned()),
        ::metrics::Label::new("handler", handler.to_owned()),
        ::metrics::Label::new("outcome", outcome),
    ];
    if let Some(job) = job {
        labels.push(::metrics::Label::new("job", job.to_owned()));
    }
    ::metrics::counter!(OUTCOMES, labels).increment(1);
}

/// Records a misfire decision by the policy applied.
pub(super) fn misfire(scheduler: &str, policy: String) {
    ::metrics::counter!(MISFIRES, "scheduler" => scheduler.to_owned(), "policy" => policy).increment(1);
}

/// Records a fire abandoned by recovery.
pub(super) fn abandoned(scheduler: &str) {
    ::metrics::counter!(ABANDONED, "scheduler" => scheduler.to_owned()).increment(1);
}

/// Records the pool, the cluster and the node's phase, at a heartbeat.
#[allow(clippy::cast_precision_loss)]
pub(super) fn beat(scheduler: &str, pool: &quartz_pool::PoolMetrics, live: usize, phase: Phase) {
    let s = || scheduler.to_owned();
    pool_gauges(scheduler, pool);
    ::metrics::counter!(POOL_REJECTED, "scheduler" => s()).absolute(pool.rejected);
    ::metrics::gauge!(LIVE_NODES, "scheduler" => s()).set(live as f64);
    phased(scheduler, phase);
}

/// Records a stopped node: its pool as the shutdown left it (no threads
/// unless a task outlived the grace) and the stopped phase.
pub(super) fn stopped(scheduler: &str, pool: &quartz_pool::PoolMetrics) {
    pool_gauges(scheduler, pool);
    phased(scheduler, Phase::Stopped);
}

/// Records the pool's threads, busy threads and queued fires.
#[allow(clippy::cast_precision_loss)]
fn pool_gauges(scheduler: &str, pool: &quartz_pool::PoolMetrics) {
    let s = || scheduler.to_owned();
    ::metrics::gauge!(POOL_THREADS, "scheduler" => s()).set(pool.threads as f64);
    ::metrics::gauge!(POOL_BUSY, "scheduler" => s()).set(pool.busy as f64);
    ::metrics::gauge!(POOL_QUEUED, "scheduler" => s()).set(pool.queued as f64);
}

/// Records this node's phase.
pub(super) fn phased(scheduler: &str, phase: Phase) {
    for (p, name) in PHASES {
        let on = if p == phase { 1.0 } else { 0.0 };
        ::metrics::gauge!(PHASE, "scheduler" => scheduler.to_owned(), "phase" => name).set(on);
    }
}

/// Records what one update of a node's counters added.
pub(super) fn counted(scheduler: &str, added: &Counters) {
    let added = [
        (POLLS, added.polls),
        (CLAIMED, added.claimed),
        (CLAIMS_LOST, added.lost),
        (SUCCEEDED, added.succeeded),
        (FAILED, added.failed),
        (REJECTED, added.rejected),
        (FENCED, added.fenced),
        (RECOVERED, added.recovered),
        (RECOMPUTED, added.recomputed),
        (CHAINED, added.chained),
        (TIMED_OUT, added.timed_out),
        (PURGED, added.purged),
    ];
    for (name, n) in added {
        if n > 0 {
            ::metrics::counter!(name, "scheduler" => scheduler.to_owned()).increment(n);
        }
    }
}

/// Records fires started on time, with their lateness in milliseconds.
pub(super) fn started(scheduler: &str, n: usize) {
    if n > 0 {
        ::metrics::counter!(STARTED, "scheduler" => scheduler.to_owned()).increment(n as u64);
    }
}

/// Records how late a handler started after its fire time: the start the
/// ledger records with the outcome.
pub(super) fn handler_started(scheduler: &str, late_ms: i64) {
    #[allow(clippy::cast_precision_loss)]
    ::metrics::histogram!(LATENESS, "scheduler" => scheduler.to_owned()).record(late_ms.max(0) as f64 / 1_000.0);
}

/// Records a poll: its duration and the due executes it read.
pub(super) fn polled(scheduler: &str, took: std::time::Duration, rows: usize) {
    ::metrics::histogram!(POLL_DURATION, "scheduler" => scheduler.to_owned()).record(took.as_secs_f64());
    ::metrics::counter!(POLL_ROWS, "scheduler" => scheduler.to_owned()).increment(rows as u64);
}
