//! The in-memory store's history: nodes, the ledger, the change log, the
//! health counts and the change counter.

use crate::Timestamp;
use crate::store::{
    ChangeQuery, ChangeRecord, ExecuteState, FireQuery, FireRecord, FireState, HealthCounts, HistoryStore, Node,
    NodeState, PayloadSchemas, StoreError,
};
use async_trait::async_trait;

use super::MemoryStore;

#[async_trait]
impl HistoryStore for MemoryStore {
    async fn schedulers(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.read(|db| db.holding_rows()))
    }

    async fn list_nodes(&self) -> Result<Vec<Node>, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.read(|db| {
            db.sched_ref(scheduler)
                .map(|s| s.nodes.values().cloned().collect())
                .unwrap_or_default()
        }))
    }

    async fn payload_schemas(&self) -> Result<Vec<(String, PayloadSchemas)>, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.read(|db| {
            db.sched_ref(scheduler)
                .map(|s| {
                    s.schemas
                        .iter()
                        .filter(|(id, _)| s.nodes.get(*id).is_some_and(|n| n.state == NodeState::Live))
                        .map(|(id, schemas)| (id.clone(), schemas.clone()))
                        .collect()
                })
                .unwrap_or_default()
        }))
    }

    async fn fires(&self, query: &FireQuery) -> Result<Vec<FireRecord>, StoreError> {
        let error = query.error_contains.as_deref().map(str::to_lowercase);
        self.read(|db| {
            let job = match (&query.job, query.job_id) {
                (Some(name), _) => Some(db.job_named(&self.scheduler, name)?.id),
                (None, id) => id,
            };
            Ok(db
                .fires
                .values()
                .rev()
                .filter(|f| f.scheduler == *self.scheduler)
                .map(|f| &f.record)
                .filter(|r| query.before_id.is_none_or(|b| r.id < b))
                .filter(|r| job.is_none_or(|j| r.job_id == j))
                .filter(|r| query.execute_id.is_none_or(|e| r.execute_id == e))
                .filter(|r| query.state.is_none_or(|s| r.state == s))
                .filter(|r| {
                    query
                        .node_id
                        .as_ref()
                        .is_none_or(|n| r.owner.as_ref().is_some_and(|o| &o.node_id == n))
                })
                .filter(|r| {
                    error.as_ref().is_none_or(|e| {
                        r.error
                            .as_deref()
                            .is_some_and(|t| t.to_lowercase().contains(e.as_str()))
                    })
                })
                .filter(|r| query.since.is_none_or(|s| r.fire_time >= s))
                .filter(|r| query.until.is_none_or(|u| r.fire_time < u))
                .take(query.limit as usize)
                .cloned()
                .collect())
        })
    }

    async fn change_log(&self, query: &ChangeQuery) -> Result<Vec<ChangeRecord>, StoreError> {
        Ok(self.read(|db| {
            db.change_log
                .values()
                .rev()
                .filter(|c| c.scheduler == *self.scheduler)
                .filter(|c| query.before_id.is_none_or(|b| c.id < b))
                .filter(|c| query.target.as_ref().is_none_or(|t| &c.target == t))
                .take(query.limit as usize)
                .cloned()
                .collect()
        }))
    }

    async fn health_counts(
        &self,
        overdue_before: Timestamp,
        stranded_before: Timestamp,
        recent_since: Timestamp,
    ) -> Result<HealthCounts, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.read(|db| {
            let overdue: Vec<i64> = db
                .executes
                .values()
                .filter(|r| r.scheduler == scheduler && r.state == ExecuteState::Waiting.as_str())
                .filter_map(|r| r.next)
                .filter(|n| *n < overdue_before.as_millis())
                .collect();
            let mut counts = HealthCounts {
                overdue_triggers: overdue.len() as u64,
                oldest_overdue: overdue.iter().min().map(|t| Timestamp::from_millis(*t)),
                ..HealthCounts::default()
            };
            for r in db
                .fires
                .values()
                .filter(|f| f.scheduler == scheduler)
                .map(|f| &f.record)
            {
                let recent = r.fire_time >= recent_since;
                match r.state {
                    FireState::Claimed => counts.claimed += 1,
                    FireState::Running => counts.running += 1,
                    FireState::Pending => {
                        counts.pending += 1;
                        if r.due_at.is_some_and(|d| d < stranded_before) {
                            counts.stranded += 1;
                        }
                    }
                    FireState::Succeeded if recent => counts.recent_succeeded += 1,
                    FireState::Failed if recent => counts.recent_failed += 1,
                    FireState::Misfired if recent => counts.recent_misfired += 1,
                    _ => {}
                }
            }
            counts
        }))
    }

    async fn changes(&self) -> Result<i64, StoreError> {
        let scheduler = &*self.scheduler;
        Ok(self.read(|db| db.sched_ref(scheduler).map_or(0, |s| s.changes)))
    }

    async fn change_wait(&self, seen: i64, max_wait: std::time::Duration) -> Result<i64, StoreError> {
        let deadline = tokio::time::Instant::now() + max_wait;
        let mut changed = self.shared.changed.subscribe();
        loop {
            let now = self.changes().await?;
            if now != seen {
                return Ok(now);
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                _ => return self.changes().await,
            }
        }
    }
}
