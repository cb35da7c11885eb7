//! The node's view of database time.
//!
//! The database clock is the only clock. A node reads it at every poll and
//! heartbeat and keeps the offset between its own clock (the wall clock at
//! start, advanced by the monotonic clock, so wall-clock jumps do not move it)
//! and the database's. It uses the offset only to know when to wake; every
//! decision another node must agree with is taken on a database time.
//!
//! Each reading is paired with the local time *after* the query returned, so
//! the estimate of database time never runs ahead of the real one: a fire
//! timed with it may start a round trip late, never early.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::time::Timestamp;

/// What a test sets of a node's clock (the `testing` feature's builder
/// methods); the defaults are a real node's.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ClockHooks {
    /// The node's own clock shifted by this many ms.
    pub(crate) skew_ms: i64,
    /// The node runs on tokio's paused clock, which a test steps.
    pub(crate) paused: bool,
    /// The node's own wall clock at start, in epoch ms, instead of the
    /// system's (a simulation: the same on every run).
    pub(crate) anchor_ms: Option<i64>,
    /// How fast the node's own clock runs against real time, in parts per
    /// million (positive: fast), for its monotonic and wall readings alike.
    pub(crate) rate_ppm: i64,
}

#[derive(Debug)]
pub(crate) struct Clock {
    /// When the node started, on the monotonic clock.
    base: Instant,
    /// The node's own wall clock at `base`, in epoch ms, shifted by the test
    /// setting that skews it.
    anchor_ms: i64,
    /// Database time minus local time, in ms, from the latest reading.
    offset_ms: AtomicI64,
    /// On tokio's paused clock: blocking handlers hold it while they run.
    paused: bool,
    /// The latest [`Clock::stamp`], in epoch ms.
    stamped_ms: AtomicI64,
    /// How far behind the database the estimate may be, from the latest
    /// reading: its round trip, in ms.
    spread_ms: AtomicI64,
    /// The drift of the node's own clock, in parts per million.
    rate_ppm: i64,
}

impl Clock {
    pub(crate) fn new(hooks: ClockHooks) -> Clock {
        let wall = hooks.anchor_ms.unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        });
        Clock {
            base: Instant::now(),
            anchor_ms: wall.saturating_add(hooks.skew_ms),
            offset_ms: AtomicI64::new(0),
            paused: hooks.paused,
            stamped_ms: AtomicI64::new(i64::MIN),
            spread_ms: AtomicI64::new(0),
            rate_ppm: hooks.rate_ppm,
        }
    }

    /// Milliseconds since the node started, on the monotonic clock (a
    /// test's stepped clock): what the node's membership lease is counted
    /// on, which no clock reading moves.
    pub(crate) fn mono_ms(&self) -> i64 {
        self.drifted(i64::try_from(self.base.elapsed().as_millis()).unwrap_or(i64::MAX))
    }

    /// What the node's clock counts in `real_ms` of real time.
    fn drifted(&self, real_ms: i64) -> i64 {
        if self.rate_ppm == 0 {
            return real_ms;
        }
        real_ms.saturating_add(real_ms.saturating_mul(self.rate_ppm).div_euclid(1_000_000))
    }

    /// The node's own clock, in epoch ms.
    pub(crate) fn local_ms(&self) -> i64 {
        self.anchor_ms.saturating_add(self.mono_ms())
    }

    /// Records a reading of the database clock, taken just now, asked at
    /// `asked_ms` on this node's clock ([`Clock::local_ms`]): the database
    /// read its clock somewhere in between, so the estimate may be behind
    /// it by as much as the round trip ([`Clock::spread_ms`]).
    pub(crate) fn observe(&self, db_now: Timestamp, asked_ms: i64) {
        let now = self.local_ms();
        // Both readings are truncated to the millisecond, which could put the
        // estimate up to 1 ms ahead: take 1 ms off so it never is.
        self.offset_ms.store(db_now.as_millis() - now - 1, Ordering::Relaxed);
        self.spread_ms.store((now - asked_ms).max(0) + 1, Ordering::Relaxed);
    }

    /// How far behind the database's clock the estimate may be: the round
    /// trip of the reading it comes from, in ms. A record of when something
    /// happened ([`Clock::stamp`]) lies between the stamp and the stamp
    /// plus this.
    pub(crate) fn spread_ms(&self) -> i64 {
        self.spread_ms.load(Ordering::Relaxed)
    }

    /// The estimated database time now (never ahead of it).
    pub(crate) fn db_now(&self) -> Timestamp {
        Timestamp::from_millis(self.local_ms().saturating_add(self.offset_ms.load(Ordering::Relaxed)))
    }

    /// The estimated database time now, for a record of what happened
    /// (a handler's start or end): never earlier than a stamp this node
    /// gave before, so that a clock reading that lowered the estimate
    /// meanwhile cannot make a later event look earlier.
    pub(crate) fn stamp(&self) -> Timestamp {
        let now = self.db_now().as_millis();
        let before = self.stamped_ms.fetch_max(now, Ordering::Relaxed);
        Timestamp::from_millis(now.max(before))
    }

    /// Database time minus this node's clock, in ms.
    pub(crate) fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::Relaxed)
    }

    /// The local instant at which the database clock reads `t`.
    pub(crate) fn instant_of(&self, t: Timestamp) -> Instant {
        let local = t.as_millis().saturating_sub(self.offset_ms.load(Ordering::Relaxed));
        let mut since_base = local.saturating_sub(self.anchor_ms);
        if self.rate_ppm != 0 && since_base > 0 {
            // The first real millisecond at which the node's clock has
            // counted that much: never before it (a wake-up before its
            // time would find it not come, and wait again at once).
            let rate = 1_000_000i64.saturating_add(self.rate_ppm).max(1);
            let mut real = since_base.saturating_mul(1_000_000).div_euclid(rate);
            while self.drifted(real) < since_base {
                real += 1;
            }
            since_base = real;
        }
        match u64::try_from(since_base) {
            Ok(ms) => self.base + Duration::from_millis(ms),
            Err(_) => self.base,
        }
    }

    /// On tokio's paused clock, a guard that keeps the clock from jumping
    /// ahead while blocking code runs on a pool thread, off the runtime, as
    /// tokio does for its own `spawn_blocking` threads (it is one): the
    /// code's time is then the test's, not whatever the next timer is. The
    /// clock moves again when the guard is dropped. `None` on a real clock.
    pub(crate) fn hold(&self) -> Option<ClockHold> {
        if !self.paused {
            return None;
        }
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        // Returns when the sender is dropped.
        drop(tokio::task::spawn_blocking(move || rx.recv()));
        Some(ClockHold(tx))
    }
}

/// Holds a paused clock still until dropped ([`Clock::hold`]).
#[derive(Debug)]
pub(crate) struct ClockHold(#[allow(dead_code)] std::sync::mpsc::Sender<()>);
