//! The admin surface: one API over a store through which the HTTP API, the
//! web console, the CLI and embedding services read and change a cluster, so
//! that each rule is written once.
//!
//! [`Admin`] lists jobs (filtered, searched, paged by key), shows one with
//! its triggers and their next fire times, adds, edits, pauses, resumes,
//! fires now and deletes jobs, and reads the ledger, the nodes, the change
//! log, the ledger audit and cron previews. Every change is made through the
//! store acting as the admin's actor ([`Admin::acting_as`]), so the change
//! log says who made it, in the change's own transaction.
//!
//! Input comes as plain data ([`JobDefinition`], [`JobPatch`],
//! [`TriggerDefinition`]), and every error says which field is at fault
//! ([`AdminError::field`]).
//!
//! ```no_run
//! # async fn admin<S: quartz_core::store::Store>(store: S) -> Result<(), quartz_core::admin::AdminError> {
//! use quartz_core::admin::{Admin, JobDefinition, TriggerDefinition};
//!
//! let admin = Admin::new(store, "billing").acting_as("ops-script");
//! let mut job = JobDefinition::new("invoice-acme", "invoice");
//! job.triggers.push(TriggerDefinition::cron("0 0 2 * * ?", "Europe/Paris")?);
//! let view = admin.job_add(&job).await?;
//! println!("next fires: {:?}", view.triggers[0].upcoming);
//! // Paused only if nobody changed it since it was read (`None`: whatever
//! // its version).
//! admin.job_pause("invoice-acme", Some(view.version)).await?;
//! # Ok(()) }
//! ```

mod backfill;
mod calendars;
mod definition;
mod error;
mod history;
mod patch;
mod put;
mod reports;
pub(crate) mod schema;
mod verdict;
mod views;
mod wire;
mod work;

use std::sync::Arc;

pub use backfill::{BackfillRequest, BackfillView, DEFAULT_BACKFILL_RATE, MAX_BACKFILL_RATE};
use calendars::calendar_field;
pub use calendars::{
    CalendarView, CronPreview, MAX_CONCURRENT_PREVIEWS, PREVIEW_STEPS, PREVIEW_TIME_LIMIT, cron_preview, parse_dst,
};
#[cfg(feature = "openapi")]
pub use definition::instant_schema;
pub use definition::{JobDefinition, TriggerDefinition, TriggerKind, deserialize_instant, parse_instant};
pub use error::AdminError;
pub use history::{ChangeFilter, FireFilter};
pub use patch::JobPatch;
use put::same_triggers;
pub use put::{PutIf, PutOutcome};
pub use reports::{ClusterHealth, JobStats};
pub use schema::PayloadSchemaView;
pub use verdict::handler_verdict;
pub use views::{
    BrokenTrigger, ChangeView, FireView, JobView, ManualFire, NodeView, Overview, Page, Standby, TriggerView,
    local_time, summary,
};
pub use wire::FieldError;
pub use work::{EnqueuedView, WorkRequest};

use crate::store::{ExecuteSpec, FireQuery, IntoStore, JobQuery, JobSpec, JobState, SharedStore};

/// How many next fire times a job's view shows per trigger.
pub const UPCOMING: usize = 5;
/// The most rows one page of a listing holds.
pub const MAX_PAGE: u32 = 500;
/// The most ledger rows the overview reads.
pub const OVERVIEW_FIRES: u32 = 20_000;
/// How far past its next fire time a waiting trigger counts as overdue in
/// [`Admin::health`]: a minute, well past a poll's window.
pub const HEALTH_OVERDUE_MS: i64 = 60_000;
/// How far past its due time a pending fire counts as stranded in
/// [`Admin::health`].
pub const HEALTH_STRANDED_MS: i64 = 60_000;
/// The span of [`Admin::health`]'s recent counts: five minutes.
pub const HEALTH_WINDOW_MS: i64 = 300_000;
/// The ledger rows [`Admin::job_stats`] reads.
pub const JOB_STATS_FIRES: u32 = 200;
/// The most fire times a cron preview computes.
pub const MAX_PREVIEW: usize = 100;

