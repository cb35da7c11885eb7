//! A seeded fault-injecting [`Store`] decorator.
//!
//! [`FaultyStore`] wraps a store and, at calls chosen by a seed, does one of
//! three things a real database and network do to a node:
//!
//! - **error**: the call fails before it reaches the database (nothing is
//!   written), as when a connection is refused;
//! - **delay**: the call waits before it runs, usually a few hundred
//!   milliseconds, rarely past a node's `dead_after` (a stalled connection, a
//!   paused process);
//! - **lost answer**: the call runs and commits, then fails, as when the
//!   connection is cut while the answer is on its way.
//!
//! Which calls are hit depends only on the seed, the method and how many
//! times that method was called before: the `n`-th `claim_batch` of a seed is
//! hit or spared on every run, whatever the other tasks do meanwhile (the
//! interleaving itself still varies from run to run).
//!
//! ```
//! use quartz_testkit::faults::Faults;
//!
//! let faults = Faults::new(42, 50); // 5 % of calls
//! faults.set_enabled(false); // setting up: no faults
//! faults.set_enabled(true);
//! assert_eq!(faults.injected().total(), 0);
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use quartz_core::Timestamp;
use quartz_core::store::{
    CalendarStore, FireStore, HistoryStore, IntoStore, JobStore, NodeStore, RetentionStore, ScheduleStore, SharedStore,
    Store, StoreError,
};

/// What one faulted call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Fails before the database is reached.
    Error,
    /// Waits this long, then runs.
    Delay(Duration),
    /// Runs (and commits), then fails.
    LostAnswer,
}

/// How many faults of each kind were injected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Injected {
    /// Calls failed before they ran.
    pub errors: u64,
    /// Calls delayed.
    pub delays: u64,
    /// Calls delayed past a second.
    pub stalls: u64,
    /// Calls that ran and then failed.
    pub lost_answers: u64,
}

impl Injected {
    /// Every fault injected.
    pub fn total(&self) -> u64 {
        self.errors + self.delays + self.lost_answers
    }
}

/// The fault plan shared by the stores of one run: a seed, a rate, and
/// whether faults are on.
#[derive(Debug)]
pub struct Faults {
    seed: u64,
    per_mille: u64,
    enabled: AtomicBool,
    calls: Mutex<HashMap<&'static str, u64>>,
    /// Faults every call of a method gets, whatever the seed draws.
    always: Mutex<HashMap<&'static str, Fault>>,
    errors: AtomicU64,
    delays: AtomicU64,
    stalls: AtomicU64,
    lost_answers: AtomicU64,
}

impl Faults {
    /// A plan that hits `per_mille` of every thousand calls, chosen by `seed`.
    pub fn new(seed: u64, per_mille: u64) -> Arc<Faults> {
        Arc::new(Faults {
            seed,
            per_mille,
            enabled: AtomicBool::new(true),
            calls: Mutex::new(HashMap::new()),
            always: Mutex::new(HashMap::new()),
            errors: AtomicU64::new(0),
            delays: AtomicU64::new(0),
            stalls: AtomicU64::new(0),
            lost_answers: AtomicU64::new(0),
        })
    }

    /// A plan without random faults, for faults a test scripts with
    /// [`Faults::always`].
    pub fn scripted() -> Arc<Faults> {
        Faults::new(0, 0)
    }

    /// Every call of `method` from now on gets `fault` (while faults are
    /// enabled).
    pub fn always(&self, method: &'static str, fault: Fault) {
        self.always.lock().insert(method, fault);
    }

