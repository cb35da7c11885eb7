//! Rows to the store's types: a row that cannot be decoded is reported for
//! that row, never as a failure of the whole call.

use quartz_core::Timestamp;
use quartz_core::store::{
    ConcurrencyLimit, DEFAULT_LIMIT_KEY, Execute, ExecuteState, FireRecord, FireState, Job, JobSpec, JobState, Node,
    NodeRef, StoreError, TriggerColumns,
};
use sqlx::Row;
use sqlx::any::AnyRow;

use super::*;

// ---- decoding ----

pub(super) struct RowError {
    pub(super) id: i64,
    pub(super) reason: String,
}

/// An execute row, its trigger's calendar taken from `calendars` (read for
/// the rows by [`SqlStore::calendars_for`]).
pub(super) fn decode_execute(row: &AnyRow, calendars: &CalendarSet) -> Result<Execute, RowError> {
    let id: i64 = row.try_get("id").map_err(|e| RowError {
        id: -1,
        reason: e.to_string(),
    })?;
    let fail = |reason: String| RowError { id, reason };
    let get_i64 = |col: &str| row.try_get::<i64, _>(col).map_err(|e| fail(e.to_string()));
    let get_opt_i64 = |col: &str| row.try_get::<Option<i64>, _>(col).map_err(|e| fail(e.to_string()));
    let get_opt_str = |col: &str| row.try_get::<Option<String>, _>(col).map_err(|e| fail(e.to_string()));
    let get_str = |col: &str| row.try_get::<String, _>(col).map_err(|e| fail(e.to_string()));
    let columns = TriggerColumns {
        kind: get_str("kind")?,
        cron_expression: get_opt_str("cron_expression")?,
        time_zone: get_opt_str("time_zone")?,
        interval_ms: get_opt_i64("interval_ms")?,
        start_time: get_i64("start_time")?,
        end_time: get_opt_i64("end_time")?,
        repeat_limit: get_opt_i64("repeat_limit")?,
        misfire_policy: get_str("misfire_policy")?,
        calendar: get_opt_str("calendar")?,
        dst_skipped: get_opt_str("dst_skipped")?,
        dst_repeated: get_opt_str("dst_repeated")?,
        jitter_ms: get_opt_i64("jitter_ms")?,
        jitter_seed: get_opt_i64("jitter_seed")?,
        catch_up_ms: get_opt_i64("catch_up_ms")?,
        overlap: get_opt_str("overlap")?,
    };
    let trigger = calendars
        .attach(columns.to_trigger().map_err(|e| fail(e.to_string()))?)
        .map_err(fail)?;
    let schedule_changed = get_opt_i64("schedule_sig")? != Some(columns.signature());
    let state = ExecuteState::parse(&get_str("state")?).map_err(|e| fail(e.to_string()))?;
    let times_triggered =
        u64::try_from(get_i64("times_triggered")?).map_err(|_| fail("negative times_triggered".into()))?;
    let next_fire_time = get_opt_i64("next_fire_time")?.map(Timestamp::from_millis);
    let owner = match (get_opt_str("node_id")?, get_opt_i64("incarnation")?) {
        (Some(node_id), incarnation) => Some(NodeRef {
            node_id,
            incarnation: incarnation.unwrap_or(0),
        }),
        (None, _) => None,
    };
    Ok(Execute {
        id,
        job_id: get_i64("job_id")?,
        scheduler: get_str("scheduler")?,
        priority: i32::try_from(get_i64("priority")?).map_err(|_| fail("priority out of range".into()))?,
        fire_state: TriggerState {
            prev_fire_time: get_opt_i64("prev_fire_time")?.map(Timestamp::from_millis),
            next_fire_time,
            times_triggered,
            awaiting_finish: state == ExecuteState::Running && next_fire_time.is_none(),
            calendar_stamp: get_i64("calendar_stamp")?,
        },
        trigger,
        state,
        owner,
        error: get_opt_str("error")?,
        schedule_changed,
    })
}

