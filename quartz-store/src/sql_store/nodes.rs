//! Node registration: a new node's row, or a returning node's next
//! incarnation.

use super::convert::Statement as _;
use quartz_core::store::{Node, NodeRegistration, StoreError, millis_of};

use super::*;
use async_trait::async_trait;

impl SqlStore {
    /// [`NodeStore::register_node`]'s transaction: one upsert (a new node's row,
    /// or a returning node's next incarnation), then the row as stored. A new
    /// row's first incarnation is the database's now in milliseconds, not 1:
    /// a node whose row the retention purged and that comes back is still
    /// newer than every incarnation it had, so fencing holds across purges.
    pub(super) async fn register_node_once(&self, node: &NodeRegistration) -> Result<Node, StoreError> {
        let mut tx = self.begin().await?;
        let upsert = self.db.backend.upsert_node();
        self.query(upsert)
            .bind(self.scheduler.to_string())
            .bind(node.node_id.clone())
            .bind(node.host.clone())
            .bind(i64::from(node.pid))
            .bind(i64::from(node.weight.max(1)))
            .bind(serde_json::to_string(&node.handlers).map_err(|e| StoreError::Database {
                reason: format!("handler names cannot be encoded: {e}"),
            })?)
            .exec(&mut *tx)
            .await?;
        let schemas = if node.payload_schemas.is_empty() {
            None
        } else {
            Some(
                serde_json::to_string(&node.payload_schemas).map_err(|e| StoreError::Database {
                    reason: format!("payload schemas cannot be encoded: {e}"),
                })?,
            )
        };
        self.query("UPDATE quartz_node SET dead_after_ms = ?, payload_schemas = ? WHERE scheduler = ? AND node_id = ?")
            .bind(node.dead_after.map(millis_of))
            .bind(schemas)
            .bind(self.scheduler.to_string())
            .bind(node.node_id.clone())
            .exec(&mut *tx)
            .await?;
        let row = self
            .query(concat!(
                "SELECT ",
                node_cols!(),
                " FROM quartz_node WHERE scheduler = ? AND node_id = ?"
            ))
            .bind(self.scheduler.to_string())
            .bind(node.node_id.clone())
            .one(&mut *tx)
            .await?;
        let registered = decode_node(&row)?;
        tx.commit().await.map_err(db_error)?;
        Ok(registered)
    }
}

#[async_trait]
impl NodeStore for SqlStore {
    async fn register_node(&self, node: &NodeRegistration) -> Result<Node, StoreError> {
        check_name("scheduler name", &self.scheduler)?;
        check_name("node id", &node.node_id)?;
        // Nodes starting together take gap locks on MySQL (the UPDATE of a
        // row not there yet) before they insert, and deadlock: again.
        retry_conflicts(|| self.register_node_once(node)).await
    }

    async fn heartbeat(&self, node: &NodeRef, busy: u64) -> Result<bool, StoreError> {
        let scheduler = self.scheduler();
        // A failover is noticed here too.
        self.db
            .watching(
                self.changed_one(
                    self.query(
                        "UPDATE quartz_node SET heartbeat_at = {now}, busy = ? \
                 WHERE scheduler = ? AND node_id = ? AND incarnation = ? AND state = 'live'",
                    )
                    .bind(count_to_i64(busy))
                    .bind(scheduler.to_owned())
                    .bind(node.node_id.clone())
                    .bind(node.incarnation),
                ),
            )
            .await
    }

    async fn retire_node(&self, node: &NodeRef, dead_after_ms: i64) -> Result<bool, StoreError> {
        let scheduler = self.scheduler();
        self.changed_one(
            self.query(
                "UPDATE quartz_node SET state = 'dead' \
                 WHERE scheduler = ? AND node_id = ? AND incarnation = ? AND state = 'live' AND heartbeat_at < {now} - ?",
            )
            .bind(scheduler.to_owned())
            .bind(node.node_id.clone())
            .bind(node.incarnation)
            .bind(dead_after_ms),
        )
        .await
    }

    async fn leave(&self, node: &NodeRef) -> Result<bool, StoreError> {
        let scheduler = self.scheduler();
        self.changed_one(
            self.query(
                "UPDATE quartz_node SET state = 'gone' \
                 WHERE scheduler = ? AND node_id = ? AND incarnation = ? AND state = 'live'",
            )
            .bind(scheduler.to_owned())
            .bind(node.node_id.clone())
            .bind(node.incarnation),
        )
        .await
    }
}
