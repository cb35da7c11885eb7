//! Backfill through the admin surface: a job's fire times over a past range,
//! previewed, then queued to run once each at a bounded pace.

use serde::{Deserialize, Serialize};

use super::{Admin, AdminError, MAX_CONCURRENT_PREVIEWS, PREVIEW_STEPS, PREVIEW_TIME_LIMIT};
use crate::admin::definition::deserialize_instant;
use crate::store::{BackfillFire, MAX_BACKFILL};
use crate::time::Timestamp;
use crate::trigger::{CALENDAR_SEARCH_STEPS, Schedule, Trigger};

/// The pace of a backfill when none is given: fires a second.
pub const DEFAULT_BACKFILL_RATE: u32 = 10;

/// The fastest pace a backfill may ask for: fires a second.
pub const MAX_BACKFILL_RATE: u32 = 1_000;

/// What a backfill asks for: the fire times of a job's triggers from `from`
/// to `to` (both included, `to` at most now), at most `rate` a second, or
/// only their list (`preview`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BackfillRequest {
    /// The first instant of the range (epoch ms or RFC 3339).
    #[serde(default, deserialize_with = "deserialize_instant")]
    #[cfg_attr(feature = "openapi", schema(schema_with = super::definition::instant_schema))]
    pub from: Option<i64>,
    /// The last instant of the range (default: now).
    #[serde(default, deserialize_with = "deserialize_instant")]
    #[cfg_attr(feature = "openapi", schema(schema_with = super::definition::instant_schema))]
    pub to: Option<i64>,
    /// At most this many fires a second (1 to 1,000; default 10).
    #[serde(default)]
    pub rate: Option<u32>,
    /// Only list the fire times; queue nothing.
    #[serde(default)]
    pub preview: bool,
}

/// What a backfill queued, or would queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BackfillView {
    /// The job.
    pub job: String,
    /// Whether this is only a preview (nothing queued).
    pub preview: bool,
    /// The fire times in the range, oldest first (epoch ms).
    pub times: Vec<i64>,
    /// How many were queued (0 for a preview).
    pub queued: usize,
    /// How many were left alone: they ran, or an attempt is under way.
    pub already: u64,
    /// When the last queued fire is due (epoch ms, database time).
    pub last_due: Option<i64>,
    /// What happens now, in words.
    pub note: String,
}

