//! Cluster-wide concurrency limits: at most N fires at once of every job
//! whose key resolves the same, across every node, enforced by the store at
//! the claim.

use crate::error::Error;

/// The most fires one key may have at once.
pub const MAX_CONCURRENCY: u32 = 100_000;

/// The longest a resolved key may be, in bytes.
pub const MAX_LIMIT_KEY_BYTES: usize = 200;

/// The key template when a job gives a limit and no key: its handler.
pub const DEFAULT_LIMIT_KEY: &str = "{handler}";

/// A job's share of a cluster-wide limit: at most `max` fires claimed or
/// running at once, on every node together, among the jobs whose `key`
/// resolves to the same text. A fire that finds its key full waits (or is
/// skipped) as its trigger's overlap policy says.
///
/// The key is a template: `{handler}` stands for the job's handler, and
/// `{/a/b}` for the payload's value at that JSON pointer (RFC 6901), so that
/// `tenant:{/tenant}` limits each tenant's jobs together.
///
/// ```
/// use quartz_core::store::ConcurrencyLimit;
///
/// let per_tenant = ConcurrencyLimit::new(2, "tenant:{/tenant}");
/// let key = per_tenant.resolve("report", r#"{"tenant": "acme"}"#)?;
/// assert_eq!(key, "tenant:acme");
/// assert_eq!(ConcurrencyLimit::per_handler(4).resolve("report", "null")?, "report");
/// # Ok::<(), quartz_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConcurrencyLimit {
    /// The most fires of the key claimed or running at once (1 to
    /// [`MAX_CONCURRENCY`]).
    pub max: u32,
    /// The key's template.
    pub key: String,
}

impl ConcurrencyLimit {
    /// At most `max` at once among the jobs whose `key` resolves the same.
    pub fn new(max: u32, key: impl Into<String>) -> ConcurrencyLimit {
        ConcurrencyLimit { max, key: key.into() }
    }

    /// At most `max` at once among the jobs of one handler.
    pub fn per_handler(max: u32) -> ConcurrencyLimit {
        ConcurrencyLimit::new(max, DEFAULT_LIMIT_KEY)
    }

    /// The key of a job with this handler and payload (JSON text).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidJob`] for an unclosed brace, an unknown placeholder,
    /// a pointer the payload has no string, number or boolean at, or a key
    /// that is empty or longer than [`MAX_LIMIT_KEY_BYTES`].
    pub fn resolve(&self, handler: &str, payload: &str) -> Result<String, Error> {
        let invalid = |reason: String| Error::InvalidJob { reason };
        let mut out = String::new();
        let mut rest = self.key.as_str();
        let mut value: Option<serde_json::Value> = None;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let close = after
                .find('}')
                .ok_or_else(|| invalid(format!("concurrency key {:?}: a '{{' is not closed", self.key)))?;
            let name = &after[..close];
            if name == "handler" {
                out.push_str(handler);
            } else if name.starts_with('/') {
                let payload = value.get_or_insert_with(|| serde_json::from_str(payload).unwrap_or_default());
                match payload.pointer(name) {
                    Some(serde_json::Value::String(s)) => out.push_str(s),
                    Some(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => {
                        out.push_str(&v.to_string());
                    }
                    _ => {
                        return Err(invalid(format!(
                            "concurrency key {:?}: the payload has no string, number or boolean at {name}",
                            self.key
                        )));
                    }
                }
            } else {
                return Err(invalid(format!(
                    "concurrency key {:?}: {{{name}}} is neither {{handler}} nor a JSON pointer such as {{/tenant}}",
                    self.key
                )));
            }
            rest = &after[close + 1..];
        }
        out.push_str(rest);
        if out.is_empty() || out.len() > MAX_LIMIT_KEY_BYTES {
            return Err(invalid(format!(
                "concurrency key {:?} resolves to {} bytes; it must be 1 to {MAX_LIMIT_KEY_BYTES}",
                self.key,
                out.len()
            )));
        }
        Ok(out)
    }

    /// Checks the limit and its key against a job's handler and payload.
    ///
    /// # Errors
    ///
    /// The field at fault (`concurrency_limit`, `concurrency_key`) and why.
    pub fn check(&self, handler: &str, payload: &str) -> Result<String, (&'static str, Error)> {
        if !(1..=MAX_CONCURRENCY).contains(&self.max) {
            return Err((
                "concurrency_limit",
                Error::InvalidJob {
                    reason: format!(
                        "a concurrency limit must be between 1 and {MAX_CONCURRENCY}, got {}",
                        self.max
                    ),
                },
            ));
        }
        self.resolve(handler, payload).map_err(|e| ("concurrency_key", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_resolve_from_the_handler_and_the_payload() {
        let payload = r#"{"tenant": {"id": 7, "name": "acme"}, "vip": true}"#;
        let key = ConcurrencyLimit::new(1, "{handler}/{/tenant/name}/{/tenant/id}/{/vip}");
        assert_eq!(key.resolve("mail", payload).unwrap(), "mail/acme/7/true");
        assert_eq!(
            ConcurrencyLimit::new(1, "shared").resolve("mail", payload).unwrap(),
            "shared"
        );
        for bad in ["{/missing}", "{/tenant}", "{nope}", "{handler", ""] {
            assert!(ConcurrencyLimit::new(1, bad).resolve("mail", payload).is_err(), "{bad}");
        }
        assert_eq!(
            ConcurrencyLimit::new(0, "x").check("mail", payload).unwrap_err().0,
            "concurrency_limit"
        );
    }
}
