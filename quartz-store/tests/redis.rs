//! The Redis store's connection on real servers: the machine's Redis
//! (`QUARTZ_REDIS_URL`, default `redis://127.0.0.1:6379`) for the clock, and
//! private `redis-server` processes started here for the settings a test
//! needs (eviction, the append-only file, a schema already written).

#![allow(clippy::unwrap_used)]

use quartz_core::Timestamp;
use quartz_core::store::Store as _;
use quartz_core::store::{Claim, DueCursor, Execute, ExecuteSpec, FireState, JobSpec, SharedStore, StoreError};
use quartz_core::trigger::{Overlap, Schedule, Trigger};
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

/// Every due execute before `window`, a page of `limit` at a time after the
/// last page's cursor, as the poll reads them.
async fn due_in_pages(store: &SharedStore, window: Timestamp, limit: u32) -> Vec<Execute> {
    let mut all = Vec::new();
    let mut after: Option<DueCursor> = None;
    loop {
        let page = store.due_executes(window, after, limit).await.unwrap();
        assert!(page.rejected.is_empty(), "{:?}", page.rejected);
        let last = page.executes.len() < limit as usize;
        after = page.cursor();
        all.extend(page.executes);
        if last {
            return all;
        }
    }
}

/// The poll reads the due executes in its own order (next fire time,
/// priority highest first, id) from an index a page can begin in: pages
/// longer than one script's rows come whole and in order, the index is
/// made again from the due set when it is missing (a database written
/// before it), and an execute an older build moved (it keeps the due set
/// alone), within the window or into and out of it, is served where it now
/// stands, once.
#[tokio::test]
async fn the_polls_order_pages_past_a_scripts_rows_and_is_mended_from_the_due_set() {
    let server = PrivateRedis::start(&[]);
    // Twenty schedulers registered before: this one's ids have 15 digits.
    let mut others = vec!["HSET".to_owned(), "quartz:schedulers".to_owned()];
    for n in 0..20 {
        others.extend([format!("other-{n}"), n.to_string()]);
    }
    server.cli(&others.iter().map(String::as_str).collect::<Vec<_>>());
    let store = RedisStore::connect(&server.url()).await.unwrap().scoped("order");
    let now = store.now().await.unwrap();
    let at = |ms: i64| now.checked_add_millis(ms).unwrap();
    // 1,100 executes of one fire time, of three priorities, and a later one.
    let specs: Vec<ExecuteSpec> = (0..1_100)
        .map(|i| ExecuteSpec {
            priority: i % 3,
            ..ExecuteSpec::new(Trigger::new(Schedule::fixed_rate_millis(1_000).unwrap(), at(60_000)).unwrap())
        })
        .chain([ExecuteSpec::new(
            Trigger::new(Schedule::fixed_rate_millis(1_000).unwrap(), at(61_000)).unwrap(),
        )])
        .collect();
    store.create_job(&JobSpec::new("many", "noop"), &specs).await.unwrap();
    let window = at(70_000);
    let key = |e: &Execute| (e.fire_state.next_fire_time, -e.priority, e.id);
    let ids = |v: &[Execute]| v.iter().map(|e| e.id).collect::<Vec<_>>();

    let whole = store.due_executes(window, None, 5_000).await.unwrap().executes;
    assert!(whole[0].id > 100_000_000_000_000, "{}", whole[0].id);
    assert_eq!(whole.len(), 1_101);
    assert!(whole.windows(2).all(|w| key(&w[0]) < key(&w[1])), "in the poll's order");
    assert_eq!(
        whole[1_100].fire_state.next_fire_time,
        Some(at(61_000)),
        "the later one last"
    );
    assert_eq!(
        ids(&due_in_pages(&store, window, 700).await),
        ids(&whole),
        "pages of 700"
    );
    assert_eq!(ids(&due_in_pages(&store, window, 3).await), ids(&whole), "pages of 3");
    assert!(
        store
            .due_executes(at(60_000), None, 5_000)
            .await
            .unwrap()
            .executes
            .is_empty(),
        "nothing due before the window's end"
    );

    // A database written before the index: it is made again from `due`.
    let prefix = "quartz:{order}:";
    server.cli(&["DEL", &format!("{prefix}due-order")]);
    assert_eq!(ids(&due_in_pages(&store, window, 500).await), ids(&whole), "made again");
    assert_eq!(server.cli(&["ZCARD", &format!("{prefix}due-order")]), "1101");

    // An older build moves the first execute 500 ms later, in its hash and
    // in `due` only: the poll serves it once, where it now stands.
    let moved = whole[0].id;
    let later = at(60_500).as_millis().to_string();
    server.cli(&["HSET", &format!("{prefix}execute:{moved}"), "next_fire_time", &later]);
    server.cli(&["ZADD", &format!("{prefix}due"), &later, &moved.to_string()]);
    let paged = due_in_pages(&store, window, 400).await;
    assert_eq!(paged.len(), 1_101, "each once");
    assert!(paged.windows(2).all(|w| key(&w[0]) < key(&w[1])), "in the poll's order");
    assert_eq!(paged[1_099].id, moved, "where it now stands");
    assert_eq!(paged[1_099].fire_state.next_fire_time, Some(at(60_500)));
    assert_eq!(
        ids(&store.due_executes(window, None, 5_000).await.unwrap().executes),
        ids(&paged)
    );

    // An older build moves the last one out of the window, then back into
    // it (a claim it gives back at its shutdown): the poll follows.
    let last = whole[1_100].id;
    let move_to = |ms: i64| {
        let at = at(ms).as_millis().to_string();
        server.cli(&["HSET", &format!("{prefix}execute:{last}"), "next_fire_time", &at]);
        server.cli(&["ZADD", &format!("{prefix}due"), &at, &last.to_string()]);
    };
    move_to(75_000);
    let out = due_in_pages(&store, window, 500).await;
    assert_eq!(out.len(), 1_100, "moved out of the window");
    assert!(!ids(&out).contains(&last));
    move_to(65_000);
    let back = due_in_pages(&store, window, 500).await;
    assert_eq!(back.len(), 1_101, "moved back into it");
    assert_eq!(back[1_100].id, last);
    assert_eq!(back[1_100].fire_state.next_fire_time, Some(at(65_000)));
}