impl Admin {
    /// Backfills a job: the fire times of its triggers (not fixed-delay
    /// ones, which have no schedule of times) from `from` to `to` are
    /// queued as pending fires, at most `rate` a second from now, each run
    /// once by the first node with the job's handler and room; a fire time
    /// that ran, or has an attempt under way, is left alone. With
    /// `preview`, only the times are listed. Recorded in the change log as
    /// `job.backfill`.
    ///
    /// # Errors
    ///
    /// [`AdminError::Invalid`] naming `from`, `to` or `rate`;
    /// [`AdminError::NotFound`]; the store's errors.
    pub async fn job_backfill(&self, name: &str, request: &BackfillRequest) -> Result<BackfillView, AdminError> {
        let now = self.store.now().await?;
        let from = request
            .from
            .map(Timestamp::from_millis)
            .ok_or_else(|| AdminError::invalid("from", "a backfill needs the start of its range"))?;
        let to = request.to.map_or(now, Timestamp::from_millis);
        if to > now {
            return Err(AdminError::invalid(
                "to",
                format!("{to} is in the future: backfill runs past fire times"),
            ));
        }
        if from > to {
            return Err(AdminError::invalid(
                "from",
                format!("{from} is after the end of the range, {to}"),
            ));
        }
        let rate = request.rate.unwrap_or(DEFAULT_BACKFILL_RATE);
        if !(1..=MAX_BACKFILL_RATE).contains(&rate) {
            return Err(AdminError::invalid(
                "rate",
                format!("a backfill runs 1 to {MAX_BACKFILL_RATE} fires a second, not {rate}"),
            ));
        }
        let detail = self
            .store
            .get_job(name)
            .await?
            .ok_or_else(|| AdminError::NotFound { name: name.to_owned() })?;
        let triggers: Vec<(i64, Trigger)> = detail
            .executes
            .iter()
            .filter(|e| !matches!(e.trigger.schedule(), Schedule::FixedDelay { .. }))
            .map(|e| (e.id, e.trigger.clone()))
            .collect();
        // Searched on a blocking thread, within the previews' limits of
        // time and steps, one of at most MAX_CONCURRENT_PREVIEWS at once: a
        // calendar that excludes almost every time of a frequent schedule
        // over a long range costs the node no more than that.
        let permit = std::sync::Arc::clone(&self.previews)
            .try_acquire_owned()
            .map_err(|_| AdminError::Busy {
                what: format!("{MAX_CONCURRENT_PREVIEWS} searches of fire times are running; try again shortly"),
            })?;
        let search = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            fire_times_within(&triggers, from, to, PREVIEW_TIME_LIMIT, PREVIEW_STEPS)
        });
        let mut times = search.await.map_err(|e| AdminError::Internal {
            reason: format!("the backfill's search failed: {e}"),
        })??;
        times.sort();
        let spacing = 1_000 / i64::from(rate);
        let fires: Vec<BackfillFire> = times
            .iter()
            .enumerate()
            .map(|(i, (t, execute_id))| BackfillFire {
                execute_id: *execute_id,
                fire_time: *t,
                due_at: now.saturating_add_millis(i64::try_from(i).unwrap_or(i64::MAX / 2) * spacing),
            })
            .collect();
        let listed = times.iter().map(|(t, _)| t.as_millis()).collect();
        if request.preview {
            return Ok(BackfillView {
                job: name.to_owned(),
                preview: true,
                note: format!(
                    "{} fire time(s) from {from} to {to}; nothing queued (a preview)",
                    fires.len()
                ),
                times: listed,
                queued: 0,
                already: 0,
                last_due: None,
            });
        }
        let done = self.store.backfill(name, &fires).await?;
        let due: std::collections::HashMap<(i64, Timestamp), Timestamp> =
            fires.iter().map(|f| ((f.execute_id, f.fire_time), f.due_at)).collect();
        let last_due = done
            .queued
            .iter()
            .filter_map(|q| due.get(&(q.execute_id, q.fire_time)))
            .map(|t| t.as_millis())
            .max();
        Ok(BackfillView {
            job: name.to_owned(),
            preview: false,
            note: format!(
                "{} fire time(s) from {from} to {to}: {} queued, at most {rate} a second, each run once by the first \
                 node with the job's handler; {} already in the ledger, left alone",
                fires.len(),
                done.queued.len(),
                done.already
            ),
            times: listed,
            queued: done.queued.len(),
            already: done.already,
            last_due,
        })
    }
}

/// The fire times of `triggers` (by execute id) from `from` to `to`, both
/// included, searching for at most `limit` and `max_steps` excluded runs
/// passed over (the checkpoints a trigger's calendar search answers, each
/// after [`CALENDAR_SEARCH_STEPS`]).
///
/// # Errors
///
/// [`AdminError::Invalid`] naming `to` when the range holds more than
/// [`MAX_BACKFILL`] fire times, or when the search stopped at a limit,
/// saying how far it got.
fn fire_times_within(
    triggers: &[(i64, Trigger)],
    from: Timestamp,
    to: Timestamp,
    limit: std::time::Duration,
    max_steps: u64,
) -> Result<Vec<(Timestamp, i64)>, AdminError> {
    let began = std::time::Instant::now();
    let per_search = u64::from(CALENDAR_SEARCH_STEPS);
    let mut searches: u64 = 0;
    let mut times: Vec<(Timestamp, i64)> = Vec::new();
    for (execute_id, trigger) in triggers {
        let mut t = trigger.fire_time_after(from.saturating_add_millis(-1));
        while let Some(at) = t.filter(|at| *at <= to) {
            if trigger.is_checkpoint(at) {
                searches += 1;
                if began.elapsed() >= limit || searches.saturating_mul(per_search) >= max_steps {
                    return Err(AdminError::invalid(
                        "to",
                        format!(
                            "the search for the range's fire times stopped at {at} after {} ms: a calendar \
                             excludes almost every time of the schedule there; backfill a shorter range",
                            began.elapsed().as_millis()
                        ),
                    ));
                }
            } else {
                if times.len() == MAX_BACKFILL {
                    return Err(AdminError::invalid(
                        "to",
                        format!("the range holds more than {MAX_BACKFILL} fire times: backfill a shorter one"),
                    ));
                }
                times.push((at, *execute_id));
            }
            t = trigger.fire_time_after(at);
        }
    }
    Ok(times)
}
