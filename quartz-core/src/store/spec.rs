//! What a job's creator gives: job and trigger definitions, a node's
//! registration, and the limits and validation every backend applies at the
//! boundary, before anything is stored.

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

/// A node's registration, as it registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRegistration {
    /// The scheduler (cluster) the node belongs to.
    pub scheduler: String,
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
}

/// How a failed fire is retried: up to `max_attempts` attempts in all, each
/// `backoff_ms` after the last failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, 1 (no retry) to [`MAX_ATTEMPTS`].
    pub max_attempts: u32,
    /// Milliseconds between a failure and the next attempt.
    pub backoff_ms: i64,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 1,
            backoff_ms: 0,
        }
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
    /// A run longer than this is cancelled and recorded failed.
    pub timeout_ms: Option<i64>,
    /// How failures are retried.
    pub retry: RetryPolicy,
    /// Run after this job (by name) succeeds, instead of on triggers of its own.
    pub parent: Option<String>,
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
            timeout_ms: None,
            retry: RetryPolicy::default(),
            parent: None,
        }
    }

    /// Checks every field; stores call this before writing anything.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidJob`] naming the field and the problem.
    pub fn validate(&self) -> Result<(), Error> {
        let invalid = |reason: String| Err(Error::InvalidJob { reason });
        check_name("job name", &self.name)?;
        check_name("handler name", &self.handler)?;
        if let Some(parent) = &self.parent {
            check_name("parent job name", parent)?;
            if parent == &self.name {
                return invalid(format!("job {:?} cannot be its own parent", self.name));
            }
        }
        if self.payload.len() > MAX_PAYLOAD_BYTES {
            return invalid(format!(
                "payload is {} bytes; the most is {MAX_PAYLOAD_BYTES}",
                self.payload.len()
            ));
        }
        // Decoded whole, as handlers and tools will: this also bounds its
        // nesting (128 levels), which a skimming parser would not.
        if let Err(e) = serde_json::from_str::<serde_json::Value>(&self.payload) {
            if e.to_string().contains("recursion limit") {
                return invalid("payload is nested deeper than 128 levels".to_owned());
            }
            return invalid(format!("payload is not valid JSON: {e}"));
        }
        if self.description.len() > MAX_DESCRIPTION_BYTES {
            return invalid(format!(
                "description is {} bytes; the most is {MAX_DESCRIPTION_BYTES}",
                self.description.len()
            ));
        }
        if let Some(timeout) = self.timeout_ms
            && !(1..=crate::trigger::MAX_INTERVAL_MILLIS).contains(&timeout)
        {
            return invalid(format!("timeout must be between 1 ms and 100 years, got {timeout} ms"));
        }
        if !(1..=MAX_ATTEMPTS).contains(&self.retry.max_attempts) {
            return invalid(format!(
                "retry attempts must be between 1 and {MAX_ATTEMPTS}, got {}",
                self.retry.max_attempts
            ));
        }
        if !(0..=crate::trigger::MAX_INTERVAL_MILLIS).contains(&self.retry.backoff_ms) {
            return invalid(format!(
                "retry backoff must be between 0 and 100 years, got {} ms",
                self.retry.backoff_ms
            ));
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
