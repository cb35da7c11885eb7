//! [`RetentionStore`] on Redis: the purge's turn and horizon, and the
//! purges of ended fires, departed nodes and complete executes, each one
//! script.

use async_trait::async_trait;
use quartz_core::Timestamp;
use quartz_core::store::{FireState, RetentionStore, Store as _, StoreError};
use serde_json::json;

use super::RedisStore;
use super::script::num;

#[async_trait]
impl RetentionStore for RedisStore {
    async fn purge_turn(&self, every_ms: i64) -> Result<bool, StoreError> {
        let scheduler = self.scheduler();
        Ok(self
            .write::<i64>(scheduler, "purge_turn", &json!({ "every": num(every_ms) }))
            .await?
            == 1)
    }

    async fn purge_horizon(&self) -> Result<Option<Timestamp>, StoreError> {
        let scheduler = self.scheduler();
        let horizon: String = self.run(scheduler, 0, "horizon", &json!({})).await?;
        Ok(horizon.parse().ok().map(Timestamp::from_millis))
    }

    async fn purge_horizon_advance(&self, before: Timestamp) -> Result<(), StoreError> {
        let scheduler = self.scheduler();
        self.write::<i64>(
            scheduler,
            "horizon_advance",
            &json!({ "before": num(before.as_millis()) }),
        )
        .await
        .map(|_| ())
    }

    async fn fires_purge(
        &self,
        state: FireState,
        before: Timestamp,
        keep_last: u32,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let scheduler = self.scheduler();
        crate::common::refuse_open_purge(state)?;
        let args = json!({ "state": state.as_str(), "before": num(before.as_millis()), "keep": num(keep_last), "limit": num(limit) });
        self.write(scheduler, "fires_purge", &args).await
    }

    async fn nodes_purge(&self, before: Timestamp) -> Result<u64, StoreError> {
        let scheduler = self.scheduler();
        self.write(scheduler, "nodes_purge", &json!({ "before": num(before.as_millis()) }))
            .await
    }

    async fn executes_purge(&self, before: Timestamp, limit: u32) -> Result<u64, StoreError> {
        let scheduler = self.scheduler();
        let args = json!({ "before": num(before.as_millis()), "limit": num(limit) });
        self.write(scheduler, "executes_purge", &args).await
    }
}