/// A filter for [`Admin::jobs`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct JobFilter {
    /// Only names containing this text (case-insensitive).
    pub search: Option<String>,
    /// `enabled` or `paused`.
    pub state: Option<String>,
    /// Only jobs of this handler.
    pub handler: Option<String>,
    /// The cursor: the `next` of the previous page.
    pub after: Option<String>,
    /// Rows per page (default 50, at most 500).
    pub limit: Option<u32>,
}

fn page_limit(limit: Option<u32>) -> Result<u32, AdminError> {
    match limit {
        None => Ok(50),
        Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        Some(n) => Err(AdminError::invalid(
            "limit",
            format!("limit must be between 1 and {MAX_PAGE}, got {n}"),
        )),
    }
}

fn id_cursor(field: &str, cursor: Option<&str>) -> Result<Option<i64>, AdminError> {
    cursor
        .map(|c| {
            c.parse::<i64>()
                .map_err(|_| AdminError::invalid(field, format!("{c:?} is not a cursor this listing gave")))
        })
        .transpose()
}

/// The admin surface over a store, for one scheduler. See the [module
/// docs](self).
#[derive(Debug, Clone)]
pub struct Admin {
    store: SharedStore,
    scheduler: String,
    /// The permits of the cron previews that search at once, shared by
    /// every clone and every [`acting_as`](Self::acting_as) of this surface.
    previews: Arc<tokio::sync::Semaphore>,
}

