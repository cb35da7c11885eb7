//! Jobs added and work enqueued in the service's own PostgreSQL
//! transaction: the job or the work exists if and only if the service's
//! transaction commits, and the nodes see it at once when it does (the
//! change is announced from that transaction).
//!
//! ```no_run
//! # async fn signup(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use quartz_core::admin::{JobDefinition, TriggerDefinition};
//!
//! let mut tx = pool.begin().await?;
//! sqlx::query("INSERT INTO customer (name) VALUES ('acme')").execute(&mut *tx).await?;
//! let job = JobDefinition::new("invoice-acme", "invoice")
//!     .with_payload("acme")?
//!     .with_trigger(TriggerDefinition::cron("0 0 2 1 * ?", "Europe/Paris")?);
//! quartz_store::postgres::add_job(&mut tx, "billing", &job).await?;
//! tx.commit().await?; // the customer and its job, or neither
//! # Ok(()) }
//! ```

use quartz_core::Timestamp;
use quartz_core::admin::{AdminError, JobDefinition};
use quartz_core::store::{ChangeAction, DEFAULT_ACTOR, Enqueued, Node, NodeState, StoreError, Work, check_name};
use sqlx::postgres::PgConnection;
use sqlx::{AssertSqlSafe, Postgres, Row};

use crate::common::{CalendarSet, new_executes};
use crate::dialect::{Backend, render};
use crate::sql_store::db_error;
use crate::sql_store::jobs::{INSERT_EXECUTE, INSERT_JOB, bind_job_spec, bind_new_execute};

/// Enqueues work (see [`Work`]) on `conn`, inside the transaction the
/// caller holds there: the work exists, and runs, if and only if that
/// transaction commits. As [`JobStore::enqueue`](quartz_core::store::JobStore::enqueue)
/// does: the job must exist in `scheduler` (the work's kind: its handler,
/// attempts, backoff and timeout apply); with a unique key that another
/// piece of work of the job holds, nothing is written and the answer is
/// [`Enqueued::Duplicate`] (a race with another transaction for the key
/// waits for it and then answers so: no error spoils the transaction). The
/// scheduler's change counter moves, so every node looks at once when the
/// transaction commits; its row stays locked until then, so enqueue near
/// the end of a long transaction.
///
/// ```no_run
/// # async fn signup(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use quartz_core::store::{Enqueued, Work};
///
/// let mut tx = pool.begin().await?;
/// sqlx::query("INSERT INTO customer (name) VALUES ('ada')").execute(&mut *tx).await?;
/// let work = Work::new("welcome-mail")
///     .payload(&serde_json::json!({ "to": "ada@example.com" }))?
///     .unique("welcome:ada@example.com");
/// let queued = quartz_store::postgres::enqueue(&mut tx, "billing", &work).await?;
/// tx.commit().await?; // the customer and its mail, or neither
/// assert!(matches!(queued, Enqueued::Queued { .. }));
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`AdminError::NotFound`] for a job the scheduler does not have (a
/// misspelt job or scheduler), [`AdminError::Invalid`] naming the field
/// for what [`Work::validate`] refuses; database errors as
/// [`AdminError::Unavailable`] or [`AdminError::Store`]. After an error
/// the transaction should be rolled back.
pub async fn enqueue(conn: &mut PgConnection, scheduler: &str, work: &Work) -> Result<Enqueued, AdminError> {
    check_name("scheduler name", scheduler).map_err(|e| AdminError::invalid("scheduler", e.to_string()))?;
    Ok(crate::work::enqueue_on!(conn, query, Backend::Postgres, scheduler, work).await?)
}

/// One of our statements, rendered for PostgreSQL.
fn query(template: &str) -> sqlx::query::Query<'static, Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(AssertSqlSafe(render(Backend::Postgres, template)))
}

