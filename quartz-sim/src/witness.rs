//! What the simulator sees apart from the system under test: each node
//! process's run log (its events handed over in memory, one log per
//! process, as the nodes write files), the handlers' runs in simulated real
//! time, judged as they happen against the overlap policies and
//! concurrency limits, and the trace every event feeds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parking_lot::Mutex;
use quartz_core::runlog::{RunEvent, RunFile, RunSink};

use crate::rng::Digest;

/// How a job's runs may overlap in real time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// A first attempt of its trigger's fire begins only when no other run
    /// of the job runs: the trigger's policy holds, skips or makes it wait
    /// (none, on a job that disallows concurrency; skip; either buffer;
    /// cancel, whose fire waits for the one it stopped).
    pub trigger_waits: bool,
    /// A later attempt of its trigger's fire (a retry, a late run) begins
    /// only when no other run of the job runs: the job disallows
    /// concurrency, or its trigger has a policy other than allow.
    pub attempts_wait: bool,
    /// A fire by hand (no trigger's, so no trigger's policy) begins only
    /// when no other run of the job runs: the job disallows concurrency.
    pub by_hand_waits: bool,
    /// Its concurrency key and limit.
    pub limit: Option<(String, u32)>,
}

/// Which fire a run is, for the rules of [`Rules`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whose {
    /// A first attempt of a trigger's fire.
    Trigger,
    /// A later attempt of a trigger's fire.
    Attempt,
    /// A fire asked for by hand.
    ByHand,
    /// A fire run again because its node died while it ran (the job
    /// requests recovery): started at once, whatever else of the job runs
    /// (the rerun is claimed for the node that recovers it; it does not
    /// wait as a retry does).
    Recovery,
}

/// A run in progress: its job, node process, fire (execute and fire time),
/// attempt, and which fire it is.
type Running = (String, usize, (i64, i64), u32, Whose);

/// The witness of one simulated run.
#[derive(Debug, Default)]
pub struct Witness {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Each node process's log, in start order.
    files: Vec<RunFile>,
    trace: Digest,
    /// Runs in progress: fire id → (job, node process, the fire: execute
    /// and fire time, and attempt).
    running: BTreeMap<i64, Running>,
    /// The jobs' rules, by name.
    rules: BTreeMap<String, Rules>,
    violations: Vec<String>,
    starts: u64,
    /// Node processes that crashed: a crash ends everything the process
    /// does, so what its left-over tasks would still do (a start task
    /// sleeping until its fire time, a line for its run log) never happens.
    dead: BTreeSet<usize>,
    /// Every line fed to the trace, when asked to keep them.
    lines: Option<Vec<String>>,
}

impl Inner {
    fn feed(&mut self, line: &str) {
        self.trace.feed(line.as_bytes());
        if let Some(lines) = &mut self.lines {
            lines.push(line.to_owned());
        }
    }
}

impl Witness {
    /// Keeps every line fed to the trace from now on ([`Self::lines`]).
    pub fn keep_lines(&self) {
        self.inner.lock().lines.get_or_insert_with(Vec::new);
    }

    /// The lines fed to the trace, if kept.
    pub fn lines(&self) -> Vec<String> {
        self.inner.lock().lines.clone().unwrap_or_default()
    }

    /// A witness that knows each job's rules.
    pub fn new(rules: BTreeMap<String, Rules>) -> Arc<Witness> {
        Arc::new(Witness {
            inner: Mutex::new(Inner {
                rules,
                ..Inner::default()
            }),
        })
    }

    /// A run log for a new node process, and its index.
    pub fn process(self: &Arc<Self>, name: &str) -> (usize, RunSink) {
        let index = {
            let mut inner = self.inner.lock();
            inner.files.push(RunFile {
                path: format!("{name}.runs.jsonl").into(),
                ..RunFile::default()
            });
            inner.files.len() - 1
        };
        let witness = Arc::clone(self);
        let sink: RunSink = Arc::new(move |event: &RunEvent| witness.logged(index, event));
        (index, sink)
    }

    fn logged(&self, process: usize, event: &RunEvent) {
        let mut inner = self.inner.lock();
        if inner.dead.contains(&process) {
            return;
        }
        // The host and process id of an opened log are the machine's, not
        // the simulation's: left out of the trace.
        if !matches!(event, RunEvent::Open { .. }) {
            let line = serde_json::to_string(event).unwrap_or_default();
            inner.feed(&line);
        }
        inner.files[process].events.push(event.clone());
    }

    /// Feeds the trace with something the simulator did.
    pub fn note(&self, what: &str) {
        self.inner.lock().feed(what);
    }

