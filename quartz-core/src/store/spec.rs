//! What a job's creator gives: job and trigger definitions, a node's
//! registration, and the limits and validation every backend applies at the
//! boundary, before anything is stored.

use std::time::Duration;

use serde::Serialize;

use super::ConcurrencyLimit;
use crate::error::Error;
use crate::trigger::Trigger;

/// The longest job name, handler name or scheduler name, in bytes.
pub const MAX_NAME_BYTES: usize = 200;
/// The largest job payload (JSON text), in bytes: 1 MiB.
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;
/// The longest description, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 4_000;
/// The longest error text kept in the ledger, in bytes (longer text is cut).
pub const MAX_ERROR_BYTES: usize = 8_000;
/// The most attempts a retry policy may ask for.
pub const MAX_ATTEMPTS: u32 = 100;

/// A node's registration, as it registers (in the store's scheduler).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRegistration {
    /// The node's id, unique in the scheduler and stable across restarts.
    pub node_id: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Its weight for the weight strategy (at least 1).
    pub weight: u32,
    /// The handlers it runs, so that operators and the CLI can see which jobs
    /// some live node can run.
    pub handlers: Vec<String>,
    /// How long its heartbeat may be silent before its peers declare it
    /// dead (its [`dead_after`](crate::engine::Settings::dead_after)), so
    /// that the admin surface can tell a silent node from a live one.
    pub dead_after: Option<std::time::Duration>,
    /// The JSON Schemas of its handlers' payloads, by handler, for those
    /// that publish one ([`TypedJob::payload_schema`](crate::engine::TypedJob::payload_schema)):
    /// stored with the node's row, read by [`HistoryStore::payload_schemas`](super::HistoryStore::payload_schemas).
    pub payload_schemas: PayloadSchemas,
}

/// Payload schemas by handler name: JSON Schema documents.
pub type PayloadSchemas = std::collections::BTreeMap<String, serde_json::Value>;

/// How a failed fire is retried: up to `max_attempts` attempts in all, each
/// `backoff` after the last failed (fixed backoff), or, with `backoff_max`,
/// after a delay that doubles with each attempt from `backoff` up to
/// `backoff_max`, with jitter (exponential backoff). Durations are kept to
/// the millisecond.
///
/// ```
/// use std::time::Duration;
/// use quartz_core::store::RetryPolicy;
///
/// let fixed = RetryPolicy::fixed(3, Duration::from_secs(1));
/// assert_eq!(fixed.delay(2, 7), Duration::from_secs(1));
/// let exponential = RetryPolicy::exponential(5, Duration::from_secs(1), Duration::from_secs(60));
/// let third = exponential.delay(3, 7); // before attempt 3: 2 s, less jitter
/// assert!((Duration::from_secs(1)..=Duration::from_secs(2)).contains(&third));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, 1 (no retry) to [`MAX_ATTEMPTS`].
    pub max_attempts: u32,
    /// The wait between a failure and the next attempt (for exponential
    /// backoff, before the second attempt).
    pub backoff: Duration,
    /// Exponential backoff: the longest wait. `None` for a fixed backoff.
    pub backoff_max: Option<Duration>,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy::none()
    }
}

/// Milliseconds of a duration, saturating: how stores keep durations.
pub fn millis_of(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A duration of stored milliseconds (a negative count is none).
pub(crate) fn duration_of(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

impl RetryPolicy {
    /// One attempt: no retry.
    pub const fn none() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 1,
            backoff: Duration::ZERO,
            backoff_max: None,
        }
    }

    /// `max_attempts` in all, `backoff` apart.
    pub const fn fixed(max_attempts: u32, backoff: Duration) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            backoff,
            backoff_max: None,
        }
    }

    /// `max_attempts` in all, the wait doubling from `first` up to `max`,
    /// with jitter.
    pub const fn exponential(max_attempts: u32, first: Duration, max: Duration) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            backoff: first,
            backoff_max: Some(max),
        }
    }

    /// The wait before attempt `next` (2 for the first retry) of a fire.
    /// Exponential backoff doubles `backoff` for each attempt after the
    /// second, up to `backoff_max`, then takes a wait between half of that
    /// and all of it, chosen by `seed` (the fire's id), so that many fires that
    /// failed together do not retry together.
    pub fn delay(&self, next: u32, seed: i64) -> Duration {
        duration_of(self.delay_ms(next, seed))
    }

    /// [`delay`](Self::delay) in milliseconds.
    pub(crate) fn delay_ms(&self, next: u32, seed: i64) -> i64 {
        let backoff = millis_of(self.backoff);
        let Some(max) = self.backoff_max.map(millis_of) else {
            return backoff;
        };
        let doublings = next.saturating_sub(2).min(62);
        let full = backoff.saturating_mul(1_i64 << doublings).min(max).max(0);
        let half = full / 2;
        let spread = u64::try_from(full - half + 1).unwrap_or(1);
        let mixed = crate::engine::mix(u64::from_ne_bytes(seed.to_ne_bytes()) ^ u64::from(next));
        half + i64::try_from(mixed % spread).unwrap_or(0)
    }
}

