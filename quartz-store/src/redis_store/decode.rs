//! Records (a hash's fields, named as the SQL backends' columns) to the
//! store's types. A record that cannot be decoded is reported for that
//! record, never as a failure of the whole call.

use std::str::FromStr;
use std::time::Duration;

use quartz_core::Timestamp;
use quartz_core::calendar::CalendarDefinition;
use quartz_core::store::{
    CalendarRecord, ChangeRecord, ConcurrencyLimit, DEFAULT_LIMIT_KEY, Execute, ExecuteState, FireRecord, FireState,
    Job, JobSpec, JobState, Node, NodeRef, NodeState, RetryPolicy, StoreError, TriggerColumns,
};
use quartz_core::trigger::TriggerState;

use super::script::Record;
use crate::common::CalendarSet;

/// Typed access to a record's fields.
struct Fields<'a>(&'a Record);

impl Fields<'_> {
    fn text(&self, field: &str) -> Result<String, String> {
        self.0.get(field).cloned().ok_or_else(|| format!("no {field}"))
    }

    fn opt_text(&self, field: &str) -> Option<String> {
        self.0.get(field).cloned()
    }

    fn opt<T: FromStr>(&self, field: &str) -> Result<Option<T>, String> {
        self.0
            .get(field)
            .map(|v| v.parse::<T>().map_err(|_| format!("{field} is not a number: {v:?}")))
            .transpose()
    }

    fn num<T: FromStr>(&self, field: &str) -> Result<T, String> {
        self.opt(field)?.ok_or_else(|| format!("no {field}"))
    }

    fn time(&self, field: &str) -> Result<Timestamp, String> {
        self.num(field).map(Timestamp::from_millis)
    }

    fn opt_time(&self, field: &str) -> Result<Option<Timestamp>, String> {
        Ok(self.opt(field)?.map(Timestamp::from_millis))
    }

    fn duration(&self, field: &str) -> Result<Option<Duration>, String> {
        Ok(self.opt::<u64>(field)?.map(Duration::from_millis))
    }
}

fn corrupt(what: &str, record: &Record, reason: &str) -> StoreError {
    StoreError::Database {
        reason: format!(
            "{what} record {} cannot be decoded: {reason}",
            record.get("id").map_or("?", String::as_str)
        ),
    }
}

/// An execute that cannot be decoded: its id and why.
pub(super) struct Rejected {
    pub(super) id: i64,
    pub(super) reason: String,
}

/// An execute, its calendar taken from `calendars`.
pub(super) fn execute(record: &Record, scheduler: &str, calendars: &CalendarSet) -> Result<Execute, Rejected> {
    let f = Fields(record);
    let id = f.num::<i64>("id").map_err(|reason| Rejected { id: -1, reason })?;
    let decoded = (|| -> Result<Execute, String> {
        let columns = TriggerColumns {
            kind: f.text("kind")?,
            cron_expression: f.opt_text("cron_expression"),
            time_zone: f.opt_text("time_zone"),
            interval_ms: f.opt("interval_ms")?,
            start_time: f.num("start_time")?,
            end_time: f.opt("end_time")?,
            repeat_limit: f.opt("repeat_limit")?,
            misfire_policy: f.text("misfire_policy")?,
            calendar: f.opt_text("calendar"),
            dst_skipped: f.opt_text("dst_skipped"),
            dst_repeated: f.opt_text("dst_repeated"),
            jitter_ms: f.opt("jitter_ms")?,
            jitter_seed: f.opt("jitter_seed")?,
            catch_up_ms: f.opt("catch_up_ms")?,
            overlap: f.opt_text("overlap"),
        };
        let trigger = calendars.attach(columns.to_trigger().map_err(|e| e.to_string())?)?;
        let state = ExecuteState::parse(&f.text("state")?).map_err(|e| e.to_string())?;
        let next_fire_time = f.opt_time("next_fire_time")?;
        Ok(Execute {
            id,
            job_id: f.num("job_id")?,
            scheduler: scheduler.to_owned(),
            priority: f.opt("priority")?.unwrap_or(0),
            fire_state: TriggerState {
                prev_fire_time: f.opt_time("prev_fire_time")?,
                next_fire_time,
                times_triggered: f.opt("times_triggered")?.unwrap_or(0),
                awaiting_finish: state == ExecuteState::Running && next_fire_time.is_none(),
                calendar_stamp: f.opt("calendar_stamp")?.unwrap_or(0),
            },
            schedule_changed: f.opt::<i64>("schedule_sig")? != Some(columns.signature()),
            trigger,
            state,
            owner: f.opt_text("node_id").map(|node_id| NodeRef {
                node_id,
                incarnation: f.opt("incarnation").ok().flatten().unwrap_or(0),
            }),
            error: f.opt_text("error"),
        })
    })();
    decoded.map_err(|reason| Rejected { id, reason })
}

