//! The engine's side of the contract in memory: membership, the executes
//! and their claim, the open fires, retention.

use std::collections::HashMap;

use crate::Timestamp;
use crate::store::rules;
use crate::store::{
    Claim, ClaimBusy, DueBatch, DueCursor, ExecuteCas, ExecuteState, FireEnd, FireRecord, FireState, FireStore,
    FollowUp, MANUAL_EXECUTE, Node, NodeRef, NodeRegistration, NodeState, NodeStore, PendingClaim, RetentionStore,
    ScheduleStore, SkippedRecord, StoreError, check_name,
};
use crate::trigger::Overlap;
use async_trait::async_trait;

use super::MemoryStore;
use super::db::{self, Row, Sched};
use super::overlap::overlapped;

#[async_trait]
impl NodeStore for MemoryStore {
    async fn register_node(&self, node: &NodeRegistration) -> Result<Node, StoreError> {
        check_name("scheduler name", &self.scheduler)?;
        check_name("node id", &node.node_id)?;
        Ok(self.step(|db, now| {
            let nodes = &mut db.sched(&self.scheduler).nodes;
            let (incarnation, busy) = match nodes.get(&node.node_id) {
                Some(n) => (n.incarnation + 1, n.busy),
                None => (now, 0),
            };
            let stored = Node {
                scheduler: self.scheduler.to_string(),
                node_id: node.node_id.clone(),
                host: node.host.clone(),
                pid: node.pid,
                weight: node.weight,
                state: NodeState::Live,
                incarnation,
                registered_at: Timestamp::from_millis(now),
                heartbeat_at: Timestamp::from_millis(now),
                busy,
                handlers: node.handlers.clone(),
                dead_after: node.dead_after,
            };
            nodes.insert(node.node_id.clone(), stored.clone());
            let schemas = &mut db.sched(&self.scheduler).schemas;
            if node.payload_schemas.is_empty() {
                schemas.remove(&node.node_id);
            } else {
                schemas.insert(node.node_id.clone(), node.payload_schemas.clone());
            }
            stored
        }))
    }

    async fn heartbeat(&self, node: &NodeRef, busy: u64) -> Result<bool, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.step(|db, now| {
            if !db.live(scheduler, Some(node)) {
                return false;
            }
            if let Some(n) = db.sched(scheduler).nodes.get_mut(&node.node_id) {
                n.heartbeat_at = Timestamp::from_millis(now);
                n.busy = busy;
            }
            true
        }))
    }

    async fn retire_node(&self, node: &NodeRef, dead_after_ms: i64) -> Result<bool, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.step(|db, now| {
            if !db.live(scheduler, Some(node)) {
                return false;
            }
            match db.sched(scheduler).nodes.get_mut(&node.node_id) {
                Some(n) if n.heartbeat_at.as_millis() < now - dead_after_ms => {
                    n.state = NodeState::Dead;
                    true
                }
                _ => false,
            }
        }))
    }

    async fn leave(&self, node: &NodeRef) -> Result<bool, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.step(|db, _| {
            if !db.live(scheduler, Some(node)) {
                return false;
            }
            if let Some(n) = db.sched(scheduler).nodes.get_mut(&node.node_id) {
                n.state = NodeState::Gone;
            }
            true
        }))
    }
}

#[async_trait]
impl ScheduleStore for MemoryStore {
    async fn due_executes(
        &self,
        before: Timestamp,
        after: Option<DueCursor>,
        limit: u32,
    ) -> Result<DueBatch, StoreError> {
        let after = after.map(|c| (Some(c.next_fire_time.as_millis()), -i64::from(c.priority), c.execute_id));
        let scheduler = &*self.scheduler;
        Ok(self.step(|db, now| {
            let waiting: Vec<&Row> = db
                .executes
                .values()
                .filter(|r| r.scheduler == scheduler && r.state == ExecuteState::Waiting.as_str())
                .collect();
            let mut due: Vec<&&Row> = waiting
                .iter()
                .filter(|r| r.next.is_some_and(|n| n < before.as_millis()))
                .filter(|r| after.is_none_or(|a| (r.next, -r.priority, r.id) > a))
                .collect();
            due.sort_by_key(|r| (r.next, -r.priority, r.id));
            let mut ids: Vec<i64> = due.iter().take(limit as usize).map(|r| r.id).collect();
            let room = (limit as usize).saturating_sub(ids.len());
            ids.extend(waiting.iter().filter(|r| r.next.is_none()).take(room).map(|r| r.id));
            db.serve(ids, now)
        }))
    }

