//! Calendars through the admin surface: add or replace, read, list,
//! delete, and previews of fire times with a calendar's exclusions.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Admin, AdminError, MAX_PREVIEW};
use crate::calendar::{self, CalendarDefinition};
use crate::cron::{CronExpression, DstChoice, RepeatedTime, SkippedTime, parse_time_zone};
use crate::store::{CalendarRecord, ExecuteSpec, Store, StoreError};
use crate::time::Timestamp;
use crate::trigger::{Schedule, Trigger};

/// A calendar as the admin surface shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CalendarView {
    /// Its name.
    pub name: String,
    /// What it excludes, as given (`kind`, `days`, `range`, `invert`,
    /// `cron`, `time_zone`, `base`, `description`).
    pub definition: CalendarDefinition,
    /// When it was added (epoch ms, database time).
    pub created_at: i64,
    /// When it was last replaced.
    pub updated_at: i64,
}

impl From<CalendarRecord> for CalendarView {
    fn from(r: CalendarRecord) -> CalendarView {
        CalendarView {
            name: r.name,
            definition: r.definition,
            created_at: r.created_at.as_millis(),
            updated_at: r.updated_at.as_millis(),
        }
    }
}

impl<S: Store> Admin<S> {
    /// Adds a calendar, or replaces the one of that name; the triggers that
    /// use it (directly or through a base) are rescheduled in the same
    /// transaction, on every node.
    ///
    /// # Errors
    ///
    /// [`AdminError::Invalid`] naming the field (`days`, `range`, `base`, …);
    /// the store's errors.
    pub async fn calendar_put(&self, name: &str, definition: &CalendarDefinition) -> Result<CalendarView, AdminError> {
        definition.calendar(None).map_err(|e| invalid_calendar(&e))?;
        let record = self.store.put_calendar(&self.scheduler, name, definition).await?;
        Ok(record.into())
    }

    /// Adds a calendar only if none of that name exists, as one step: of two
    /// adds of one name at once, one is stored and the other refused.
    ///
    /// # Errors
    ///
    /// [`AdminError::CalendarExists`], the stored calendar left as it was;
    /// [`AdminError::Invalid`] naming the field; the store's errors.
    pub async fn calendar_add(&self, name: &str, definition: &CalendarDefinition) -> Result<CalendarView, AdminError> {
        definition.calendar(None).map_err(|e| invalid_calendar(&e))?;
        let record = self.store.add_calendar(&self.scheduler, name, definition).await?;
        Ok(record.into())
    }

    /// A calendar, by name.
    ///
    /// # Errors
    ///
    /// [`AdminError::CalendarNotFound`]; the store's errors.
    pub async fn calendar(&self, name: &str) -> Result<CalendarView, AdminError> {
        self.store
            .get_calendar(&self.scheduler, name)
            .await?
            .map(CalendarView::from)
            .ok_or_else(|| AdminError::CalendarNotFound { name: name.to_owned() })
    }

