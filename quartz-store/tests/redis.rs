//! The Redis store's connection on real servers: the machine's Redis
//! (`QUARTZ_REDIS_URL`, default `redis://127.0.0.1:6379`) for the clock, and
//! private `redis-server` processes started here for the settings a test
//! needs (eviction, the append-only file, a schema already written).

#![allow(clippy::unwrap_used)]

use quartz_core::store::Store as _;
use quartz_core::store::StoreError;
use quartz_store::RedisStore;
use quartz_store::redis_store::{Keys, SCHEMA_KEY, SCHEMA_VERSION};
use quartz_testkit::redis_server::PrivateRedis;

fn redis_url() -> String {
    std::env::var("QUARTZ_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// The machine's Redis, or `None` after a loud message (a failure under
/// `CI=true`).
async fn machine_redis() -> Option<RedisStore> {
    match RedisStore::connect(&redis_url()).await {
        Ok(store) => Some(store),
        Err(e) => {
            let message = format!("\n*** Redis at {} is unreachable: {e}\n", redis_url());
            assert!(
                !std::env::var("CI").is_ok_and(|v| v == "true"),
                "{message}*** CI=true: failing instead of skipping."
            );
            eprintln!("{message}*** skipping the Redis tests; start it or set QUARTZ_REDIS_URL.\n");
            None
        }
    }
}

#[tokio::test]
async fn the_servers_clock_is_the_clock_and_its_settings_are_read() {
    let Some(store) = machine_redis().await else { return };
    let a = store.now().await.unwrap();
    let b = store.now().await.unwrap();
    assert!(a <= b, "the server's clock does not run backwards: {a} then {b}");
    let system = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let drift = (i64::try_from(system).unwrap() - b.as_millis()).abs();
    assert!(
        drift < 60_000,
        "TIME on this machine's server is this machine's clock: {drift} ms apart"
    );
    // The machine's Redis keeps nothing on disk.
    assert_eq!(store.durability().append_only, Some(false));
    assert!(store.durability().describe().contains("append-only file is off"));
}

#[tokio::test]
async fn a_server_that_could_evict_the_schedulers_keys_is_refused() {
    for policy in ["allkeys-lru", "allkeys-lfu", "allkeys-random"] {
        let server = PrivateRedis::start(&["--maxmemory-policy", policy]);
        match RedisStore::connect(&server.url()).await {
            Err(StoreError::UnsafeSettings { setting, value, reason }) => {
                assert_eq!((setting.as_str(), value.as_str()), ("maxmemory-policy", policy));
                assert!(reason.contains("noeviction"), "{reason}");
            }
            other => panic!("{policy}: {other:?}"),
        }
    }
    for policy in ["noeviction", "volatile-lru"] {
        let server = PrivateRedis::start(&["--maxmemory-policy", policy]);
        let store = RedisStore::connect(&server.url()).await.unwrap();
        assert_eq!(store.durability().eviction.as_deref(), Some(policy));
    }
}

#[tokio::test]
async fn an_append_only_server_says_what_a_crash_can_lose() {
    let server = PrivateRedis::start(&["--appendonly", "yes", "--appendfsync", "everysec"]);
    let store = RedisStore::connect(&server.url()).await.unwrap();
    assert_eq!(store.durability().append_only, Some(true));
    assert_eq!(store.durability().append_fsync.as_deref(), Some("everysec"));
    assert!(
        store.durability().describe().contains("about a second"),
        "{}",
        store.durability().describe()
    );
    let always = PrivateRedis::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let store = RedisStore::connect(&always.url()).await.unwrap();
    assert!(store.durability().describe().starts_with("nothing"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_starting_at_once_agree_on_the_schema_and_a_newer_one_is_refused() {
    let server = PrivateRedis::start(&[]);
    let url = server.url();
    let starts: Vec<_> = (0..8)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { RedisStore::connect(&url).await })
        })
        .collect();
    for start in starts {
        start.await.unwrap().unwrap();
    }
    assert_eq!(server.cli(&["GET", SCHEMA_KEY]), SCHEMA_VERSION.to_string());
    server.cli(&["SET", SCHEMA_KEY, &(SCHEMA_VERSION + 1).to_string()]);
    match RedisStore::connect(&url).await {
        Err(StoreError::Migration { reason }) => assert!(reason.contains("newer"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_unreachable_server_and_a_bad_url_get_clear_errors() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    match RedisStore::connect(&format!("redis://:secret@127.0.0.1:{closed}")).await {
        Err(StoreError::Unavailable { reason }) => assert!(!reason.contains("secret"), "{reason}"),
        other => panic!("{other:?}"),
    }
    match RedisStore::connect("redis://127.0.0.1:notaport").await {
        Err(StoreError::InvalidUrl { .. }) => {}
        other => panic!("{other:?}"),
    }
    assert!(Keys::of("billing}x").is_err(), "a brace would move the hash tag");
    assert_eq!(Keys::of("billing").unwrap().execute(3), "quartz:{billing}:execute:3");
}
