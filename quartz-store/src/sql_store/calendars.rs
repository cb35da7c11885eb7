//! Calendars: the `quartz_calendar` rows, read with the execute rows that
//! name them, and their changes, which reschedule the triggers that use
//! them in the change's own transaction.

use super::convert::Statement as _;
use std::collections::{HashMap, HashSet};

use quartz_core::calendar::CalendarDefinition;
use quartz_core::store::{CalendarRecord, ChangeAction, ExecuteState, JobState, StoreError};
use quartz_core::{Error, Timestamp};
use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

use super::*;
use crate::common::{by_name, changed_calendars, recalendared};
use async_trait::async_trait;

/// The jobs of the complete executes that name a calendar, and their state,
/// locked in id order.
const JOBS_OF_COMPLETE: &str = "SELECT id, state FROM quartz_job WHERE id IN (SELECT job_id FROM quartz_execute \
     WHERE scheduler = ? AND calendar IS NOT NULL AND state = 'complete') ORDER BY id{for_update}";

/// The executes a calendar change may move, locked in id order: those that
/// name a calendar and wait, are paused or are complete.
const CALENDAR_USERS: &str = concat!(
    "SELECT ",
    execute_cols!(),
    " FROM quartz_execute WHERE scheduler = ? AND calendar IS NOT NULL \
     AND state IN ('waiting', 'paused', 'complete') ORDER BY id{for_update}"
);

fn decode_record(row: &AnyRow) -> Result<CalendarRecord, StoreError> {
    let name: String = row.try_get("name").map_err(db_error)?;
    let json: String = row.try_get("definition").map_err(db_error)?;
    let definition = serde_json::from_str(&json).map_err(|e| Error::InvalidCalendar {
        field: "definition",
        reason: format!("the stored definition of {name:?} cannot be read: {e}"),
    })?;
    Ok(CalendarRecord {
        name,
        definition,
        created_at: Timestamp::from_millis(row.try_get("created_at").map_err(db_error)?),
        updated_at: Timestamp::from_millis(row.try_get("updated_at").map_err(db_error)?),
        version: row.try_get("version").map_err(db_error)?,
    })
}

/// How a calendar write meets the stored calendar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CalendarWrite {
    /// Adds it, or replaces whatever is stored.
    Any,
    /// Adds it only if none of that name exists.
    New,
    /// Replaces it only if it is stored at this version.
    At(i64),
}

/// A calendar write against a version that is not the stored one.
fn stale_calendar(name: &str, expected: i64, current: Option<i64>) -> StoreError {
    StoreError::Stale {
        kind: "calendar",
        name: name.to_owned(),
        expected,
        current,
    }
}

impl SqlStore {
    async fn calendar_records<'e, E>(&self, executor: E, scheduler: &str) -> Result<Vec<CalendarRecord>, StoreError>
    where
        E: sqlx::Executor<'e, Database = Any>,
    {
        let rows = self
            .query(
                "SELECT name, definition, created_at, updated_at, version FROM quartz_calendar WHERE scheduler = ? \
                 ORDER BY name",
            )
            .bind(scheduler.to_owned())
            .rows(executor)
            .await?;
        rows.iter().map(decode_record).collect()
    }

    /// The calendars execute rows name, read after the rows: a calendar
    /// changed since moved the rows' calendar stamp in the change's
    /// transaction, so a fire expanded under the calendar as read here is
    /// won only if the rows are still as read.
    pub(super) async fn calendars_for(&self, scheduler: &str, rows: &[AnyRow]) -> Result<CalendarSet, StoreError> {
        let names: HashSet<String> = rows
            .iter()
            .filter_map(|row| row.try_get::<Option<String>, _>("calendar").ok().flatten())
            .collect();
        if names.is_empty() {
            return Ok(CalendarSet::default());
        }
        let definitions = by_name(self.calendar_records(&self.db.pool, scheduler).await?);
        Ok(CalendarSet::resolve(&definitions, names.iter().map(String::as_str)))
    }

    /// The calendars new triggers name, inside their transaction: each must
    /// exist and resolve.
    pub(super) async fn calendars_in(
        &self,
        tx: &mut Transaction<'static, Any>,
        scheduler: &str,
        names: &[&str],
    ) -> Result<CalendarSet, StoreError> {
        if names.is_empty() {
            return Ok(CalendarSet::default());
        }
        let definitions = by_name(self.calendar_records(&mut **tx, scheduler).await?);
        for name in names {
            if !definitions.contains_key(*name) {
                return Err(StoreError::UnknownCalendar {
                    scheduler: scheduler.to_owned(),
                    name: (*name).to_owned(),
                });
            }
        }
        Ok(CalendarSet::resolve(&definitions, names.iter().copied()))
    }