impl Admin {
    /// The admin surface of `scheduler` (the cluster's name) on `store`; its
    /// changes are recorded as made by the store's actor.
    pub fn new(store: impl IntoStore, scheduler: impl Into<String>) -> Admin {
        let scheduler = scheduler.into();
        Admin {
            store: store.into_store().scoped(&scheduler),
            scheduler,
            previews: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_PREVIEWS)),
        }
    }

    /// The same surface, its changes recorded in the change log as made by
    /// `actor` (for example `http:admin` or `cli`).
    pub fn acting_as(&self, actor: &str) -> Admin {
        Admin {
            store: self.store.acting_as(actor),
            scheduler: self.scheduler.clone(),
            previews: Arc::clone(&self.previews),
        }
    }

    /// The scheduler (cluster) name.
    pub fn scheduler(&self) -> &str {
        &self.scheduler
    }

    /// The store underneath.
    pub fn store(&self) -> &SharedStore {
        &self.store
    }

    // ---- jobs ----

    /// A page of jobs, by name, with their triggers.
    ///
    /// # Errors
    ///
    /// [`AdminError::Invalid`] for a bad filter; the store's errors.
    pub async fn jobs(&self, filter: &JobFilter) -> Result<Page<JobView>, AdminError> {
        let state = filter
            .state
            .as_deref()
            .map(|s| {
                JobState::parse(s).map_err(|_| AdminError::invalid("state", format!("{s:?} is not enabled or paused")))
            })
            .transpose()?;
        let limit = page_limit(filter.limit)?;
        let query = JobQuery {
            search: filter.search.clone().filter(|s| !s.is_empty()),
            state,
            handler: filter.handler.clone().filter(|s| !s.is_empty()),
            after: filter.after.clone(),
            limit,
        };
        let jobs = self.store.jobs_page(&query).await?;
        let mut details = Vec::with_capacity(jobs.len());
        for job in &jobs {
            if let Some(detail) = self.store.get_job(&job.spec.name).await? {
                details.push(detail);
            }
        }
        let items = views::views_of(details).await?;
        let next = (jobs.len() == limit as usize)
            .then(|| jobs.last().map(|j| j.spec.name.clone()))
            .flatten();
        Ok(Page { items, next })
    }

    /// A job with its triggers and their next fire times.
    ///
    /// # Errors
    ///
    /// [`AdminError::NotFound`]; the store's errors.
    pub async fn job(&self, name: &str) -> Result<JobView, AdminError> {
        let detail = self
            .store
            .get_job(name)
            .await?
            .ok_or_else(|| AdminError::NotFound { name: name.to_owned() })?;
        views::view_of(detail).await
    }

    /// How a job's last [`JOB_STATS_FIRES`] fires went: success rate, run
    /// times, the last failure.
    ///
    /// # Errors
    ///
    /// [`AdminError::NotFound`]; the store's errors.
    pub async fn job_stats(&self, name: &str) -> Result<JobStats, AdminError> {
        let mut query = FireQuery::new();
        query.job_id = Some(self.job_id_by_name(name).await?);
        query.limit = JOB_STATS_FIRES;
        let fires = self.store.fires(&query).await?;
        Ok(JobStats::of(name, &fires))
    }

    /// Adds a job with its triggers; on any error nothing is stored.
    ///
    /// # Errors
    ///
    /// [`AdminError::Invalid`] naming the field, [`AdminError::Conflict`] for
    /// a name taken, [`AdminError::NotFound`] for an unknown parent.
    pub async fn job_add(&self, job: &JobDefinition) -> Result<JobView, AdminError> {
        let now = self.store.now().await?;
        let (spec, executes) = job.to_specs(now)?;
        self.job_create(&spec, &executes).await
    }

    /// Declares a job: adds it when none of its name exists, applies what
    /// differs when one does, and leaves it untouched (no write, no change
    /// log row, its version and its triggers' places kept) when nothing
    /// does. What a service calls on every start for the jobs it defines in
    /// code. A trigger whose definition gives no `start` is the same
    /// trigger whatever its stored start; when the triggers differ they are
    /// replaced (and start afresh), else kept where they stand.
    ///
    /// # Errors
    ///
    /// As [`job_add`](Self::job_add) and [`job_edit`](Self::job_edit).
    pub async fn job_put(&self, job: &JobDefinition) -> Result<(JobView, PutOutcome), AdminError> {
        self.job_put_if(job, PutIf::Any).await
    }

    /// [`job_put`](Self::job_put) under a condition: only an add
    /// ([`PutIf::Absent`]), or only a declaration over the job at a version
    /// ([`PutIf::Version`]), the version compared in the write itself.
    ///
    /// # Errors
    ///
    /// As [`job_put`](Self::job_put); [`AdminError::Stale`] when the
    /// condition does not hold (a job of the name exists, for an add; the
    /// job is at another version, or gone).
    pub async fn job_put_if(&self, job: &JobDefinition, condition: PutIf) -> Result<(JobView, PutOutcome), AdminError> {
        let stale = |current: Option<i64>| AdminError::Stale {
            kind: "job",
            name: job.name().to_owned(),
            expected: match condition {
                PutIf::Version(v) => v,
                _ => 0,
            },
            current,
        };
        for _ in 0..5 {
            let Some(current) = self.store.get_job(job.name()).await? else {
                if let PutIf::Version(_) = condition {
                    return Err(stale(None));
                }
                match self.job_add(job).await {
                    Ok(view) => return Ok((view, PutOutcome::Created)),
                    // Added meanwhile: compared with on the next turn.
                    Err(AdminError::Conflict { .. }) => continue,
                    Err(e) => return Err(e),
                }
            };
            match condition {
                PutIf::Absent => return Err(stale(Some(current.job.version))),
                PutIf::Version(v) if v != current.job.version => return Err(stale(Some(current.job.version))),
                _ => {}
            }
            let now = self.store.now().await?;
            let (spec, executes) = job.to_specs(now)?;
            let same = same_triggers(&current, &executes, &job.triggers);
            if spec == current.job.spec && same {
                return Ok((views::view_of(current).await?, PutOutcome::Unchanged));
            }
            let replaced = (!same).then_some(executes.as_slice());
            match self
                .job_update(job.name(), &spec, replaced, Some(current.job.version))
                .await
            {
                Ok(view) => return Ok((view, PutOutcome::Updated)),
                // Changed meanwhile: compared again with what it is now
                // (which a version asked for no longer is).
                Err(e @ AdminError::Stale { .. }) if matches!(condition, PutIf::Version(_)) => return Err(e),
                Err(AdminError::Stale { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Err(AdminError::Unavailable {
            reason: format!("job {:?} kept changing while it was declared; try again", job.name()),
        })
    }

    /// Adds a job from its stored form.
    async fn job_create(&self, spec: &JobSpec, executes: &[ExecuteSpec]) -> Result<JobView, AdminError> {
        spec.check_fields()
            .map_err(|(field, e)| AdminError::invalid(field, e.to_string()))?;
        self.check_parent(spec).await?;
        let warnings = self.check_handler(&spec.handler).await?;
        self.check_spec_payload(spec).await?;
        self.store
            .create_job(spec, executes)
            .await
            .map_err(|e| calendar_field(e, executes))?;
        let mut view = self.job(&spec.name).await?;
        view.warnings = warnings;
        Ok(view)
    }

    /// Checks that some node offers `handler` ([`handler_verdict`]).
    async fn check_handler(&self, handler: &str) -> Result<Vec<String>, AdminError> {
        let now = self.store.now().await?;
        let nodes = self.store.list_nodes().await?;
        Ok(handler_verdict(&self.scheduler, &nodes, now, handler)?
            .into_iter()
            .collect())
    }

    /// Checks a job's payload against its handler's published schema.
    async fn check_spec_payload(&self, spec: &JobSpec) -> Result<(), AdminError> {
        let payload: serde_json::Value = serde_json::from_str(&spec.payload)
            .map_err(|e| AdminError::invalid("payload", format!("not JSON: {e}")))?;
        self.check_payload(&spec.handler, &payload).await
    }

    async fn check_parent(&self, spec: &JobSpec) -> Result<(), AdminError> {
        if let Some(parent) = &spec.parent
            && self.store.get_job(parent).await?.is_none()
        {
            return Err(AdminError::invalid("parent", format!("no job named {parent:?}")));
        }
        Ok(())
    }

    /// Changes a job; new triggers, if given, replace its others and start
    /// afresh. With `expected_version`, only if the job is at that version
    /// (the one its editor saw). Either way the patch is applied to the job
    /// as stored when it is written: a change made between this call's read
    /// and its write is never overwritten with what was read (the call
    /// reads again, or with `expected_version` is refused).
    ///
    /// # Errors
    ///
    /// As [`job_add`](Self::job_add), [`AdminError::NotFound`], and
    /// [`AdminError::Stale`].
    pub async fn job_edit(
        &self,
        name: &str,
        patch: &JobPatch,
        expected_version: Option<i64>,
    ) -> Result<JobView, AdminError> {
        let mut tries = 0;
        loop {
            tries += 1;
            let current = self
                .store
                .get_job(name)
                .await?
                .ok_or_else(|| AdminError::NotFound { name: name.to_owned() })?;
            let read = current.job.version;
            if let Some(expected) = expected_version
                && expected != read
            {
                return Err(AdminError::Stale {
                    kind: "job",
                    name: name.to_owned(),
                    expected,
                    current: Some(read),
                });
            }
            let now = self.store.now().await?;
            let (spec, executes) = patch.apply(current.job.spec, now)?;
            match self.job_update(name, &spec, executes.as_deref(), Some(read)).await {
                Err(AdminError::Stale { .. }) if expected_version.is_none() && tries < 5 => {}
                other => return other,
            }
        }
    }

    /// Replaces a job's stored form; `executes`, when given, replace its
    /// triggers. With `expected_version`, only if the job is at that
    /// version.
    async fn job_update(
        &self,
        name: &str,
        spec: &JobSpec,
        executes: Option<&[ExecuteSpec]>,
        expected_version: Option<i64>,
    ) -> Result<JobView, AdminError> {
        spec.check_fields()
            .map_err(|(field, e)| AdminError::invalid(field, e.to_string()))?;
        self.check_parent(spec).await?;
        let stored = self.store.get_job(name).await?;
        let warnings = match &stored {
            // A handler the job already has is not checked again.
            Some(d) if d.job.spec.handler == spec.handler => Vec::new(),
            _ => self.check_handler(&spec.handler).await?,
        };
        // Nor a payload it already has: a schema published since does not
        // stop its pause, its triggers or its description from changing.
        if !stored.is_some_and(|d| d.job.spec.handler == spec.handler && d.job.spec.payload == spec.payload) {
            self.check_spec_payload(spec).await?;
        }
        self.store
            .update_job(name, spec, executes, expected_version)
            .await
            .map_err(|e| calendar_field(e, executes.unwrap_or_default()))?;
        let mut view = self.job(&spec.name).await?;
        view.warnings = warnings;
        Ok(view)
    }

    /// Pauses a job: its triggers hold until it is resumed. With
    /// `expected_version`, only if the job is at that version.
    ///
    /// # Errors
    ///
    /// [`AdminError::NotFound`], [`AdminError::Stale`]; the store's errors.
    pub async fn job_pause(&self, name: &str, expected_version: Option<i64>) -> Result<JobView, AdminError> {
        self.store.set_paused(name, true, expected_version).await?;
        self.job(name).await
    }

    /// Resumes a job; fire times missed meanwhile follow each trigger's
    /// misfire policy. With `expected_version`, only if the job is at that
    /// version.
    ///
    /// # Errors
    ///
    /// [`AdminError::NotFound`], [`AdminError::Stale`]; the store's errors.
    pub async fn job_resume(&self, name: &str, expected_version: Option<i64>) -> Result<JobView, AdminError> {
        self.store.set_paused(name, false, expected_version).await?;
        self.job(name).await
    }

    /// Puts the whole scheduler on standby: no node claims a fire (of a
    /// trigger, a retry, a late run or one asked for by hand) until it
    /// resumes; fires already claimed or running finish. Recorded in the
    /// change log as `scheduler.pause`. Since when it is on standby.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn pause_all(&self) -> Result<Standby, AdminError> {
        let since = self.store.set_standby(true).await?;
        Ok(Standby::since(since))
    }

    /// Takes the scheduler off standby: the nodes claim again, and each
    /// trigger found overdue gets its misfire policy. Recorded in the change
    /// log as `scheduler.resume`.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn resume_all(&self) -> Result<Standby, AdminError> {
        let since = self.store.set_standby(false).await?;
        Ok(Standby::since(since))
    }

    /// Whether the scheduler is on standby, and since when.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn standby(&self) -> Result<Standby, AdminError> {
        Ok(Standby::since(self.store.standby().await?))
    }

    /// Fires a job now, once, beside its schedule: a pending fire in the
    /// ledger (no trigger is added; the job's triggers are left as they
    /// are), run by the first node with its handler and a free thread. A
    /// paused job's fire runs too, and the job stays paused. What it
    /// answers says which of these holds, in words.
    ///
    /// # Errors
    ///
    /// [`AdminError::NotFound`]; the store's errors.
    pub async fn job_trigger(&self, name: &str) -> Result<ManualFire, AdminError> {
        let (fire_id, fire_time) = self.store.fire_now(name).await?;
        let job = self.job(name).await?;
        let offered = !self.nodes_offering(&job.spec.handler).await?.is_empty();
        let paused = job.state == "paused";
        let mut note = format!(
            "fire {fire_id} of {name} is pending: the first node with handler {:?} and a free thread runs it, once",
            job.spec.handler
        );
        if paused {
            note.push_str("; the job is paused, and stays paused: its triggers hold, this fire runs all the same");
        } else {
            note.push_str("; the job's schedule is unchanged");
        }
        if !offered {
            note.push_str(&format!(
                "; no live node offers handler {:?} now: it runs when one does",
                job.spec.handler
            ));
        }
        Ok(ManualFire {
            job: name.to_owned(),
            fire_id,
            fire_time: fire_time.as_millis(),
            paused,
            note,
        })
    }

    /// Deletes a job and its triggers; its ledger rows stay as history.
    /// With `expected_version`, only if the job is at that version.
    ///
    /// # Errors
    ///
    /// [`AdminError::NotFound`], [`AdminError::Stale`]; the store's errors.
    pub async fn job_delete(&self, name: &str, expected_version: Option<i64>) -> Result<(), AdminError> {
        Ok(self.store.delete_job(name, expected_version).await?)
    }

    /// Which of the live nodes offer `handler`: empty when none does (the
    /// job is stored all the same, and its fires are recorded failed once
    /// past the misfire threshold unless a node with the handler joins).
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn nodes_offering(&self, handler: &str) -> Result<Vec<String>, AdminError> {
        let now = self.store.now().await?;
        Ok(self
            .store
            .list_nodes()
            .await?
            .into_iter()
            .filter(|n| views::is_live(n, now) && n.handlers.iter().any(|h| h == handler))
            .map(|n| n.node_id)
            .collect())
    }
}
