//! Supervision of a fire the pool accepted: its timeout, its outcome, and
//! what comes after (the execute's release, a retry, a chain of child jobs,
//! a misfire's late run).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use quartz_pool::RejectReason;
use tokio::sync::{oneshot, watch};

use super::backlog::PendingFire;
use super::handler::{CancelReason, JobResult, RunKind};
use super::launch::RunFire;
use super::node::{FINISH_TRIES, Inner, release_cas};
use crate::misfire::MisfirePolicy;
use crate::store::{ChainedFire, FireEnd, FollowUp, LateRun, Outcome};
use crate::trigger::Trigger;

/// What a fire's pool task reports.
pub(super) enum Ran {
    /// The handler ran, with this outcome.
    Done(JobResult),
    /// A thread took the fire this many milliseconds after its time, past the
    /// misfire threshold: the handler did not run.
    Late(i64),
    /// A thread took the fire late and found it no longer this incarnation's:
    /// the handler did not run.
    NotOwned,
    /// A thread took the fire late and the database could not confirm its
    /// start: the handler did not run, and the fire goes to its policy.
    Unconfirmed,
}

/// The misfires since the last poll's report: an overloaded node says so in
/// one line a poll, not one a fire.
#[derive(Debug, Default)]
pub(super) struct Misfires {
    fires: u64,
    by_policy: std::collections::BTreeMap<&'static str, u64>,
    /// A few of the jobs, for the line.
    jobs: Vec<String>,
}

impl Misfires {
    /// How many jobs the line names.
    const JOBS_NAMED: usize = 3;

    /// `fires` fire times of `job` misfired, handled by `policy`.
    pub(super) fn add(&mut self, job: &str, policy: &'static str, fires: u64) {
        self.fires += fires;
        *self.by_policy.entry(policy).or_default() += fires;
        if self.jobs.len() < Self::JOBS_NAMED && !self.jobs.iter().any(|j| j == job) {
            self.jobs.push(job.to_owned());
        }
    }
}

impl Inner {
    /// Says in one line what misfired since the last report, if anything.
    pub(super) fn report_misfires(&self) {
        let seen = std::mem::take(&mut *self.misfires.lock());
        if seen.fires == 0 {
            return;
        }
        let policies: Vec<String> = seen.by_policy.iter().map(|(p, n)| format!("{p}: {n}")).collect();
        tracing::warn!(
            scheduler = self.scheduler,
            fires = seen.fires,
            policies = policies.join(", "),
            jobs = seen.jobs.join(", "),
            "fire times misfired since the last poll, each handled by its policy (debug logs name every one)"
        );
    }

    /// Follows a fire the pool accepted: its start, timeout and outcome, then
    /// what comes after (release, retry).
    pub(super) async fn supervise(
        self: Arc<Self>,
        run: RunFire,
        done_rx: oneshot::Receiver<Ran>,
        cancel_tx: watch::Sender<Option<CancelReason>>,
    ) {
        self.follow(&run, done_rx, cancel_tx).await;
        self.inflight.fetch_sub(1, Ordering::SeqCst);
    }

    pub(super) async fn follow(
        self: &Arc<Self>,
        run: &RunFire,
        done_rx: oneshot::Receiver<Ran>,
        cancel_tx: watch::Sender<Option<CancelReason>>,
    ) {
        self.running.lock().insert(run.fire_id, cancel_tx.clone());
        let timeout = run.job.spec.timeout;
        let mut done_rx = done_rx;
        let result = match timeout {
            Some(limit) => {
                tokio::select! {
                    r = &mut done_rx => r.ok(),
                    () = tokio::time::sleep(limit) => self.time_out(run, limit, &cancel_tx, done_rx).await,
                }
            }
            None => done_rx.await.ok(),
        };
        let result = match result {
            Some(Ran::Late(late_ms)) => {
                self.running.lock().remove(&run.fire_id);
                let cause = format!("a thread took it {late_ms} ms after its time");
                self.misfired(run.clone(), &cause, false).await;
                return;
            }
            Some(Ran::Unconfirmed) => {
                self.running.lock().remove(&run.fire_id);
                self.misfired(
                    run.clone(),
                    "its start could not be confirmed after waiting for a thread",
                    false,
                )
                .await;
                return;
            }
            Some(Ran::NotOwned) => {
                self.running.lock().remove(&run.fire_id);
                self.count(|c| c.fenced += 1);
                return;
            }
            Some(Ran::Done(result)) => Some(result),
            None => None,
        };
        self.running.lock().remove(&run.fire_id);
        let outcome = match result {
            Some(Ok(())) => Outcome::Succeeded,
            Some(Err(e)) => Outcome::Failed { error: e.to_string() },
            None => Outcome::Failed {
                error: "the handler's thread ended without an outcome".to_owned(),
            },
        };
        let succeeded = outcome == Outcome::Succeeded;
        self.count(|c| {
            if succeeded {
                c.succeeded += 1;
            } else {
                c.failed += 1;
            }
        });
        let job = self.settings.metrics_job_label.then_some(run.job.spec.name.as_str());
        let what = if succeeded { "succeeded" } else { "failed" };
        super::metrics::outcome(&self.scheduler, &run.job.spec.handler, job, what);
        if let Outcome::Failed { error } = &outcome {
            tracing::warn!(
                scheduler = self.scheduler,
                job = run.job.spec.name,
                fire_id = run.fire_id,
                attempt = run.attempt,
                error,
                "fire failed"
            );
        }
        let children = match &outcome {
            Outcome::Failed { error } if run.attempt < run.job.spec.retry.max_attempts => {
                self.fail_with_retry(run, error).await;
                Vec::new()
            }
            _ => self.recorder.record(run, &outcome).await,
        };
        self.release(run).await;
        if !children.is_empty() {
            self.chain(run, children).await;
        }
    }