    /// Calls of `method` get no scripted fault from now on.
    pub fn clear(&self, method: &'static str) {
        self.always.lock().remove(method);
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Turns faults on or off (calls made while off do not count).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::SeqCst);
    }

    /// The faults injected so far.
    pub fn injected(&self) -> Injected {
        Injected {
            errors: self.errors.load(Ordering::Relaxed),
            delays: self.delays.load(Ordering::Relaxed),
            stalls: self.stalls.load(Ordering::Relaxed),
            lost_answers: self.lost_answers.load(Ordering::Relaxed),
        }
    }

    /// The fault, if any, for the next call of `method`.
    pub fn next(&self, method: &'static str) -> Option<Fault> {
        if !self.enabled.load(Ordering::SeqCst) {
            return None;
        }
        let scripted = self.always.lock().get(method).copied();
        let n = {
            let mut calls = self.calls.lock();
            let n = calls.entry(method).or_default();
            *n += 1;
            *n
        };
        let draw = mix(self.seed ^ mix(fnv(method) ^ mix(n)));
        let fault = match scripted {
            Some(fault) => fault,
            None if draw % 1_000 >= self.per_mille => return None,
            None => match (draw / 1_000) % 100 {
                0..=29 => Fault::Error,
                30..=64 => Fault::LostAnswer,
                // A stall past a node's dead_after, now and then.
                65..=67 => Fault::Delay(Duration::from_millis(1_600 + (draw >> 20) % 1_000)),
                _ => Fault::Delay(Duration::from_millis(5 + (draw >> 20) % 300)),
            },
        };
        match fault {
            Fault::Error => self.errors.fetch_add(1, Ordering::Relaxed),
            Fault::LostAnswer => self.lost_answers.fetch_add(1, Ordering::Relaxed),
            Fault::Delay(d) => {
                if d >= Duration::from_secs(1) {
                    self.stalls.fetch_add(1, Ordering::Relaxed);
                }
                self.delays.fetch_add(1, Ordering::Relaxed)
            }
        };
        Some(fault)
    }

    /// Runs one store call under the plan.
    async fn around<T>(
        &self,
        method: &'static str,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match self.next(method) {
            None => call.await,
            Some(Fault::Error) => Err(StoreError::Unavailable {
                reason: format!("injected fault: {method} failed before it ran"),
            }),
            Some(Fault::Delay(d)) => {
                tokio::time::sleep(d).await;
                call.await
            }
            Some(Fault::LostAnswer) => {
                let _ = call.await;
                Err(StoreError::Unavailable {
                    reason: format!("injected fault: {method} ran, its answer was lost"),
                })
            }
        }
    }
}

/// A store whose calls fail, stall or lose their answers as its [`Faults`]
/// say.
#[derive(Debug, Clone)]
pub struct FaultyStore {
    inner: SharedStore,
    faults: Arc<Faults>,
}

impl FaultyStore {
    /// Wraps `inner`.
    pub fn new(inner: impl IntoStore, faults: Arc<Faults>) -> FaultyStore {
        FaultyStore {
            inner: inner.into_store(),
            faults,
        }
    }

    /// The store underneath, without faults.
    pub fn inner(&self) -> &SharedStore {
        &self.inner
    }
}

/// The decorator's methods of one trait of the contract: each one runs the
/// inner store's under the plan.
macro_rules! faulty {
    ($(impl $tr:ident { $( fn $name:ident(&self $(, $arg:ident : $ty:ty)* ) -> $ret:ty; )* })*) => {
        $(
            #[async_trait]
            impl $tr for FaultyStore {
                $(
                    async fn $name(&self $(, $arg: $ty)*) -> Result<$ret, StoreError> {
                        self.faults.around(stringify!($name), self.inner.$name($($arg),*)).await
                    }
                )*
            }
        )*
    };
}

#[async_trait]
impl Store for FaultyStore {
    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.faults.around("now", self.inner.now()).await
    }

    fn scheduler(&self) -> &str {
        self.inner.scheduler()
    }

    fn scoped(&self, scheduler: &str) -> SharedStore {
        Arc::new(FaultyStore {
            inner: self.inner.scoped(scheduler),
            faults: Arc::clone(&self.faults),
        })
    }

    fn acting_as(&self, actor: &str) -> SharedStore {
        Arc::new(FaultyStore {
            inner: self.inner.acting_as(actor),
            faults: Arc::clone(&self.faults),
        })
    }

    fn claims_runs_at_once(&self) -> bool {
        self.inner.claims_runs_at_once()
    }
}

quartz_core::store_methods!(faulty);

/// A 64-bit mixer (splitmix64's finaliser).
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// FNV-1a of a method name.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_hits_the_same_calls_and_the_rate_holds() {
        let plan = |seed| {
            let f = Faults::new(seed, 100);
            (0..2_000).map(|_| f.next("claim_batch")).collect::<Vec<_>>()
        };
        assert_eq!(plan(7), plan(7));
        assert_ne!(plan(7), plan(8));
        let hit = plan(7).iter().filter(|f| f.is_some()).count();
        assert!((120..=280).contains(&hit), "{hit} of 2,000 at 10 %");
    }

    #[test]
    fn nothing_is_injected_while_off() {
        let f = Faults::new(1, 1_000);
        f.set_enabled(false);
        assert!((0..100).all(|_| f.next("now").is_none()));
        f.set_enabled(true);
        assert!(f.next("now").is_some());
        assert_eq!(f.injected().total(), 1);
    }
}