pub(super) fn decode_job(row: &AnyRow) -> Result<Job, StoreError> {
    let job = (|| -> Result<Job, Box<dyn std::error::Error + Send + Sync>> {
        Ok(Job {
            id: row.try_get("id")?,
            scheduler: row.try_get("scheduler")?,
            spec: JobSpec {
                name: row.try_get("name")?,
                handler: row.try_get("handler")?,
                payload: row.try_get("payload")?,
                description: row.try_get("description")?,
                requests_recovery: row.try_get::<i64, _>("requests_recovery")? != 0,
                allow_concurrent: row.try_get::<i64, _>("allow_concurrent")? != 0,
                timeout: row
                    .try_get::<Option<i64>, _>("timeout_ms")?
                    .map(stored_duration)
                    .transpose()?,
                retry: RetryPolicy {
                    max_attempts: u32::try_from(row.try_get::<i64, _>("max_attempts")?)?,
                    backoff: stored_duration(row.try_get("backoff_ms")?)?,
                    backoff_max: row
                        .try_get::<Option<i64>, _>("backoff_max_ms")?
                        .map(stored_duration)
                        .transpose()?,
                },
                parent: row.try_get("parent_job")?,
                limit: match row.try_get::<Option<i64>, _>("concurrency_limit")? {
                    Some(max) => Some(ConcurrencyLimit::new(
                        u32::try_from(max)?,
                        row.try_get::<Option<String>, _>("concurrency_key")?
                            .unwrap_or_else(|| DEFAULT_LIMIT_KEY.to_owned()),
                    )),
                    None => None,
                },
            },
            state: JobState::parse(&row.try_get::<String, _>("state")?)?,
            created_at: Timestamp::from_millis(row.try_get("created_at")?),
            updated_at: Timestamp::from_millis(row.try_get("updated_at")?),
            version: row.try_get("version")?,
        })
    })();
    job.map_err(|e| StoreError::Database {
        reason: format!("job row cannot be decoded: {e}"),
    })
}

pub(super) fn decode_node(row: &AnyRow) -> Result<Node, StoreError> {
    let node = (|| -> Result<Node, Box<dyn std::error::Error + Send + Sync>> {
        Ok(Node {
            scheduler: row.try_get("scheduler")?,
            node_id: row.try_get("node_id")?,
            host: row.try_get("host")?,
            pid: u32::try_from(row.try_get::<i64, _>("pid")?)?,
            weight: u32::try_from(row.try_get::<i64, _>("weight")?)?,
            state: NodeState::parse(&row.try_get::<String, _>("state")?)?,
            incarnation: row.try_get("incarnation")?,
            registered_at: Timestamp::from_millis(row.try_get("registered_at")?),
            heartbeat_at: Timestamp::from_millis(row.try_get("heartbeat_at")?),
            busy: u64::try_from(row.try_get::<i64, _>("busy")?)?,
            handlers: match row.try_get::<Option<String>, _>("handlers")? {
                Some(text) => serde_json::from_str(&text)?,
                None => Vec::new(),
            },
            dead_after: row
                .try_get::<Option<i64>, _>("dead_after_ms")?
                .map(stored_duration)
                .transpose()?,
        })
    })();
    node.map_err(|e| StoreError::Database {
        reason: format!(
            "node row {:?} cannot be decoded: {e}",
            row.try_get::<String, _>("node_id").unwrap_or_default()
        ),
    })
}

pub(super) fn decode_fire(row: &AnyRow) -> Result<FireRecord, StoreError> {
    let fire = (|| -> Result<FireRecord, Box<dyn std::error::Error + Send + Sync>> {
        let ms = |col: &str| -> Result<Option<Timestamp>, sqlx::Error> {
            Ok(row.try_get::<Option<i64>, _>(col)?.map(Timestamp::from_millis))
        };
        Ok(FireRecord {
            id: row.try_get("id")?,
            execute_id: row.try_get("execute_id")?,
            job_id: row.try_get("job_id")?,
            fire_time: Timestamp::from_millis(row.try_get("fire_time")?),
            attempt: u32::try_from(row.try_get::<i64, _>("attempt")?)?,
            owner: row.try_get::<Option<String>, _>("node_id")?.map(|node_id| NodeRef {
                node_id,
                incarnation: row.try_get::<i64, _>("incarnation").unwrap_or(0),
            }),
            state: FireState::parse(&row.try_get::<String, _>("state")?)?,
            claimed_at: Timestamp::from_millis(row.try_get("claimed_at")?),
            started_at: ms("started_at")?,
            finished_at: ms("finished_at")?,
            timed_out_at: ms("timed_out_at")?,
            due_at: ms("due_at")?,
            error: row.try_get("error")?,
            skipped_until: ms("skipped_until")?,
            fire_count: u64::try_from(row.try_get::<i64, _>("fire_count")?)?,
        })
    })();
    fire.map_err(|e| StoreError::Database {
        reason: format!(
            "fire row {} cannot be decoded: {e}",
            row.try_get::<i64, _>("id").unwrap_or_default()
        ),
    })
}

/// A duration stored in milliseconds; a negative one is a row written wrong.
fn stored_duration(ms: i64) -> Result<std::time::Duration, Box<dyn std::error::Error + Send + Sync>> {
    u64::try_from(ms)
        .map(std::time::Duration::from_millis)
        .map_err(|_| format!("a negative duration: {ms} ms").into())
}
