//! The script library (the `lua/` files, one script) and how the store
//! calls it: every command one `EVALSHA`, its arguments one JSON object of
//! strings.

use std::collections::HashMap;
use std::sync::LazyLock;

use quartz_core::Timestamp;
use quartz_core::store::{ExecuteCas, StoreError, TriggerColumns};
use redis::{FromRedisValue, ToRedisArgs};
use serde_json::{Map, Value, json};

use super::registry::SEQUENCE_BITS;
use super::{RedisStore, error};

/// The library: helpers, then the commands, then the dispatch on ARGV[1].
static LIBRARY: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(concat!(
        include_str!("lua/lib.lua"),
        include_str!("lua/engine.lua"),
        include_str!("lua/admin.lua"),
        include_str!("lua/reads.lua"),
    ))
});

/// Whether the server did not have the script.
fn no_script(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// A record as a script returns it: a hash's fields.
pub(super) type Record = HashMap<String, String>;

/// A number as a script argument.
pub(super) fn num(n: impl std::fmt::Display) -> Value {
    Value::String(n.to_string())
}

/// An optional number ("" for none).
pub(super) fn opt(n: Option<impl std::fmt::Display>) -> Value {
    Value::String(n.map(|n| n.to_string()).unwrap_or_default())
}

/// An optional time in milliseconds ("" for none).
pub(super) fn ms(t: Option<Timestamp>) -> Value {
    opt(t.map(Timestamp::as_millis))
}

/// A flag ("1" or "").
pub(super) fn flag(b: bool) -> Value {
    Value::String(if b { "1" } else { "" }.to_owned())
}

/// An execute's compare-and-set as the script's fields (see `cas_execute`
/// in `lua/lib.lua`).
pub(super) fn cas_fields(cas: &ExecuteCas) -> Map<String, Value> {
    let signature = cas
        .set_trigger
        .as_ref()
        .map(|t| TriggerColumns::from_trigger(t).signature())
        .or(cas.set_signature);
    let value = json!({
        "id": num(cas.execute_id),
        "es": cas.expect_state.as_str(),
        "ep": ms(cas.expect.prev_fire_time),
        "en": ms(cas.expect.next_fire_time),
        "ek": num(cas.expect.calendar_stamp),
        "eo": flag(cas.expect_owner.is_some()),
        "eon": cas.expect_owner.as_ref().map(|o| o.node_id.clone()).unwrap_or_default(),
        "eoi": opt(cas.expect_owner.as_ref().map(|o| o.incarnation)),
        "ss": cas.set_state.as_str(),
        "sp": ms(cas.set.prev_fire_time),
        "sn": ms(cas.set.next_fire_time),
        "st": num(cas.set.times_triggered),
        "son": cas.set_owner.as_ref().map(|o| o.node_id.clone()).unwrap_or_default(),
        "soi": opt(cas.set_owner.as_ref().map(|o| o.incarnation)),
        "sig": opt(signature),
        "rs": flag(cas.set_trigger.is_some()),
        "rstart": opt(cas.set_trigger.as_ref().map(|t| t.start().as_millis())),
        "rlimit": opt(cas.set_trigger.as_ref().and_then(|t| t.repeat_limit())),
    });
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

impl RedisStore {
    /// Runs a command of the library on a scheduler's keys, with the id base
    /// of its number.
    pub(super) async fn run<T: FromRedisValue>(
        &self,
        scheduler: &str,
        number: i64,
        command: &str,
        args: &Value,
    ) -> Result<T, StoreError> {
        let keys = self.keys(scheduler)?;
        self.eval(
            &LIBRARY,
            &[keys.prefix()],
            (command, args.to_string(), number << SEQUENCE_BITS),
        )
        .await
    }

    /// Runs a script by `EVALSHA` on the master of its keys' slot
    /// (loading it when the server has not got it), then, with
    /// `wait_replicas`, `WAIT`s in the same round trip until that many
    /// replicas hold what it wrote: a failover of the master cannot lose an
    /// answered write then.
    ///
    /// # Errors
    ///
    /// The script's error; [`StoreError::Unavailable`] when fewer replicas
    /// acknowledged the write within `wait_timeout_ms` (the write is made on
    /// the master, and may or may not survive its failover: an outcome not
    /// known, as a lost answer is).
    pub(super) async fn eval<T: FromRedisValue>(
        &self,
        script: &redis::Script,
        keys: &[&str],
        args: impl ToRedisArgs,
    ) -> Result<T, StoreError> {
        let mut eval = redis::cmd("EVALSHA");
        eval.arg(script.get_hash()).arg(keys.len()).arg(keys).arg(args);
        let mut conn = self.conn.clone();
        let Some(wait) = self.wait else {
            return match eval.query_async(&mut conn).await {
                Err(e) if no_script(&e) => {
                    script.load_async(&mut conn).await.map_err(|e| error(&e))?;
                    eval.query_async(&mut conn).await
                }
                other => other,
            }
            .map_err(|e| error(&e));
        };
        let mut pipe = redis::pipe();
        pipe.add_command(eval)
            .cmd("WAIT")
            .arg(wait.replicas)
            .arg(wait.timeout_ms);
        let (value, acknowledged): (T, u32) = match pipe.query_async(&mut conn).await {
            Err(e) if no_script(&e) => {
                script.load_async(&mut conn).await.map_err(|e| error(&e))?;
                pipe.query_async(&mut conn).await
            }
            other => other,
        }
        .map_err(|e| error(&e))?;
        if acknowledged < wait.replicas {
            return Err(StoreError::Unavailable {
                reason: format!(
                    "a write reached {acknowledged} of the {} replicas asked for (wait_replicas) within {} ms; it \
                     is made on the master but may be lost if the master fails over",
                    wait.replicas, wait.timeout_ms
                ),
            });
        }
        Ok(value)
    }

    /// A command that may write: the scheduler is registered first.
    pub(super) async fn write<T: FromRedisValue>(
        &self,
        scheduler: &str,
        command: &str,
        args: &Value,
    ) -> Result<T, StoreError> {
        let number = self.number(scheduler).await?;
        self.run(scheduler, number, command, args).await
    }

    /// A command on the scheduler of a record named by id alone; `None`
    /// when no scheduler has that id's number.
    pub(super) async fn on_id<T: FromRedisValue>(
        &self,
        id: i64,
        command: &str,
        args: &Value,
    ) -> Result<Option<T>, StoreError> {
        match self.scheduler_of(id).await? {
            Some((scheduler, number)) => self.run(&scheduler, number, command, args).await.map(Some),
            None => Ok(None),
        }
    }
}
