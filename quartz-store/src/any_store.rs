//! [`AnyStore`]: the store a URL names, SQL or Redis, as one value (a
//! [`SharedStore`], the contract as a trait object), for tools (the CLI, the
//! console, benchmarks, test suites) that take any backend at run time.

use std::any::Any;
use std::ops::Deref;

use quartz_core::store::{IntoStore, SharedStore, Store, StoreError};

#[cfg(feature = "redis")]
use crate::RedisStore;
use crate::{SqlStore, StoreOptions};

/// The store a URL names: [`SqlStore`] for `sqlite:`, `postgres://` and
/// `mysql://` (or `mariadb://`), [`RedisStore`] for `redis://` and
/// `rediss://`, held as a [`SharedStore`] (`Arc<dyn Store>`): every method
/// of the contract is called through it, and it goes wherever a store does
/// ([`IntoStore`]). Cheap to clone.
///
/// ```
/// use quartz_core::store::{JobSpec, JobStore};
/// use quartz_store::AnyStore;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = AnyStore::connect("sqlite::memory:").await?;
/// store.create_job(&JobSpec::new("nightly-report", "shell"), &[]).await?;
/// assert_eq!(store.list_jobs().await?.len(), 1);
/// assert!(store.as_sql().is_some());
/// # Ok::<(), quartz_core::store::StoreError>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct AnyStore(SharedStore);

/// Whether a URL names a Redis server or a Redis Cluster.
pub fn is_redis_url(url: &str) -> bool {
    ["redis://", "rediss://", "redis+cluster://", "rediss+cluster://"]
        .iter()
        .any(|scheme| url.starts_with(scheme))
}

impl AnyStore {
    /// Connects to the store a URL names (see [`SqlStore::connect`] and
    /// [`RedisStore::connect`]).
    ///
    /// # Errors
    ///
    /// As the chosen store's `connect`.
    pub async fn connect(url: &str) -> Result<AnyStore, StoreError> {
        AnyStore::connect_with(url, &StoreOptions::default()).await
    }

    /// Connects with options (which only the SQL stores take).
    ///
    /// # Errors
    ///
    /// As [`AnyStore::connect`].
    pub async fn connect_with(url: &str, options: &StoreOptions) -> Result<AnyStore, StoreError> {
        if is_redis_url(url) {
            #[cfg(feature = "redis")]
            return Ok(AnyStore::from(RedisStore::connect(url).await?));
            #[cfg(not(feature = "redis"))]
            return Err(StoreError::InvalidUrl {
                url: crate::dialect::redact(url),
                reason: "this build has no redis support: enable the `redis` feature (for example \
                         `quartz = { version = \"0.1\", features = [\"redis\"] }` in Cargo.toml)"
                    .to_owned(),
            });
        } else {
            Ok(AnyStore::from(SqlStore::connect_with(url, options).await?))
        }
    }

    /// Any store, as one of these.
    pub fn new(store: impl IntoStore) -> AnyStore {
        AnyStore(store.into_store())
    }

    /// The SQL store, if this is one.
    pub fn as_sql(&self) -> Option<&SqlStore> {
        (&*self.0 as &dyn Any).downcast_ref()
    }

    /// The Redis store, if this is one.
    #[cfg(feature = "redis")]
    pub fn as_redis(&self) -> Option<&RedisStore> {
        (&*self.0 as &dyn Any).downcast_ref()
    }

    /// The same store on another scheduler's rows (see [`Store::scoped`]).
    pub fn scoped(&self, scheduler: &str) -> AnyStore {
        AnyStore(self.0.scoped(scheduler))
    }

    /// The same store, its changes made as `actor` (see
    /// [`Store::acting_as`]).
    pub fn acting_as(&self, actor: &str) -> AnyStore {
        AnyStore(self.0.acting_as(actor))
    }

    /// The store, shared.
    pub fn shared(&self) -> &SharedStore {
        &self.0
    }
}

impl Deref for AnyStore {
    type Target = dyn Store;

    fn deref(&self) -> &(dyn Store + 'static) {
        &*self.0
    }
}

impl IntoStore for AnyStore {
    fn into_store(self) -> SharedStore {
        self.0
    }
}

impl IntoStore for &AnyStore {
    fn into_store(self) -> SharedStore {
        SharedStore::clone(&self.0)
    }
}

impl From<SqlStore> for AnyStore {
    fn from(store: SqlStore) -> AnyStore {
        AnyStore::new(store)
    }
}

#[cfg(feature = "redis")]
impl From<RedisStore> for AnyStore {
    fn from(store: RedisStore) -> AnyStore {
        AnyStore::new(store)
    }
}

impl From<SharedStore> for AnyStore {
    fn from(store: SharedStore) -> AnyStore {
        AnyStore(store)
    }
}
