//! The memory's rows, and the steps the calls are made of.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::Timestamp;
use crate::store::rules::{self, CalendarSet};
use crate::store::{
    CalendarRecord, ChangeRecord, DueBatch, ExecuteCas, ExecuteSpec, ExecuteState, FireRecord, FireState, FullKey, Job,
    JobDetail, JobSpec, Node, NodeRef, NodeState, RejectedRow, StoreError, TriggerColumns,
};

pub(super) use super::row::{Change, Row};

/// What one scheduler keeps beside its rows.
#[derive(Debug, Default)]
pub(super) struct Sched {
    pub(super) nodes: BTreeMap<String, Node>,
    /// The payload schemas each node published, by node id.
    pub(super) schemas: BTreeMap<String, crate::store::PayloadSchemas>,
    /// Job ids by name.
    pub(super) job_names: BTreeMap<String, i64>,
    pub(super) calendars: BTreeMap<String, CalendarRecord>,
    pub(super) changes: i64,
    pub(super) purge_started_at: Option<i64>,
    pub(super) purged_before: Option<i64>,
    /// Since when the scheduler is on standby.
    pub(super) paused_at: Option<i64>,
}

/// Everything the store keeps. Ids (of jobs, executes, fires and changes)
/// come from one sequence.
#[derive(Debug, Default)]
pub(super) struct Db {
    last_id: i64,
    schedulers: HashMap<String, Sched>,
    pub(super) jobs: BTreeMap<i64, Job>,
    pub(super) executes: BTreeMap<i64, Row>,
    pub(super) fires: BTreeMap<i64, Fire>,
    /// The ledger's unique key: (execute, job, fire time, attempt).
    pub(super) fire_keys: HashMap<(i64, i64, i64, u32), i64>,
    pub(super) change_log: BTreeMap<i64, ChangeRecord>,
    /// Enqueued work, by id.
    pub(super) work: BTreeMap<i64, super::work::WorkRow>,
    /// Every change of every scheduler, counted: what wakes change waiters.
    pub(super) change_total: u64,
}

/// A ledger row and its scheduler.
#[derive(Debug, Clone)]
pub(super) struct Fire {
    pub(super) scheduler: String,
    pub(super) record: FireRecord,
    /// Asked to stop by a newer fire under the cancel overlap policy.
    pub(super) cancel: bool,
}

/// The open states: claimed or running.
pub(super) const OPEN: &[FireState] = &[FireState::Claimed, FireState::Running];

/// Whether a fire in `state` takes a place under its concurrency limit.
fn open_for_limit(state: FireState) -> bool {
    state == FireState::Claimed || (state == FireState::Running && !crate::mutants::on("limit-ignores-running"))
}

impl Db {
    pub(super) fn id(&mut self) -> i64 {
        self.last_id += 1;
        self.last_id
    }

    pub(super) fn sched(&mut self, scheduler: &str) -> &mut Sched {
        self.schedulers.entry(scheduler.to_owned()).or_default()
    }

    pub(super) fn sched_ref(&self, scheduler: &str) -> Option<&Sched> {
        self.schedulers.get(scheduler)
    }

    /// The schedulers with a job or a node, by name.
    pub(super) fn holding_rows(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .schedulers
            .iter()
            .filter(|(_, s)| !s.job_names.is_empty() || !s.nodes.is_empty())
            .map(|(name, _)| name.clone())
            .collect();
        names.sort();
        names
    }

    /// Counts a change and writes its log row.
    pub(super) fn changed(&mut self, scheduler: &str, at: i64, c: Change) {
        let id = self.id();
        self.sched(scheduler).changes += 1;
        self.change_total += 1;
        self.change_log.insert(
            id,
            ChangeRecord {
                id,
                scheduler: scheduler.to_owned(),
                at: Timestamp::from_millis(at),
                actor: c.actor,
                action: c.action.as_str().to_owned(),
                target: c.target,
                target_id: c.target_id,
                detail: c.detail,
            },
        );
    }

    /// Counts a change that is not logged (enqueued work): what wakes the
    /// nodes' change watchers.
    pub(super) fn bump(&mut self, scheduler: &str) {
        self.sched(scheduler).changes += 1;
        self.change_total += 1;
    }

    /// Whether `node` is a live incarnation of the scheduler.
    pub(super) fn live(&self, scheduler: &str, node: Option<&NodeRef>) -> bool {
        let Some(node) = node else { return false };
        self.sched_ref(scheduler)
            .and_then(|s| s.nodes.get(&node.node_id))
            .is_some_and(|n| n.state == NodeState::Live && n.incarnation == node.incarnation)
    }

    pub(super) fn job_id(&self, scheduler: &str, name: &str) -> Option<i64> {
        self.sched_ref(scheduler)?.job_names.get(name).copied()
    }

