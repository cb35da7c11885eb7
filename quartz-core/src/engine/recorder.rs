//! Outcomes to the ledger. Successes go through one recorder task that
//! writes whatever arrived while its previous statement ran in the next
//! (one statement for many fires); failures, timeouts and successes that
//! start chains are written one by one, each with what follows it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use super::context::{FINISH_TRIES, duration_ms, finish_backoff};
use super::fixed::{HashMap, HashSet};
use super::run::RunFire;
use crate::store::{
    ChainedFire, FIRES_PER_BATCH, FireEnd, FollowUp, HandlerSpan, NodeRef, Outcome, SharedStore, StoreError,
};
use crate::time::Timestamp;

/// The recorder stage: a node's outcomes to the ledger, and the starts its
/// waiting fires confirm again. It owns the queues its two batching tasks
/// read (the tasks end when it is dropped with its node) and which jobs'
/// successes start chains.
pub(super) struct Recorder {
    store: SharedStore,
    scheduler: String,
    /// Jobs that have child jobs, as the last poll read and published them:
    /// their successes start chains.
    parents: watch::Receiver<HashSet<i64>>,
    /// Successes on their way to the ledger, recorded together.
    successes: mpsc::UnboundedSender<Success>,
    /// Starts to confirm again (fires that waited for a thread), confirmed
    /// together.
    confirms: mpsc::UnboundedSender<Confirm>,
    /// The node's stop signal: an outcome is tried until it is recorded,
    /// or the node stops.
    stop: watch::Receiver<bool>,
}

/// What became of an end a runner asked the recorder to write
/// ([`Recorder::end`]).
pub(super) enum Ended {
    /// Recorded, with what follows it.
    Recorded(FollowUp),
    /// The fire is no longer this incarnation's (declared dead meanwhile);
    /// `after_error`: a try before failed, perhaps after committing.
    NotOwned { after_error: bool },
    /// Not recorded before the node stopped: left to recovery.
    GaveUp,
}

/// The most successes recorded by one statement batch.
const SUCCESS_BATCH: usize = FIRES_PER_BATCH;

/// A success to record: the fire, its owner, and where the answer goes
/// (`true` when recorded, `false` when the fire is no longer this
/// incarnation's).
pub(super) type Success = (
    i64,
    NodeRef,
    Option<HandlerSpan>,
    oneshot::Sender<Result<bool, StoreError>>,
);

/// The next batch from a queue: what arrived while the previous one was
/// written, up to [`SUCCESS_BATCH`], split by owner (one statement each);
/// `None` when the queue is closed.
async fn next_batch<T>(
    rx: &mut mpsc::UnboundedReceiver<T>,
    owner: fn(&T) -> &NodeRef,
) -> Option<Vec<(NodeRef, Vec<T>)>> {
    let mut batch = vec![rx.recv().await?];
    while batch.len() < SUCCESS_BATCH {
        match rx.try_recv() {
            Ok(next) => batch.push(next),
            Err(_) => break,
        }
    }
    let mut by_owner: Vec<(NodeRef, Vec<T>)> = Vec::new();
    for item in batch {
        match by_owner.iter_mut().find(|(node, _)| node == owner(&item)) {
            Some((_, items)) => items.push(item),
            None => by_owner.push((owner(&item).clone(), vec![item])),
        }
    }
    Some(by_owner)
}

/// Records successes as they come, many per statement: whatever arrived while
/// the previous statement ran goes in the next. Ends with its recorder.
async fn record_successes(store: SharedStore, mut rx: mpsc::UnboundedReceiver<Success>) {
    while let Some(batch) = next_batch(&mut rx, |s| &s.1).await {
        for (node, mine) in batch {
            let ends: Vec<(i64, FireEnd)> = mine
                .iter()
                .map(|s| (s.0, FireEnd::Succeeded { chain: false, ran: s.2 }))
                .collect();
            let asked = tokio::time::Instant::now();
            let recorded = store.end_fires(&node, &ends).await;
            tracing::debug!(
                node = node.node_id,
                fires = ends.len(),
                ms = duration_ms(asked.elapsed()),
                "successes recorded"
            );
            for (i, (_, _, _, reply)) in mine.into_iter().enumerate() {
                let answer = match &recorded {
                    Ok(done) => Ok(done.get(i) == Some(&FollowUp::Recorded)),
                    Err(e) => Err(StoreError::Database { reason: e.to_string() }),
                };
                let _ = reply.send(answer);
            }
        }
    }
}

/// A start to confirm: the fire, its owner, and where the answer goes (the
/// pool thread that waits for it): `Some` start time when confirmed, `None`
/// when the fire is no longer this incarnation's, `Err` when the database
/// could not say.
pub(super) type Confirm = (i64, NodeRef, oneshot::Sender<StartAnswer>);