    async fn orphaned_executes(&self, limit: u32) -> Result<DueBatch, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.step(|db, now| {
            let ids: Vec<i64> = db
                .executes
                .values()
                .filter(|r| r.scheduler == scheduler && r.state == ExecuteState::Running.as_str())
                .filter(|r| !db.live(scheduler, r.owner().as_ref()))
                .take(limit as usize)
                .map(|r| r.id)
                .collect();
            db.serve(ids, now)
        }))
    }

    async fn update_execute(&self, cas: &ExecuteCas, records: &[SkippedRecord]) -> Result<bool, StoreError> {
        let won = self.update_executes(&[(cas.clone(), records.to_vec())]).await?;
        Ok(won.first().copied().unwrap_or(false))
    }

    async fn update_executes(&self, updates: &[(ExecuteCas, Vec<SkippedRecord>)]) -> Result<Vec<bool>, StoreError> {
        Ok(self.step(|db, now| {
            updates
                .iter()
                .map(|(cas, records)| {
                    if !db.cas(cas, now) {
                        return false;
                    }
                    let Some(row) = db.executes.get(&cas.execute_id).cloned() else {
                        return true;
                    };
                    if cas.recomputes() {
                        db.unclaim_ahead(row.id, now);
                    }
                    for r in records {
                        let from = r.from.as_millis();
                        let inserted = db.insert_fire(&row.scheduler, row.id, row.job_id, from, 1, None, r.state, now);
                        if let Some(f) = inserted.and_then(|id| db.fires.get_mut(&id)) {
                            f.record.error = Some(rules::truncate(&r.reason));
                            f.record.skipped_until = Some(r.until);
                            f.record.fire_count = r.count;
                        }
                    }
                    true
                })
                .collect()
        }))
    }

    async fn claim(&self, claim: &Claim) -> Result<Option<i64>, StoreError> {
        let won = self.claim_batch(std::slice::from_ref(claim)).await?;
        Ok(won.first().copied().flatten())
    }

    async fn claim_batch(&self, claims: &[Claim]) -> Result<Vec<Option<i64>>, StoreError> {
        Ok(self.step(|db, now| {
            claims
                .iter()
                .map(|c| {
                    let row = db.executes.get(&c.cas.execute_id)?.clone();
                    // Under allow, the job's own fires do not hold this one;
                    // its concurrency limit still may.
                    let open = if c.exclusive && c.overlap != Some(Overlap::Allow) {
                        db.job_open(row.job_id)
                    } else {
                        None
                    };
                    if c.overlap.is_none() && open.is_some() {
                        return None;
                    }
                    let full = if c.exclusive { db.key_full(row.job_id) } else { None };
                    // A fire of the trigger that waits holds the later ones
                    // behind it, so that they keep their order.
                    let waiting = if c.exclusive && (c.overlap.is_some() || full.is_some()) {
                        db.waiting_of(row.id, row.job_id)
                    } else {
                        None
                    };
                    let busy = ClaimBusy { open, waiting, full };
                    if busy.any() {
                        if db.cas(&c.cas, now) {
                            let policy = c.overlap.unwrap_or(Overlap::BufferAll);
                            overlapped(db, c, policy, (&row.scheduler, row.job_id), &busy, now);
                        }
                        return None;
                    }
                    if !db.cas(&c.cas, now) {
                        return None;
                    }
                    let time = c.fire_time.as_millis();
                    let owner = Some(&c.node);
                    db.insert_fire(
                        &row.scheduler,
                        row.id,
                        row.job_id,
                        time,
                        c.attempt,
                        owner,
                        FireState::Claimed,
                        now,
                    )
                })
                .collect()
        }))
    }

    async fn chain_parents(&self) -> Result<Vec<i64>, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.read(|db| {
            let mut parents: Vec<i64> = db
                .jobs
                .values()
                .filter(|j| j.scheduler == scheduler)
                .filter_map(|j| j.spec.parent.as_deref())
                .filter_map(|p| db.job_id(scheduler, p))
                .collect();
            parents.sort_unstable();
            parents.dedup();
            parents
        }))
    }
}

