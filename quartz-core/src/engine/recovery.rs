//! Recovery of work a node left behind: fires of dead nodes (claimed ones
//! fired here, running ones re-run when their job requests recovery and
//! recorded abandoned otherwise), fires this node claimed without knowing it
//! (a commit whose answer was lost), and executes a dead node left running.
//! Each item is won by compare-and-set, so two nodes never recover one twice.
//!
//! A fire is orphaned when its owner stops being live, which the membership
//! shows: the sweep for orphans (every fire not ended, read to find those
//! whose owner is not live) runs when the live members differ from those of
//! the last sweep, when this pass retired a node, while the last sweep found
//! a full batch, and at least once per `dead_after` (a claim that committed
//! after its node was retired orphans its fire with no change to see).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::context::{Ctx, RECOVERY_BATCH, duration_ms, release_cas};
use super::handler::RunKind;
use super::launch_handle::Launch;
use super::run::RunFire;
use super::runner::Runner;
use super::status::Phase;
use crate::store::{
    FireEnd, FireRecord, FireState, Job, MANUAL_EXECUTE, NodeRef, NodeState, StoreError, work_of_execute,
};
use crate::time::Timestamp;
use crate::trigger::Trigger;

/// The recovery stage, run by the cluster stage's judge after each pass
/// (it owns it, and its state).
pub(super) struct Recovery {
    ctx: Arc<Ctx>,
    /// Where recovered fires go.
    launcher: Launch,
    /// Where a recovered fire found past the misfire threshold goes.
    runner: Arc<Runner>,
    /// When this node last looked for fires it claimed without knowing it.
    swept: Option<Instant>,
    /// The last sweep for orphans: when, and the live members it saw
    /// (`None` until the first, and after a full batch, to go on at once).
    orphans_swept: Option<(Instant, Vec<NodeRef>)>,
}

impl Recovery {
    pub(super) fn new(ctx: Arc<Ctx>, launcher: Launch, runner: Arc<Runner>) -> Recovery {
        Recovery {
            ctx,
            launcher,
            runner,
            swept: None,
            orphans_swept: None,
        }
    }

    /// Whether to sweep for orphans now (see the module's docs), noting the
    /// sweep when so: `retired` when this pass declared a node dead.
    fn orphans_due(&mut self, retired: bool) -> bool {
        let mut live: Vec<NodeRef> = self
            .ctx
            .members
            .borrow()
            .iter()
            .filter(|m| m.state == NodeState::Live)
            .map(|m| NodeRef {
                node_id: m.node_id.clone(),
                incarnation: m.incarnation,
            })
            .collect();
        live.sort_unstable_by(|a, b| (&a.node_id, a.incarnation).cmp(&(&b.node_id, b.incarnation)));
        let now = Instant::now();
        let due = retired || orphans_may_be_new(self.orphans_swept.as_ref(), &live, now, self.ctx.settings.dead_after);
        if due {
            self.orphans_swept = Some((now, live));
        }
        due
    }

    /// Sweeps again at the next pass (a sweep that found a full batch).
    fn orphans_left(&mut self) {
        self.orphans_swept = None;
    }

    /// Recovery of dead nodes' work, each item won by compare-and-set;
    /// `retired` when this pass declared a node dead.
    pub(super) async fn recover(&mut self, retired: bool) -> Result<(), StoreError> {
        if self.ctx.stopping() || self.ctx.phase() != Phase::Running {
            return Ok(());
        }
        let node = self.ctx.node();
        let orphans = self.orphans_due(retired);
        let fires = if orphans {
            self.ctx.store.orphaned_fires(RECOVERY_BATCH).await?
        } else {
            Vec::new()
        };
        if fires.len() >= RECOVERY_BATCH as usize {
            self.orphans_left();
        }
        if !fires.is_empty() {
            let jobs = self.ctx.jobs(fires.iter().map(|f| f.job_id)).await?;
            for fire in fires {
                let job = jobs.get(&fire.job_id);
                self.recover_fire(fire, job, &node, "recovered from a node that is gone")
                    .await?;
            }
        }
        self.sweep_own_claims(&node).await?;
        if !orphans {
            return Ok(());
        }
        let executes = self.ctx.store.orphaned_executes(RECOVERY_BATCH).await?;
        if executes.executes.len() >= RECOVERY_BATCH as usize {
            self.orphans_left();
        }
        if !executes.executes.is_empty() {
            let db_now = self.ctx.db_now().await?;
            for execute in executes.executes {
                let cas = release_cas(
                    execute.id,
                    &execute.trigger,
                    &execute.fire_state,
                    execute.owner.clone(),
                    db_now,
                );
                if self.ctx.store.update_execute(&cas, &[]).await? {
                    tracing::info!(
                        scheduler = self.ctx.scheduler,
                        execute_id = execute.id,
                        "released an execute a dead node left running"
                    );
                    self.ctx.poll_now.notify_one();
                }
            }
        }
        Ok(())
    }

