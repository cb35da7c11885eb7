//! Work enqueued in the service's own SQLite transaction: it exists,
//! and runs, if and only if the service's transaction commits.
//!
//! ```no_run
//! # async fn signup(pool: sqlx::SqlitePool) -> Result<(), Box<dyn std::error::Error>> {
//! use quartz_core::store::Work;
//!
//! let mut tx = pool.begin().await?;
//! sqlx::query("INSERT INTO customer (name) VALUES ('ada')").execute(&mut *tx).await?;
//! let work = Work::new("welcome-mail").payload(&serde_json::json!({ "to": "ada@example.com" }))?;
//! quartz_store::sqlite::enqueue(&mut tx, "billing", &work).await?;
//! tx.commit().await?; // the customer and its mail, or neither
//! # Ok(()) }
//! ```

use quartz_core::admin::AdminError;
use quartz_core::store::{Enqueued, Work, check_name};
use sqlx::sqlite::{SqliteArguments, SqliteConnection};
use sqlx::{AssertSqlSafe, Sqlite};

use crate::dialect::{Backend, render};

/// One of our statements, rendered for SQLite.
fn query(template: &str) -> sqlx::query::Query<'static, Sqlite, SqliteArguments> {
    sqlx::query(AssertSqlSafe(render(Backend::Sqlite, template)))
}

/// Enqueues work on `conn`, inside the transaction the caller holds there,
/// as [`postgres::enqueue`](crate::postgres) does on PostgreSQL (see
/// [`JobStore::enqueue`](quartz_core::store::JobStore::enqueue)): the job
/// must exist in `scheduler`; a unique key another piece of work of the
/// job holds gives [`Enqueued::Duplicate`] and writes nothing. The
/// scheduler's change counter moves (its row locked until the commit), so
/// every node looks at once when the transaction commits.
///
/// # Errors
///
/// [`AdminError::NotFound`] for a job the scheduler does not have,
/// [`AdminError::Invalid`] naming the field for what
/// [`Work::validate`] refuses; database errors as
/// [`AdminError::Unavailable`] or [`AdminError::Store`].
pub async fn enqueue(conn: &mut SqliteConnection, scheduler: &str, work: &Work) -> Result<Enqueued, AdminError> {
    check_name("scheduler name", scheduler).map_err(|e| AdminError::invalid("scheduler", e.to_string()))?;
    Ok(crate::work::enqueue_on!(conn, query, Backend::Sqlite, scheduler, work).await?)
}
