//! Node registration: a new node's row, or a returning node's next
//! incarnation.

use super::convert::Statement as _;
use quartz_core::store::{Node, NodeRegistration, StoreError, millis_of};

use super::*;

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
        self.query("UPDATE quartz_node SET dead_after_ms = ? WHERE scheduler = ? AND node_id = ?")
            .bind(node.dead_after.map(millis_of))
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