impl MemoryStore {
    /// Fenced starts (`from` claimed) or confirmations (`from` running).
    fn starts(&self, ids: &[i64], node: &NodeRef, from: FireState) -> Vec<(i64, Timestamp)> {
        self.step(|db, now| {
            let mut out = Vec::new();
            for id in ids {
                let Some(scheduler) = db.fires.get(id).map(|f| f.scheduler.clone()) else {
                    continue;
                };
                let unfenced = crate::mutants::on("start-without-fence");
                if !unfenced && !db.live(&scheduler, Some(node)) {
                    continue;
                }
                let owner = db.fires.get(id).and_then(|f| f.record.owner.clone());
                let fence = if unfenced { owner.as_ref() } else { Some(node) };
                if let Some(f) = db.held(*id, &[from], fence) {
                    let at = f.record.fire_time.max(Timestamp::from_millis(now));
                    f.record.state = FireState::Running;
                    f.record.started_at = Some(at);
                    out.push((*id, at));
                }
            }
            out
        })
    }
}

#[async_trait]
impl FireStore for MemoryStore {
    async fn mark_running_all(&self, fire_ids: &[i64], node: &NodeRef) -> Result<Vec<(i64, Timestamp)>, StoreError> {
        Ok(self.starts(fire_ids, node, FireState::Claimed))
    }

    async fn confirm_starts(&self, fire_ids: &[i64], node: &NodeRef) -> Result<Vec<(i64, Timestamp)>, StoreError> {
        Ok(self.starts(fire_ids, node, FireState::Running))
    }

    async fn end_fires(&self, node: &NodeRef, ends: &[(i64, FireEnd)]) -> Result<Vec<FollowUp>, StoreError> {
        Ok(self.step(|db, now| ends.iter().map(|(id, end)| db.end_one(*id, node, end, now)).collect()))
    }

    async fn fire_time_out(&self, fire_id: i64, node: &NodeRef, error: &str) -> Result<bool, StoreError> {
        Ok(
            self.step(|db, now| match db.held(fire_id, &[FireState::Running], Some(node)) {
                Some(f) => {
                    f.record.timed_out_at = Some(Timestamp::from_millis(now));
                    f.record.error = Some(rules::truncate(error));
                    true
                }
                None => false,
            }),
        )
    }

    async fn orphaned_fires(&self, limit: u32) -> Result<Vec<FireRecord>, StoreError> {
        let scheduler = &*self.scheduler;
        let live_too = crate::mutants::on("recover-live-fire");
        Ok(self.read(|db| db.open_fires(scheduler, limit, |r| live_too || !db.live(scheduler, r.owner.as_ref()))))
    }

