//! Enqueued work on the SQL backends: the statements of
//! [`JobStore::enqueue`](quartz_core::store::JobStore::enqueue), written
//! once for a connection of any of sqlx's drivers, so that the store (on
//! sqlx's `Any`) and a service's own transaction (`postgres::enqueue`,
//! `mysql::enqueue`, `sqlite::enqueue`) run the same ones.
//!
//! A piece of work is a row of `quartz_work` (its payload, unique key and
//! window) and its first attempt, a pending ledger row whose execute id is
//! the work's id negated. A unique key is held by one row per job at a time
//! (a unique index); a holder whose fires have all ended and whose window
//! has passed gives its key up to the next, in the next's transaction. Two
//! transactions racing for one key: the second's insert waits for the
//! first's, and on its commit inserts nothing (no error that would spoil
//! the caller's transaction) and answers a duplicate.

/// The work's row (binds: scheduler, job id, fire time, payload, trace parent, key,
/// window's end, created at).
macro_rules! insert_work {
    ($verb:literal) => {
        concat!(
            $verb,
            " INTO quartz_work (scheduler, job_id, fire_time, payload, trace_parent, unique_key, unique_until, \
             created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        )
    };
}

/// The work's first attempt (binds: scheduler, execute id, job id, fire
/// time, due at).
macro_rules! insert_work_fire {
    () => {
        "INSERT INTO quartz_fire (scheduler, execute_id, job_id, fire_time, attempt, node_id, incarnation, state, \
         claimed_at, due_at, fire_count) VALUES (?, ?, ?, ?, 1, NULL, 0, 'pending', {now}, ?, 1)"
    };
}

/// The work's row, nothing on a duplicate key, its id returned
/// (PostgreSQL, SQLite).
pub(crate) const INSERT_WORK_RETURNING: &str = concat!(insert_work!("INSERT"), " ON CONFLICT DO NOTHING RETURNING id");
/// The work's row, nothing on a duplicate key (MySQL: its id read after).
pub(crate) const INSERT_WORK_IGNORE: &str = insert_work!("INSERT IGNORE");
/// The work's first attempt, its id returned (PostgreSQL, SQLite).
pub(crate) const INSERT_WORK_FIRE_RETURNING: &str = concat!(insert_work_fire!(), " RETURNING id");
/// The work's first attempt (MySQL: its id read after).
pub(crate) const INSERT_WORK_FIRE: &str = insert_work_fire!();
/// The id of the row just inserted, on MySQL.
pub(crate) const LAST_ID: &str = "SELECT CAST(LAST_INSERT_ID() AS SIGNED)";

/// Runs the statements of one enqueue on `$conn` (a `&mut` connection of
/// any driver, in a transaction), each made by `$query` from a template;
/// `$backend` picks the dialect's forms. Evaluates to
/// `Result<Enqueued, StoreError>`.
macro_rules! enqueue_on {
    ($conn:expr, $query:expr, $backend:expr, $scheduler:expr, $work:expr) => {{
        use quartz_core::Timestamp;
        use quartz_core::store::{Enqueued, StoreError, work_execute};
        use sqlx::Row as _;
        use $crate::sql_store::db_error;
        use $crate::work::{
            INSERT_WORK_FIRE, INSERT_WORK_FIRE_RETURNING, INSERT_WORK_IGNORE, INSERT_WORK_RETURNING, LAST_ID,
        };
        let (conn, scheduler, work, backend) = ($conn, $scheduler, $work, $backend);
        $crate::work::typed(async move {
            work.validate()?;
            let one = |row: Option<_>| -> Result<Option<i64>, StoreError> {
                row.map(|r: _| sqlx::Row::try_get::<i64, _>(&r, 0))
                    .transpose()
                    .map_err(db_error)
            };
            let now: i64 = $query("SELECT {now}")
                .fetch_one(&mut *conn)
                .await
                .and_then(|row| row.try_get(0))
                .map_err(db_error)?;
            let job_id = one($query("SELECT id FROM quartz_job WHERE scheduler = ? AND name = ?")
                .bind(scheduler.to_owned())
                .bind(work.job.clone())
                .fetch_optional(&mut *conn)
                .await
                .map_err(db_error)?)?
            .ok_or_else(|| StoreError::UnknownJob {
                scheduler: scheduler.to_owned(),
                name: work.job.clone(),
            })?;
            let now_at = Timestamp::from_millis(now);
            let key = work.unique.as_ref().map(|u| u.key.clone());
            // The holder of a key: a plain read first; after losing a race
            // for it, a locking read, which sees the winner's committed row
            // in a transaction whose snapshot predates it (MySQL's
            // repeatable read).
            let holder_of = |key: String, locking: bool| {
                $query(if locking {
                    "SELECT id, fire_time, unique_until FROM quartz_work WHERE scheduler = ? AND job_id = ? \
                     AND unique_key = ?{for_share}"
                } else {
                    "SELECT id, fire_time, unique_until FROM quartz_work WHERE scheduler = ? AND job_id = ? \
                     AND unique_key = ?"
                })
                .bind(scheduler.to_owned())
                .bind(job_id)
                .bind(key)
            };
            if let Some(key) = &key {
                let holder = holder_of(key.clone(), false)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err(db_error)?;
                if let Some(row) = holder {
                    let id: i64 = row.try_get(0).map_err(db_error)?;
                    let fire_time: i64 = row.try_get(1).map_err(db_error)?;
                    let until: Option<i64> = row.try_get(2).map_err(db_error)?;
                    let open = $query(
                        "SELECT 1 FROM quartz_fire WHERE execute_id = ? AND job_id = ? AND fire_time = ? \
                         AND finished_at IS NULL",
                    )
                    .bind(work_execute(id))
                    .bind(job_id)
                    .bind(fire_time)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err(db_error)?
                    .is_some();
                    if open || until.is_some_and(|u| u > now) {
                        return Ok(Enqueued::Duplicate {
                            key: key.clone(),
                            work_id: Some(id),
                            due_at: Some(Timestamp::from_millis(fire_time)),
                        });
                    }
                    $query("UPDATE quartz_work SET unique_key = NULL WHERE id = ? AND unique_key = ?")
                        .bind(id)
                        .bind(key.clone())
                        .execute(&mut *conn)
                        .await
                        .map_err(db_error)?;
                }
            }
            let due = work.due.resolve(now_at).as_millis();
            let returns = backend.returns_rows();
            let insert = $query(if returns {
                INSERT_WORK_RETURNING
            } else {
                INSERT_WORK_IGNORE
            })
            .bind(scheduler.to_owned())
            .bind(job_id)
            .bind(due)
            .bind(work.payload.clone())
            .bind(work.trace_parent.clone())
            .bind(key.clone())
            .bind(work.unique_until(now_at))
            .bind(now);
            let work_id = if returns {
                one(insert.fetch_optional(&mut *conn).await.map_err(db_error)?)?
            } else if insert.execute(&mut *conn).await.map_err(db_error)?.rows_affected() == 1 {
                one($query(LAST_ID).fetch_optional(&mut *conn).await.map_err(db_error)?)?
            } else {
                None
            };
            let Some(work_id) = work_id else {
                // Another transaction's work took the key meanwhile.
                let key = key.unwrap_or_default();
                let holder = holder_of(key.clone(), true)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err(db_error)?;
                let read = |i: usize| holder.as_ref().and_then(|r| r.try_get::<i64, _>(i).ok());
                return Ok(Enqueued::Duplicate {
                    work_id: read(0),
                    due_at: read(1).map(Timestamp::from_millis),
                    key,
                });
            };
            let fire = $query(if returns {
                INSERT_WORK_FIRE_RETURNING
            } else {
                INSERT_WORK_FIRE
            })
            .bind(scheduler.to_owned())
            .bind(work_execute(work_id))
            .bind(job_id)
            .bind(due)
            .bind(due);
            let fire_id = if returns {
                one(fire.fetch_optional(&mut *conn).await.map_err(db_error)?)?
            } else {
                fire.execute(&mut *conn).await.map_err(db_error)?;
                one($query(LAST_ID).fetch_optional(&mut *conn).await.map_err(db_error)?)?
            }
            .ok_or_else(|| StoreError::Database {
                reason: "the work's fire was not written".to_owned(),
            })?;
            $query("UPDATE quartz_scheduler SET changes = changes + 1 WHERE scheduler = ?")
                .bind(scheduler.to_owned())
                .execute(&mut *conn)
                .await
                .map_err(db_error)?;
            if backend.notifies() {
                $query("SELECT pg_notify('quartz_changes', ?) IS NULL")
                    .bind(scheduler.to_owned())
                    .execute(&mut *conn)
                    .await
                    .map_err(db_error)?;
            }
            Ok(Enqueued::Queued {
                work_id,
                fire_id,
                due_at: Timestamp::from_millis(due),
            })
        })
    }};
}
pub(crate) use enqueue_on;

/// The future [`enqueue_on!`] makes, its output named for the compiler.
pub(crate) fn typed<F>(f: F) -> F
where
    F: std::future::Future<Output = Result<quartz_core::store::Enqueued, quartz_core::store::StoreError>>,
{
    f
}
