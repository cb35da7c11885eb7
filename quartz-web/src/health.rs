//! The cluster's health gauges, read from the database at each scrape of
//! `/metrics` ([`Admin::health`](quartz_core::admin::Admin::health)), so that
//! `quartz serve`, or any process that mounts the router with a recorder,
//! exports them whether or not a node is alive to report anything: alerts on
//! "no live node" need a process that outlives the nodes.
//!
//! Every gauge carries the label `scheduler`; the node and fire gauges one
//! more, `state`, of a few values.
//!
//! | metric | what |
//! |---|---|
//! | [`DATABASE_UP`] | 1 when the last scrape read the database, 0 when it could not |
//! | [`NODES`] | nodes by `state`: `live`, `silent` (live by its row, heartbeat older than its `dead_after`), `dead`, `gone` |
//! | [`OVERDUE_TRIGGERS`] | waiting triggers more than a minute past their next fire time |
//! | [`OLDEST_OVERDUE`] | how far past its next fire time the oldest of them is, in seconds (0 when none) |
//! | [`OPEN_FIRES`] | fires by `state`: `claimed`, `running`, `pending` |
//! | [`STRANDED_FIRES`] | pending fires more than a minute past their due time, unclaimed |
//! | [`RECENT_FIRES`] | fires scheduled in the last five minutes by `state`: `succeeded`, `failed`, `misfired` |

use quartz_core::admin::{Admin, ClusterHealth};

/// 1 when the last scrape read the database, 0 when it could not.
pub const DATABASE_UP: &str = "quartz_cluster_database_up";
/// Nodes by `state`.
pub const NODES: &str = "quartz_cluster_nodes";
/// Waiting triggers more than a minute past their next fire time.
pub const OVERDUE_TRIGGERS: &str = "quartz_cluster_overdue_triggers";
/// The oldest overdue trigger's lateness, in seconds.
pub const OLDEST_OVERDUE: &str = "quartz_cluster_oldest_overdue_seconds";
/// Open fires by `state`.
pub const OPEN_FIRES: &str = "quartz_cluster_open_fires";
/// Pending fires more than a minute past their due time.
pub const STRANDED_FIRES: &str = "quartz_cluster_stranded_fires";
/// Fires of the last five minutes by `state`.
pub const RECENT_FIRES: &str = "quartz_cluster_recent_fires";

/// Every gauge this module sets.
pub const ALL: [&str; 7] = [
    DATABASE_UP,
    NODES,
    OVERDUE_TRIGGERS,
    OLDEST_OVERDUE,
    OPEN_FIRES,
    STRANDED_FIRES,
    RECENT_FIRES,
];

fn as_f64(n: impl TryInto<u32>) -> f64 {
    // Counts past u32::MAX are shown at that: a gauge, not a ledger.
    f64::from(n.try_into().unwrap_or(u32::MAX))
}

/// Reads the cluster's health and sets the gauges (through the `metrics`
/// facade: nothing is recorded when no recorder is installed).
/// A database that has not answered by then is reported down: a scrape is
/// answered well within Prometheus's default timeout of 10 s, so that the
/// alert on [`DATABASE_UP`] can fire.
pub(crate) async fn refresh(admin: &Admin) {
    let scheduler = admin.scheduler().to_owned();
    match tokio::time::timeout(READ_LIMIT, admin.health()).await {
        Ok(Ok(health)) => {
            metrics::gauge!(DATABASE_UP, "scheduler" => scheduler.clone()).set(1.0);
            record(&scheduler, &health);
        }
        Ok(Err(e)) => {
            tracing::warn!(scheduler, error = %e, "the cluster's health could not be read for /metrics");
            metrics::gauge!(DATABASE_UP, "scheduler" => scheduler).set(0.0);
        }
        Err(_) => {
            tracing::warn!(
                scheduler,
                limit_ms = READ_LIMIT.as_millis(),
                "the database did not answer the health read for /metrics in time"
            );
            metrics::gauge!(DATABASE_UP, "scheduler" => scheduler).set(0.0);
        }
    }
}

/// How long `/metrics` and `/healthz` wait for the database.
pub const READ_LIMIT: std::time::Duration = std::time::Duration::from_millis(1_500);

fn record(scheduler: &str, h: &ClusterHealth) {
    let labelled = |name: &'static str, state: &'static str, value: f64| {
        metrics::gauge!(name, "scheduler" => scheduler.to_owned(), "state" => state).set(value);
    };
    for (state, n) in [
        ("live", h.live_nodes),
        ("silent", h.silent_nodes),
        ("dead", h.dead_nodes),
        ("gone", h.gone_nodes),
    ] {
        labelled(NODES, state, as_f64(n));
    }
    for (state, n) in [
        ("claimed", h.claimed_fires),
        ("running", h.running_fires),
        ("pending", h.pending_fires),
    ] {
        labelled(OPEN_FIRES, state, as_f64(n));
    }
    for (state, n) in [
        ("succeeded", h.recent_succeeded),
        ("failed", h.recent_failed),
        ("misfired", h.recent_misfired),
    ] {
        labelled(RECENT_FIRES, state, as_f64(n));
    }
    let plain = |name: &'static str, value: f64| {
        metrics::gauge!(name, "scheduler" => scheduler.to_owned()).set(value);
    };
    plain(OVERDUE_TRIGGERS, as_f64(h.overdue_triggers));
    plain(STRANDED_FIRES, as_f64(h.stranded_fires));
    let oldest = h.oldest_overdue_ms.unwrap_or(0).max(0);
    plain(OLDEST_OVERDUE, as_f64(oldest / 1000));
}