    async fn claimed_by(&self, node: &NodeRef, before: Timestamp, limit: u32) -> Result<Vec<FireRecord>, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.read(|db| {
            db.open_fires(scheduler, limit, |r| {
                r.state == FireState::Claimed
                    && r.owner.as_ref() == Some(node)
                    && r.fire_time < before
                    && r.claimed_at < before
            })
        }))
    }

    async fn take_over(&self, fire: &FireRecord, node: &NodeRef) -> Result<bool, StoreError> {
        Ok(self.step(
            |db, now| match db.held(fire.id, &[FireState::Claimed], fire.owner.as_ref()) {
                Some(f) => {
                    f.record.owner = Some(node.clone());
                    f.record.claimed_at = Timestamp::from_millis(now);
                    true
                }
                None => false,
            },
        ))
    }

    async fn rerun(&self, fire: &FireRecord, node: &NodeRef) -> Result<Option<i64>, StoreError> {
        Ok(self.step(|db, now| {
            let held = db.held(fire.id, &[FireState::Running], fire.owner.as_ref())?.clone();
            let r = &held.record;
            let attempt = r.attempt + 1;
            let time = r.fire_time.as_millis();
            if db.fire_keys.contains_key(&(r.execute_id, r.job_id, time, attempt)) {
                return None;
            }
            let f = db.fires.get_mut(&fire.id)?;
            f.record.state = FireState::Failed;
            f.record.error = Some(format!("node died mid-run; recovered as attempt {attempt}"));
            f.record.finished_at = Some(Timestamp::from_millis(now));
            let claimed = FireState::Claimed;
            db.insert_fire(
                &held.scheduler,
                r.execute_id,
                r.job_id,
                time,
                attempt,
                Some(node),
                claimed,
                now,
            )
        }))
    }

    async fn abandon(&self, fire: &FireRecord) -> Result<bool, StoreError> {
        Ok(self.step(
            |db, now| match db.held(fire.id, &[FireState::Running], fire.owner.as_ref()) {
                Some(f) => {
                    f.record.state = FireState::Abandoned;
                    f.record.error = Some("node died mid-run; the job does not request recovery".to_owned());
                    f.record.finished_at = Some(Timestamp::from_millis(now));
                    true
                }
                None => false,
            },
        ))
    }

    async fn fires_pending(&self, before: Timestamp, limit: u32) -> Result<Vec<FireRecord>, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.read(|db| {
            let mut pending: Vec<FireRecord> = db
                .fires
                .values()
                .filter(|f| f.scheduler == scheduler && f.record.state == FireState::Pending)
                .filter(|f| f.record.due_at.is_some_and(|d| d < before))
                .map(|f| f.record.clone())
                .collect();
            pending.sort_by_key(|f| (f.due_at, f.id));
            pending.truncate(limit as usize);
            pending
        }))
    }

    async fn pending_claim(&self, fire_id: i64, node: &NodeRef, exclusive: bool) -> Result<PendingClaim, StoreError> {
        Ok(self.step(|db, now| {
            let Some(fire) = db
                .fires
                .get(&fire_id)
                .filter(|f| f.record.state == FireState::Pending)
                .cloned()
            else {
                return PendingClaim::Gone;
            };
            // The whole scheduler on standby: a node that has not seen it
            // yet claims nothing either.
            if db.sched_ref(&fire.scheduler).is_some_and(|s| s.paused_at.is_some()) {
                return PendingClaim::Blocked;
            }
            let execute = db.executes.get(&fire.record.execute_id);
            let overlap = execute
                .and_then(|e| e.columns.overlap.as_deref())
                .and_then(|o| o.parse::<Overlap>().ok());
            // A fire of a trigger an edit replaced (or deleted) waits for
            // the job's open fires: the overlap policy that held it is gone
            // with its trigger, so it is held as strictly as any could.
            let trigger_gone = execute.is_none() && fire.record.execute_id > MANUAL_EXECUTE;
            if (exclusive || trigger_gone || overlap.is_some_and(|o| o != Overlap::Allow))
                && db.job_has_open(fire.record.job_id)
            {
                return PendingClaim::Blocked;
            }
            if db.key_full(fire.record.job_id).is_some() {
                return PendingClaim::Blocked;
            }
            let limited = db.jobs.get(&fire.record.job_id).is_some_and(|j| j.spec.limit.is_some());
            if (overlap.is_some_and(Overlap::waits) || limited)
                && db.older_due(fire.record.execute_id, fire.record.job_id, fire.record.fire_time, now)
            {
                return PendingClaim::Blocked;
            }
            if !db.live(&fire.scheduler, Some(node)) {
                return PendingClaim::Gone;
            }
            let Some(f) = db.fires.get_mut(&fire_id) else {
                return PendingClaim::Gone;
            };
            f.record.state = FireState::Claimed;
            f.record.owner = Some(node.clone());
            f.record.claimed_at = Timestamp::from_millis(now);
            PendingClaim::Won
        }))
    }

    async fn cancel_requests(&self, node: &NodeRef) -> Result<Vec<i64>, StoreError> {
        Ok(self.read(|db| {
            let mut ids: Vec<i64> = db
                .fires
                .values()
                .filter(|f| f.cancel && db::OPEN.contains(&f.record.state) && f.record.owner.as_ref() == Some(node))
                .map(|f| f.record.id)
                .collect();
            ids.sort_unstable();
            ids
        }))
    }

    async fn work_run(&self, work_id: i64) -> Result<crate::store::WorkRun, StoreError> {
        Ok(self.read(|db| {
            db.work
                .get(&work_id)
                .map(|w| crate::store::WorkRun {
                    payload: w.payload.clone(),
                    trace_parent: w.trace_parent.clone(),
                })
                .unwrap_or_default()
        }))
    }
}

