//! Calendars through the admin surface: add or replace, read, list,
//! delete, and previews of fire times with a calendar's exclusions.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Admin, AdminError, MAX_PREVIEW};
use crate::calendar::{self, CalendarDefinition};
use crate::cron::{CronExpression, DstChoice, RepeatedTime, SkippedTime, parse_time_zone};
use crate::store::{CalendarRecord, ExecuteSpec, StoreError};
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
    /// Its version, moved on by every replacement: the API's `ETag`, and
    /// what a write with `If-Match` must name.
    pub version: i64,
}

impl From<CalendarRecord> for CalendarView {
    fn from(r: CalendarRecord) -> CalendarView {
        CalendarView {
            name: r.name,
            definition: r.definition,
            created_at: r.created_at.as_millis(),
            updated_at: r.updated_at.as_millis(),
            version: r.version,
        }
    }
}

impl Admin {
    /// Adds a calendar, or replaces the one of that name; the triggers that
    /// use it (directly or through a base) are rescheduled in the same
    /// transaction, on every node. With `expected_version`, only if the
    /// calendar is stored at that version (the one its reader saw).
    ///
    /// # Errors
    ///
    /// [`AdminError::Invalid`] naming the field (`days`, `range`, `base`, …);
    /// [`AdminError::Stale`] when it is not at `expected_version`; the
    /// store's errors.
    pub async fn calendar_put(
        &self,
        name: &str,
        definition: &CalendarDefinition,
        expected_version: Option<i64>,
    ) -> Result<CalendarView, AdminError> {
        definition.calendar(None).map_err(|e| invalid_calendar(&e))?;
        let record = self.store.put_calendar(name, definition, expected_version).await?;
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
        let record = self.store.add_calendar(name, definition).await?;
        Ok(record.into())
    }

    /// A calendar, by name.
    ///
    /// # Errors
    ///
    /// [`AdminError::CalendarNotFound`]; the store's errors.
    pub async fn calendar(&self, name: &str) -> Result<CalendarView, AdminError> {
        self.store
            .get_calendar(name)
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
        let records = self.store.list_calendars().await?;
        Ok(records.into_iter().map(CalendarView::from).collect())
    }

    /// Deletes a calendar no trigger and no calendar uses; with
    /// `expected_version`, only if it is stored at that version.
    ///
    /// # Errors
    ///
    /// [`AdminError::CalendarNotFound`], [`AdminError::InUse`] naming its
    /// users, [`AdminError::Stale`]; the store's errors.
    pub async fn calendar_delete(&self, name: &str, expected_version: Option<i64>) -> Result<(), AdminError> {
        Ok(self.store.delete_calendar(name, expected_version).await?)
    }