    /// Every calendar, by name.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn calendars(&self) -> Result<Vec<CalendarView>, AdminError> {
        let records = self.store.list_calendars(&self.scheduler).await?;
        Ok(records.into_iter().map(CalendarView::from).collect())
    }

    /// Deletes a calendar no trigger and no calendar uses.
    ///
    /// # Errors
    ///
    /// [`AdminError::CalendarNotFound`], [`AdminError::InUse`] naming its
    /// users; the store's errors.
    pub async fn calendar_delete(&self, name: &str) -> Result<(), AdminError> {
        Ok(self.store.delete_calendar(&self.scheduler, name).await?)
    }

    /// The next `count` fire times after `after` of a cron expression in a
    /// zone under a DST choice, passing over the times calendar `calendar`
    /// excludes when one is named.
    ///
    /// # Errors
    ///
    /// [`AdminError::Invalid`] for the expression, the zone or the count;
    /// [`AdminError::CalendarNotFound`]; the store's errors.
    pub async fn cron_preview_with(
        &self,
        expr: &str,
        time_zone: &str,
        dst: DstChoice,
        calendar: Option<&str>,
        after: Timestamp,
        count: usize,
    ) -> Result<Vec<Timestamp>, AdminError> {
        let (expr, zone) = parse_preview(expr, time_zone, count)?;
        let Some(name) = calendar else {
            return Ok(expr.iter_after_with(after, zone, dst).take(count).collect());
        };
        let trigger = Trigger::new(Schedule::cron_with_dst(expr, zone, dst), Timestamp::from_millis(0))
            .and_then(|t| t.with_calendar(name))
            .map_err(|e| AdminError::invalid("calendar", e.to_string()))?
            .with_calendar_read(Arc::new(self.resolved(name).await?));
        let mut times = Vec::with_capacity(count);
        let mut at = after;
        while times.len() < count
            && let Some(next) = trigger.fire_time_after(at)
        {
            times.push(next);
            at = next;
        }
        Ok(times)
    }

    /// A calendar with its bases, read.
    async fn resolved(&self, name: &str) -> Result<calendar::Calendar, AdminError> {
        let records = self.store.list_calendars(&self.scheduler).await?;
        if !records.iter().any(|r| r.name == name) {
            return Err(AdminError::CalendarNotFound { name: name.to_owned() });
        }
        calendar::resolve(name, |n| {
            records.iter().find(|r| r.name == n).map(|r| r.definition.clone())
        })
        .map_err(|e| invalid_calendar(&e))
    }
}

/// A store's refusal of triggers naming an unknown calendar, as the field
/// of the first trigger naming it (`triggers[i].calendar`); other errors as
/// they are.
pub(super) fn calendar_field(e: StoreError, executes: &[ExecuteSpec]) -> AdminError {
    match e {
        StoreError::UnknownCalendar { name, .. } => {
            let i = executes
                .iter()
                .position(|x| x.trigger.calendar_name() == Some(name.as_str()))
                .unwrap_or(0);
            AdminError::invalid(format!("triggers[{i}].calendar"), format!("no calendar named {name:?}"))
        }
        other => other.into(),
    }
}

fn invalid_calendar(e: &crate::Error) -> AdminError {
    match e {
        crate::Error::InvalidCalendar { field, reason } => AdminError::invalid(*field, reason.clone()),
        other => AdminError::invalid("", other.to_string()),
    }
}

/// The next `count` fire times of a cron expression in a zone under a DST
/// choice after an instant, as `quartz cron next` and the console's preview
/// show them.
///
/// # Errors
///
/// [`AdminError::Invalid`] naming `cron`, `time_zone` or `count`.
pub fn cron_preview(
    expr: &str,
    time_zone: &str,
    dst: DstChoice,
    after: Timestamp,
    count: usize,
) -> Result<Vec<Timestamp>, AdminError> {
    let (expr, zone) = parse_preview(expr, time_zone, count)?;
    Ok(expr.iter_after_with(after, zone, dst).take(count).collect())
}

/// A DST choice from its two names (`None` is `quartz`), each error naming
/// its field, `dst_skipped` or `dst_repeated`.
///
/// # Errors
///
/// [`AdminError::Invalid`] for an unknown name.
pub fn parse_dst(skipped: Option<&str>, repeated: Option<&str>) -> Result<DstChoice, AdminError> {
    Ok(DstChoice {
        skipped: skipped
            .map_or(Ok(SkippedTime::Quartz), str::parse)
            .map_err(|e| AdminError::invalid("dst_skipped", e.to_string()))?,
        repeated: repeated
            .map_or(Ok(RepeatedTime::Quartz), str::parse)
            .map_err(|e| AdminError::invalid("dst_repeated", e.to_string()))?,
    })
}

/// A preview's expression and zone, each error naming its field, and its
/// count checked.
fn parse_preview(expr: &str, time_zone: &str, count: usize) -> Result<(CronExpression, crate::Tz), AdminError> {
    if !(1..=MAX_PREVIEW).contains(&count) {
        return Err(AdminError::invalid(
            "count",
            format!("count must be between 1 and {MAX_PREVIEW}, got {count}"),
        ));
    }
    let expr = CronExpression::parse(expr).map_err(|e| AdminError::invalid("cron", e.to_string()))?;
    let zone = parse_time_zone(time_zone).map_err(|e| AdminError::invalid("time_zone", e.to_string()))?;
    Ok((expr, zone))
}