pub(super) fn job(record: &Record, scheduler: &str) -> Result<Job, StoreError> {
    let f = Fields(record);
    let decoded = (|| -> Result<Job, String> {
        Ok(Job {
            id: f.num("id")?,
            scheduler: scheduler.to_owned(),
            spec: JobSpec {
                name: f.text("name")?,
                handler: f.text("handler")?,
                payload: f.opt_text("payload").unwrap_or_else(|| "null".to_owned()),
                description: f.opt_text("description").unwrap_or_default(),
                requests_recovery: f.opt_text("requests_recovery").as_deref() == Some("1"),
                allow_concurrent: f.opt_text("allow_concurrent").as_deref() != Some("0"),
                timeout: f.duration("timeout_ms")?,
                retry: RetryPolicy {
                    max_attempts: f.opt("max_attempts")?.unwrap_or(1),
                    backoff: f.duration("backoff_ms")?.unwrap_or_default(),
                    backoff_max: f.duration("backoff_max_ms")?,
                },
                parent: f.opt_text("parent_job"),
                limit: f.opt::<u32>("concurrency_limit")?.map(|max| {
                    let key = f.opt_text("concurrency_key");
                    ConcurrencyLimit::new(max, key.unwrap_or_else(|| DEFAULT_LIMIT_KEY.to_owned()))
                }),
            },
            state: JobState::parse(&f.text("state")?).map_err(|e| e.to_string())?,
            created_at: f.time("created_at")?,
            updated_at: f.time("updated_at")?,
            // A job stored before versions is at its first.
            version: f.opt("version")?.unwrap_or(1),
        })
    })();
    decoded.map_err(|reason| corrupt("job", record, &reason))
}

pub(super) fn fire(record: &Record) -> Result<FireRecord, StoreError> {
    let f = Fields(record);
    let decoded = (|| -> Result<FireRecord, String> {
        Ok(FireRecord {
            id: f.num("id")?,
            execute_id: f.num("execute_id")?,
            job_id: f.num("job_id")?,
            fire_time: f.time("fire_time")?,
            attempt: f.num("attempt")?,
            owner: f.opt_text("node_id").map(|node_id| NodeRef {
                node_id,
                incarnation: f.opt("incarnation").ok().flatten().unwrap_or(0),
            }),
            state: FireState::parse(&f.text("state")?).map_err(|e| e.to_string())?,
            claimed_at: f.time("claimed_at")?,
            started_at: f.opt_time("started_at")?,
            finished_at: f.opt_time("finished_at")?,
            timed_out_at: f.opt_time("timed_out_at")?,
            due_at: f.opt_time("due_at")?,
            error: f.opt_text("error"),
            skipped_until: f.opt_time("skipped_until")?,
            fire_count: f.opt("fire_count")?.unwrap_or(1),
        })
    })();
    decoded.map_err(|reason| corrupt("fire", record, &reason))
}

pub(super) fn node(record: &Record, scheduler: &str) -> Result<Node, StoreError> {
    let f = Fields(record);
    let decoded = (|| -> Result<Node, String> {
        Ok(Node {
            scheduler: scheduler.to_owned(),
            node_id: f.text("node_id")?,
            host: f.opt_text("host").unwrap_or_default(),
            pid: f.opt("pid")?.unwrap_or(0),
            weight: f.opt("weight")?.unwrap_or(1),
            state: NodeState::parse(&f.text("state")?).map_err(|e| e.to_string())?,
            incarnation: f.num("incarnation")?,
            registered_at: f.time("registered_at")?,
            heartbeat_at: f.time("heartbeat_at")?,
            busy: f.opt("busy")?.unwrap_or(0),
            handlers: match f.opt_text("handlers") {
                Some(text) => serde_json::from_str(&text).map_err(|e| e.to_string())?,
                None => Vec::new(),
            },
            dead_after: f.opt::<u64>("dead_after")?.map(Duration::from_millis),
        })
    })();
    decoded.map_err(|reason| corrupt("node", record, &reason))
}

pub(super) fn calendar(record: &Record) -> Result<CalendarRecord, StoreError> {
    let f = Fields(record);
    let decoded = (|| -> Result<CalendarRecord, String> {
        let name = f.text("name")?;
        let definition: CalendarDefinition = serde_json::from_str(&f.text("definition")?)
            .map_err(|e| format!("the stored definition of {name:?} cannot be read: {e}"))?;
        Ok(CalendarRecord {
            name,
            definition,
            created_at: f.time("created_at")?,
            updated_at: f.time("updated_at")?,
            version: f.opt("version")?.unwrap_or(1),
        })
    })();
    decoded.map_err(|reason| corrupt("calendar", record, &reason))
}

pub(super) fn change(record: &Record, scheduler: &str) -> Result<ChangeRecord, StoreError> {
    let f = Fields(record);
    let decoded = (|| -> Result<ChangeRecord, String> {
        Ok(ChangeRecord {
            id: f.num("id")?,
            scheduler: scheduler.to_owned(),
            at: f.time("at")?,
            actor: f.text("actor")?,
            action: f.text("action")?,
            target: f.text("target")?,
            detail: f.opt_text("detail").unwrap_or_default(),
            target_id: f.opt("target_id")?,
        })
    })();
    decoded.map_err(|reason| corrupt("change", record, &reason))
}
