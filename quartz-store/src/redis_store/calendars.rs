//! Calendars on Redis: read together with their version, and a calendar
//! added or replaced with the triggers that use it rescheduled in one step.

use quartz_core::calendar::CalendarDefinition;
use quartz_core::store::{CalendarRecord, CalendarStore, ChangeAction, ExecuteState, JobState, StoreError};
use serde_json::json;

use super::RedisStore;
use super::decode;
use super::script::{Record, flag, ms, num, opt};
use super::store::{Answer, TRIES};
use crate::common::{self, CalendarSet, by_name, recalendared};

/// The calendars of a scheduler as read together, with their version.
pub(super) struct CalendarSnapshot {
    pub(super) records: Vec<CalendarRecord>,
    /// The waiting and paused executes that name a calendar (when asked).
    pub(super) users: Vec<Record>,
    pub(super) version: String,
}

impl RedisStore {
    /// Adds or replaces a calendar and reschedules its users in one step;
    /// with `only_new`, adds it only if none of that name exists.
    pub(super) async fn calendar_write(
        &self,
        scheduler: &str,
        name: &str,
        definition: &CalendarDefinition,
        only_new: bool,
        expected_version: Option<i64>,
    ) -> Result<CalendarRecord, StoreError> {
        let json = common::calendar_text(scheduler, name, definition)?;
        self.keys(scheduler)?;
        for _ in 0..TRIES {
            let snapshot = self.calendar_snapshot(scheduler, true).await?;
            let mut definitions = by_name(snapshot.records);
            let existed = definitions.insert(name.to_owned(), definition.clone()).is_some();
            let users = common::changed_calendars(&definitions, name)?;
            let set = CalendarSet::resolve(&definitions, users.iter().map(String::as_str));
            let now = self.clock().await?;
            let mut updates = Vec::new();
            for record in &snapshot.users {
                if !record.get("calendar").is_some_and(|c| users.contains(c)) {
                    continue;
                }
                // A row that cannot be read is left to the poll, which marks it.
                let Ok(execute) = decode::execute(record, scheduler, &set) else {
                    continue;
                };
                let job_state = record.get("job_state").map_or("", String::as_str);
                let paused = job_state == JobState::Paused.as_str();
                let Some((state, next)) = recalendared(&execute, paused, now) else {
                    continue;
                };
                // A revived row's state follows its job's: the write checks it.
                let revived = execute.state == ExecuteState::Complete;
                let expect = &execute.fire_state;
                updates.push(json!({
                    "id": num(execute.id),
                    "es": execute.state.as_str(),
                    "ep": ms(expect.prev_fire_time),
                    "en": ms(expect.next_fire_time),
                    "ek": num(expect.calendar_stamp),
                    "ss": state.as_str(),
                    "sn": ms(next),
                    "js": if revived { job_state } else { "" },
                }));
            }
            let detail = common::calendar_detail(existed, definition, updates.len());
            let args = json!({
                "name": name,
                "definition": json,
                "calendars_version": snapshot.version,
                "only_new": flag(only_new),
                "expected": opt(expected_version),
                "updates": updates,
                "change": self.change(ChangeAction::CalendarPut, name, &detail),
            });
            let reply: Vec<String> = self.write(scheduler, "calendar_put", &args).await?;
            if let Answer::Ok = Self::answer(scheduler, name, &reply)? {
                return self
                    .get_calendar(name)
                    .await?
                    .ok_or_else(|| StoreError::UnknownCalendar {
                        scheduler: scheduler.to_owned(),
                        name: name.to_owned(),
                    });
            }
        }
        Err(StoreError::Conflict {
            reason: format!("the triggers using calendar {name:?} kept changing; try again"),
        })
    }

    /// The scheduler's calendars (and, with `users`, the executes that use
    /// one), read in one step.
    pub(super) async fn calendar_snapshot(&self, scheduler: &str, users: bool) -> Result<CalendarSnapshot, StoreError> {
        let (records, users, version): (Vec<Record>, Vec<Record>, String) = self
            .run(scheduler, 0, "calendars", &json!({ "users": flag(users) }))
            .await?;
        let mut records = records.iter().map(decode::calendar).collect::<Result<Vec<_>, _>>()?;
        records.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(CalendarSnapshot {
            records,
            users,
            version,
        })
    }

    /// The calendars that records name, resolved.
    pub(super) async fn calendars_for(&self, scheduler: &str, records: &[Record]) -> Result<CalendarSet, StoreError> {
        let names: Vec<&str> = records
            .iter()
            .filter_map(|r| r.get("calendar"))
            .map(String::as_str)
            .collect();
        if names.is_empty() {
            return Ok(CalendarSet::default());
        }
        let snapshot = self.calendar_snapshot(scheduler, false).await?;
        Ok(CalendarSet::resolve(&by_name(snapshot.records), names.into_iter()))
    }
}