/// A job as its creator defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    /// Unique in the scheduler; 1 to [`MAX_NAME_BYTES`] bytes, no control characters.
    pub name: String,
    /// The handler that runs it, by name.
    pub handler: String,
    /// The handler's input, JSON text (at most [`MAX_PAYLOAD_BYTES`]).
    pub payload: String,
    /// Free text.
    pub description: String,
    /// Re-run a fire whose node died mid-run (at-least-once); otherwise such a
    /// fire is recorded abandoned (at-most-once).
    pub requests_recovery: bool,
    /// Whether fires of the job may overlap.
    pub allow_concurrent: bool,
    /// A run longer than this is cancelled and recorded failed (kept to the
    /// millisecond).
    pub timeout: Option<Duration>,
    /// How failures are retried.
    pub retry: RetryPolicy,
    /// Run after this job (by name) succeeds, instead of on triggers of its own.
    pub parent: Option<String>,
    /// A cluster-wide limit on fires at once, shared with the jobs whose key
    /// resolves the same.
    pub limit: Option<ConcurrencyLimit>,
}

impl JobSpec {
    /// A job with defaults: payload `null`, no description, no recovery,
    /// concurrent fires allowed, no timeout, no retry, no parent.
    pub fn new(name: impl Into<String>, handler: impl Into<String>) -> JobSpec {
        JobSpec {
            name: name.into(),
            handler: handler.into(),
            payload: "null".to_owned(),
            description: String::new(),
            requests_recovery: false,
            allow_concurrent: true,
            timeout: None,
            retry: RetryPolicy::none(),
            parent: None,
            limit: None,
        }
    }

    /// The payload: any serde value, as JSON.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidJob`] when the value does not serialise to JSON (a
    /// map with non-string keys, a failing `Serialize`).
    pub fn with_payload<T: Serialize + ?Sized>(mut self, payload: &T) -> Result<JobSpec, Error> {
        self.payload = serde_json::to_string(payload).map_err(|e| Error::InvalidJob {
            reason: format!("the payload does not serialise to JSON: {e}"),
        })?;
        Ok(self)
    }

    /// The payload as a JSON value (`null` when the stored text is not
    /// JSON).
    pub fn payload_value(&self) -> serde_json::Value {
        serde_json::from_str(&self.payload).unwrap_or(serde_json::Value::Null)
    }

    /// The description.
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> JobSpec {
        self.description = description.into();
        self
    }

