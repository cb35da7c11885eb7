//! Scheduler numbers. Each scheduler name gets a number, the first 0, from
//! a registry shared by every node of the Redis database (the hashes
//! `NAMESPACE:schedulers` and `NAMESPACE:scheduler-numbers`); the ids of a
//! scheduler's jobs, executes and fires carry it in their high bits (the
//! number shifted past [`SEQUENCE_BITS`]). A call that names a fire or an
//! execute by id alone (a start, an outcome, a claim) so finds its
//! scheduler's keys without a lookup, and ids stay below 2^53, exact in a
//! Lua number and in a browser's JavaScript.

use std::collections::HashMap;

use parking_lot::RwLock;
use quartz_core::store::StoreError;

use super::{RedisStore, error};

/// The bits of an id's sequence: 2^43 (about 8.8e12) ids per scheduler.
pub const SEQUENCE_BITS: u32 = 43;

/// The most schedulers one Redis database holds (ids stay below 2^53).
pub const MAX_SCHEDULERS: i64 = 1 << (53 - SEQUENCE_BITS);

/// A name's number, given the first time it is asked for: -1 when the
/// registry is full.
static REGISTER: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"
local found = redis.call('HGET', KEYS[1], ARGV[1])
if found then return tonumber(found) end
local n = redis.call('HLEN', KEYS[1])
if n >= tonumber(ARGV[2]) then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], n)
redis.call('HSET', KEYS[2], n, ARGV[1])
return n
",
    )
});

/// The registry as this process has read it.
#[derive(Debug, Default)]
pub(super) struct Registry {
    numbers: RwLock<HashMap<String, i64>>,
    names: RwLock<HashMap<i64, String>>,
}

impl Registry {
    fn remember(&self, name: &str, number: i64) {
        self.numbers.write().insert(name.to_owned(), number);
        self.names.write().insert(number, name.to_owned());
    }
}

/// The number an id carries.
pub(super) fn number_of_id(id: i64) -> i64 {
    id >> SEQUENCE_BITS
}

impl RedisStore {
    /// One of the registry's two hashes.
    fn registry_key(&self, name: &str) -> String {
        if self.is_cluster() {
            format!("{{{}}}:{name}", self.namespace())
        } else {
            self.namespaced(name)
        }
    }

    /// The scheduler's number, registered the first time.
    pub(super) async fn number(&self, scheduler: &str) -> Result<i64, StoreError> {
        if let Some(n) = self.registry.numbers.read().get(scheduler) {
            return Ok(*n);
        }
        let (names, numbers) = (self.registry_key("schedulers"), self.registry_key("scheduler-numbers"));
        let n: i64 = self
            .eval(
                &REGISTER,
                &[names.as_str(), numbers.as_str()],
                (scheduler, MAX_SCHEDULERS),
            )
            .await?;
        if n < 0 {
            return Err(StoreError::Database {
                reason: format!(
                    "the Redis database holds {MAX_SCHEDULERS} schedulers already; scheduler {scheduler:?} needs \
                     a database of its own"
                ),
            });
        }
        self.registry.remember(scheduler, n);
        Ok(n)
    }

    /// The registered schedulers that hold a job or a node, by name (a
    /// name is registered by any call, a read too).
    pub(super) async fn holding_rows(&self) -> Result<Vec<String>, StoreError> {
        let mut conn = self.conn.clone();
        let names: Vec<String> = redis::cmd("HKEYS")
            .arg(self.registry_key("schedulers"))
            .query_async(&mut conn)
            .await
            .map_err(|e| error(&e))?;
        let mut held = Vec::new();
        for name in names {
            let keys = self.keys(&name)?;
            let mut any = false;
            for key in [keys.job_names(), keys.nodes()] {
                let n: i64 = redis::cmd("EXISTS")
                    .arg(key)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| error(&e))?;
                any |= n > 0;
            }
            if any {
                held.push(name);
            }
        }
        held.sort();
        Ok(held)
    }

    /// The scheduler whose id this is, with its number; `None` when no
    /// scheduler has that number (no such record).
    pub(super) async fn scheduler_of(&self, id: i64) -> Result<Option<(String, i64)>, StoreError> {
        let number = number_of_id(id);
        if let Some(name) = self.registry.names.read().get(&number) {
            return Ok(Some((name.clone(), number)));
        }
        let name: Option<String> = redis::cmd("HGET")
            .arg(self.registry_key("scheduler-numbers"))
            .arg(number)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| error(&e))?;
        Ok(name.map(|name| {
            self.registry.remember(&name, number);
            (name, number)
        }))
    }
}

impl RedisStore {
    /// The scheduler's number if it has one, without registering it (for
    /// reads).
    pub(super) async fn known_number(&self, scheduler: &str) -> Result<Option<i64>, StoreError> {
        if let Some(n) = self.registry.numbers.read().get(scheduler) {
            return Ok(Some(*n));
        }
        let n: Option<i64> = redis::cmd("HGET")
            .arg(self.registry_key("schedulers"))
            .arg(scheduler)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| error(&e))?;
        if let Some(n) = n {
            self.registry.remember(scheduler, n);
        }
        Ok(n)
    }
}