    /// The next `count` fire times after `after` of a cron expression in a
    /// zone under a DST choice, passing over the times calendar `calendar`
    /// excludes when one is named.
    ///
    /// The work is bounded whoever asks: the search runs on a blocking
    /// thread, not on the async workers, for at most [`PREVIEW_TIME_LIMIT`]
    /// and [`PREVIEW_STEPS`] excluded runs passed over, and at most
    /// [`MAX_CONCURRENT_PREVIEWS`] previews run at once on this surface (its
    /// clones and [`acting_as`](Self::acting_as) copies included). A search
    /// that stops early answers the times it found and how far it looked
    /// ([`CronPreview::searched_until`], [`CronPreview::note`]).
    ///
    /// # Errors
    ///
    /// [`AdminError::Invalid`] for the expression, the zone or the count;
    /// [`AdminError::CalendarNotFound`]; [`AdminError::Busy`] when as many
    /// previews as allowed are running; the store's errors.
    pub async fn cron_preview_with(
        &self,
        expr: &str,
        time_zone: &str,
        dst: DstChoice,
        calendar: Option<&str>,
        after: Timestamp,
        count: usize,
    ) -> Result<CronPreview, AdminError> {
        let (expr, zone) = parse_preview(expr, time_zone, count)?;
        let Some(name) = calendar else {
            let times: Vec<Timestamp> = expr.iter_after_with(after, zone, dst).take(count).collect();
            let note = (times.len() < count).then(|| "the expression has no further fire time".to_owned());
            return Ok(CronPreview {
                times,
                searched_until: None,
                note,
            });
        };
        let trigger = Trigger::new(Schedule::cron_with_dst(expr, zone, dst), Timestamp::from_millis(0))
            .and_then(|t| t.with_calendar(name))
            .map_err(|e| AdminError::invalid("calendar", e.to_string()))?
            .with_calendar_read(Arc::new(self.resolved(name).await?));
        // A permit per running search: a caller who finds none is told to
        // come back, rather than queued behind searches it cannot see.
        let permit = Arc::clone(&self.previews)
            .try_acquire_owned()
            .map_err(|_| AdminError::Busy {
                what: format!("{MAX_CONCURRENT_PREVIEWS} cron previews are running; try again shortly"),
            })?;
        let search = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            bounded_preview(&trigger, after, count, PREVIEW_TIME_LIMIT, PREVIEW_STEPS)
        });
        search.await.map_err(|e| AdminError::Internal {
            reason: format!("the cron preview's search failed: {e}"),
        })
    }

    /// A calendar with its bases, read.
    async fn resolved(&self, name: &str) -> Result<calendar::Calendar, AdminError> {
        let records = self.store.list_calendars().await?;
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

/// How long one cron preview searches at most.
pub const PREVIEW_TIME_LIMIT: std::time::Duration = std::time::Duration::from_millis(500);
/// The most excluded runs one cron preview passes over (each search of
/// the trigger passes over at most [`crate::trigger::CALENDAR_SEARCH_STEPS`]).
pub const PREVIEW_STEPS: u64 = 100_000;
/// The most cron previews with a calendar that search at once on one
/// admin surface (an [`Admin`] and its clones).
pub const MAX_CONCURRENT_PREVIEWS: usize = 2;

/// A cron preview's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronPreview {
    /// The fire times found, in order.
    pub times: Vec<Timestamp>,
    /// When the search stopped before it found as many times as asked
    /// (its time or step limit): every instant before this was searched.
    pub searched_until: Option<Timestamp>,
    /// Why fewer times than asked are listed, in words.
    pub note: Option<String>,
}

/// The next `count` fire times of `trigger` after `after`, searching for at
/// most `limit` and `max_steps` excluded runs, resuming from each
/// checkpoint the trigger's search answers.
fn bounded_preview(
    trigger: &Trigger,
    after: Timestamp,
    count: usize,
    limit: std::time::Duration,
    max_steps: u64,
) -> CronPreview {
    let began = std::time::Instant::now();
    // As far as a trigger's own search looks before it gives up.
    let horizon = after.saturating_add_millis(crate::trigger::CALENDAR_GIVE_UP_MS);
    let mut times = Vec::with_capacity(count);
    let mut at = after;
    let mut searches: u64 = 0;
    let per_search = u64::from(crate::trigger::CALENDAR_SEARCH_STEPS);
    while times.len() < count {
        let Some(next) = trigger.fire_time_after(at) else {
            return CronPreview {
                times,
                searched_until: None,
                note: Some("the calendar excludes every later fire time of the expression".to_owned()),
            };
        };
        at = next;
        if next > horizon {
            return CronPreview {
                times,
                searched_until: Some(horizon),
                note: Some(format!(
                    "no fire time the calendar includes within 100 years, until {horizon}"
                )),
            };
        }
        if !trigger.is_checkpoint(next) {
            times.push(next);
            continue;
        }
        searches += 1;
        if began.elapsed() >= limit || searches.saturating_mul(per_search) >= max_steps {
            return CronPreview {
                times,
                searched_until: Some(next),
                note: Some(format!(
                    "no fire time the calendar includes up to {next}: the search stopped there after {} ms \
                     (later times may exist)",
                    began.elapsed().as_millis()
                )),
            };
        }
    }
    CronPreview {
        times,
        searched_until: None,
        note: None,
    }
}
