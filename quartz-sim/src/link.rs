//! The simulated link between one node and the store: every call the node
//! makes passes it, and the simulator cuts it (both ways, or one way), holds
//! it (the node frozen), drops it (the node crashed), refuses it (the store
//! restarting), or, at random by the seed, fails, delays or loses the
//! answer of one call.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use quartz_core::Timestamp;
use quartz_core::store::{
    CalendarStore, FireStore, HistoryStore, JobStore, NodeStore, RetentionStore, ScheduleStore, SharedStore, Store,
    StoreError,
};
use tokio::sync::watch;

use crate::rng::Rng;

/// Which way a cut link loses what it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Nothing is lost.
    None,
    /// Requests and answers alike: nothing reaches the store.
    Both,
    /// Requests: nothing reaches the store, as `Both`.
    ToStore,
    /// Answers: the store does what it is asked (commits it), and the node
    /// hears nothing back.
    FromStore,
}

/// What the simulator has done to a link, and its seeded per-call faults.
#[derive(Debug)]
struct Conditions {
    cut: Cut,
    /// The node is frozen: its calls wait until it thaws, then go.
    frozen: bool,
    /// The node crashed: its calls never return.
    crashed: bool,
    /// The store is restarting: every call is refused at once.
    store_down: bool,
    /// The way back is congested: every answer comes this late.
    slow_answers_ms: u64,
    /// Per-call faults, per mille of calls: errors, lost answers, delays.
    error: u64,
    lost: u64,
    delay: u64,
}

/// One node's link, shared by the simulator (which changes it) and the
/// node's store (which every call passes through).
#[derive(Debug)]
pub struct LinkState {
    conditions: watch::Sender<Conditions>,
    rng: Mutex<Rng>,
    /// Calls failed, delayed and answered into the void, for the report.
    pub faults: AtomicU64,
}

impl LinkState {
    /// A healthy link whose per-call faults draw from `rng`.
    pub fn new(rng: Rng) -> Arc<LinkState> {
        Arc::new(LinkState {
            conditions: watch::channel(Conditions {
                cut: Cut::None,
                frozen: false,
                crashed: false,
                store_down: false,
                slow_answers_ms: 0,
                error: 0,
                lost: 0,
                delay: 0,
            })
            .0,
            rng: Mutex::new(rng),
            faults: AtomicU64::new(0),
        })
    }

    /// Cuts the link (or mends it, with [`Cut::None`]).
    pub fn cut(&self, cut: Cut) {
        self.conditions.send_modify(|c| c.cut = cut);
    }

    /// Freezes the node's calls, or thaws them.
    pub fn freeze(&self, frozen: bool) {
        self.conditions.send_modify(|c| c.frozen = frozen);
    }

    /// The node crashed: nothing it sends arrives, nothing it waits for
    /// comes back.
    pub fn crash(&self) {
        self.conditions.send_modify(|c| c.crashed = true);
    }

    /// Whether the node crashed.
    pub fn crashed(&self) -> bool {
        self.conditions.borrow().crashed
    }

    /// The store restarting (every call refused), or back.
    pub fn store_down(&self, down: bool) {
        self.conditions.send_modify(|c| c.store_down = down);
    }

    /// Every answer `ms` late (0: on time), the calls themselves done at
    /// once: the node learns late of what it did (a renewal of its lease).
    pub fn slow_answers(&self, ms: u64) {
        self.conditions.send_modify(|c| c.slow_answers_ms = ms);
    }

    /// Per-call faults, per mille: errors, lost answers, delays (all 0: none).
    pub fn per_call(&self, error: u64, lost: u64, delay: u64) {
        self.conditions.send_modify(|c| {
            c.error = error;
            c.lost = lost;
            c.delay = delay;
        });
    }