    /// Fires this incarnation claimed but does not know of: a claim stored
    /// by a commit whose answer was lost (the connection cut at that
    /// moment). Once past their time, and claimed, by the misfire threshold
    /// and `dead_after` (the store reads both times), they are recovered as
    /// a dead node's are; the compare-and-set on their state keeps a start
    /// still on its way from running one twice. At most once per
    /// `dead_after`.
    async fn sweep_own_claims(&mut self, node: &NodeRef) -> Result<(), StoreError> {
        let now = Instant::now();
        if self
            .swept
            .is_some_and(|at| now.duration_since(at) < self.ctx.settings.dead_after)
        {
            return Ok(());
        }
        self.swept = Some(now);
        let margin = self
            .ctx
            .settings
            .misfire
            .threshold_ms()
            .saturating_add(duration_ms(self.ctx.settings.dead_after));
        let before = Timestamp::from_millis(self.ctx.clock.db_now().as_millis().saturating_sub(margin));
        let unknown: Vec<FireRecord> = {
            let fires = self.ctx.store.claimed_by(node, before, RECOVERY_BATCH).await?;
            fires
                .into_iter()
                .filter(|f| !self.ctx.flights.is_unstarted(f.id))
                .collect()
        };
        if unknown.is_empty() {
            return Ok(());
        }
        let jobs = self.ctx.jobs(unknown.iter().map(|f| f.job_id)).await?;
        for fire in unknown {
            tracing::warn!(
                scheduler = self.ctx.scheduler,
                fire_id = fire.id,
                "found a fire this node claimed without knowing it; recovering it"
            );
            let job = jobs.get(&fire.job_id);
            self.recover_fire(fire, job, node, "claimed by this node, which lost track of it")
                .await?;
        }
        Ok(())
    }

