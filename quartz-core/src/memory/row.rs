//! The memory's rows as the SQL stores have them: an execute's columns
//! (decoded into the contract's `Execute` on read) and a change log row to write.

use crate::Timestamp;
use crate::store::rules::CalendarSet;
use crate::store::{ChangeAction, Execute, ExecuteState, NodeRef, TriggerColumns};
use crate::trigger::TriggerState;

/// A change log row to write.
pub(super) struct Change {
    pub(super) actor: String,
    pub(super) action: ChangeAction,
    pub(super) target: String,
    pub(super) target_id: Option<i64>,
    pub(super) detail: String,
}

impl Change {
    /// The same change, of the job or row `id`.
    pub(super) fn on(self, id: i64) -> Change {
        Change {
            target_id: Some(id),
            ..self
        }
    }
}

/// An execute as its columns: edited by hand like a SQL row, read through
/// the same decoding rules.
#[derive(Debug, Clone)]
pub(super) struct Row {
    pub(super) id: i64,
    pub(super) job_id: i64,
    pub(super) scheduler: String,
    pub(super) columns: TriggerColumns,
    pub(super) priority: i64,
    pub(super) state: String,
    pub(super) prev: Option<i64>,
    pub(super) next: Option<i64>,
    pub(super) times_triggered: i64,
    pub(super) node_id: Option<String>,
    pub(super) incarnation: Option<i64>,
    pub(super) error: Option<String>,
    pub(super) schedule_sig: Option<i64>,
    pub(super) calendar_stamp: i64,
    pub(super) updated_at: i64,
}

impl Row {
    /// Sets a field by its SQL column name.
    pub(super) fn set(&mut self, column: &str, value: Option<String>) {
        let int = |v: &Option<String>| v.as_deref().map(|t| t.parse::<i64>().expect("an integer"));
        match column {
            "kind" => self.columns.kind = value.unwrap_or_default(),
            "cron_expression" => self.columns.cron_expression = value,
            "time_zone" => self.columns.time_zone = value,
            "interval_ms" => self.columns.interval_ms = int(&value),
            "start_time" => self.columns.start_time = int(&value).unwrap_or_default(),
            "end_time" => self.columns.end_time = int(&value),
            "repeat_limit" => self.columns.repeat_limit = int(&value),
            "misfire_policy" => self.columns.misfire_policy = value.unwrap_or_default(),
            "calendar" => self.columns.calendar = value,
            "dst_skipped" => self.columns.dst_skipped = value,
            "dst_repeated" => self.columns.dst_repeated = value,
            "jitter_ms" => self.columns.jitter_ms = int(&value),
            "jitter_seed" => self.columns.jitter_seed = int(&value),
            "catch_up_ms" => self.columns.catch_up_ms = int(&value),
            "overlap" => self.columns.overlap = value,
            "priority" => self.priority = int(&value).unwrap_or_default(),
            "state" => self.state = value.unwrap_or_default(),
            "prev_fire_time" => self.prev = int(&value),
            "next_fire_time" => self.next = int(&value),
            "times_triggered" => self.times_triggered = int(&value).unwrap_or_default(),
            "node_id" => self.node_id = value,
            "incarnation" => self.incarnation = int(&value),
            "error" => self.error = value,
            "schedule_sig" => self.schedule_sig = int(&value),
            "calendar_stamp" => self.calendar_stamp = int(&value).unwrap_or_default(),
            other => panic!("no execute column {other:?}"),
        }
    }

    /// The row as the store's type, its calendar taken from `calendars`.
    pub(super) fn decode(&self, calendars: &CalendarSet) -> Result<Execute, String> {
        let trigger = calendars.attach(self.columns.to_trigger().map_err(|e| e.to_string())?)?;
        let state = ExecuteState::parse(&self.state).map_err(|e| e.to_string())?;
        let times_triggered = u64::try_from(self.times_triggered).map_err(|_| "negative times_triggered")?;
        let next_fire_time = self.next.map(Timestamp::from_millis);
        Ok(Execute {
            id: self.id,
            job_id: self.job_id,
            scheduler: self.scheduler.clone(),
            schedule_changed: self.schedule_sig != Some(self.columns.signature()),
            trigger,
            priority: i32::try_from(self.priority).map_err(|_| "priority out of range")?,
            state,
            fire_state: TriggerState {
                prev_fire_time: self.prev.map(Timestamp::from_millis),
                next_fire_time,
                times_triggered,
                awaiting_finish: state == ExecuteState::Running && next_fire_time.is_none(),
                calendar_stamp: self.calendar_stamp,
            },
            owner: self.owner(),
            error: self.error.clone(),
        })
    }

    /// The node that owns it (a running fixed-delay execute's).
    pub(super) fn owner(&self) -> Option<NodeRef> {
        self.node_id.clone().map(|node_id| NodeRef {
            node_id,
            incarnation: self.incarnation.unwrap_or(0),
        })
    }
}
