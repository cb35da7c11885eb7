//! What the run logs say, gathered for the checker: the starts by fire
//! time and attempt, the ends, the incarnations that kept a log, and when
//! each incarnation was fenced.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::runlog::{RunEnd, RunEvent, RunFile, RunStart};

/// (execute, job, fire time): one fire time of one job.
pub(super) type FireKey = (i64, i64, i64);

/// What the run logs say, gathered.
#[derive(Default)]
pub(super) struct Runs<'a> {
    /// Starts by fire time, then attempt.
    pub(super) starts: BTreeMap<FireKey, BTreeMap<u32, Vec<&'a RunStart>>>,
    /// Ends by (node, incarnation, fire id).
    pub(super) ends: HashMap<(&'a str, i64, i64), &'a RunEnd>,
    /// When each incarnation was retired (database time): declared dead by
    /// another node, or replaced by a later registration of its node id.
    pub(super) fenced_at: HashMap<(&'a str, i64), i64>,
    /// The incarnations that kept a run log.
    pub(super) logged: HashSet<(&'a str, i64)>,
    pub(super) unreadable: usize,
}

impl<'a> Runs<'a> {
    pub(super) fn of(files: &'a [RunFile]) -> Runs<'a> {
        let mut runs = Runs::default();
        let mut registrations: Vec<(&str, i64, i64)> = Vec::new();
        for file in files {
            runs.unreadable += file.unreadable.len();
            for event in &file.events {
                match event {
                    RunEvent::Start(s) => runs
                        .starts
                        .entry((s.execute_id, s.job_id, s.fire_time))
                        .or_default()
                        .entry(s.attempt)
                        .or_default()
                        .push(s),
                    RunEvent::End(e) => {
                        runs.ends.insert((e.node.as_str(), e.incarnation, e.fire_id), e);
                    }
                    RunEvent::Registered {
                        node,
                        incarnation,
                        db_ms,
                        ..
                    } => {
                        runs.logged.insert((node.as_str(), *incarnation));
                        registrations.push((node.as_str(), *incarnation, *db_ms));
                    }
                    RunEvent::Retired {
                        node,
                        incarnation,
                        db_ms,
                        ..
                    } => runs.fence((node.as_str(), *incarnation), *db_ms),
                    _ => {}
                }
            }
        }
        // A registration retires every older incarnation of its node id.
        for &(node, incarnation, at) in &registrations {
            let older: Vec<(&str, i64)> = registrations
                .iter()
                .filter(|(n, i, _)| *n == node && *i < incarnation)
                .map(|(n, i, _)| (*n, *i))
                .collect();
            for key in older {
                runs.fence(key, at);
            }
        }
        runs
    }

    fn fence(&mut self, key: (&'a str, i64), at: i64) {
        let entry = self.fenced_at.entry(key).or_insert(at);
        *entry = (*entry).min(at);
    }

    pub(super) fn end_of(&self, s: &RunStart) -> Option<&'a RunEnd> {
        self.ends.get(&(s.node.as_str(), s.incarnation, s.fire_id)).copied()
    }
}