    // A compare-and-set that writes is not a match guard: it stays in the arm.
    #[allow(clippy::collapsible_match)]
    pub(super) async fn recover_fire(
        &self,
        fire: FireRecord,
        job: Option<&Arc<Job>>,
        node: &NodeRef,
        whence: &str,
    ) -> Result<(), StoreError> {
        let Some(job) = job else {
            // The job was deleted: nothing to run.
            if fire.state == FireState::Running {
                self.ctx.store.abandon(&fire).await?;
            } else if self.ctx.store.take_over(&fire, node).await? {
                self.ctx
                    .store
                    .end_fire(fire.id, node, FireEnd::misfired("the job was deleted"))
                    .await
                    .map(|f| f.ended())?;
            }
            return Ok(());
        };
        if !self.ctx.handlers.contains_key(&job.spec.handler) {
            return Ok(()); // a node with the handler recovers it
        }
        // Enqueued work runs with its own payload, read before it is taken.
        let (payload, trace_parent) = match work_of_execute(fire.execute_id) {
            Some(work) if matches!(fire.state, FireState::Claimed | FireState::Running) => {
                let run = self.ctx.store.work_run(work).await?;
                (run.payload.map(Arc::from), run.trace_parent.map(Arc::from))
            }
            _ => (None, None),
        };
        let run = |fire_id: i64, attempt: u32, kind: RunKind| RunFire {
            fire_id,
            execute_id: fire.execute_id,
            job: Arc::clone(job),
            trigger: None,
            fire_time: fire.fire_time,
            attempt,
            kind,
            node: node.clone(),
            release: None,
            hold: Some(self.ctx.hold(job)),
            marked_at: None,
            payload: payload.clone(),
            trace_parent: trace_parent.clone(),
            snoozed: 0,
        };
        match fire.state {
            FireState::Claimed => {
                if self.ctx.store.take_over(&fire, node).await? {
                    self.ctx.count(|c| c.recovered += 1);
                    // A claimed fire runs as it would have on its node.
                    let kind = if fire.attempt > 1 {
                        RunKind::Retry
                    } else if fire.execute_id == MANUAL_EXECUTE {
                        RunKind::ByHand
                    } else if work_of_execute(fire.execute_id).is_some() {
                        RunKind::Enqueued
                    } else {
                        RunKind::Scheduled
                    };
                    self.fire_taken_over(run(fire.id, fire.attempt, kind), job, whence)
                        .await?;
                }
            }
            FireState::Running if job.spec.requests_recovery => {
                if let Some(fire_id) = self.ctx.store.rerun(&fire, node).await? {
                    self.ctx.count(|c| c.recovered += 1);
                    tracing::info!(
                        scheduler = self.ctx.scheduler,
                        job = job.spec.name,
                        fire_id,
                        "re-running a fire its node died in (the job requests recovery)"
                    );
                    self.launcher.launch(run(fire_id, fire.attempt + 1, RunKind::Recovery));
                }
            }
            FireState::Running => {
                if self.ctx.store.abandon(&fire).await? {
                    self.ctx.count(|c| c.recovered += 1);
                    super::metrics::abandoned(&self.ctx.scheduler);
                    tracing::warn!(
                        scheduler = self.ctx.scheduler,
                        job = job.spec.name,
                        fire_id = fire.id,
                        "fire abandoned: its node died mid-run and the job does not request recovery"
                    );
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// A claimed fire this node took over: run at its time, or, found past
    /// the misfire threshold, left to its trigger's policy like any overdue
    /// fire.
    async fn fire_taken_over(&self, run: RunFire, job: &Arc<Job>, whence: &str) -> Result<(), StoreError> {
        let late_ms = self.ctx.clock.db_now().as_millis() - run.fire_time.as_millis();
        let trigger = self.trigger_of(job, run.execute_id).await?;
        // A child's fire (the execute is its parent's) has no trigger of its
        // own: it runs whenever it is found.
        let chained = job.spec.parent.is_some() && trigger.is_none();
        let run = RunFire { trigger, ..run };
        if late_ms > self.ctx.settings.misfire.threshold_ms() && !chained {
            let cause = format!("{whence}, {late_ms} ms after its time");
            self.runner.misfired(run, &cause, true).await;
            return Ok(());
        }
        tracing::info!(
            scheduler = self.ctx.scheduler,
            job = job.spec.name,
            fire_id = run.fire_id,
            "firing a claimed fire its node did not start"
        );
        self.launcher.launch(run);
        Ok(())
    }

    /// The trigger of one of a job's executes, if it still exists.
    pub(super) async fn trigger_of(&self, job: &Job, execute_id: i64) -> Result<Option<Arc<Trigger>>, StoreError> {
        let detail = self.ctx.store.get_job(&job.spec.name).await?;
        Ok(detail
            .and_then(|d| d.executes.into_iter().find(|e| e.id == execute_id))
            .map(|e| Arc::new(e.trigger)))
    }
}

/// Whether fires may have been orphaned since the last sweep (`last`: when,
/// and the live members it saw): none yet, the live members are not the
/// same, or `dead_after` has passed.
fn orphans_may_be_new(
    last: Option<&(Instant, Vec<NodeRef>)>,
    live: &[NodeRef],
    now: Instant,
    dead_after: Duration,
) -> bool {
    last.is_none_or(|(at, seen)| seen.as_slice() != live || now.duration_since(*at) >= dead_after)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, incarnation: i64) -> NodeRef {
        NodeRef {
            node_id: id.to_owned(),
            incarnation,
        }
    }

    #[test]
    fn orphans_are_swept_for_when_the_membership_changes_and_once_per_dead_after() {
        let t0 = Instant::now();
        let dead_after = Duration::from_secs(10);
        let live = vec![member("a", 1), member("b", 1)];
        assert!(orphans_may_be_new(None, &live, t0, dead_after), "the first pass sweeps");
        let last = (t0, live.clone());
        let later = t0 + Duration::from_secs(2);
        assert!(
            !orphans_may_be_new(Some(&last), &live, later, dead_after),
            "the same members, within dead_after: nothing new"
        );
        assert!(
            orphans_may_be_new(Some(&last), &[member("a", 1)], later, dead_after),
            "a member is gone"
        );
        assert!(
            orphans_may_be_new(Some(&last), &[member("a", 1), member("b", 2)], later, dead_after),
            "a member came back as a new incarnation"
        );
        assert!(
            orphans_may_be_new(Some(&last), &live, t0 + dead_after, dead_after),
            "the backstop, once per dead_after"
        );
    }
}
