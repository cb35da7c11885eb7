//! `b1 --hold-xmin`: a REPEATABLE READ transaction that holds PostgreSQL's
//! xmin back through a run, and what the execute and fire tables hold when
//! it ends (row versions live and dead, the run's updates and HOT updates,
//! sizes).

/// A transaction that holds PostgreSQL's xmin back through a run: a
/// snapshot taken at its start, kept until the run's ledger is read.
pub(crate) struct HeldSnapshot {
    conn: sqlx::PgConnection,
    url: String,
    /// Each table's updates and HOT updates counted before the run (the
    /// statistics count since the table was made).
    before: Vec<(String, i64, i64)>,
}

impl HeldSnapshot {
    pub(crate) async fn take(url: &str) -> HeldSnapshot {
        use sqlx::{Connection as _, Executor as _};
        assert!(url.starts_with("postgres"), "--hold-xmin is for PostgreSQL");
        let before = table_updates(url).await;
        let mut conn = sqlx::PgConnection::connect(url)
            .await
            .expect("a connection to hold the snapshot");
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ").await.unwrap();
        // The snapshot is taken at the transaction's first statement.
        conn.execute("SELECT count(*) FROM quartz_fire").await.unwrap();
        HeldSnapshot {
            conn,
            url: url.to_owned(),
            before,
        }
    }

    /// Ends the transaction; what the tables hold then (read on a
    /// connection of its own, the statistics being per transaction).
    pub(crate) async fn release(mut self) -> Vec<String> {
        use sqlx::{Connection as _, Executor as _, Row as _};
        let _ = self.conn.execute("ROLLBACK").await;
        let Ok(mut conn) = sqlx::PgConnection::connect(&self.url).await else {
            return Vec::new();
        };
        let rows = conn
            .fetch_all(
                "SELECT relname::text, n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, \
                 pg_total_relation_size(relid) FROM pg_stat_user_tables \
                 WHERE relname IN ('quartz_execute', 'quartz_fire') ORDER BY relname",
            )
            .await
            .unwrap_or_default();
        rows.iter()
            .map(|r| {
                let n = |i: usize| r.try_get::<i64, _>(i).unwrap_or(0);
                let table = r.try_get::<String, _>(0).unwrap_or_default();
                let (upd0, hot0) = self
                    .before
                    .iter()
                    .find(|(t, _, _)| *t == table)
                    .map_or((0, 0), |(_, u, h)| (*u, *h));
                format!(
                    "{table}: {} live and {} dead row versions, {} updates in the run ({} HOT), {:.1} MB",
                    n(1),
                    n(2),
                    n(3) - upd0,
                    n(4) - hot0,
                    f64::from(u32::try_from(n(5) / 1024).unwrap_or(u32::MAX)) / 1024.0
                )
            })
            .collect()
    }
}

/// Each quartz table's updates and HOT updates so far (none when the
/// statistics cannot be read).
async fn table_updates(url: &str) -> Vec<(String, i64, i64)> {
    use sqlx::{Connection as _, Executor as _, Row as _};
    let Ok(mut conn) = sqlx::PgConnection::connect(url).await else {
        return Vec::new();
    };
    conn.fetch_all(
        "SELECT relname::text, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables \
         WHERE relname IN ('quartz_execute', 'quartz_fire')",
    )
    .await
    .unwrap_or_default()
    .iter()
    .map(|r| {
        (
            r.try_get::<String, _>(0).unwrap_or_default(),
            r.try_get::<i64, _>(1).unwrap_or(0),
            r.try_get::<i64, _>(2).unwrap_or(0),
        )
    })
    .collect()
}
