//! What misfired since the last poll, in one line a poll: the stages that
//! apply a misfire policy (the poller to an overdue row, the runner to a fire
//! its lane could not take in time) send what they did on a channel, and the
//! poller says it all after each poll, so that an overloaded node writes one
//! line a poll, not one a fire (debug logs name every one).

use tokio::sync::mpsc;

/// Fire times of a job that misfired, and the policy that handled them.
#[derive(Debug)]
pub(super) struct Misfired {
    pub(super) job: String,
    pub(super) policy: &'static str,
    pub(super) fires: u64,
}

/// The poller's end of the channel, and its one line.
pub(super) struct MisfireReport {
    inbox: mpsc::UnboundedReceiver<Misfired>,
}

impl MisfireReport {
    pub(super) fn new(inbox: mpsc::UnboundedReceiver<Misfired>) -> MisfireReport {
        MisfireReport { inbox }
    }

    /// Says in one line what misfired since the last time, if anything.
    pub(super) fn say(&mut self, scheduler: &str) {
        let mut seen = Misfires::default();
        while let Ok(m) = self.inbox.try_recv() {
            seen.add(&m);
        }
        if seen.fires == 0 {
            return;
        }
        let policies: Vec<String> = seen.by_policy.iter().map(|(p, n)| format!("{p}: {n}")).collect();
        tracing::warn!(
            scheduler,
            fires = seen.fires,
            policies = policies.join(", "),
            jobs = seen.jobs.join(", "),
            "fire times misfired since the last poll, each handled by its policy (debug logs name every one)"
        );
    }
}

/// What misfired since the last report, summed.
#[derive(Debug, Default)]
struct Misfires {
    fires: u64,
    by_policy: std::collections::BTreeMap<&'static str, u64>,
    /// A few of the jobs, for the line.
    jobs: Vec<String>,
}

impl Misfires {
    /// How many jobs the line names.
    const JOBS_NAMED: usize = 3;

    fn add(&mut self, m: &Misfired) {
        self.fires += m.fires;
        *self.by_policy.entry(m.policy).or_default() += m.fires;
        if self.jobs.len() < Self::JOBS_NAMED && !self.jobs.contains(&m.job) {
            self.jobs.push(m.job.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misfires_are_summed_by_policy_and_a_few_jobs_named() {
        let mut seen = Misfires::default();
        let misfired = |job: String, policy, fires| Misfired { job, policy, fires };
        for i in 0..5 {
            seen.add(&misfired(format!("job-{i}"), "fire_now", 2));
        }
        seen.add(&misfired("job-0".to_owned(), "do_nothing", 10));
        assert_eq!(seen.fires, 20);
        assert_eq!(
            seen.by_policy.iter().map(|(p, n)| (*p, *n)).collect::<Vec<_>>(),
            [("do_nothing", 10), ("fire_now", 10)]
        );
        assert_eq!(seen.jobs, ["job-0", "job-1", "job-2"]);
    }
}