/// A trigger's waiting fires are found through its own index of pending
/// fires (`execute-pending:ID`): made again from `pending` when its count
/// differs (a database written before it, or by an older build), and read
/// from `pending` itself while a live node of an older build, which keeps
/// `pending` alone, is registered.
/// A job named `name` whose one trigger fires every second from a minute
/// ago (with `overlap`), and its first ten fires.
async fn a_job_a_minute_behind(
    store: &SharedStore,
    name: &str,
    overlap: Option<Overlap>,
) -> (Execute, Vec<quartz_core::trigger::Fire>) {
    let start = Timestamp::from_millis(store.now().await.unwrap().as_millis() - 60_000);
    quartz_core::testing::conformance::fixtures::job_with_overlap(store, name, start, overlap, 10).await
}

#[tokio::test]
async fn a_triggers_waiting_fires_are_found_beside_an_older_build() {
    let server = PrivateRedis::start(&[]);
    let store = RedisStore::connect(&server.url()).await.unwrap().scoped("waits");
    let (execute, fires) = a_job_a_minute_behind(&store, "waits", Some(Overlap::BufferOne)).await;
    let node = quartz_testkit::register_node(&store, "node-a").await;
    let claim = |n: usize| {
        let mut claim = Claim::for_fire(execute.id, &fires[n], &node);
        claim.exclusive = true;
        claim.overlap = Some(Overlap::BufferOne);
        claim
    };
    let state_of = |n: usize| {
        let store = store.clone();
        let fire_time = fires[n].fire_time;
        async move {
            let mut query = quartz_core::store::FireQuery::new();
            query.execute_id = Some(execute.id);
            let rows = store.fires(&query).await.unwrap();
            rows.iter().find(|f| f.fire_time == fire_time).unwrap().state
        }
    };
    assert!(store.claim(&claim(0)).await.unwrap().is_some(), "the first runs");
    assert_eq!(store.claim(&claim(1)).await.unwrap(), None);
    assert_eq!(state_of(1).await, FireState::Pending, "the second waits");
    let prefix = "quartz:{waits}:";
    let index = format!("{prefix}execute-pending:{}", execute.id);
    assert_eq!(server.cli(&["ZCARD", &index]), "1");

    // Written before the index: it is made again, and the waiting fire found.
    server.cli(&["DEL", &index, &format!("{prefix}pending-executes")]);
    server.cli(&["HDEL", &format!("{prefix}meta"), "pending-indexed"]);
    assert_eq!(store.claim(&claim(2)).await.unwrap(), None);
    assert_eq!(state_of(2).await, FireState::Skipped, "one waits already");
    assert_eq!(server.cli(&["ZCARD", &index]), "1", "made again");

    // Beside a live node of an older build (no `pending_index` in its
    // registration), whose pending fires the index would not hold, a claim
    // reads `pending` itself.
    server.cli(&["HDEL", &format!("{prefix}node:node-a"), "pending_index"]);
    server.cli(&["DEL", &index]);
    assert_eq!(store.claim(&claim(3)).await.unwrap(), None);
    assert_eq!(state_of(3).await, FireState::Skipped, "found in `pending`");
}