    pub(super) async fn calendar_get(&self, scheduler: &str, name: &str) -> Result<Option<CalendarRecord>, StoreError> {
        let records = self.calendar_records(&self.db.pool, scheduler).await?;
        Ok(records.into_iter().find(|r| r.name == name))
    }

    pub(super) async fn calendar_list(&self, scheduler: &str) -> Result<Vec<CalendarRecord>, StoreError> {
        self.calendar_records(&self.db.pool, scheduler).await
    }

    /// Adds or replaces a calendar as `write` says (the table's unique key
    /// settles two adds at once; the version, two replaces of one version).
    pub(super) async fn calendar_put(
        &self,
        scheduler: &str,
        name: &str,
        definition: &CalendarDefinition,
        write: CalendarWrite,
    ) -> Result<CalendarRecord, StoreError> {
        let only_new = write == CalendarWrite::New;
        let json = crate::common::calendar_text(scheduler, name, definition)?;
        let duplicate = || StoreError::DuplicateCalendar {
            scheduler: scheduler.to_owned(),
            name: name.to_owned(),
        };
        let mut tx = self.begin_change(scheduler).await?;
        let records = self.calendar_records(&mut *tx, scheduler).await?;
        let stored = records.iter().find(|r| r.name == name).map(|r| r.version);
        let mut definitions = by_name(records);
        let existed = definitions.insert(name.to_owned(), definition.clone()).is_some();
        if existed && only_new {
            return Err(duplicate());
        }
        if let CalendarWrite::At(expected) = write
            && stored != Some(expected)
        {
            return Err(stale_calendar(name, expected, stored));
        }
        let users = changed_calendars(&definitions, name)?;
        let statement = if existed {
            "UPDATE quartz_calendar SET definition = ?, updated_at = {now}, version = version + 1 \
             WHERE scheduler = ? AND name = ? AND version = ?"
        } else {
            "INSERT INTO quartz_calendar (definition, scheduler, name, created_at, updated_at) \
             VALUES (?, ?, ?, {now}, {now})"
        };
        let mut query = self
            .query(statement)
            .bind(json)
            .bind(scheduler.to_owned())
            .bind(name.to_owned());
        if let Some(version) = stored {
            query = query.bind(version);
        }
        let written = query.execute(&mut *tx).await;
        match written {
            // Replaced by another transaction since it was read here: the
            // retry reads it again.
            Ok(done) if existed && done.rows_affected() == 0 => {
                return Err(StoreError::Conflict {
                    reason: format!("calendar {name:?} changed while it was replaced"),
                });
            }
            Ok(_) => {}
            // Added at the same time by another transaction.
            Err(e) if only_new && is_unique_violation(&e) => return Err(duplicate()),
            Err(e) => return Err(db_error(e)),
        }
        let set = CalendarSet::resolve(&definitions, users.iter().map(String::as_str));
        let moved = self.reschedule_users(&mut tx, scheduler, &users, &set).await?;
        let detail = crate::common::calendar_detail(existed, definition, moved);
        self.changed_in(&mut tx, scheduler, Change::new(ChangeAction::CalendarPut, name, detail))
            .await?;
        tx.commit().await.map_err(db_error)?;
        self.calendar_get(scheduler, name)
            .await?
            .ok_or_else(|| StoreError::UnknownCalendar {
                scheduler: scheduler.to_owned(),
                name: name.to_owned(),
            })
    }

    /// Recomputes the waiting and paused triggers that use `users` and
    /// revives the complete ones the change gives a time (see
    /// [`recalendared`]), locked in id order (the claims' order) so no claim
    /// slips between the read and the write, and moves their calendar stamp.
    /// How many there were.
    async fn reschedule_users(
        &self,
        tx: &mut Transaction<'static, Any>,
        scheduler: &str,
        users: &[String],
        set: &CalendarSet,
    ) -> Result<usize, StoreError> {
        // The jobs of the complete rows first, locked as every change and
        // exclusive claim locks them, before their executes: their state
        // says whether a revived row waits or is paused.
        let jobs = self
            .query(JOBS_OF_COMPLETE)
            .bind(scheduler.to_owned())
            .rows(&mut **tx)
            .await?;
        let mut paused = HashMap::new();
        for job in &jobs {
            let id: i64 = job.try_get(0).map_err(db_error)?;
            let state: String = job.try_get(1).map_err(db_error)?;
            paused.insert(id, state == JobState::Paused.as_str());
        }
        let rows = self
            .query(CALENDAR_USERS)
            .bind(scheduler.to_owned())
            .rows(&mut **tx)
            .await?;
        let now = self.now_in(tx).await?;
        let mut moved = 0;
        for row in &rows {
            let named: Option<String> = row.try_get("calendar").map_err(db_error)?;
            if !named.is_some_and(|n| users.contains(&n)) {
                continue;
            }
            // A row that cannot be read is left to the poll, which marks it.
            let Ok(execute) = decode_execute(row, set) else {
                continue;
            };
            // A row completed since the jobs were locked stays complete.
            let job_paused = match (execute.state, paused.get(&execute.job_id)) {
                (ExecuteState::Complete, None) => continue,
                (_, job_paused) => job_paused.copied().unwrap_or(false),
            };
            let Some((state, next)) = recalendared(&execute, job_paused, now) else {
                continue;
            };
            self.query(
                "UPDATE quartz_execute SET next_fire_time = ?, state = ?, calendar_stamp = calendar_stamp + 1, \
                 updated_at = {now} WHERE id = ?",
            )
            .bind(next.map(Timestamp::as_millis))
            .bind(state.as_str())
            .bind(execute.id)
            .exec(&mut **tx)
            .await?;
            moved += 1;
        }
        Ok(moved)
    }