/// Adds a job with its triggers on `conn`, inside whatever transaction the
/// caller holds there (begin one first: on a connection in autocommit each
/// statement commits alone). As [`Admin::job_add`](quartz_core::admin::Admin::job_add)
/// does: the same checks, the same rows, the change counted and logged (as
/// made by `service`) and announced to the nodes, who see it when the
/// transaction commits; nothing is written when it fails, nothing remains
/// when the transaction rolls back. The schema must exist (a node, or
/// `quartz migrate`, creates it). Returns the job's id.
///
/// # Errors
///
/// [`AdminError::Invalid`] naming the field, [`AdminError::Conflict`] for a
/// name taken, [`AdminError::Invalid`] for an unknown parent, a handler no
/// live node of the scheduler offers (field `handler`), or a scheduler with
/// no node and no job where other schedulers have nodes (field
/// `scheduler`: a misspelt name),
/// [`AdminError::CalendarNotFound`]; database errors as
/// [`AdminError::Unavailable`] or [`AdminError::Store`]. After an error the
/// transaction should be rolled back (PostgreSQL refuses further statements
/// in it once one has failed).
pub async fn add_job(conn: &mut PgConnection, scheduler: &str, job: &JobDefinition) -> Result<i64, AdminError> {
    check_name("scheduler name", scheduler).map_err(|e| AdminError::invalid("scheduler", e.to_string()))?;
    let now: i64 = query("SELECT {now}")
        .fetch_one(&mut *conn)
        .await
        .and_then(|row| row.try_get(0))
        .map_err(db_error)?;
    let now = Timestamp::from_millis(now);
    let (spec, executes) = job.to_specs(now)?;
    spec.validate().map_err(StoreError::Invalid)?;
    check_scheduler_and_handler(conn, scheduler, &spec.handler, now).await?;
    if let Some(parent) = &spec.parent {
        let found = query("SELECT id FROM quartz_job WHERE scheduler = ? AND name = ?")
            .bind(scheduler)
            .bind(parent)
            .fetch_optional(&mut *conn)
            .await
            .map_err(db_error)?;
        if found.is_none() {
            return Err(AdminError::invalid("parent", format!("no job named {parent:?}")));
        }
    }
    let named: Vec<&str> = executes.iter().filter_map(|e| e.trigger.calendar_name()).collect();
    let calendars = calendars(conn, scheduler, &named).await?;
    let rows = new_executes(&executes, &calendars, now)?;

    query(Backend::Postgres.insert_scheduler_row())
        .bind(scheduler)
        .execute(&mut *conn)
        .await
        .map_err(db_error)?;
    let insert = query(&format!("{INSERT_JOB} RETURNING id")).bind(scheduler);
    let inserted = bind_job_spec!(insert, &spec).fetch_one(&mut *conn).await;
    let job_id: i64 = match inserted {
        Ok(row) => row.try_get("id").map_err(db_error)?,
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
            return Err(AdminError::Conflict { name: spec.name });
        }
        Err(e) => return Err(db_error(e).into()),
    };
    for new in rows {
        bind_new_execute!(query(INSERT_EXECUTE), job_id, scheduler, new, false)
            .execute(&mut *conn)
            .await
            .map_err(db_error)?;
    }
    query("UPDATE quartz_scheduler SET changes = changes + 1 WHERE scheduler = ?")
        .bind(scheduler)
        .execute(&mut *conn)
        .await
        .map_err(db_error)?;
    query(
        "INSERT INTO quartz_change_log (scheduler, at, actor, action, target, detail, target_id) \
         VALUES (?, {now}, ?, ?, ?, ?, ?)",
    )
    .bind(scheduler)
    .bind(DEFAULT_ACTOR)
    .bind(ChangeAction::JobCreate.as_str())
    .bind(&spec.name)
    .bind(format!(
        "handler {}, {} trigger(s), in the service's transaction",
        spec.handler,
        executes.len()
    ))
    .bind(job_id)
    .execute(&mut *conn)
    .await
    .map_err(db_error)?;
    query("SELECT pg_notify('quartz_changes', ?) IS NULL")
        .bind(scheduler)
        .execute(&mut *conn)
        .await
        .map_err(db_error)?;
    Ok(job_id)
}