/// A start confirmed again: `Some` start time, `None` when the fire is no
/// longer this incarnation's, `Err` when the database could not say.
pub(super) type StartAnswer = Result<Option<Timestamp>, StoreError>;

/// Whether the node holds its membership lease
/// ([`Ctx::membership_fresh`](super::context::Ctx::membership_fresh)).
pub(super) type Lease = Arc<dyn Fn() -> bool + Send + Sync>;

/// Confirms starts as they come, many per statement, as
/// [`record_successes`] records successes; a database error is tried again
/// before it is the answer, unless the node is stopping. A start is
/// confirmed only while the node holds its lease: without it the node may
/// be declared dead any moment and its running fires run again elsewhere,
/// so the database still calling the fire its own is no answer; the
/// confirmation waits for a renewal (or for the node to stop). Ends with
/// its recorder.
async fn confirm_starts(
    store: SharedStore,
    stop: watch::Receiver<bool>,
    lease: Lease,
    mut rx: mpsc::UnboundedReceiver<Confirm>,
) {
    while let Some(batch) = next_batch(&mut rx, |c| &c.1).await {
        while !lease() && !*stop.borrow() {
            tokio::time::sleep(super::context::LEASE_WAIT).await;
        }
        for (node, mine) in batch {
            let ids: Vec<i64> = mine.iter().map(|c| c.0).collect();
            let mut confirmed = store.confirm_starts(&ids, &node).await;
            for tries in 1..FINISH_TRIES {
                if confirmed.is_ok() || *stop.borrow() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(25 << tries)).await;
                confirmed = store.confirm_starts(&ids, &node).await;
            }
            let confirmed = confirmed.map(|c| c.into_iter().collect::<HashMap<i64, Timestamp>>());
            for (id, _, reply) in mine {
                let answer = match &confirmed {
                    Ok(started) => Ok(started.get(&id).copied()),
                    Err(e) => Err(StoreError::Database { reason: e.to_string() }),
                };
                let _ = reply.send(answer);
            }
        }
    }
}

impl Recorder {
    /// The recorder of a node of `scheduler`, and its two batching tasks;
    /// `stop` is the node's, `parents` what its poller publishes.
    pub(super) fn start(
        store: SharedStore,
        scheduler: String,
        stop: watch::Receiver<bool>,
        lease: Lease,
        parents: watch::Receiver<HashSet<i64>>,
    ) -> Recorder {
        let (successes, successes_rx) = mpsc::unbounded_channel();
        let (confirms, confirms_rx) = mpsc::unbounded_channel();
        tokio::spawn(record_successes(store.clone(), successes_rx));
        tokio::spawn(confirm_starts(store.clone(), stop.clone(), lease, confirms_rx));
        Recorder {
            store,
            scheduler,
            parents,
            successes,
            confirms,
            stop,
        }
    }

    /// Asks for a fire's start to be confirmed again, with the others
    /// waiting at this moment (one statement).
    pub(super) fn confirm(&self, fire_id: i64, owner: NodeRef) -> oneshot::Receiver<StartAnswer> {
        let (reply, answer) = oneshot::channel();
        let _ = self.confirms.send((fire_id, owner, reply));
        answer
    }

    /// Records `end` of `run` (`what`, for the log: `the failure`, `the
    /// misfire`), retrying on database errors until it is recorded or the
    /// node stops.
    pub(super) async fn end(&self, run: &RunFire, end: FireEnd, what: &str) -> Ended {
        for attempt in 1.. {
            match self.store.end_fire(run.fire_id, &run.node, end.clone()).await {
                Ok(FollowUp::NotOwned) => {
                    return Ended::NotOwned {
                        after_error: attempt > 1,
                    };
                }
                Ok(follow_up) => return Ended::Recorded(follow_up),
                Err(e) if attempt < FINISH_TRIES || !*self.stop.borrow() => {
                    tracing::warn!(scheduler = self.scheduler, fire_id = run.fire_id, error = %e, "recording {what} failed; retrying");
                    tokio::time::sleep(finish_backoff(attempt)).await;
                }
                Err(e) => {
                    tracing::error!(scheduler = self.scheduler, fire_id = run.fire_id, error = %e,
                        "{what} could not be recorded before the node stopped; left to recovery");
                    return Ended::GaveUp;
                }
            }
        }
        Ended::GaveUp
    }

