//! The ledger, the nodes, the change log, the audit and the cluster's
//! health through the admin surface: what happened, and how the cluster
//! stands.

use std::collections::HashMap;

use super::deserialize_instant;
#[cfg(feature = "openapi")]
use super::instant_schema;
use super::{
    Admin, AdminError, ChangeView, ClusterHealth, FireView, HEALTH_OVERDUE_MS, HEALTH_STRANDED_MS, HEALTH_WINDOW_MS,
    NodeView, OVERVIEW_FIRES, Overview, Page, id_cursor, page_limit, views,
};
use crate::audit::{AuditParams, AuditReport};
use crate::store::{ChangeQuery, FireQuery, FireRetry, FireState, JobQuery, NodeState};
use crate::time::Timestamp;

/// A filter for [`Admin::fires`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct FireFilter {
    /// Only this job's fires (by name; a deleted job's too, by the name it
    /// had).
    pub job: Option<String>,
    /// Only the fires of the job of this id (a deleted job's too).
    pub job_id: Option<i64>,
    /// Only fires whose error contains this text (case-insensitive).
    pub error: Option<String>,
    /// Only fires claimed by this node (its id).
    pub node: Option<String>,
    /// Only fires in this state.
    pub state: Option<String>,
    /// Only fires scheduled at or after this (epoch ms or RFC 3339).
    #[serde(default, deserialize_with = "deserialize_instant")]
    #[cfg_attr(feature = "openapi", param(schema_with = instant_schema))]
    pub since: Option<i64>,
    /// Only fires scheduled before this (epoch ms or RFC 3339).
    #[serde(default, deserialize_with = "deserialize_instant")]
    #[cfg_attr(feature = "openapi", param(schema_with = instant_schema))]
    pub until: Option<i64>,
    /// The cursor: the `next` of the previous page.
    pub before: Option<String>,
    /// Rows per page (default 50, at most 500).
    pub limit: Option<u32>,
}

/// A filter for [`Admin::changes`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct ChangeFilter {
    /// Only changes to this job (by name).
    pub job: Option<String>,
    /// The cursor: the `next` of the previous page.
    pub before: Option<String>,
    /// Rows per page (default 50, at most 500).
    pub limit: Option<u32>,
}

impl Admin {
    /// A page of the ledger, newest first.
    ///
    /// # Errors
    ///
    /// [`AdminError::Invalid`] for a bad filter, [`AdminError::NotFound`] for
    /// an unknown job; the store's errors.
    pub async fn fires(&self, filter: &FireFilter) -> Result<Page<FireView>, AdminError> {
        let state = filter
            .state
            .as_deref()
            .filter(|s| !s.is_empty())
            .map(|s| {
                FireState::parse(s).map_err(|_| AdminError::invalid("state", format!("{s:?} is not a fire state")))
            })
            .transpose()?;
        let limit = page_limit(filter.limit)?;
        let mut query = FireQuery::new();
        query.job_id = filter.job_id;
        query.error_contains = filter.error.clone().filter(|e| !e.is_empty());
        query.node_id = filter.node.clone().filter(|n| !n.is_empty());
        if let Some(name) = filter.job.as_deref().filter(|j| !j.is_empty()) {
            query.job_id = Some(self.job_id_by_name(name).await?);
        }
        query.state = state;
        query.since = filter.since.map(Timestamp::from_millis);
        query.until = filter.until.map(Timestamp::from_millis);
        query.before_id = id_cursor("before", filter.before.as_deref())?;
        query.limit = limit;
        let fires = self.store.fires(&query).await?;
        let names = self.job_names(fires.iter().map(|f| f.job_id)).await?;
        let next = (fires.len() == limit as usize)
            .then(|| fires.last().map(|f| f.id.to_string()))
            .flatten();
        Ok(Page {
            items: fires
                .iter()
                .map(|f| FireView::new(f, names.get(&f.job_id).cloned()))
                .collect(),
            next,
        })
    }

    /// Retries a finished fire by hand: a new attempt of it (the next
    /// attempt number, recorded as such), pending now, run by the first
    /// node with its job's handler and a free thread. Returns the new
    /// attempt's ledger row.
    ///
    /// # Errors
    ///
    /// [`AdminError::FireNotFound`]; [`AdminError::Refused`] saying why
    /// when the fire did not fail (or abandon, or misfire), an attempt of
    /// it is open or succeeded since, or its job is gone or paused; the
    /// store's errors.
    pub async fn fire_retry(&self, fire_id: i64) -> Result<FireView, AdminError> {
        match self.store.retry_fire(fire_id).await? {
            FireRetry::NotFound => Err(AdminError::FireNotFound { id: fire_id }),
            FireRetry::Refused(reason) => Err(AdminError::Refused { reason }),
            FireRetry::Pending { fire_id: new, .. } => {
                let mut query = FireQuery::new();
                query.before_id = Some(new + 1);
                query.limit = 1;
                let fires = self.store.fires(&query).await?;
                let fire = fires
                    .into_iter()
                    .find(|f| f.id == new)
                    .ok_or(AdminError::FireNotFound { id: new })?;
                let names = self.job_names(std::iter::once(fire.job_id)).await?;
                Ok(FireView::new(&fire, names.get(&fire.job_id).cloned()))
            }
        }
    }