/// The calendars the new triggers name, each of which must exist.
async fn calendars(conn: &mut PgConnection, scheduler: &str, names: &[&str]) -> Result<CalendarSet, AdminError> {
    if names.is_empty() {
        return Ok(CalendarSet::default());
    }
    let rows = query("SELECT name, definition FROM quartz_calendar WHERE scheduler = ?")
        .bind(scheduler)
        .fetch_all(&mut *conn)
        .await
        .map_err(db_error)?;
    let mut records = Vec::with_capacity(rows.len());
    for row in &rows {
        let name: String = row.try_get("name").map_err(db_error)?;
        let text: String = row.try_get("definition").map_err(db_error)?;
        let definition = serde_json::from_str(&text).map_err(|e| {
            AdminError::invalid(
                "calendar",
                format!("the stored definition of {name:?} cannot be read: {e}"),
            )
        })?;
        records.push((name, definition));
    }
    let definitions: std::collections::BTreeMap<_, _> = records.into_iter().collect();
    if let Some(missing) = names.iter().find(|n| !definitions.contains_key(**n)) {
        return Err(AdminError::CalendarNotFound {
            name: (*missing).to_owned(),
        });
    }
    Ok(CalendarSet::resolve(&definitions, names.iter().copied()))
}

/// A misspelt scheduler or handler refused, as the admin surface refuses
/// them: a handler no live node of the scheduler offers
/// ([`handler_verdict`](quartz_core::admin::handler_verdict); with no node
/// live, accepted with a warning in the log); a scheduler with no node and
/// no job in a database whose other schedulers have nodes.
async fn check_scheduler_and_handler(
    conn: &mut PgConnection,
    scheduler: &str,
    handler: &str,
    now: Timestamp,
) -> Result<(), AdminError> {
    let rows = query(
        "SELECT node_id, host, pid, weight, state, incarnation, registered_at, heartbeat_at, busy, handlers, \
         dead_after_ms FROM quartz_node WHERE scheduler = ?",
    )
    .bind(scheduler)
    .fetch_all(&mut *conn)
    .await
    .map_err(db_error)?;
    let nodes: Vec<Node> = rows.iter().filter_map(|row| node_of(scheduler, row)).collect();
    if nodes.is_empty() {
        let has_jobs = query("SELECT 1 FROM quartz_job WHERE scheduler = ? LIMIT 1")
            .bind(scheduler)
            .fetch_optional(&mut *conn)
            .await
            .map_err(db_error)?
            .is_some();
        let others: Vec<String> = query("SELECT DISTINCT scheduler FROM quartz_node ORDER BY 1")
            .fetch_all(&mut *conn)
            .await
            .map_err(db_error)?
            .iter()
            .filter_map(|row| row.try_get::<String, _>(0).ok())
            .collect();
        if !has_jobs && !others.is_empty() {
            return Err(AdminError::invalid(
                "scheduler",
                format!(
                    "scheduler {scheduler:?} has no node and no job in this database, whose nodes run {}: \
                     a misspelt name? (a new scheduler: start its first node before adding jobs from a \
                     transaction)",
                    others.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
    if let Some(warning) = quartz_core::admin::handler_verdict(scheduler, &nodes, now, handler)? {
        tracing::warn!(scheduler, handler, "{warning}");
    }
    Ok(())
}

/// A node's row as the handler check reads it; `None` when it cannot be
/// read (it counts as no node).
fn node_of(scheduler: &str, row: &sqlx::postgres::PgRow) -> Option<Node> {
    Some(Node {
        scheduler: scheduler.to_owned(),
        node_id: row.try_get("node_id").ok()?,
        host: row.try_get("host").ok()?,
        pid: u32::try_from(row.try_get::<i64, _>("pid").ok()?).ok()?,
        weight: u32::try_from(row.try_get::<i64, _>("weight").ok()?).ok()?,
        state: NodeState::parse(&row.try_get::<String, _>("state").ok()?).ok()?,
        incarnation: row.try_get("incarnation").ok()?,
        registered_at: Timestamp::from_millis(row.try_get("registered_at").ok()?),
        heartbeat_at: Timestamp::from_millis(row.try_get("heartbeat_at").ok()?),
        busy: u64::try_from(row.try_get::<i64, _>("busy").ok()?).ok()?,
        handlers: match row.try_get::<Option<String>, _>("handlers").ok()? {
            Some(text) => serde_json::from_str(&text).ok()?,
            None => Vec::new(),
        },
        dead_after: row
            .try_get::<Option<i64>, _>("dead_after_ms")
            .ok()?
            .map(|ms| std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
    })
}