/// Creates a job of one trigger in `scheduler` and claims its first fire:
/// calls of the library that write and read.
async fn create_and_claim(store: &RedisStore, scheduler: &str) {
    let store = store.scoped(scheduler);
    let (execute, fires) = a_job_a_minute_behind(&store, "library", None).await;
    let fire = &fires[0];
    let node = quartz_testkit::register_node(&store, "node-a").await;
    let claimed = store.claim(&Claim::for_fire(execute.id, fire, &node)).await.unwrap();
    assert!(claimed.is_some(), "{scheduler}: the first fire is claimed");
}

/// How many times the server loaded a function library.
fn function_loads(server: &PrivateRedis) -> u64 {
    let stats = server.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_function|load:calls="))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

#[tokio::test]
async fn the_library_is_a_function_loaded_once_and_a_script_where_functions_are_not_allowed() {
    let server = PrivateRedis::start(&[]);
    let store = RedisStore::connect(&server.url()).await.unwrap();
    assert!(store.library_is_function(), "Redis 7 runs the library as a function");
    create_and_claim(&store, "functions").await;
    assert!(server.cli(&["FUNCTION", "LIST"]).contains("quartz_"));
    assert_eq!(function_loads(&server), 1);

    // A second node finds it loaded and does not load it again.
    let second = RedisStore::connect(&server.url()).await.unwrap();
    assert!(second.library_is_function());
    assert_eq!(function_loads(&server), 1);

    // A server that lost it (as a new master of a cluster's slot may have)
    // gets it again at the next call, which then runs.
    server.cli(&["FUNCTION", "FLUSH"]);
    create_and_claim(&second, "reloaded").await;
    assert_eq!(function_loads(&server), 2);

    // A user not allowed to load functions runs the library as a script.
    server.cli(&["FUNCTION", "FLUSH"]);
    server.cli(&[
        "ACL",
        "SETUSER",
        "scripts",
        "on",
        "nopass",
        "~*",
        "&*",
        "+@all",
        "-function",
    ]);
    let url = format!("redis://scripts:any@127.0.0.1:{}", server.port());
    let scripts = RedisStore::connect(&url).await.unwrap();
    assert!(!scripts.library_is_function());
    create_and_claim(&scripts, "scripts").await;
    assert_eq!(server.cli(&["FUNCTION", "LIST"]), "", "nothing was loaded");
    assert!(server.cli(&["INFO", "commandstats"]).contains("cmdstat_evalsha"));
}

#[tokio::test]
async fn the_sweeps_read_a_nodes_own_open_fires_and_those_no_index_holds() {
    let server = PrivateRedis::start(&[]);
    let store = RedisStore::connect(&server.url()).await.unwrap().scoped("owners");
    let (execute, fires) = a_job_a_minute_behind(&store, "owners", None).await;
    let a = quartz_testkit::register_node(&store, "node-a").await;
    let b = quartz_testkit::register_node(&store, "node-b").await;
    let mut ids = Vec::new();
    for fire in &fires[..3] {
        ids.push(
            store
                .claim(&Claim::for_fire(execute.id, fire, &a))
                .await
                .unwrap()
                .unwrap(),
        );
    }
    let prefix = "quartz:{owners}:";
    let a_index = format!("{prefix}open-of:node-a:{}", a.incarnation);
    assert_eq!(server.cli(&["SCARD", &a_index]), "3", "node a's open fires, indexed");
    let far = Timestamp::from_millis(i64::MAX / 2);
    let own = |node: quartz_core::store::NodeRef| {
        let store = store.clone();
        async move { store.claimed_by(&node, far, 100).await.unwrap().len() }
    };
    assert_eq!((own(a.clone()).await, own(b.clone()).await), (3, 0));
    assert!(store.orphaned_fires(100).await.unwrap().is_empty(), "both live");

    // Node a dies; one of its fires was taken over by a node of an older
    // build, which moved no index: its fields name node b, which is live.
    server.cli(&["HSET", &format!("{prefix}node:node-a"), "state", "dead"]);
    let taken = format!("{prefix}fire:{}", ids[0]);
    let b_inc = b.incarnation.to_string();
    server.cli(&["HSET", &taken, "node_id", "node-b", "incarnation", &b_inc]);
    let orphans: Vec<i64> = store.orphaned_fires(100).await.unwrap().iter().map(|f| f.id).collect();
    assert_eq!(orphans, ids[1..].to_vec(), "what the fields say decides");

    // Written by an older build: no index at all. The sweeps find the
    // fires in `open`.
    server.cli(&["DEL", &a_index, &format!("{prefix}open-owners")]);
    let orphans: Vec<i64> = store.orphaned_fires(100).await.unwrap().iter().map(|f| f.id).collect();
    assert_eq!(orphans, ids[1..].to_vec());
    assert_eq!((own(a).await, own(b).await), (2, 1));
}