    /// A fire past its job's timeout: asked to stop, recorded timed out, and
    /// followed until its code really returns. A thread cannot be killed, so
    /// until then the fire stays running in the ledger (a job that disallows
    /// concurrency stays blocked) and its pool thread stays busy; then it is
    /// failed, whatever the code returned.
    pub(super) async fn time_out(
        &self,
        run: &RunFire,
        limit: Duration,
        cancel_tx: &watch::Sender<Option<CancelReason>>,
        done_rx: oneshot::Receiver<Ran>,
    ) -> Option<Ran> {
        let _ = cancel_tx.send(Some(CancelReason::TimedOut));
        let limit_ms = limit.as_millis();
        let asked = std::time::Instant::now();
        self.count(|c| c.timed_out += 1);
        let note = format!("timed out after {limit_ms} ms; asked to stop, still running");
        if let Err(e) = self.store.fire_time_out(run.fire_id, &run.node, &note).await {
            tracing::warn!(scheduler = self.scheduler, fire_id = run.fire_id, error = %e, "could not record the timeout");
        }
        tracing::warn!(
            scheduler = self.scheduler,
            job = run.job.spec.name,
            fire_id = run.fire_id,
            limit_ms,
            "fire timed out"
        );
        match done_rx.await.ok()? {
            ran @ (Ran::Late(_) | Ran::NotOwned | Ran::Unconfirmed) => Some(ran),
            Ran::Done(returned) => {
                let after = asked.elapsed().as_millis();
                let how = match returned {
                    Ok(()) => "returned success".to_owned(),
                    Err(e) => format!("returned: {e}"),
                };
                Some(Ran::Done(Err(format!(
                    "timed out after {limit_ms} ms; asked to stop, the code {how} {after} ms later"
                )
                .into())))
            }
        }
    }

