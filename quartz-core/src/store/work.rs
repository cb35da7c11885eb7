//! Work enqueued from code: a one-off fire of a job, with a payload of its
//! own, due now, at a time or after a delay, and perhaps unique by a key.
//!
//! The job is the work's kind: its handler, attempts, backoff, timeout,
//! overlap rule and concurrency limit apply; its triggers are not involved
//! (a job may have none). Each piece of work is a row of its own (its
//! payload and unique key) and a pending fire in the ledger whose execute
//! id is the work's id negated ([`work_execute`]), so that every attempt of
//! it finds its payload, and the fire is run once by the first node with
//! the job's handler and a free thread, as a fire by hand is.

use std::time::Duration;

use serde::Serialize;

use super::spec::{MAX_PAYLOAD_BYTES, check_name, millis_of};
use crate::error::Error;
use crate::time::Timestamp;

/// The longest unique key, in bytes.
pub const MAX_UNIQUE_KEY_BYTES: usize = 255;

/// When a piece of work is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// At the database's now.
    Now,
    /// At this time (in the past: now).
    At(Timestamp),
    /// This long after the database's now.
    After(Duration),
}

impl Due {
    /// The due time, given the database's now: never before it.
    pub fn resolve(self, now: Timestamp) -> Timestamp {
        match self {
            Due::Now => now,
            Due::At(at) => at.max(now),
            Due::After(delay) => Timestamp::from_millis(now.as_millis().saturating_add(millis_of(delay))),
        }
    }
}

/// A unique key: no second piece of work of the same job with this key is
/// enqueued while one is pending or running, nor within `window` of the
/// enqueueing of the one that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unique {
    /// The key, at most [`MAX_UNIQUE_KEY_BYTES`].
    pub key: String,
    /// How long after it was enqueued the key stays taken once its work
    /// has ended (`None`: only while it is pending or running).
    pub window: Option<Duration>,
}

/// A piece of work to enqueue: a one-off fire of job `job` (its kind: its
/// handler, attempts, backoff, timeout, overlap rule and concurrency limit
/// apply), with a payload of its own, due now, at a time or after a delay,
/// and perhaps unique by a key. Its attempts are ledger rows whose execute
/// id is the work's id negated ([`work_execute`]), so that each finds the
/// work's payload; it runs once, on the first node with the job's handler
/// and a free thread. See [`JobStore::enqueue`](super::JobStore::enqueue).
///
/// ```
/// use quartz_core::store::Work;
/// use std::time::Duration;
///
/// let work = Work::new("send-welcome-mail")
///     .payload(&serde_json::json!({ "to": "ada@example.com" }))?
///     .after(Duration::from_secs(60))
///     .unique("welcome:ada@example.com");
/// assert_eq!(work.job, "send-welcome-mail");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Work {
    /// The job whose fire it is (its kind).
    pub job: String,
    /// Its payload as JSON text; `None` runs it with the job's own.
    pub payload: Option<String>,
    /// When it is due.
    pub due: Due,
    /// Its unique key, if any.
    pub unique: Option<Unique>,
    /// The W3C trace context (`traceparent`) of the span that enqueued it:
    /// each of its fires' spans links to that span (see [`valid_trace_parent`]).
    pub trace_parent: Option<String>,
}

impl Work {
    /// Work of job `job`, due now, with the job's own payload.
    pub fn new(job: impl Into<String>) -> Work {
        Work {
            job: job.into(),
            payload: None,
            due: Due::Now,
            unique: None,
            trace_parent: None,
        }
    }

    /// Linked to the span whose W3C trace context this is (a `traceparent`
    /// header's value, `00-<trace id>-<span id>-<flags>`): each fire's span
    /// carries it, and `quartz run` exports it as the span's link, so that a
    /// trace shows the request that enqueued the work beside its runs.
    pub fn trace_parent(mut self, traceparent: impl Into<String>) -> Work {
        self.trace_parent = Some(traceparent.into());
        self
    }

    /// Work of the job named after a typed job's kind
    /// ([`TypedJob::KIND`](crate::engine::TypedJob::KIND)), with `payload`
    /// as its own.
    ///
    /// # Errors
    ///
    /// When `payload` cannot be written as JSON.
    pub fn of<J: crate::engine::TypedJob>(payload: &J) -> Result<Work, serde_json::Error> {
        Work::new(J::KIND).payload(payload)
    }

    /// Its own payload, written as JSON.
    ///
    /// # Errors
    ///
    /// When `payload` cannot be written as JSON (a map with keys that are
    /// not strings).
    pub fn payload<T: Serialize + ?Sized>(mut self, payload: &T) -> Result<Work, serde_json::Error> {
        self.payload = Some(serde_json::to_string(payload)?);
        Ok(self)
    }

    /// Its own payload as JSON text (checked by [`Work::validate`]).
    pub fn payload_json(mut self, json: impl Into<String>) -> Work {
        self.payload = Some(json.into());
        self
    }

    /// Due at `at` (a time in the past: now).
    pub fn at(mut self, at: Timestamp) -> Work {
        self.due = Due::At(at);
        self
    }

    /// Due `delay` after the database's now.
    pub fn after(mut self, delay: Duration) -> Work {
        self.due = Due::After(delay);
        self
    }

    /// Unique by `key` while pending or running.
    pub fn unique(mut self, key: impl Into<String>) -> Work {
        self.unique = Some(Unique {
            key: key.into(),
            window: None,
        });
        self
    }

    /// Unique by `key` while pending or running, and for `window` after it
    /// was enqueued.
    pub fn unique_for(mut self, key: impl Into<String>, window: Duration) -> Work {
        self.unique = Some(Unique {
            key: key.into(),
            window: Some(window),
        });
        self
    }

