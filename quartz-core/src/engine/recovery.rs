//! Recovery of work a node left behind: fires of dead nodes (claimed ones
//! fired here, running ones re-run when their job requests recovery and
//! recorded abandoned otherwise), fires this node claimed without knowing it
//! (a commit whose answer was lost), and executes a dead node left running.
//! Each item is won by compare-and-set, so two nodes never recover one twice.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::Phase;
use super::context::{Ctx, RECOVERY_BATCH, duration_ms, release_cas};
use super::handler::RunKind;
use super::launch::Launcher;
use super::run::RunFire;
use super::runner::Runner;
use crate::store::{FireEnd, FireRecord, FireState, Job, MANUAL_EXECUTE, NodeRef, StoreError};
use crate::time::Timestamp;
use crate::trigger::Trigger;

/// The recovery stage, run by the cluster stage after each heartbeat.
pub(super) struct Recovery {
    ctx: Arc<Ctx>,
    /// Where recovered fires go.
    launcher: Arc<Launcher>,
    /// Where a recovered fire found past the misfire threshold goes.
    runner: Arc<Runner>,
    /// When this node last looked for fires it claimed without knowing it.
    swept: Mutex<Option<Instant>>,
}

impl Recovery {
    pub(super) fn new(ctx: Arc<Ctx>, launcher: Arc<Launcher>, runner: Arc<Runner>) -> Recovery {
        Recovery {
            ctx,
            launcher,
            runner,
            swept: Mutex::default(),
        }
    }

    /// Recovery of dead nodes' work, each item won by compare-and-set.
    pub(super) async fn recover(&self) -> Result<(), StoreError> {
        if self.ctx.stopping() || self.ctx.phase() != Phase::Running {
            return Ok(());
        }
        let node = self.ctx.node();
        let fires = self.ctx.store.orphaned_fires(RECOVERY_BATCH).await?;
        if !fires.is_empty() {
            let jobs = self.ctx.jobs(fires.iter().map(|f| f.job_id)).await?;
            for fire in fires {
                let job = jobs.get(&fire.job_id);
                self.recover_fire(fire, job, &node, "recovered from a node that is gone")
                    .await?;
            }
        }
        self.sweep_own_claims(&node).await?;
        let executes = self.ctx.store.orphaned_executes(RECOVERY_BATCH).await?;
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
    /// moment). Once past their time by the misfire threshold and
    /// `dead_after`, they are recovered as a dead node's are; the
    /// compare-and-set on their state keeps a start still on its way from
    /// running one twice. At most once per `dead_after`.
    pub(super) async fn sweep_own_claims(&self, node: &NodeRef) -> Result<(), StoreError> {
        {
            let now = Instant::now();
            let mut swept = self.swept.lock();
            if swept.is_some_and(|at| now.duration_since(at) < self.ctx.settings.dead_after) {
                return Ok(());
            }
            *swept = Some(now);
        }
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