    /// A timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> JobSpec {
        self.timeout = Some(timeout);
        self
    }

    /// A retry policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> JobSpec {
        self.retry = retry;
        self
    }

    /// Re-run a fire whose node died mid-run (at-least-once), or not.
    #[must_use]
    pub fn with_recovery(mut self, requests_recovery: bool) -> JobSpec {
        self.requests_recovery = requests_recovery;
        self
    }

    /// Whether fires of the job may overlap.
    #[must_use]
    pub fn with_concurrency(mut self, allow_concurrent: bool) -> JobSpec {
        self.allow_concurrent = allow_concurrent;
        self
    }

    /// A cluster-wide concurrency limit.
    #[must_use]
    pub fn with_limit(mut self, limit: ConcurrencyLimit) -> JobSpec {
        self.limit = Some(limit);
        self
    }

    /// The resolved key of its concurrency limit, if it has one (`None` too
    /// when the key does not resolve, which [`validate`](Self::validate)
    /// refuses).
    pub fn limit_key(&self) -> Option<String> {
        self.limit.as_ref()?.resolve(&self.handler, &self.payload).ok()
    }

    /// A parent: the job runs after each success of this one.
    #[must_use]
    pub fn with_parent(mut self, parent: impl Into<String>) -> JobSpec {
        self.parent = Some(parent.into());
        self
    }

    /// Checks every field; stores call this before writing anything.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidJob`] naming the field and the problem.
    pub fn validate(&self) -> Result<(), Error> {
        self.check_fields().map_err(|(_, e)| e)
    }

    /// As [`validate`](Self::validate), with the name of the field at fault
    /// (`name`, `handler`, `payload`, `description`, `timeout_ms`,
    /// `max_attempts`, `backoff_ms`, `backoff_max_ms`, `parent`,
    /// `concurrency_limit`, `concurrency_key`: the admin
    /// API's names), as the admin API reports it.
    ///
    /// # Errors
    ///
    /// The field and its [`Error::InvalidJob`].
    pub fn check_fields(&self) -> Result<(), (&'static str, Error)> {
        let invalid = |field: &'static str, reason: String| Err((field, Error::InvalidJob { reason }));
        check_name("job name", &self.name).map_err(|e| ("name", e))?;
        check_name("handler name", &self.handler).map_err(|e| ("handler", e))?;
        if let Some(parent) = &self.parent {
            check_name("parent job name", parent).map_err(|e| ("parent", e))?;
            if parent == &self.name {
                return invalid("parent", format!("job {:?} cannot be its own parent", self.name));
            }
        }
        if self.payload.len() > MAX_PAYLOAD_BYTES {
            return invalid(
                "payload",
                format!(
                    "payload is {} bytes; the most is {MAX_PAYLOAD_BYTES}",
                    self.payload.len()
                ),
            );
        }
        // Decoded whole, as handlers and tools will: this also bounds its
        // nesting (128 levels), which a skimming parser would not.
        if let Err(e) = serde_json::from_str::<serde_json::Value>(&self.payload) {
            if e.to_string().contains("recursion limit") {
                return invalid("payload", "payload is nested deeper than 128 levels".to_owned());
            }
            return invalid("payload", format!("payload is not valid JSON: {e}"));
        }
        if self.description.len() > MAX_DESCRIPTION_BYTES {
            return invalid(
                "description",
                format!(
                    "description is {} bytes; the most is {MAX_DESCRIPTION_BYTES}",
                    self.description.len()
                ),
            );
        }
        if let Some(timeout) = self.timeout.map(millis_of)
            && !(1..=crate::trigger::MAX_INTERVAL_MILLIS).contains(&timeout)
        {
            return invalid(
                "timeout_ms",
                format!("timeout must be between 1 ms and 100 years, got {timeout} ms"),
            );
        }
        if !(1..=MAX_ATTEMPTS).contains(&self.retry.max_attempts) {
            return invalid(
                "max_attempts",
                format!(
                    "retry attempts must be between 1 and {MAX_ATTEMPTS}, got {}",
                    self.retry.max_attempts
                ),
            );
        }
        let backoff = millis_of(self.retry.backoff);
        if backoff > crate::trigger::MAX_INTERVAL_MILLIS {
            return invalid(
                "backoff_ms",
                format!("retry backoff must be between 0 and 100 years, got {backoff} ms"),
            );
        }
        if let Some(max) = self.retry.backoff_max.map(millis_of)
            && !(backoff..=crate::trigger::MAX_INTERVAL_MILLIS).contains(&max)
        {
            return invalid(
                "backoff_max_ms",
                format!(
                    "the longest retry backoff must be between the first ({backoff} ms) and 100 years, got {max} ms"
                ),
            );
        }
        if let Some(limit) = &self.limit {
            limit.check(&self.handler, &self.payload)?;
        }
        Ok(())
    }
}

/// Checks a name: 1 to [`MAX_NAME_BYTES`] bytes, no control characters, no
/// leading or trailing whitespace.
///
/// # Errors
///
/// [`Error::InvalidJob`] saying which name and why.
pub fn check_name(what: &str, name: &str) -> Result<(), Error> {
    let reason = if name.is_empty() {
        "is empty".to_owned()
    } else if name.len() > MAX_NAME_BYTES {
        format!("is {} bytes; the most is {MAX_NAME_BYTES}", name.len())
    } else if name.chars().any(char::is_control) {
        "contains a control character".to_owned()
    } else if name.trim() != name {
        "starts or ends with whitespace".to_owned()
    } else if name == "." || name == ".." {
        // A URL path resolves them away: `/jobs/..` is `/`.
        "is a dot segment, which no URL can name (a browser resolves it away)".to_owned()
    } else {
        return Ok(());
    };
    Err(Error::InvalidJob {
        reason: format!("{what} {name:?} {reason}"),
    })
}

/// A trigger of a job, as its creator defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecuteSpec {
    /// When it fires.
    pub trigger: Trigger,
    /// Higher fires first among fires due at the same instant.
    pub priority: i32,
}

impl ExecuteSpec {
    /// A trigger with priority 0.
    pub fn new(trigger: Trigger) -> ExecuteSpec {
        ExecuteSpec { trigger, priority: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_backoff_doubles_up_to_its_cap_with_jitter() {
        let policy = RetryPolicy::exponential(20, Duration::from_secs(1), Duration::from_secs(30));
        for seed in 0..200 {
            for (next, full) in [
                (2, 1_000),
                (3, 2_000),
                (4, 4_000),
                (6, 16_000),
                (7, 30_000),
                (19, 30_000),
            ] {
                let delay = policy.delay_ms(next, seed);
                assert!(
                    (full / 2..=full).contains(&delay),
                    "attempt {next} seed {seed}: {delay}"
                );
            }
        }
        let spread: std::collections::HashSet<i64> = (0..50).map(|seed| policy.delay_ms(4, seed)).collect();
        assert!(
            spread.len() > 25,
            "jitter spreads fires that failed together: {spread:?}"
        );
        let fixed = RetryPolicy {
            backoff_max: None,
            ..policy
        };
        assert!((2..20).all(|next| fixed.delay_ms(next, 9) == 1_000));
    }
}