    /// The id of the job of a name: the job's now, else the one its
    /// changes name (a job deleted or renamed since keeps its history).
    pub(super) async fn job_id_by_name(&self, name: &str) -> Result<i64, AdminError> {
        if let Some(detail) = self.store.get_job(name).await? {
            return Ok(detail.job.id);
        }
        let mut query = ChangeQuery::new();
        query.target = Some(name.to_owned());
        query.limit = 50;
        self.store
            .change_log(&query)
            .await?
            .iter()
            .find_map(|c| c.action.starts_with("job.").then_some(c.target_id).flatten())
            .ok_or_else(|| AdminError::NotFound { name: name.to_owned() })
    }

    async fn job_names(&self, ids: impl Iterator<Item = i64>) -> Result<HashMap<i64, String>, AdminError> {
        let mut ids: Vec<i64> = ids.collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(self
            .store
            .jobs_by_id(&ids)
            .await?
            .into_iter()
            .map(|j| (j.id, j.spec.name))
            .collect())
    }

    /// Every node the scheduler has seen, live first.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn nodes(&self) -> Result<Vec<NodeView>, AdminError> {
        let now = self.store.now().await?;
        let mut nodes: Vec<NodeView> = self
            .store
            .list_nodes()
            .await?
            .iter()
            .map(|n| NodeView::new(n, now))
            .collect();
        let rank = |state: &str| match state {
            "live" => 0,
            "silent" => 1,
            _ => 2,
        };
        nodes.sort_by(|a, b| (rank(&a.state), &a.node_id).cmp(&(rank(&b.state), &b.node_id)));
        Ok(nodes)
    }

    /// A page of the change log, newest first.
    ///
    /// # Errors
    ///
    /// [`AdminError::Invalid`] for a bad cursor; the store's errors.
    pub async fn changes(&self, filter: &ChangeFilter) -> Result<Page<ChangeView>, AdminError> {
        let limit = page_limit(filter.limit)?;
        let mut query = ChangeQuery::new();
        query.target = filter.job.clone().filter(|j| !j.is_empty());
        query.before_id = id_cursor("before", filter.before.as_deref())?;
        query.limit = limit;
        let changes = self.store.change_log(&query).await?;
        let next = (changes.len() == limit as usize)
            .then(|| changes.last().map(|c| c.id.to_string()))
            .flatten();
        Ok(Page {
            items: changes.iter().map(ChangeView::from).collect(),
            next,
        })
    }

    /// The ledger audit over a range (see [`crate::audit`]).
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn audit(&self, params: &AuditParams) -> Result<AuditReport, AdminError> {
        Ok(crate::audit::audit(&*self.store, params).await?)
    }

    /// The database's now.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn now(&self) -> Result<Timestamp, AdminError> {
        Ok(self.store.now().await?)
    }

    /// The cluster's health as the database has it (see [`ClusterHealth`]):
    /// nodes by state (silent ones apart), overdue waiting triggers,
    /// open, pending and stranded fires, and the last
    /// [`HEALTH_WINDOW_MS`]'s outcomes. A handful of reads on indexes, for
    /// every scrape of `/metrics`.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn health(&self) -> Result<ClusterHealth, AdminError> {
        let now = self.store.now().await?;
        let nodes = self.store.list_nodes().await?;
        let counts = self
            .store
            .health_counts(
                now.saturating_add_millis(-HEALTH_OVERDUE_MS),
                now.saturating_add_millis(-HEALTH_STRANDED_MS),
                now.saturating_add_millis(-HEALTH_WINDOW_MS),
            )
            .await?;
        let silent = |n: &&crate::store::Node| views::is_silent(n, now);
        let in_state = |s: NodeState| nodes.iter().filter(|n| n.state == s).count();
        let silent_nodes = nodes.iter().filter(silent).count();
        Ok(ClusterHealth {
            now: now.as_millis(),
            live_nodes: in_state(NodeState::Live) - silent_nodes,
            silent_nodes,
            dead_nodes: in_state(NodeState::Dead),
            gone_nodes: in_state(NodeState::Gone),
            overdue_triggers: counts.overdue_triggers,
            oldest_overdue_ms: counts.oldest_overdue.map(|t| now.as_millis() - t.as_millis()),
            claimed_fires: counts.claimed,
            running_fires: counts.running,
            pending_fires: counts.pending,
            stranded_fires: counts.stranded,
            window_ms: HEALTH_WINDOW_MS,
            recent_succeeded: counts.recent_succeeded,
            recent_failed: counts.recent_failed,
            recent_misfired: counts.recent_misfired,
        })
    }

    /// The cluster at a glance over the last `window_ms`: nodes, jobs, and
    /// the fires of the window by outcome, per minute and by lateness.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn overview(&self, window_ms: i64) -> Result<Overview, AdminError> {
        let now = self.store.now().await?;
        let nodes = self.store.list_nodes().await?;
        let mut jobs = JobQuery::new();
        jobs.limit = 10_000;
        let jobs = self.store.jobs_page(&jobs).await?;
        let since = now.saturating_add_millis(-window_ms);
        let mut query = FireQuery::new();
        query.since = Some(since);
        query.limit = OVERVIEW_FIRES;
        let fires = self.store.fires(&query).await?;
        Ok(views::overview(now, window_ms, &nodes, &jobs, &fires))
    }
}
