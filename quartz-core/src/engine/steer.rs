//! [`Steer`]: a handler's error that says what it means for its fire (no
//! retry, a retry after a given wait, cancelled) instead of leaving it to
//! the job's retry policy.

use std::fmt;
use std::time::Duration;

/// A handler's failure that steers its fire. Return it as the handler's
/// error (`Err(Steer::no_retry("the account is closed").into())`, or with
/// `?` from a function that returns it); any other error is retried by
/// the job's [`RetryPolicy`](crate::store::RetryPolicy), as before. What it
/// asked is recorded with the error in the ledger (`no retry: …`,
/// `retry after 30 s: …`, `cancelled by the handler: …`, `snoozed for
/// 5 min: …`), which the history, the console and the API show.
///
/// ```
/// use std::time::Duration;
/// use quartz_core::engine::{JobContext, JobResult, Steer};
///
/// fn charge(ctx: JobContext) -> JobResult {
///     let account: String = ctx.payload()?;
///     if account.is_empty() {
///         // Nothing another attempt could change.
///         return Err(Steer::no_retry("no account given").into());
///     }
///     if account == "rate-limited" {
///         // The other side said when to come back.
///         return Err(Steer::retry_after(Duration::from_secs(60), "429 from the bank").into());
///     }
///     Ok(())
/// }
/// # #[cfg(feature = "testing")] {
/// # let ctx = quartz_core::testing::TestContext::new("charge").payload(&"").build();
/// # assert_eq!(charge(ctx).unwrap_err().to_string(), "no retry: no account given");
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steer {
    kind: SteerKind,
    reason: String,
}

/// What a [`Steer`] asks of its fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SteerKind {
    /// Record the attempt failed and try no other, whatever attempts the
    /// job's policy has left.
    NoRetry,
    /// Try again after this wait instead of the policy's backoff, if the
    /// policy has an attempt left (otherwise the fire ends failed).
    RetryAfter(Duration),
    /// Give the fire up: recorded failed, as cancelled by its handler, and
    /// never retried.
    Cancel,
    /// Not now: run again after this wait, whatever attempts the job's
    /// policy has left, and without counting this attempt against them
    /// (the ledger records it as an attempt that failed, `snoozed for …`).
    Snooze(Duration),
}

impl Steer {
    /// Fail without another attempt.
    pub fn no_retry(reason: impl Into<String>) -> Steer {
        Steer {
            kind: SteerKind::NoRetry,
            reason: reason.into(),
        }
    }

    /// Fail, and try again after `delay` (instead of the job's backoff),
    /// within the job's attempts.
    pub fn retry_after(delay: Duration, reason: impl Into<String>) -> Steer {
        Steer {
            kind: SteerKind::RetryAfter(delay),
            reason: reason.into(),
        }
    }

    /// Give the fire up, recorded as cancelled by its handler.
    pub fn cancel(reason: impl Into<String>) -> Steer {
        Steer {
            kind: SteerKind::Cancel,
            reason: reason.into(),
        }
    }

    /// Not now: run again after `delay`, not counted as one of the job's
    /// attempts (a resource not ready yet, a window not open yet).
    pub fn snooze(delay: Duration, reason: impl Into<String>) -> Steer {
        Steer {
            kind: SteerKind::Snooze(delay),
            reason: reason.into(),
        }
    }

    /// What it asks.
    pub fn kind(&self) -> SteerKind {
        self.kind
    }

    /// Why, in the handler's words.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// What a handler's error asks, if it is a [`Steer`].
    pub(crate) fn of(error: &(dyn std::error::Error + Send + Sync + 'static)) -> Option<SteerKind> {
        error.downcast_ref::<Steer>().map(Steer::kind)
    }
}

impl fmt::Display for Steer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            SteerKind::NoRetry => write!(f, "no retry: {}", self.reason),
            SteerKind::RetryAfter(delay) => write!(f, "retry after {}: {}", wait_text(delay), self.reason),
            SteerKind::Cancel => write!(f, "cancelled by the handler: {}", self.reason),
            SteerKind::Snooze(delay) => write!(f, "{SNOOZED}{}: {}", wait_text(delay), self.reason),
        }
    }
}

impl std::error::Error for Steer {}

/// When a failed attempt of `run` is tried again, if at all, given what its
/// handler's error asked: after the job's backoff while its attempts last,
/// or the wait its handler asked, unless the handler said not to; a snooze
/// whatever attempts are left, and the attempts it snoozed are not counted.
pub(super) fn retry_wait(steer: Option<SteerKind>, run: &super::run::RunFire) -> Option<Duration> {
    let counted = run.attempt.saturating_sub(run.snoozed);
    match steer {
        Some(SteerKind::Snooze(delay)) => Some(delay),
        _ if counted >= run.job.spec.retry.max_attempts => None,
        Some(SteerKind::NoRetry | SteerKind::Cancel) => None,
        Some(SteerKind::RetryAfter(delay)) => Some(delay),
        None => Some(run.job.spec.retry.delay(run.attempt + 1, run.fire_id)),
    }
}

/// How the ledger's error of a snoozed attempt begins: what tells it from a
/// failure when a later attempt counts the job's attempts.
pub(crate) const SNOOZED: &str = "snoozed for ";

/// A wait in the largest whole unit that says it exactly.
fn wait_text(delay: Duration) -> String {
    let ms = delay.as_millis();
    if ms.is_multiple_of(3_600_000) && ms > 0 {
        format!("{} h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) && ms > 0 {
        format!("{} min", ms / 60_000)
    } else if ms.is_multiple_of(1_000) {
        format!("{} s", ms / 1_000)
    } else {
        format!("{ms} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steer_is_found_behind_the_boxed_error_and_says_what_it_asked() {
        let boxed: super::super::JobError = Steer::retry_after(Duration::from_secs(90), "busy").into();
        assert_eq!(Steer::of(&*boxed), Some(SteerKind::RetryAfter(Duration::from_secs(90))));
        assert_eq!(boxed.to_string(), "retry after 90 s: busy");
        let plain: super::super::JobError = "plain".into();
        assert_eq!(Steer::of(&*plain), None);
        assert_eq!(Steer::cancel("gone").to_string(), "cancelled by the handler: gone");
        let snoozed = Steer::snooze(Duration::from_secs(300), "the file is not there yet");
        assert_eq!(snoozed.to_string(), "snoozed for 5 min: the file is not there yet");
        assert!(snoozed.to_string().starts_with(SNOOZED));
        assert_eq!(wait_text(Duration::from_secs(120)), "2 min");
        assert_eq!(wait_text(Duration::from_millis(1_500)), "1500 ms");
    }
}
