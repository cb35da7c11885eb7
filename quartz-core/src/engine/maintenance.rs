//! Two background services of a node: the change watcher, which polls at once
//! when a job is added, edited, paused, resumed, triggered or deleted anywhere
//! in the cluster, and the maintenance task, which purges under the retention
//! settings when this node wins the cluster's purge turn.

use std::sync::Arc;
use std::time::Duration;

use super::context::{Ctx, duration_ms};
use crate::retention::{PurgePlan, purge};

/// The longest one wait for a change lasts before the watcher looks at its
/// stop signal and the counter again.
const CHANGE_WAIT: Duration = Duration::from_secs(1);

/// The shortest time between two polls the watcher asks for: a burst of
/// changes (a thousand jobs added one by one) costs a few polls, not one per
/// change, and the changes made meanwhile are seen by the next.
const CHANGE_POLL_GAP: Duration = Duration::from_millis(100);

/// How long the watcher backs off after a store error.
const CHANGE_ERROR_PAUSE: Duration = Duration::from_secs(1);

/// Polls at once whenever the scheduler's change counter moves. The poll
/// expands new and edited triggers, and requeues the fires of an edited
/// job with its new version. A change may be the whole scheduler paused or
/// resumed: the standby is read again at every change. It may be a newer
/// fire asking fires this node runs to stop (the cancel overlap policy):
/// read at every change while the node has fires open.
pub(super) async fn change_watcher(ctx: Arc<Ctx>) {
    let mut seen: Option<i64> = None;
    let mut stop = ctx.stop_signal();
    loop {
        let next = match seen {
            None => ctx.store.changes().await,
            Some(seen) => {
                tokio::select! {
                    biased;
                    _ = stop.wait_for(|s| *s) => return,
                    r = ctx.store.change_wait(seen, CHANGE_WAIT) => r,
                }
            }
        };
        match next {
            Ok(now) => {
                let changed = seen.is_some_and(|seen| seen != now);
                seen = Some(now);
                if changed {
                    // A pause or resume of the whole scheduler is a change.
                    match ctx.store.standby().await {
                        Ok(since) => ctx.standby_read(since),
                        Err(e) => {
                            // Read again after a pause: the counter is
                            // taken as not yet seen.
                            tracing::debug!(scheduler = ctx.scheduler, error = %e, "cannot read the standby");
                            seen = Some(now.wrapping_sub(1));
                            if !ctx.pause(CHANGE_ERROR_PAUSE).await {
                                return;
                            }
                            continue;
                        }
                    }
                    // A change may be a newer fire asking this node's fires
                    // of its job to stop (the cancel overlap policy).
                    if ctx.flights.any_open() {
                        match ctx.store.cancel_requests(&ctx.node()).await {
                            Ok(ids) => ctx.flights.cancel_asked(&ids),
                            Err(e) => {
                                tracing::debug!(scheduler = ctx.scheduler, error = %e, "cannot read the cancel requests")
                            }
                        }
                    }
                    tracing::debug!(scheduler = ctx.scheduler, changes = now, "change seen; polling");
                    ctx.poll_now.notify_one();
                    if !ctx.pause(CHANGE_POLL_GAP).await {
                        return;
                    }
                }
            }
            Err(e) => {
                tracing::debug!(scheduler = ctx.scheduler, error = %e, "cannot read the change counter");
                if !ctx.pause(CHANGE_ERROR_PAUSE).await {
                    return;
                }
            }
        }
    }
}

/// Once per [`Retention::every`](crate::retention::Retention::every), tries
/// to win the purge turn and, when it does, purges in small batches.
pub(super) async fn maintenance(ctx: Arc<Ctx>) {
    let retention = ctx.settings.retention.clone();
    if !retention.enabled {
        return;
    }
    // Nodes tick at the same period; a little less as the turn's length
    // keeps a turn from being skipped for a timer that fired early.
    let turn_ms = duration_ms(retention.every) * 9 / 10;
    loop {
        if !ctx.pause(retention.every).await {
            return;
        }
        let won = match ctx.store.purge_turn(turn_ms).await {
            Ok(won) => won,
            Err(e) => {
                tracing::debug!(scheduler = ctx.scheduler, error = %e, "cannot take the purge turn");
                continue;
            }
        };
        if !won {
            continue;
        }
        let now = match ctx.db_now().await {
            Ok(now) => now,
            Err(e) => {
                tracing::warn!(scheduler = ctx.scheduler, error = %e, "purge skipped: cannot read the clock");
                continue;
            }
        };
        let plan = PurgePlan::from_retention(&retention, now);
        match purge(&*ctx.store, &plan).await {
            Ok(report) => {
                ctx.count(|c| c.purged += report.fires);
                if report != Default::default() {
                    tracing::info!(
                        scheduler = ctx.scheduler,
                        fires = report.fires,
                        nodes = report.nodes,
                        executes = report.executes,
                        "purged under the retention settings"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(scheduler = ctx.scheduler, error = %e, "purge interrupted; the next turn goes on");
            }
        }
    }
}