    /// Waits while `held` says so of the link's conditions.
    async fn wait_while(&self, held: impl Fn(&Conditions) -> bool) {
        let mut rx = self.conditions.subscribe();
        // An error means the sender is gone: the simulation is over.
        if rx.wait_for(|c| !held(c)).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Runs one call across the link.
    async fn carry<T>(&self, call: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        if self.crashed() {
            return std::future::pending().await;
        }
        self.wait_while(|c| c.frozen && !c.crashed).await;
        let (cut, down, error, lost, delay, slow) = {
            let c = self.conditions.borrow();
            (c.cut, c.store_down, c.error, c.lost, c.delay, c.slow_answers_ms)
        };
        if slow > 0 && cut == Cut::None && !down {
            let answer = call.await;
            tokio::time::sleep(Duration::from_millis(slow)).await;
            return answer;
        }
        match cut {
            Cut::Both | Cut::ToStore => {
                // Sent into the void: the caller's deadline ends the wait,
                // or the link mends and the connection reports it broken.
                self.wait_while(|c| matches!(c.cut, Cut::Both | Cut::ToStore)).await;
                return Err(broken("the request was lost"));
            }
            Cut::FromStore => {
                let _ = call.await;
                self.wait_while(|c| c.cut == Cut::FromStore).await;
                return Err(broken("the answer was lost"));
            }
            Cut::None => {}
        }
        if down {
            return Err(StoreError::Unavailable {
                reason: "simulated: the store is restarting (connection refused)".into(),
            });
        }
        let draw = self.rng.lock().below(1_000);
        if draw < error {
            self.faults.fetch_add(1, Ordering::Relaxed);
            return Err(broken("the call failed before it ran"));
        }
        if draw < error + lost {
            self.faults.fetch_add(1, Ordering::Relaxed);
            let _ = call.await;
            return Err(broken("the call ran, its answer was lost"));
        }
        if draw < error + lost + delay {
            self.faults.fetch_add(1, Ordering::Relaxed);
            let (ms, on_answer) = {
                let mut rng = self.rng.lock();
                // Now and then past a node's lease.
                let ms = if rng.chance(30) {
                    rng.range(5_000, 12_000)
                } else {
                    rng.range(5, 400)
                };
                (ms, rng.chance(500))
            };
            if on_answer {
                // Done at once, answered late: the caller learns of it (a
                // lease renewed, a start recorded) long after it happened.
                let answer = call.await;
                tokio::time::sleep(Duration::from_millis(ms.min(4_000))).await;
                return answer;
            }
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        call.await
    }
}

fn broken(what: &str) -> StoreError {
    StoreError::Unavailable {
        reason: format!("simulated: {what}"),
    }
}

/// A store seen through a [`LinkState`].
#[derive(Debug, Clone)]
pub struct Link {
    inner: SharedStore,
    state: Arc<LinkState>,
}

impl Link {
    /// `inner` through `state`.
    pub fn new(inner: SharedStore, state: Arc<LinkState>) -> Link {
        Link { inner, state }
    }
}

/// The link's methods of one trait of the contract: each carries the inner
/// store's call; a start statement may arrive after its caller gave up.
macro_rules! linked {
    ($(impl $tr:ident { $( fn $name:ident(&self $(, $arg:ident : $ty:ty)* ) -> $ret:ty; )* })*) => {
        $(
            #[async_trait]
            impl $tr for Link {
                $(
                    async fn $name(&self $(, $arg: $ty)*) -> Result<$ret, StoreError> {
                        linked!(@call self, $name $(, $arg)*)
                    }
                )*
            }
        )*
    };
    (@call $self:ident, mark_running_all, $ids:ident, $node:ident) => {
        $self.start_statement($ids, $node).await
    };
    (@call $self:ident, $name:ident $(, $arg:ident)*) => {
        $self.state.carry($self.inner.$name($($arg),*)).await
    };
}

impl Link {
    /// The start statement (the fenced one): sent while the node is
    /// frozen, it waits in the link and reaches the store when the node
    /// thaws, whether or not the node still waits for its answer (its
    /// deadline passed long before): a statement delivered late, which
    /// only the store's fence keeps from starting a fire the node no longer
    /// owns.
    async fn start_statement(
        &self,
        fire_ids: &[i64],
        node: &quartz_core::store::NodeRef,
    ) -> Result<Vec<(i64, Timestamp)>, StoreError> {
        if !self.state.conditions.borrow().frozen {
            return self.state.carry(self.inner.mark_running_all(fire_ids, node)).await;
        }
        let (state, inner, ids, node) = (
            Arc::clone(&self.state),
            Arc::clone(&self.inner),
            fire_ids.to_vec(),
            node.clone(),
        );
        let delivered = tokio::spawn(async move {
            state.wait_while(|c| c.frozen && !c.crashed).await;
            if state.crashed() {
                return Err(broken("the node crashed"));
            }
            inner.mark_running_all(&ids, &node).await
        });
        delivered.await.unwrap_or_else(|_| Err(broken("the delivery failed")))
    }
}

#[async_trait]
impl Store for Link {
    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.state.carry(self.inner.now()).await
    }

    fn scheduler(&self) -> &str {
        self.inner.scheduler()
    }

    fn scoped(&self, scheduler: &str) -> SharedStore {
        Arc::new(Link::new(self.inner.scoped(scheduler), Arc::clone(&self.state)))
    }

    fn acting_as(&self, actor: &str) -> SharedStore {
        Arc::new(Link::new(self.inner.acting_as(actor), Arc::clone(&self.state)))
    }

    fn claims_runs_at_once(&self) -> bool {
        self.inner.claims_runs_at_once()
    }
}

quartz_core::store_methods!(linked);