    /// After a run of an execute the claim had moved to running: back to
    /// waiting, with a fixed-delay trigger's next fire computed from the finish.
    pub(super) async fn release(self: &Arc<Self>, run: &RunFire) {
        let (Some(expect), Some(trigger)) = (&run.release, &run.trigger) else {
            return;
        };
        // Only a fixed-delay successor needs the clock: it counts from the finish.
        let now = if expect.awaiting_finish {
            match self.db_now().await {
                Ok(now) => now,
                Err(e) => {
                    tracing::warn!(scheduler = self.scheduler, error = %e, "cannot read the clock; the execute is released by recovery");
                    return;
                }
            }
        } else {
            self.clock.db_now()
        };
        let cas = release_cas(run.execute_id, trigger, expect, Some(run.node.clone()), now);
        match self.store.update_execute(&cas, &[]).await {
            // The successor is due soon, perhaps before the next poll.
            Ok(true) => self.poll_now.notify_one(),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(scheduler = self.scheduler, execute_id = run.execute_id, error = %e,
                    "releasing the execute failed; recovery releases it if this node dies");
            }
        }
    }

    /// Runs the children a parent's success claimed for this node, at once. A
    /// child whose handler this node lacks is given back, for a node that has
    /// it (recovery takes released fires).
    pub(super) async fn chain(self: &Arc<Self>, parent: &RunFire, children: Vec<ChainedFire>) {
        let jobs = match self.jobs(children.iter().map(|c| c.job_id)).await {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::warn!(scheduler = self.scheduler, fire_id = parent.fire_id, error = %e,
                    "cannot read the child jobs; their claimed fires are released by recovery if this node dies");
                HashMap::new()
            }
        };
        for child in children {
            let job = jobs
                .get(&child.job_id)
                .filter(|job| self.handlers.contains_key(&job.spec.handler));
            let Some(job) = job else {
                let _ = self.give_back_fire(child.fire_id, &parent.node).await;
                continue;
            };
            tracing::debug!(
                scheduler = self.scheduler,
                parent = parent.job.spec.name,
                child = job.spec.name,
                fire_id = child.fire_id,
                "chained fire"
            );
            self.count(|c| c.chained += 1);
            self.launch.unstarted.lock().insert(child.fire_id);
            self.launch(RunFire {
                fire_id: child.fire_id,
                execute_id: parent.execute_id,
                job: Arc::clone(job),
                trigger: None,
                fire_time: parent.fire_time,
                attempt: 1,
                kind: RunKind::Scheduled,
                node: parent.node.clone(),
                release: None,
                hold: Some(self.hold(job)),
            });
        }
    }

    /// The pool refused a started fire: recorded as misfired, then the trigger's
    /// policy decides whether it runs late.
    pub(super) async fn on_rejected(self: Arc<Self>, run: RunFire, reason: RejectReason) {
        // Started already: the pool's refusal is recorded as a misfire (the
        // room the dispatcher keeps makes it the rare exception).
        self.count(|c| c.rejected += 1);
        self.misfired(run, &format!("the pool refused the fire ({reason})"), false)
            .await;
        self.inflight.fetch_sub(1, Ordering::SeqCst);
    }

    /// A won fire that will not start on time: recorded as misfired with its
    /// cause, then its trigger's policy decides whether it runs late. When
    /// `row_decides` (the fire was found past the threshold after an outage),
    /// the execute row's own misfire decision stands for the fire-now policies,
    /// so only the ignore policy runs the fire late.
    pub(super) async fn misfired(self: &Arc<Self>, run: RunFire, cause: &str, row_decides: bool) {
        let policy = run
            .trigger
            .as_deref()
            .map_or(MisfirePolicy::FireNow, Trigger::resolved_misfire_policy);
        let runs_late = match policy {
            MisfirePolicy::IgnoreMisfires => true,
            MisfirePolicy::FireNow
            | MisfirePolicy::RescheduleNowWithExistingCount
            | MisfirePolicy::RescheduleNowWithRemainingCount => !row_decides,
            _ => false,
        };
        let text = format!(
            "misfired: {cause}; policy {policy}: {}",
            if runs_late {
                "runs it as soon as the pool has room"
            } else {
                "skips it"
            }
        );
        // The late run is a pending row written with the misfire record. Fire
        // once now: one pending late run per execute stands for them all.
        // Retried on database errors: a fire marked running stays so until
        // this is recorded, and nothing else would ever end it.
        let mut tries = 0;
        let follow_up = loop {
            tries += 1;
            let run_late = runs_late.then_some(if policy == MisfirePolicy::IgnoreMisfires {
                LateRun::Each
            } else {
                LateRun::OnePerExecute
            });
            let recorded = self
                .store
                .end_fire(
                    run.fire_id,
                    &run.node,
                    FireEnd::Misfired {
                        reason: text.clone(),
                        run_late,
                    },
                )
                .await;
            match recorded {
                // After an error, the record may have committed with its
                // answer lost: the release is a compare-and-set, harmless if
                // it was done.
                Ok(FollowUp::NotOwned) if tries > 1 => {
                    self.release(&run).await;
                    return;
                }
                Ok(FollowUp::NotOwned) => return,
                Ok(follow_up) => break follow_up,
                Err(e) if tries < FINISH_TRIES => {
                    tracing::warn!(scheduler = self.scheduler, fire_id = run.fire_id, error = %e,
                        "recording a misfire failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100 << tries)).await;
                }
                Err(e) => {
                    tracing::error!(scheduler = self.scheduler, fire_id = run.fire_id, error = %e,
                        "the misfire could not be recorded");
                    return;
                }
            }
        };
        tracing::debug!(scheduler = self.scheduler, job = run.job.spec.name, fire_id = run.fire_id, %policy, cause, "fire misfired");
        self.misfires.lock().add(&run.job.spec.name, policy.as_str(), 1);
        self.release(&run).await;
        if let Some(late) = PendingFire::after(&run, follow_up) {
            self.queue_pending(late);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misfires_are_summed_by_policy_and_a_few_jobs_named() {
        let mut seen = Misfires::default();
        for i in 0..5 {
            seen.add(&format!("job-{i}"), "fire_now", 2);
        }
        seen.add("job-0", "do_nothing", 10);
        assert_eq!(seen.fires, 20);
        assert_eq!(
            seen.by_policy.iter().map(|(p, n)| (*p, *n)).collect::<Vec<_>>(),
            [("do_nothing", 10), ("fire_now", 10)]
        );
        assert_eq!(seen.jobs, ["job-0", "job-1", "job-2"]);
    }
}