    /// A handler began, at simulated time `at_ms`: judged against the runs
    /// in progress. `false` when its process had crashed: it never began
    /// (its handler waits forever, as nothing runs in a dead process).
    #[allow(clippy::too_many_arguments)]
    pub fn began(
        &self,
        process: usize,
        job: &str,
        fire_id: i64,
        fire: (i64, i64),
        attempt: u32,
        whose: Whose,
        at_ms: i64,
    ) -> bool {
        let mut inner = self.inner.lock();
        if inner.dead.contains(&process) {
            return false;
        }
        inner.starts += 1;
        // A later attempt (a retry, a recovery rerun) never begins while an
        // earlier attempt of the same fire still runs: a node that lost its
        // membership stopped its handlers before the others could declare
        // it dead and run its fires again.
        if attempt > 1 {
            let earlier: Vec<(i64, u32)> = inner
                .running
                .iter()
                .filter(|(_, (_, _, f, a, _))| *f == fire && *a < attempt)
                .map(|(id, (_, _, _, a, _))| (*id, *a))
                .collect();
            if !earlier.is_empty() {
                inner.violations.push(format!(
                    "attempt {attempt} of {job}'s fire at {} (fire {fire_id}) began at {at_ms} while earlier attempts still ran: {earlier:?}",
                    fire.1
                ));
            }
        }
        let rules = inner.rules.get(job).cloned();
        if let Some(rules) = rules {
            let waits = match whose {
                Whose::Trigger => rules.trigger_waits,
                Whose::Attempt => rules.attempts_wait,
                Whose::ByHand => rules.by_hand_waits,
                Whose::Recovery => false,
            };
            if waits {
                // A trigger's first attempt that waits for nothing (its
                // overlap `allow`, or a child's fire of a job that allows
                // concurrency) may run beside any
                // fire of the job, whichever began first: an exclusive
                // claim (a retry's) is judged when it is claimed, and such a
                // fire may start between that claim and its start.
                let free = !rules.trigger_waits;
                let others: Vec<i64> = inner
                    .running
                    .iter()
                    .filter(|(_, (j, .., w))| j == job && !(free && *w == Whose::Trigger))
                    .map(|(id, _)| *id)
                    .collect();
                if !others.is_empty() {
                    inner.violations.push(format!(
                        "overlap: {job} fire {fire_id} began at {at_ms} while fires {others:?} of the job ran"
                    ));
                }
            }
            // A recovery rerun is claimed for the node that recovers it and
            // starts at once: it waits neither for the job's other runs nor
            // for room under its key (a gap left open: the rerun does not
            // pass the pending claim a retry passes).
            if let Some((key, max)) = rules.limit.as_ref().filter(|_| whose != Whose::Recovery) {
                let rules_of = &inner.rules;
                let at_once = 1 + inner
                    .running
                    .values()
                    .filter(|(j, ..)| {
                        rules_of
                            .get(j)
                            .is_some_and(|r| r.limit.as_ref().is_some_and(|(k, _)| k == key))
                    })
                    .count();
                if at_once > *max as usize {
                    inner.violations.push(format!(
                        "limit: {job} fire {fire_id} began at {at_ms} as the {at_once}th of key {key} (limit {max})"
                    ));
                }
            }
        }
        inner
            .running
            .insert(fire_id, (job.to_owned(), process, fire, attempt, whose));
        inner.feed(&format!("began {process} {fire_id} {at_ms}"));
        true
    }

    /// A handler ended (returned, or its process died).
    pub fn ended(&self, fire_id: i64, at_ms: i64) {
        let mut inner = self.inner.lock();
        if inner.running.remove(&fire_id).is_some() {
            inner.feed(&format!("ended {fire_id} {at_ms}"));
        }
    }

    /// A node process died: its handlers with it.
    pub fn died(&self, process: usize, at_ms: i64) {
        let mut inner = self.inner.lock();
        inner.dead.insert(process);
        let dead: Vec<i64> = inner
            .running
            .iter()
            .filter(|(_, (_, p, ..))| *p == process)
            .map(|(id, _)| *id)
            .collect();
        for id in dead {
            inner.running.remove(&id);
            inner.feed(&format!("died {id} {at_ms}"));
        }
    }

    /// The run logs so far.
    pub fn files(&self) -> Vec<RunFile> {
        self.inner.lock().files.clone()
    }

    /// What the real-time judgement found.
    pub fn violations(&self) -> Vec<String> {
        self.inner.lock().violations.clone()
    }

    /// Handler starts seen.
    pub fn starts(&self) -> u64 {
        self.inner.lock().starts
    }

    /// The trace's digest so far.
    pub fn trace(&self) -> u64 {
        self.inner.lock().trace.value()
    }
}
