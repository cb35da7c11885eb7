//! The Redis store's history: nodes, the ledger, the change log, the
//! health counts and the change counter.

use async_trait::async_trait;
use quartz_core::Timestamp;
use quartz_core::store::{
    ChangeQuery, ChangeRecord, FireQuery, FireRecord, HealthCounts, HistoryStore, Node, PayloadSchemas, Store,
    StoreError,
};
use serde_json::{Value, json};

use super::RedisStore;
use super::decode;
use super::script::{Record, ms, num, opt};

#[async_trait]
impl HistoryStore for RedisStore {
    async fn schedulers(&self) -> Result<Vec<String>, StoreError> {
        self.holding_rows().await
    }

    async fn list_nodes(&self) -> Result<Vec<Node>, StoreError> {
        let scheduler = self.scheduler();
        let records: Vec<Record> = self.run(scheduler, 0, "nodes", &json!({})).await?;
        let mut nodes = crate::common::decode_each(&records, "node", |r| decode::node(r, scheduler));
        nodes.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        Ok(nodes)
    }

    async fn payload_schemas(&self) -> Result<Vec<(String, PayloadSchemas)>, StoreError> {
        let scheduler = self.scheduler();
        let reply: Vec<String> = self.run(scheduler, 0, "payload_schemas", &json!({})).await?;
        let pairs: Vec<&[String]> = reply.chunks(2).collect();
        let mut out = crate::common::decode_each(&pairs, "node's payload schemas", |pair| {
            let [id, text] = pair else {
                return Err(StoreError::Database {
                    reason: "payload schemas: an odd reply".to_owned(),
                });
            };
            let schemas = serde_json::from_str(text).map_err(|e| StoreError::Database {
                reason: format!("node {id:?}'s payload schemas are not JSON: {e}"),
            })?;
            Ok((id.clone(), schemas))
        });
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    async fn fires(&self, query: &FireQuery) -> Result<Vec<FireRecord>, StoreError> {
        let job = match (&query.job, query.job_id) {
            (Some(name), _) => num(self.require_job(&self.scheduler, name).await?.id),
            (None, Some(id)) => num(id),
            (None, None) => Value::String(String::new()),
        };
        let args = json!({
            "job": job,
            "execute": opt(query.execute_id),
            "state": query.state.map(|s| s.as_str()).unwrap_or_default(),
            "since": ms(query.since),
            "upto": ms(query.until),
            "before_id": opt(query.before_id),
            "limit": num(query.limit),
            "node": query.node_id.clone().unwrap_or_default(),
            "error": query.error_contains.as_deref().map(str::to_lowercase).unwrap_or_default(),
        });
        let records: Vec<Record> = self.run(&self.scheduler, 0, "fires", &args).await?;
        records.iter().map(decode::fire).collect()
    }

    async fn change_log(&self, query: &ChangeQuery) -> Result<Vec<ChangeRecord>, StoreError> {
        let args = json!({
            "target": query.target.clone().unwrap_or_default(),
            "before_id": opt(query.before_id),
            "limit": num(query.limit),
        });
        let records: Vec<Record> = self.run(&self.scheduler, 0, "change_log", &args).await?;
        records.iter().map(|r| decode::change(r, &self.scheduler)).collect()
    }

    async fn health_counts(
        &self,
        overdue_before: Timestamp,
        stranded_before: Timestamp,
        recent_since: Timestamp,
    ) -> Result<HealthCounts, StoreError> {
        let scheduler = self.scheduler();
        let args = json!({
            "overdue_before": num(overdue_before.as_millis()),
            "stranded_before": num(stranded_before.as_millis()),
            "recent_since": num(recent_since.as_millis()),
        });
        let reply: Vec<String> = self.run(scheduler, 0, "health", &args).await?;
        let n = |i: usize| reply.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        Ok(HealthCounts {
            overdue_triggers: n(0),
            oldest_overdue: reply
                .get(1)
                .and_then(|v| v.parse::<f64>().ok())
                .map(|ms| Timestamp::from_millis(ms as i64)),
            claimed: n(2),
            running: n(3),
            pending: n(4),
            stranded: n(5),
            recent_succeeded: n(6),
            recent_failed: n(7),
            recent_misfired: n(8),
        })
    }

    async fn changes(&self) -> Result<i64, StoreError> {
        let scheduler = self.scheduler();
        let n: String = self.run(scheduler, 0, "changes", &json!({})).await?;
        Ok(n.parse().unwrap_or(0))
    }

    async fn change_wait(&self, seen: i64, max_wait: std::time::Duration) -> Result<i64, StoreError> {
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            let now = self.changes().await?;
            if now != seen || tokio::time::Instant::now() >= deadline {
                return Ok(now);
            }
            tokio::time::sleep(super::engine::CHANGE_POLL.min(deadline - tokio::time::Instant::now())).await;
        }
    }
}