    /// Checks what a store checks before writing anything: the job's name,
    /// the payload (JSON, at most [`MAX_PAYLOAD_BYTES`]), the key (not
    /// empty, at most [`MAX_UNIQUE_KEY_BYTES`]). The error names the field.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidWork`] naming the first field that does not fit.
    pub fn validate(&self) -> Result<(), Error> {
        self.check()
            .map_err(|(field, reason)| Error::InvalidWork { field, reason })
    }

    fn check(&self) -> Result<(), (&'static str, String)> {
        check_name("job name", &self.job).map_err(|e| ("job", e.to_string()))?;
        if let Some(payload) = &self.payload {
            if payload.len() > MAX_PAYLOAD_BYTES {
                return Err((
                    "payload",
                    format!("{} bytes, more than the {MAX_PAYLOAD_BYTES} allowed", payload.len()),
                ));
            }
            if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(payload) {
                return Err(("payload", format!("not JSON: {e}")));
            }
        }
        if let Some(tp) = &self.trace_parent
            && !valid_trace_parent(tp)
        {
            return Err((
                "trace_parent",
                format!("{tp:?} is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)"),
            ));
        }
        if let Some(unique) = &self.unique {
            if unique.key.is_empty() {
                return Err(("unique_key", "empty".to_owned()));
            }
            if unique.key.len() > MAX_UNIQUE_KEY_BYTES {
                return Err((
                    "unique_key",
                    format!(
                        "{} bytes, more than the {MAX_UNIQUE_KEY_BYTES} allowed",
                        unique.key.len()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// When its key stops being taken once its work has ended, given when
    /// it was enqueued: `None` for no key or no window.
    pub fn unique_until(&self, now: Timestamp) -> Option<i64> {
        let window = self.unique.as_ref()?.window?;
        Some(now.as_millis().saturating_add(millis_of(window)))
    }
}

/// Whether `value` is a W3C trace context header (`traceparent`): a
/// version other than `ff`, a trace id and a span id that are not all
/// zeros, and flags, in lower-case hex (`00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01`).
pub fn valid_trace_parent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let zeros = |s: &str| s.bytes().all(|b| b == b'0');
    matches!(parts.as_slice(), [version, trace, span, flags]
        if hex(version, 2) && *version != "ff" && hex(trace, 32) && !zeros(trace) && hex(span, 16) && !zeros(span)
            && hex(flags, 2))
        && value.len() == 55
}

/// What a fire of enqueued work reads of its work before it is claimed
/// ([`FireStore::work_run`](super::FireStore::work_run)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkRun {
    /// Its own payload as JSON text; `None` runs it with the job's.
    pub payload: Option<String>,
    /// The trace context of the span that enqueued it
    /// ([`Work::trace_parent`]).
    pub trace_parent: Option<String>,
}

/// What [`JobStore::enqueue`](super::JobStore::enqueue) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    /// The work is pending in the ledger.
    Queued {
        /// The work's id (its fire's execute id is this negated).
        work_id: i64,
        /// Its pending fire's ledger id.
        fire_id: i64,
        /// When it is due (its fire time).
        due_at: Timestamp,
    },
    /// Its unique key is taken: nothing was written.
    Duplicate {
        /// The key.
        key: String,
        /// The work that holds it, when it can be read (it cannot from a
        /// transaction whose snapshot predates it).
        work_id: Option<i64>,
        /// Its due time.
        due_at: Option<Timestamp>,
    },
}

impl Enqueued {
    /// Whether the work was queued (not refused as a duplicate).
    pub fn is_queued(&self) -> bool {
        matches!(self, Enqueued::Queued { .. })
    }
}

/// The execute id of the fires of work `work_id`: negative, so that it is
/// no trigger's and no fire by hand's ([`MANUAL_EXECUTE`](super::MANUAL_EXECUTE)).
pub fn work_execute(work_id: i64) -> i64 {
    -work_id
}

/// The work whose fire has execute id `execute_id`, if it is one.
pub fn work_of_execute(execute_id: i64) -> Option<i64> {
    (execute_id < 0).then_some(-execute_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_is_never_before_now() {
        let now = Timestamp::from_millis(10_000);
        assert_eq!(Due::Now.resolve(now), now);
        assert_eq!(Due::At(Timestamp::from_millis(5)).resolve(now), now);
        assert_eq!(Due::At(Timestamp::from_millis(20_000)).resolve(now).as_millis(), 20_000);
        assert_eq!(Due::After(Duration::from_secs(2)).resolve(now).as_millis(), 12_000);
    }

    #[test]
    fn validation_names_the_field() {
        assert_eq!(Work::new("").check().unwrap_err().0, "job");
        assert_eq!(Work::new("a").payload_json("{").check().unwrap_err().0, "payload");
        assert_eq!(Work::new("a").unique("").check().unwrap_err().0, "unique_key");
        assert_eq!(
            Work::new("a").unique("k".repeat(256)).check().unwrap_err().0,
            "unique_key"
        );
        assert!(Work::new("a").payload_json("{\"x\":1}").unique("k").validate().is_ok());
    }

    #[test]
    fn a_trace_parent_is_a_w3c_traceparent() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(valid_trace_parent(good));
        assert!(valid_trace_parent(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
        ));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
        ] {
            assert!(!valid_trace_parent(bad), "{bad:?}");
        }
        assert_eq!(Work::new("a").trace_parent("x").check().unwrap_err().0, "trace_parent");
        assert!(Work::new("a").trace_parent(good).validate().is_ok());
    }

    #[test]
    fn work_ids_are_negative_execute_ids() {
        assert_eq!(work_execute(7), -7);
        assert_eq!(work_of_execute(-7), Some(7));
        assert_eq!(work_of_execute(0), None);
        assert_eq!(work_of_execute(3), None);
    }
}