    pub(super) fn unknown_job(scheduler: &str, name: &str) -> StoreError {
        StoreError::UnknownJob {
            scheduler: scheduler.to_owned(),
            name: name.to_owned(),
        }
    }

    pub(super) fn job_named(&self, scheduler: &str, name: &str) -> Result<&Job, StoreError> {
        self.job_id(scheduler, name)
            .and_then(|id| self.jobs.get(&id))
            .ok_or_else(|| Db::unknown_job(scheduler, name))
    }

    /// Refuses a job whose name another job of the scheduler has (`was`: its
    /// name before, for an edit) or whose parent does not exist.
    pub(super) fn check_job_fits(&self, scheduler: &str, job: &JobSpec, was: Option<&str>) -> Result<(), StoreError> {
        if was != Some(job.name.as_str()) && self.job_id(scheduler, &job.name).is_some() {
            return Err(StoreError::DuplicateJob {
                scheduler: scheduler.to_owned(),
                name: job.name.clone(),
            });
        }
        match &job.parent {
            Some(parent) if self.job_id(scheduler, parent).is_none() => Err(Db::unknown_job(scheduler, parent)),
            _ => Ok(()),
        }
    }

    /// The job of a name at the version expected: its id.
    pub(super) fn job_as_read(&self, scheduler: &str, name: &str, expected: Option<i64>) -> Result<i64, StoreError> {
        let job = self.job_named(scheduler, name)?;
        if let Some(expected) = expected.filter(|e| *e != job.version) {
            return Err(StoreError::Stale {
                kind: "job",
                name: name.to_owned(),
                expected,
                current: Some(job.version),
            });
        }
        Ok(job.id)
    }

    /// The scheduler's calendars as definitions by name.
    pub(super) fn definitions(&self, scheduler: &str) -> BTreeMap<String, crate::calendar::CalendarDefinition> {
        let records: Vec<CalendarRecord> = self
            .sched_ref(scheduler)
            .map(|s| s.calendars.values().cloned().collect())
            .unwrap_or_default();
        rules::by_name(records)
    }

