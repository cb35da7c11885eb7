//! The library (the `lua/` files, one text) and how the store calls it:
//! every command one call, its arguments one JSON object of strings. On
//! Redis 7 the library is a function, loaded once (`FUNCTION LOAD`) and
//! called with `FCALL`; where the server has no functions (Redis 6) or does
//! not let the store's user load them, it is a script called with
//! `EVALSHA`, which runs the whole library again on every call (50–130 µs
//! of the server's time a call on the project's machine, measured in
//! BENCHMARKS.md).

use std::collections::HashMap;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};

use quartz_core::Timestamp;
use quartz_core::store::{ExecuteCas, StoreError, TriggerColumns};
use redis::{FromRedisValue, ToRedisArgs};
use serde_json::{Map, Value, json};

use super::registry::SEQUENCE_BITS;
use super::{RedisStore, error};

/// The library's text: helpers, the commands, and `call`, which reads a
/// call's arguments and runs its command.
const LIBRARY: &str = concat!(
    include_str!("lua/lib.lua"),
    include_str!("lua/engine.lua"),
    include_str!("lua/admin.lua"),
    include_str!("lua/reads.lua"),
);

/// The library as a script.
static SCRIPT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&format!("{LIBRARY}\nreturn call(KEYS, ARGV)\n")));

/// The library as a Redis function: named after its text, so that nodes of
/// two builds (during a rolling upgrade) each call their own.
struct Function {
    /// The library's and its one function's name.
    name: String,
    /// What `FUNCTION LOAD` takes.
    code: String,
}

static FUNCTION: LazyLock<Function> = LazyLock::new(|| {
    let name = format!("quartz_{}", &SCRIPT.get_hash()[..16]);
    let code = format!("#!lua name={name}\n{LIBRARY}\nredis.register_function('{name}', call)\n");
    Function { name, code }
});

/// What a call runs, to load it again where the server has lost it (a
/// restart forgets scripts; a new master of a cluster's slot may lack the
/// function).
#[derive(Clone, Copy)]
pub(super) enum Code<'a> {
    Script(&'a redis::Script),
    Function,
}

/// How the library is called on this store's server: as a function, or,
/// where loading it failed at connect, as a script.
#[derive(Debug, Default)]
pub(super) struct Calls {
    functions: AtomicBool,
}

/// Whether the server did not have the script or the function.
fn missing(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
        || e.detail().is_some_and(|d| d.starts_with("Function not found"))
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
        "un": flag(cas.recomputes()),
    });
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// Loads the library as a function on every master (replacing a library
/// of the same name, which has the same text).
async fn load_function(conn: &mut super::conn::Conn) -> redis::RedisResult<()> {
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(&FUNCTION.code)
        .query_async::<redis::Value>(conn)
        .await
        .map(drop)
}

/// Loads what a call runs.
async fn load(code: Code<'_>, conn: &mut super::conn::Conn) -> redis::RedisResult<()> {
    match code {
        Code::Script(script) => script.load_async(conn).await.map(drop),
        Code::Function => load_function(conn).await,
    }
}

impl RedisStore {
    /// Loads the library as a function where the server has not got it
    /// (loading costs the server a few milliseconds), to be called as one
    /// from now on. A server without functions or a user not allowed
    /// to load them leaves it a script, and says so once; a connection lost
    /// meanwhile leaves it to the first call.
    pub(super) async fn load_library(&self) {
        let mut conn = self.conn.clone();
        // On a cluster this asks one node; a master without the function
        // loads it at its first call.
        let listed = redis::cmd("FUNCTION")
            .arg("LIST")
            .arg("LIBRARYNAME")
            .arg(&FUNCTION.name)
            .query_async::<redis::Value>(&mut conn)
            .await;
        let loaded = match listed {
            Ok(redis::Value::Array(libraries)) if !libraries.is_empty() => Ok(()),
            Ok(_) => load_function(&mut conn).await,
            Err(e) => Err(e),
        };
        let loaded = match loaded {
            Ok(()) => true,
            // Reached a moment ago (the schema was read): the first call
            // that finds the function missing loads it.
            Err(e) if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() => {
                tracing::debug!(reason = %e, "the store's Redis library is loaded at its first call");
                true
            }
            Err(e) => {
                tracing::info!(
                    reason = %e,
                    "the store's Redis library runs as a script (EVALSHA): the server did not load it as a \
                     function (Redis 7's FUNCTION LOAD), so every call runs the whole library again"
                );
                false
            }
        };
        self.calls.functions.store(loaded, Ordering::Relaxed);
    }

    /// Whether the library is called as a function.
    pub fn library_is_function(&self) -> bool {
        self.calls.functions.load(Ordering::Relaxed)
    }

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
        let args = (command, args.to_string(), number << SEQUENCE_BITS);
        if !self.library_is_function() {
            return self.eval(&SCRIPT, &[keys.prefix()], args).await;
        }
        let mut call = redis::cmd("FCALL");
        call.arg(&FUNCTION.name).arg(1).arg(keys.prefix()).arg(args);
        self.send(call, Code::Function).await
    }

    /// Runs a script by `EVALSHA` on the master of its keys' slot (see
    /// [`RedisStore::send`]).
    pub(super) async fn eval<T: FromRedisValue>(
        &self,
        script: &redis::Script,
        keys: &[&str],
        args: impl ToRedisArgs,
    ) -> Result<T, StoreError> {
        let mut eval = redis::cmd("EVALSHA");
        eval.arg(script.get_hash()).arg(keys.len()).arg(keys).arg(args);
        self.send(eval, Code::Script(script)).await
    }

    /// Sends a call of a script or of the library's function (loading it
    /// where the server has not got it), then, with `wait_replicas`,
    /// `WAIT`s in the same round trip until that many replicas hold what it
    /// wrote: a failover of the master cannot lose an answered write then.
    ///
    /// # Errors
    ///
    /// The script's error; [`StoreError::Unavailable`] when fewer replicas
    /// acknowledged the write within `wait_timeout_ms` (the write is made on
    /// the master, and may or may not survive its failover: an outcome not
    /// known, as a lost answer is).
    async fn send<T: FromRedisValue>(&self, call: redis::Cmd, code: Code<'_>) -> Result<T, StoreError> {
        let mut conn = self.conn.clone();
        let Some(wait) = self.wait else {
            return match call.query_async(&mut conn).await {
                Err(e) if missing(&e) => {
                    load(code, &mut conn).await.map_err(|e| error(&e))?;
                    call.query_async(&mut conn).await
                }
                other => other,
            }
            .map_err(|e| error(&e));
        };
        let mut pipe = redis::pipe();
        pipe.add_command(call)
            .cmd("WAIT")
            .arg(wait.replicas)
            .arg(wait.timeout_ms);
        let (value, acknowledged): (T, u32) = match pipe.query_async(&mut conn).await {
            Err(e) if missing(&e) => {
                load(code, &mut conn).await.map_err(|e| error(&e))?;
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