    pub(super) async fn calendar_delete(
        &self,
        scheduler: &str,
        name: &str,
        expected_version: Option<i64>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_change(scheduler).await?;
        let records = self.calendar_records(&mut *tx, scheduler).await?;
        let Some(stored) = records.iter().find(|r| r.name == name).map(|r| r.version) else {
            return Err(StoreError::UnknownCalendar {
                scheduler: scheduler.to_owned(),
                name: name.to_owned(),
            });
        };
        if let Some(expected) = expected_version
            && expected != stored
        {
            return Err(stale_calendar(name, expected, Some(stored)));
        }
        let definitions = by_name(records);
        let jobs = self
            .query(
                "SELECT DISTINCT j.name FROM quartz_execute e JOIN quartz_job j ON j.id = e.job_id \
                 WHERE e.scheduler = ? AND e.calendar = ? ORDER BY j.name",
            )
            .bind(scheduler.to_owned())
            .bind(name.to_owned())
            .rows(&mut *tx)
            .await?;
        let mut users: Vec<String> = jobs
            .iter()
            .map(|row| row.try_get::<String, _>(0).map(|job| format!("job {job}")))
            .collect::<Result<_, _>>()
            .map_err(db_error)?;
        users.extend(
            definitions
                .iter()
                .filter(|(_, d)| d.base.as_deref() == Some(name))
                .map(|(n, _)| format!("calendar {n}")),
        );
        if !users.is_empty() {
            return Err(StoreError::CalendarInUse {
                name: name.to_owned(),
                users,
            });
        }
        let deleted = self
            .query("DELETE FROM quartz_calendar WHERE scheduler = ? AND name = ? AND version = ?")
            .bind(scheduler.to_owned())
            .bind(name.to_owned())
            .bind(stored)
            .exec(&mut *tx)
            .await?;
        if deleted.rows_affected() == 0 {
            // Replaced or deleted by another transaction since it was
            // read: the retry reads it again.
            return Err(StoreError::Conflict {
                reason: format!("calendar {name:?} changed while it was deleted"),
            });
        }
        self.changed_in(
            &mut tx,
            scheduler,
            Change::new(ChangeAction::CalendarDelete, name, String::new()),
        )
        .await?;
        tx.commit().await.map_err(db_error)
    }
}

#[async_trait]
impl CalendarStore for SqlStore {
    async fn put_calendar(
        &self,
        name: &str,
        def: &CalendarDefinition,
        expected_version: Option<i64>,
    ) -> Result<CalendarRecord, StoreError> {
        let scheduler = self.scheduler();
        let write = match expected_version {
            Some(version) => CalendarWrite::At(version),
            None => CalendarWrite::Any,
        };
        retry_conflicts(|| self.calendar_put(scheduler, name, def, write)).await
    }

    async fn add_calendar(&self, name: &str, def: &CalendarDefinition) -> Result<CalendarRecord, StoreError> {
        let scheduler = self.scheduler();
        retry_conflicts(|| self.calendar_put(scheduler, name, def, CalendarWrite::New)).await
    }

    async fn get_calendar(&self, name: &str) -> Result<Option<CalendarRecord>, StoreError> {
        let scheduler = self.scheduler();
        self.calendar_get(scheduler, name).await
    }

    async fn list_calendars(&self) -> Result<Vec<CalendarRecord>, StoreError> {
        let scheduler = self.scheduler();
        self.calendar_list(scheduler).await
    }

    async fn delete_calendar(&self, name: &str, expected_version: Option<i64>) -> Result<(), StoreError> {
        let scheduler = self.scheduler();
        retry_conflicts(|| self.calendar_delete(scheduler, name, expected_version)).await
    }
}