#[async_trait]
impl RetentionStore for MemoryStore {
    async fn purge_turn(&self, every_ms: i64) -> Result<bool, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.step(|db, now| {
            let sched = db.sched(scheduler);
            if sched.purge_started_at.unwrap_or(0) > now - every_ms {
                return false;
            }
            sched.purge_started_at = Some(now);
            true
        }))
    }

    async fn purge_horizon(&self) -> Result<Option<Timestamp>, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.read(|db| {
            db.sched_ref(scheduler)
                .and_then(|s| s.purged_before)
                .map(Timestamp::from_millis)
        }))
    }

    async fn purge_horizon_advance(&self, before: Timestamp) -> Result<(), StoreError> {
        let scheduler = &*self.scheduler;
        self.step(|db, _| {
            let sched = db.sched(scheduler);
            if sched.purged_before.is_none_or(|h| h < before.as_millis()) {
                sched.purged_before = Some(before.as_millis());
            }
        });
        Ok(())
    }

    async fn fires_purge(
        &self,
        state: FireState,
        before: Timestamp,
        keep_last: u32,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let scheduler = &*self.scheduler;
        rules::refuse_open_purge(state)?;
        Ok(self.step(|db, _| {
            let mut chosen: Vec<(Timestamp, i64, i64)> = db
                .fires
                .values()
                .filter(|f| f.scheduler == scheduler && f.record.state == state && f.record.fire_time < before)
                .map(|f| (f.record.fire_time, f.record.id, f.record.job_id))
                .collect();
            chosen.sort_unstable();
            // Per job, the id of its newest fire kept (`keep_last` back).
            let mut kept: HashMap<i64, Option<i64>> = HashMap::new();
            let mut deleted = 0u64;
            for (_, id, job) in chosen {
                if deleted >= u64::from(limit) {
                    break;
                }
                if keep_last > 0 {
                    let oldest_kept = *kept.entry(job).or_insert_with(|| {
                        let mut ids: Vec<i64> = db
                            .fires
                            .values()
                            .filter(|f| f.record.job_id == job)
                            .map(|f| f.record.id)
                            .collect();
                        ids.sort_unstable_by(|a, b| b.cmp(a));
                        ids.get(keep_last as usize - 1).copied()
                    });
                    if oldest_kept.is_none_or(|k| id >= k) {
                        continue;
                    }
                }
                if db.delete_fire(id) {
                    deleted += 1;
                }
            }
            deleted
        }))
    }

    async fn nodes_purge(&self, before: Timestamp) -> Result<u64, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.step(|db, _| {
            let (named, _) = db.named_by_open(scheduler);
            let sched = db.sched(scheduler);
            let count = sched.nodes.len();
            sched
                .nodes
                .retain(|id, n| n.state == NodeState::Live || n.heartbeat_at >= before || named.contains(id));
            let Sched { nodes, schemas, .. } = sched;
            schemas.retain(|id, _| nodes.contains_key(id));
            (count - nodes.len()) as u64
        }))
    }

    async fn executes_purge(&self, before: Timestamp, limit: u32) -> Result<u64, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.step(|db, now| {
            let work = db.work_purge(scheduler, before.as_millis(), now, limit as usize) as u64;
            let (_, named) = db.named_by_open(scheduler);
            let before = before.as_millis();
            let mut chosen: Vec<(i64, i64)> = db
                .executes
                .values()
                .filter(|r| r.scheduler == scheduler && r.state == ExecuteState::Complete.as_str())
                .filter(|r| r.updated_at < before && r.prev.unwrap_or(r.columns.start_time) < before)
                .filter(|r| !named.contains(&r.id))
                .map(|r| (r.updated_at, r.id))
                .collect();
            chosen.sort_unstable();
            chosen.truncate(limit as usize);
            for (_, id) in &chosen {
                db.executes.remove(id);
            }
            chosen.len() as u64 + work
        }))
    }
}
