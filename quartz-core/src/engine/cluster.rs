//! Membership: heartbeats, declaring silent nodes dead (on the database's
//! clock, and only once this node has itself been heart-beating without a
//! gap for `dead_after`), and rejoining under a new incarnation when this
//! node was declared dead itself. Each pass ends with recovery
//! ([`super::recovery`]).

use std::sync::Arc;
use tracing::Instrument as _;

use parking_lot::{Mutex, RwLock};
use tokio::time::Instant;

use super::Phase;
use super::node::{Inner, duration_ms};
use crate::store::{Node, NodeRef, NodeState, StoreError};

/// What the cluster task keeps.
#[derive(Debug)]
pub(super) struct ClusterState {
    /// The scheduler's nodes as last read.
    pub(super) members: RwLock<Vec<Node>>,
    /// This node's own heartbeats: (last written, written without a gap
    /// since). A node judges others dead only after it has itself been
    /// heart-beating without a gap for `dead_after`: after an outage of the
    /// database every heartbeat is stale, and the living need time to write
    /// theirs again.
    pub(super) heartbeats: Mutex<Option<(Instant, Instant)>>,
    /// When this node last looked for fires it claimed without knowing it.
    pub(super) swept: Mutex<Option<Instant>>,
}

impl ClusterState {
    pub(super) fn new(me: Node) -> ClusterState {
        ClusterState {
            members: RwLock::new(vec![me]),
            heartbeats: Mutex::new(None),
            swept: Mutex::new(None),
        }
    }
}

impl Inner {
    pub(super) async fn cluster(self: Arc<Self>) {
        loop {
            if let Err(e) = self.cluster_pass().await {
                tracing::warn!(scheduler = self.scheduler, error = %e, "heartbeat or recovery failed; retrying");
            }
            if !self.pause(self.settings.heartbeat_interval).await {
                return;
            }
        }
    }

    pub(super) async fn cluster_pass(self: &Arc<Self>) -> Result<(), StoreError> {
        let node = self.node();
        let busy = self.launch.held() + self.pending_queued.lock().len();
        if !self.store.heartbeat(&node, busy as u64).await? {
            self.rejoin(&node).await?;
        }
        let steady = {
            let now = Instant::now();
            let mut heartbeats = self.cluster.heartbeats.lock();
            let since = match *heartbeats {
                Some((last, since)) if now.duration_since(last) <= self.settings.dead_after / 2 => since,
                _ => now, // the first, or after a gap: this node was cut off too
            };
            *heartbeats = Some((now, since));
            now.duration_since(since) >= self.settings.dead_after
        };
        let db_now = self.db_now().await?;
        let members = self.store.list_nodes().await?;
        let dead_after = duration_ms(self.settings.dead_after);
        let me = self.node();
        for member in &members {
            let silent = db_now.as_millis() - member.heartbeat_at.as_millis();
            if steady && member.state == NodeState::Live && member.node_id != me.node_id && silent > dead_after {
                let theirs = NodeRef {
                    node_id: member.node_id.clone(),
                    incarnation: member.incarnation,
                };
                if self.store.retire_node(&theirs, dead_after).await? {
                    tracing::warn!(
                        scheduler = self.scheduler,
                        node = member.node_id,
                        incarnation = member.incarnation,
                        silent_ms = silent,
                        "node declared dead; its incarnation is retired"
                    );
                }
            }
        }
        let live = members.iter().filter(|m| m.state == NodeState::Live).count();
        *self.cluster.members.write() = members;
        if !self.stopping() {
            // A pass still in flight while the node shuts down records nothing:
            // the shutdown records the stopped node's gauges last.
            super::metrics::beat(&self.scheduler, &self.pool.metrics(), live, *self.phase.lock());
        }
        self.recover()
            .instrument(tracing::debug_span!("recovery", scheduler = self.scheduler))
            .await
    }

    /// This incarnation was declared dead (a long pause): forget everything in
    /// flight (its claims are refused now) and register again.
    pub(super) async fn rejoin(self: &Arc<Self>, old: &NodeRef) -> Result<(), StoreError> {
        *self.phase.lock() = Phase::Fenced;
        tracing::warn!(
            scheduler = self.scheduler,
            node = old.node_id,
            incarnation = old.incarnation,
            "this node was declared dead; re-registering"
        );
        self.queue.clear();
        let registered = self.store.register_node(&self.registration).await?;
        *self.node.write() = NodeRef {
            node_id: registered.node_id,
            incarnation: registered.incarnation,
        };
        *self.phase.lock() = Phase::Running;
        self.poll_now.notify_one();
        Ok(())
    }
}
