//! The `Store` implementations of quartz-rs on sqlx: SQLite (the embedded default),
//! PostgreSQL and MySQL/MariaDB, each claim a single compare-and-set statement.
//!
//! Status: this crate is being built; it exports nothing yet. The schema lives in
//! `migrations/<backend>/` at the workspace root.
