//! Driver errors as store errors, and small conversions the statements share.

use quartz_core::store::StoreError;
use sqlx::Any;
use sqlx::any::{AnyQueryResult, AnyRow};

use super::AnyQuery;
use crate::dialect::IDS_PER_LIST;

/// A statement sent, its driver error mapped ([`db_error`]): the fetch
/// skeleton every read and write of the SQL store shares.
pub(super) trait Statement: Sized {
    /// Every row it returns.
    fn rows<'e, 'c: 'e, E>(self, on: E) -> impl Future<Output = Result<Vec<AnyRow>, StoreError>> + Send + 'e
    where
        E: 'e + sqlx::Executor<'c, Database = Any>;

    /// Its row, if it returns one.
    fn row<'e, 'c: 'e, E>(self, on: E) -> impl Future<Output = Result<Option<AnyRow>, StoreError>> + Send + 'e
    where
        E: 'e + sqlx::Executor<'c, Database = Any>;

    /// Its one row (an error when it returns none).
    fn one<'e, 'c: 'e, E>(self, on: E) -> impl Future<Output = Result<AnyRow, StoreError>> + Send + 'e
    where
        E: 'e + sqlx::Executor<'c, Database = Any>;

    /// Runs it, for what it changed.
    fn exec<'e, 'c: 'e, E>(self, on: E) -> impl Future<Output = Result<AnyQueryResult, StoreError>> + Send + 'e
    where
        E: 'e + sqlx::Executor<'c, Database = Any>;
}

impl Statement for AnyQuery {
    async fn rows<'e, 'c: 'e, E>(self, on: E) -> Result<Vec<AnyRow>, StoreError>
    where
        E: 'e + sqlx::Executor<'c, Database = Any>,
    {
        self.fetch_all(on).await.map_err(db_error)
    }

    async fn row<'e, 'c: 'e, E>(self, on: E) -> Result<Option<AnyRow>, StoreError>
    where
        E: 'e + sqlx::Executor<'c, Database = Any>,
    {
        self.fetch_optional(on).await.map_err(db_error)
    }

    async fn one<'e, 'c: 'e, E>(self, on: E) -> Result<AnyRow, StoreError>
    where
        E: 'e + sqlx::Executor<'c, Database = Any>,
    {
        self.fetch_one(on).await.map_err(db_error)
    }

    async fn exec<'e, 'c: 'e, E>(self, on: E) -> Result<AnyQueryResult, StoreError>
    where
        E: 'e + sqlx::Executor<'c, Database = Any>,
    {
        self.execute(on).await.map_err(db_error)
    }
}

pub(super) fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_unique_violation())
}

/// Maps a driver error: connection trouble is [`StoreError::Unavailable`] (the
/// caller may retry), a deadlock or serialization failure is
/// [`StoreError::Conflict`], the rest [`StoreError::Database`].
pub(crate) fn db_error(e: sqlx::Error) -> StoreError {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => StoreError::Unavailable { reason: e.to_string() },
        sqlx::Error::Database(ref db) if is_conflict(db.code().as_deref()) => {
            StoreError::Conflict { reason: e.to_string() }
        }
        sqlx::Error::Database(ref db) if is_missing_schema(db.code().as_deref(), db.message()) => {
            StoreError::Database {
                reason: format!(
                    "{}: the quartz schema is missing here, or older than this build; run `quartz migrate \
                 --database-url URL` (or connect with StoreOptions::migrate on, as by default)",
                    db.message()
                ),
            }
        }
        // The server's message without sqlx's wrapping and the server's own
        // source line ("… at line 1392").
        sqlx::Error::Database(ref db) => StoreError::Database {
            reason: match db.code() {
                Some(code) => format!("{} (SQLSTATE {code})", db.message()),
                None => db.message().to_owned(),
            },
        },
        other => StoreError::Database {
            reason: other.to_string(),
        },
    }
}

/// A table or column the statement names is not in the database: the
/// schema was never made there, or is older than the statements
/// (PostgreSQL's 42P01 and 42703, MySQL's and MariaDB's 42S02 and 42S22,
/// SQLite's "no such table" and "no such column").
pub(crate) fn is_missing_schema(code: Option<&str>, message: &str) -> bool {
    matches!(code, Some("42P01" | "42703" | "42S02" | "42S22"))
        || message.starts_with("no such table")
        || message.starts_with("no such column")
}

/// Runs a transaction again, up to three times in all, when the database
/// rolled it back to break a deadlock.
pub(super) async fn retry_conflicts<T, F, Fut>(mut attempt: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let mut tries = 1;
    loop {
        match attempt().await {
            Err(StoreError::Conflict { .. }) if tries < 3 => tries += 1,
            other => return other,
        }
    }
}

/// SQLSTATE 40001 (serialization failure; MySQL's deadlock 1213 carries it)
/// and 40P01 (PostgreSQL's deadlock): the server rolled the transaction back.
pub(super) fn is_conflict(code: Option<&str>) -> bool {
    matches!(code, Some("40001" | "40P01"))
}

/// Binds a MySQL `{ids}` list of [`IDS_PER_LIST`] placeholders: the ids,
/// the last repeated to fill it (one prepared text for every size).
pub(super) fn bind_id_list(mut q: AnyQuery, ids: &[i64]) -> AnyQuery {
    for i in 0..IDS_PER_LIST {
        q = q.bind(ids.get(i).or(ids.last()).copied().unwrap_or(0));
    }
    q
}

pub(super) fn count_to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The text of a one-row, one-column answer (`NULL`, or no row: `None`):
/// the lists the PostgreSQL batches answer in one row.
pub(super) fn text_of(row: Option<sqlx::any::AnyRow>) -> Result<Option<String>, StoreError> {
    use sqlx::Row as _;
    row.map(|row| row.try_get::<Option<String>, _>(0).map_err(db_error))
        .transpose()
        .map(Option::flatten)
}

/// The first column of every row, as ids.
pub(super) fn first_ids<C: FromIterator<i64>>(rows: &[sqlx::any::AnyRow]) -> Result<C, StoreError> {
    use sqlx::Row as _;
    rows.iter()
        .map(|row| row.try_get::<i64, _>(0).map_err(db_error))
        .collect()
}

/// The items of a one-row list answer ([`text_of`]): separated by commas,
/// each `N` integers joined by colons. An item of another shape is an
/// error saying `bad` and the item.
pub(super) fn int_items<const N: usize>(list: Option<&str>, bad: &str) -> Result<Vec<[i64; N]>, StoreError> {
    list.unwrap_or_default()
        .split(',')
        .filter(|item| !item.is_empty())
        .map(|item| {
            let mut parts = item.split(':').map(str::parse::<i64>);
            let mut out = [0; N];
            for slot in &mut out {
                match parts.next() {
                    Some(Ok(n)) => *slot = n,
                    _ => return Err(bad_item(bad, item)),
                }
            }
            match parts.next() {
                None => Ok(out),
                Some(_) => Err(bad_item(bad, item)),
            }
        })
        .collect()
}

fn bad_item(bad: &str, item: &str) -> StoreError {
    StoreError::Database {
        reason: format!("{bad}: {item:?}"),
    }
}