    /// The scheduler's calendars, resolved for `names`.
    pub(super) fn calendar_set<'a>(&self, scheduler: &str, names: impl Iterator<Item = &'a str>) -> CalendarSet {
        CalendarSet::resolve(&self.definitions(scheduler), names)
    }

    /// New triggers' rows, their calendars checked to exist.
    pub(super) fn new_rows(
        &self,
        scheduler: &str,
        executes: &[ExecuteSpec],
        now: i64,
    ) -> Result<Vec<rules::NewExecute>, StoreError> {
        let named: Vec<&str> = executes.iter().filter_map(|e| e.trigger.calendar_name()).collect();
        let known = self.sched_ref(scheduler).map(|s| &s.calendars);
        if let Some(missing) = named.iter().find(|n| !known.is_some_and(|c| c.contains_key(**n))) {
            return Err(StoreError::UnknownCalendar {
                scheduler: scheduler.to_owned(),
                name: (*missing).to_owned(),
            });
        }
        let set = self.calendar_set(scheduler, named.into_iter());
        rules::new_executes(executes, &set, Timestamp::from_millis(now))
    }

    /// Stores a job's new triggers: complete without a first fire time,
    /// paused with a paused job, waiting otherwise.
    pub(super) fn insert_rows(
        &mut self,
        scheduler: &str,
        job_id: i64,
        paused: bool,
        rows: Vec<rules::NewExecute>,
        now: i64,
    ) {
        for new in rows {
            let id = self.id();
            let state = new.state(paused);
            self.executes.insert(
                id,
                Row {
                    id,
                    job_id,
                    scheduler: scheduler.to_owned(),
                    priority: i64::from(new.priority),
                    state: state.as_str().to_owned(),
                    prev: None,
                    next: new.first.map(Timestamp::as_millis),
                    times_triggered: 0,
                    node_id: None,
                    incarnation: None,
                    error: None,
                    schedule_sig: Some(new.signature),
                    calendar_stamp: 0,
                    updated_at: now,
                    columns: new.columns,
                },
            );
        }
    }

    /// A job with its executes (those that cannot be read apart).
    pub(super) fn detail(&self, job: &Job) -> JobDetail {
        let rows: Vec<&Row> = self.executes.values().filter(|r| r.job_id == job.id).collect();
        let set = self.calendar_set(
            &job.scheduler,
            rows.iter().filter_map(|r| r.columns.calendar.as_deref()),
        );
        let mut detail = JobDetail {
            job: job.clone(),
            executes: Vec::new(),
            broken: Vec::new(),
        };
        for row in rows {
            match row.decode(&set) {
                Ok(e) => detail.executes.push(e),
                Err(reason) => detail.broken.push(RejectedRow {
                    execute_id: row.id,
                    reason,
                }),
            }
        }
        detail
    }

    /// Decodes rows for the poll, marking those that cannot be read.
    pub(super) fn serve(&mut self, ids: Vec<i64>, now: i64) -> DueBatch {
        let mut batch = DueBatch::default();
        for id in ids {
            let Some(row) = self.executes.get(&id) else { continue };
            let set = self.calendar_set(&row.scheduler, row.columns.calendar.as_deref().into_iter());
            match row.decode(&set) {
                Ok(e) => batch.executes.push(e),
                Err(reason) => {
                    if let Some(row) = self.executes.get_mut(&id) {
                        row.state = ExecuteState::Error.as_str().to_owned();
                        row.error = Some(rules::truncate(&reason));
                        row.updated_at = now;
                    }
                    batch.rejected.push(RejectedRow { execute_id: id, reason });
                }
            }
        }
        batch
    }

    /// The compare-and-set on an execute: whether it won.
    pub(super) fn cas(&mut self, cas: &ExecuteCas, now: i64) -> bool {
        let Some(row) = self.executes.get_mut(&cas.execute_id) else {
            return false;
        };
        let expect = &cas.expect;
        if row.state != cas.expect_state.as_str()
            || row.prev != expect.prev_fire_time.map(Timestamp::as_millis)
            || row.next != expect.next_fire_time.map(Timestamp::as_millis)
            || row.calendar_stamp != expect.calendar_stamp
        {
            return false;
        }
        if let Some(owner) = &cas.expect_owner
            && row.owner().as_ref() != Some(owner)
        {
            return false;
        }
        row.prev = cas.set.prev_fire_time.map(Timestamp::as_millis);
        row.next = cas.set.next_fire_time.map(Timestamp::as_millis);
        row.times_triggered = i64::try_from(cas.set.times_triggered).unwrap_or(i64::MAX);
        row.state = cas.set_state.as_str().to_owned();
        row.node_id = cas.set_owner.as_ref().map(|n| n.node_id.clone());
        row.incarnation = cas.set_owner.as_ref().map(|n| n.incarnation);
        row.updated_at = now;
        let signature = cas
            .set_trigger
            .as_ref()
            .map(|t| TriggerColumns::from_trigger(t).signature())
            .or(cas.set_signature);
        if signature.is_some() {
            row.schedule_sig = signature;
        }
        if let Some(t) = &cas.set_trigger {
            row.columns.start_time = t.start().as_millis();
            row.columns.repeat_limit = t.repeat_limit().map(|l| i64::try_from(l).unwrap_or(i64::MAX));
        }
        true
    }

    /// Deletes a ledger row and its unique key; whether it existed.
    pub(super) fn delete_fire(&mut self, id: i64) -> bool {
        let Some(f) = self.fires.remove(&id) else {
            return false;
        };
        let r = &f.record;
        self.fire_keys
            .remove(&(r.execute_id, r.job_id, r.fire_time.as_millis(), r.attempt));
        true
    }

    /// Inserts a ledger row; `None` when the unique key says it exists.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn insert_fire(
        &mut self,
        scheduler: &str,
        execute_id: i64,
        job_id: i64,
        fire_time: i64,
        attempt: u32,
        owner: Option<&NodeRef>,
        state: FireState,
        now: i64,
    ) -> Option<i64> {
        let key = (execute_id, job_id, fire_time, attempt);
        if self.fire_keys.contains_key(&key) {
            return None;
        }
        let id = self.id();
        self.fire_keys.insert(key, id);
        self.fires.insert(
            id,
            Fire {
                scheduler: scheduler.to_owned(),
                record: FireRecord {
                    id,
                    execute_id,
                    job_id,
                    fire_time: Timestamp::from_millis(fire_time),
                    attempt,
                    owner: owner.cloned(),
                    state,
                    claimed_at: Timestamp::from_millis(now),
                    started_at: None,
                    // Written ended (a misfire's record, a paused child's
                    // skip): finished now.
                    finished_at: state.is_ended().then(|| Timestamp::from_millis(now)),
                    timed_out_at: None,
                    due_at: None,
                    error: None,
                    skipped_until: None,
                    fire_count: 1,
                },
                cancel: false,
            },
        );
        Some(id)
    }

    /// A pending attempt, due `due`: its ledger row.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn insert_pending(
        &mut self,
        scheduler: &str,
        execute_id: i64,
        job_id: i64,
        fire_time: i64,
        attempt: u32,
        due: i64,
        now: i64,
    ) -> Option<i64> {
        let id = self.insert_fire(
            scheduler,
            execute_id,
            job_id,
            fire_time,
            attempt,
            None,
            FireState::Pending,
            now,
        )?;
        if let Some(f) = self.fires.get_mut(&id) {
            f.record.due_at = Some(Timestamp::from_millis(due));
        }
        Some(id)
    }

    /// The fire when it is in one of `from` under `owner` (`None`: no owner).
    pub(super) fn held(&mut self, id: i64, from: &[FireState], owner: Option<&NodeRef>) -> Option<&mut Fire> {
        self.fires
            .get_mut(&id)
            .filter(|f| from.contains(&f.record.state) && f.record.owner.as_ref() == owner)
    }

    /// Whether a fire of the job is claimed or running.
    pub(super) fn job_has_open(&self, job_id: i64) -> bool {
        self.job_open(job_id).is_some()
    }

    /// The job's concurrency key, its claimed and running fires and its
    /// limit, when they are full.
    pub(super) fn key_full(&self, job_id: i64) -> Option<FullKey> {
        let job = self.jobs.get(&job_id)?;
        let key = job.spec.limit_key()?;
        let max = i64::from(job.spec.limit.as_ref()?.max);
        let jobs: HashSet<i64> = self
            .jobs
            .values()
            .filter(|j| j.scheduler == job.scheduler && j.spec.limit_key().as_ref() == Some(&key))
            .map(|j| j.id)
            .collect();
        let open = self
            .fires
            .values()
            .filter(|f| jobs.contains(&f.record.job_id) && open_for_limit(f.record.state))
            .count();
        let open = i64::try_from(open).unwrap_or(i64::MAX);
        (open >= max).then_some(FullKey { key, open, max })
    }

    /// A claimed or running fire of the job, if there is one: the newest
    /// (read from the newest down, where open fires are; a claim blocked
    /// behind a long run asks again and again).
    pub(super) fn job_open(&self, job_id: i64) -> Option<i64> {
        let running_too = !crate::mutants::on("skip-ignores-running");
        self.fires
            .values()
            .rev()
            .find(|f| {
                f.record.job_id == job_id
                    && (f.record.state == FireState::Claimed || (running_too && f.record.state == FireState::Running))
            })
            .map(|f| f.record.id)
    }

    /// The pending first attempts of an execute's job, oldest first (a
    /// chained child's pending fires share its parent's execute).
    fn pending_firsts(&self, execute_id: i64, job_id: i64) -> impl Iterator<Item = &FireRecord> {
        let mut firsts: Vec<&FireRecord> = self
            .fires
            .values()
            .map(|f| &f.record)
            .filter(|r| {
                r.execute_id == execute_id && r.job_id == job_id && r.state == FireState::Pending && r.attempt == 1
            })
            .collect();
        firsts.sort_by_key(|r| (r.fire_time, r.id));
        firsts.into_iter()
    }

    /// The execute's oldest fire that waits under an overlap policy or a
    /// limit (due at its own time).
    pub(super) fn waiting_of(&self, execute_id: i64, job_id: i64) -> Option<i64> {
        self.pending_firsts(execute_id, job_id)
            .find(|r| r.by_overlap())
            .map(|r| r.id)
    }

    /// Whether a pending first attempt of the execute older than `before`
    /// is due by `now` (the waiting fires run in the order of their times).
    pub(super) fn older_due(&self, execute_id: i64, job_id: i64, before: Timestamp, now: i64) -> bool {
        self.pending_firsts(execute_id, job_id)
            .any(|r| r.fire_time < before && r.due_at.is_some_and(|d| d.as_millis() <= now))
    }

    /// Open fires of a scheduler that `keep` accepts, by fire time then id,
    /// at most `limit`.
    pub(super) fn open_fires(
        &self,
        scheduler: &str,
        limit: u32,
        keep: impl Fn(&FireRecord) -> bool,
    ) -> Vec<FireRecord> {
        let mut chosen: Vec<FireRecord> = self
            .fires
            .values()
            .filter(|f| f.scheduler == scheduler && OPEN.contains(&f.record.state) && keep(&f.record))
            .map(|f| f.record.clone())
            .collect();
        chosen.sort_by_key(|f| (f.fire_time, f.id));
        chosen.truncate(limit as usize);
        chosen
    }

    /// Node ids and execute ids that open fires or running executes name.
    pub(super) fn named_by_open(&self, scheduler: &str) -> (Vec<String>, Vec<i64>) {
        let mut nodes = Vec::new();
        let mut executes = Vec::new();
        for f in self
            .fires
            .values()
            .filter(|f| f.scheduler == scheduler && OPEN.contains(&f.record.state))
        {
            if let Some(o) = &f.record.owner {
                nodes.push(o.node_id.clone());
            }
            executes.push(f.record.execute_id);
        }
        for r in self
            .executes
            .values()
            .filter(|r| r.scheduler == scheduler && r.state == ExecuteState::Running.as_str())
        {
            nodes.extend(r.node_id.clone());
        }
        (nodes, executes)
    }
}
