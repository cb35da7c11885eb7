//! The key layout of a scheduler: every key `quartz:{SCHEDULER}:...`, the
//! braces being Redis Cluster's hash tag, so that all of a scheduler's keys
//! share one slot and every script may touch any of them.

use quartz_core::store::StoreError;

/// The namespace of every key unless the URL names another.
pub const DEFAULT_NAMESPACE: &str = "quartz";

/// The keys of one scheduler.
///
/// ```
/// use quartz_store::redis_store::Keys;
///
/// let keys = Keys::of("billing")?;
/// assert_eq!(keys.job(7), "quartz:{billing}:job:7");
/// assert_eq!(keys.due(), "quartz:{billing}:due");
/// # Ok::<(), quartz_core::store::StoreError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// The keys of `scheduler`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a name with `{` or `}`, which would move
    /// the hash tag and split the scheduler's keys across slots.
    pub fn of(scheduler: &str) -> Result<Keys, StoreError> {
        Keys::in_namespace(DEFAULT_NAMESPACE, scheduler)
    }

    /// The keys of `scheduler` under a namespace other than `quartz` (see
    /// [`RedisStore::connect`](super::RedisStore::connect)'s `namespace`).
    ///
    /// # Errors
    ///
    /// As [`Keys::of`].
    pub fn in_namespace(namespace: &str, scheduler: &str) -> Result<Keys, StoreError> {
        if scheduler.contains(['{', '}']) {
            return Err(StoreError::Invalid(quartz_core::Error::InvalidJob {
                reason: format!("a scheduler name on Redis may not contain {{ or }}: {scheduler:?}"),
            }));
        }
        Ok(Keys {
            prefix: format!("{namespace}:{{{scheduler}}}:"),
        })
    }

    /// The prefix every key of the scheduler starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    /// The counters that hand out ids (a hash: `job`, `execute`, `fire`, ...).
    pub fn ids(&self) -> String {
        self.key("ids")
    }

    /// A node's hash.
    pub fn node(&self, node_id: &str) -> String {
        self.key(&format!("node:{node_id}"))
    }

    /// The set of node ids.
    pub fn nodes(&self) -> String {
        self.key("nodes")
    }

    /// A job's hash.
    pub fn job(&self, id: i64) -> String {
        self.key(&format!("job:{id}"))
    }

    /// Job names to ids (a hash), the unique name rule.
    pub fn job_names(&self) -> String {
        self.key("jobs")
    }

    /// An execute's hash (a trigger and where it stands).
    pub fn execute(&self, id: i64) -> String {
        self.key(&format!("execute:{id}"))
    }

    /// Enabled executes by next fire time (a sorted set), read by the poll.
    pub fn due(&self) -> String {
        self.key("due")
    }

    /// A fire's hash (a ledger row).
    pub fn fire(&self, id: i64) -> String {
        self.key(&format!("fire:{id}"))
    }

    /// The unique (execute, fire time, attempt) rule: a hash from
    /// `execute:fire_time:attempt` to the fire's id.
    pub fn fire_keys(&self) -> String {
        self.key("fire-keys")
    }

    /// A job's fires by fire time (a sorted set), for its history.
    pub fn job_fires(&self, job_id: i64) -> String {
        self.key(&format!("job-fires:{job_id}"))
    }

    /// The change counter every node watches.
    pub fn changes(&self) -> String {
        self.key("changes")
    }

    /// A calendar's definition, by name (a hash).
    pub fn calendars(&self) -> String {
        self.key("calendars")
    }
}
