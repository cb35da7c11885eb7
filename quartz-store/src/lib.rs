//! The [`Store`](quartz_core::store::Store) on real databases: SQLite (the
//! embedded default), PostgreSQL and MySQL/MariaDB, through sqlx.
//!
//! One implementation, [`SqlStore`], serves all three; the backend is chosen by
//! the URL and the dialect differences (placeholders, the clock expression,
//! null-safe equality, how an inserted id comes back, which statements take
//! `RETURNING`) are confined to one module, `dialect`. The schema lives in `migrations/{sqlite,postgres,mysql}` at the root
//! of the repository, is embedded in the library and applied on connect (or by
//! [`SqlStore::migrate`]), recorded in its own table
//! [`MIGRATIONS_TABLE`] so that an application's sqlx migrations in the same
//! database are left alone.
//!
//! Every claim is one compare-and-set `UPDATE` of the execute row plus the
//! insert of its ledger row, in one transaction; the ledger's unique key on
//! `(execute_id, fire_time, attempt)` makes a second claim of a fire impossible.
//!
//! ```
//! use quartz_core::store::JobSpec;
//! use quartz_core::store::prelude::*;
//! use quartz_store::SqlStore;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = SqlStore::connect("sqlite::memory:").await?;
//! let job = store.create_job(&JobSpec::new("nightly-report", "shell"), &[]).await?;
//! assert_eq!(store.list_jobs().await?, vec![job]);
//! # Ok::<(), quartz_core::store::StoreError>(())
//! # }).unwrap();
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod any_store;
mod common;
mod connect;
mod dialect;
mod ends;
mod hosts;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis_store;
mod sql_store;
#[cfg(feature = "sqlite")]
pub mod sqlite;
mod work;

pub use any_store::{AnyStore, is_redis_url};
pub use connect::{Backend, MIGRATIONS_TABLE, StoreOptions};
#[cfg(feature = "redis")]
pub use redis_store::RedisStore;
pub use sql_store::{CHANGE_POLL, SqlStore};
