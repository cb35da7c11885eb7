//! The metrics a node records, through the [`metrics`](https://docs.rs/metrics)
//! facade. The library never installs a recorder or an exporter: a service
//! that installs one (for example `metrics-exporter-prometheus`) gets these;
//! one that does not pays a relaxed atomic load per record.
//!
//! Every metric carries one label, `scheduler` (the cluster's name), so its
//! cardinality is the number of clusters a process runs. Counters end in
//! `_total`; durations are histograms in seconds.
//!
//! | metric | kind | what |
//! |---|---|---|
//! | [`POLLS`] | counter | polls made |
//! | [`POLL_ROWS`] | counter | due executes the polls read |
//! | [`POLL_DURATION`] | histogram | how long a poll took |
//! | [`CLAIMED`] | counter | fires this node won |
//! | [`CLAIMS_LOST`] | counter | claims lost to another node or a changed row |
//! | [`STARTED`] | counter | fires started (marked running) on time |
//! | [`LATENESS`] | histogram | a started fire's recorded start less its fire time |
//! | [`SUCCEEDED`] | counter | fires that ran to success |
//! | [`FAILED`] | counter | fires that failed (error, panic, timeout) |
//! | [`TIMED_OUT`] | counter | fires that passed their job's timeout |
//! | [`REJECTED`] | counter | fires the pool refused, recorded misfired |
//! | [`MISFIRES`] | counter | misfire decisions applied to overdue executes |
//! | [`FENCED`] | counter | fires not started because this incarnation was fenced |
//! | [`RECOVERED`] | counter | dead nodes' fires taken over, re-run or recorded abandoned |
//! | [`RECOMPUTED`] | counter | rows written by hand, initialised or recomputed |
//! | [`CHAINED`] | counter | child jobs' fires started after their parent succeeded |
//! | [`PURGED`] | counter | ledger rows purged under the retention settings |

use super::Counters;

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
/// A started fire's lateness: its recorded start (database time) less its
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

/// Records what one update of a node's counters added.
pub(super) fn counted(scheduler: &str, before: &Counters, after: &Counters) {
    let added = [
        (POLLS, after.polls - before.polls),
        (CLAIMED, after.claimed - before.claimed),
        (CLAIMS_LOST, after.lost - before.lost),
        (SUCCEEDED, after.succeeded - before.succeeded),
        (FAILED, after.failed - before.failed),
        (REJECTED, after.rejected - before.rejected),
        (MISFIRES, after.misfires - before.misfires),
        (FENCED, after.fenced - before.fenced),
        (RECOVERED, after.recovered - before.recovered),
        (RECOMPUTED, after.recomputed - before.recomputed),
        (CHAINED, after.chained - before.chained),
        (TIMED_OUT, after.timed_out - before.timed_out),
        (PURGED, after.purged - before.purged),
    ];
    for (name, n) in added {
        if n > 0 {
            ::metrics::counter!(name, "scheduler" => scheduler.to_owned()).increment(n);
        }
    }
}

/// Records fires started on time, with their lateness in milliseconds.
pub(super) fn started(scheduler: &str, late_ms: impl Iterator<Item = i64>) {
    let lateness = ::metrics::histogram!(LATENESS, "scheduler" => scheduler.to_owned());
    let mut n = 0;
    for ms in late_ms {
        #[allow(clippy::cast_precision_loss)]
        lateness.record(ms.max(0) as f64 / 1_000.0);
        n += 1;
    }
    if n > 0 {
        ::metrics::counter!(STARTED, "scheduler" => scheduler.to_owned()).increment(n);
    }
}

/// Records a poll: its duration and the due executes it read.
pub(super) fn polled(scheduler: &str, took: std::time::Duration, rows: usize) {
    ::metrics::histogram!(POLL_DURATION, "scheduler" => scheduler.to_owned()).record(took.as_secs_f64());
    ::metrics::counter!(POLL_ROWS, "scheduler" => scheduler.to_owned()).increment(rows as u64);
}