    /// Records an outcome, with when its handler ran, retrying on database
    /// errors. A success of a job with children claims their fires in the
    /// same transaction: those are returned, to be run by this node.
    pub(super) async fn record(&self, run: &RunFire, outcome: &Outcome, ran: Option<HandlerSpan>) -> Vec<ChainedFire> {
        let chains = *outcome == Outcome::Succeeded && self.parents.borrow().contains(&run.job.id);
        for attempt in 1.. {
            let recorded = if chains {
                self.store
                    .end_fire(run.fire_id, &run.node, FireEnd::Succeeded { chain: true, ran })
                    .await
                    .map(|done| match done {
                        FollowUp::Chained(children) => Some(children),
                        FollowUp::NotOwned => None,
                        _ => Some(Vec::new()),
                    })
            } else if *outcome == Outcome::Succeeded {
                let (reply, answer) = oneshot::channel();
                let _ = self.successes.send((run.fire_id, run.node.clone(), ran, reply));
                answer
                    .await
                    .unwrap_or_else(|_| {
                        Err(StoreError::Database {
                            reason: "the success recorder stopped".to_owned(),
                        })
                    })
                    .map(|done| done.then(Vec::new))
            } else {
                self.store
                    .end_fire(run.fire_id, &run.node, FireEnd::of_outcome(outcome, ran))
                    .await
                    .map(|done| (done != FollowUp::NotOwned).then(Vec::new))
            };
            match recorded {
                Ok(Some(children)) => return children,
                Ok(None) => {
                    tracing::warn!(
                        scheduler = self.scheduler,
                        fire_id = run.fire_id,
                        "outcome not recorded: this incarnation no longer owns the fire (declared dead meanwhile)"
                    );
                    return Vec::new();
                }
                Err(e) if attempt < FINISH_TRIES || !*self.stop.borrow() => {
                    tracing::warn!(scheduler = self.scheduler, fire_id = run.fire_id, error = %e, "recording the outcome failed; retrying");
                    tokio::time::sleep(finish_backoff(attempt)).await;
                }
                Err(e) => {
                    tracing::error!(scheduler = self.scheduler, fire_id = run.fire_id, error = %e,
                        "the outcome could not be recorded before the node stopped; left to recovery");
                    return Vec::new();
                }
            }
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    //! The recorder alone, on the in-memory store: no node around it, its
    //! lease a switch the test holds.

    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::memory::MemoryStore;
    use crate::store::{JobSpec, NodeRegistration, PendingClaim, Store as _};

    #[tokio::test(start_paused = true)]
    async fn starts_are_confirmed_only_while_the_lease_holds() {
        let store = MemoryStore::new().scoped("recorder");
        store.create_job(&JobSpec::new("job", "noop"), &[]).await.unwrap();
        let registration = NodeRegistration {
            node_id: "alone".to_owned(),
            host: "test".to_owned(),
            pid: 1,
            weight: 1,
            handlers: vec!["noop".to_owned()],
            dead_after: None,
            payload_schemas: Default::default(),
        };
        let node = store.register_node(&registration).await.unwrap();
        let node = NodeRef {
            node_id: node.node_id,
            incarnation: node.incarnation,
        };
        // Three running fires of this node (fired by hand, claimed, started).
        let mut ids = Vec::new();
        for _ in 0..3 {
            let (id, _) = store.fire_now("job").await.unwrap();
            assert_eq!(store.pending_claim(id, &node, false).await.unwrap(), PendingClaim::Won);
            ids.push(id);
        }
        assert_eq!(store.mark_running_all(&ids, &node).await.unwrap().len(), 3);
        let held = Arc::new(AtomicBool::new(false));
        let lease: Lease = {
            let held = Arc::clone(&held);
            Arc::new(move || held.load(Ordering::SeqCst))
        };
        let (_stop_tx, stop) = watch::channel(false);
        let recorder = Recorder::start(
            store.clone(),
            "recorder".to_owned(),
            stop,
            lease,
            watch::channel(HashSet::default()).1,
        );

        // Without the lease no answer comes, however long.
        let mut answers: Vec<_> = ids.iter().map(|id| recorder.confirm(*id, node.clone())).collect();
        let stranger = NodeRef {
            node_id: "stranger".to_owned(),
            incarnation: 1,
        };
        answers.push(recorder.confirm(ids[0], stranger));
        tokio::time::sleep(Duration::from_secs(30)).await;
        for answer in &mut answers {
            assert!(answer.try_recv().is_err(), "answered without the lease");
        }
        // With it, each of this node's starts is confirmed; the stranger's
        // question about a fire it does not own answers none.
        held.store(true, Ordering::SeqCst);
        let stranger_answer = answers.pop().unwrap();
        for answer in answers {
            let at = answer.await.unwrap().unwrap();
            assert!(at.is_some(), "a running fire of the node is confirmed");
        }
        assert_eq!(stranger_answer.await.unwrap().unwrap(), None);
    }
}
