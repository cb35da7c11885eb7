//! The benchmark program: each workload of BENCHMARKS.md (B1-B10) against the
//! databases it names, printing one Markdown table per workload. Build it in
//! release mode:
//!
//! ```text
//! cargo run --release -p quartz-bench -- all           # every workload; plots to benches/
//! cargo run --release -p quartz-bench -- b1 --triggers 1000 --nodes 1,2,3 --seconds 60
//! cargo run --release -p quartz-bench -- b8 --jobs 1000,10000 --nodes 1,3
//! cargo run --release -p quartz-bench -- b10 --registered 10000,100000 --every-second 1000 --nodes 3
//! cargo run --release -p quartz-bench -- b1 --help     # each workload's options
//! ```
//!
//! Databases: `QUARTZ_PG_URL`, `QUARTZ_MYSQL_URL` and `QUARTZ_REDIS_URL`
//! (defaults: the local servers); SQLite files in the temporary directory. Figures come from the
//! fire ledger and from /proc, never from the nodes' own counters.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use sqlx::AssertSqlSafe;

mod b1;
mod b10;
mod b2;
mod b3;
mod b4;
mod b5;
mod b6;
mod b7;
mod b8;
mod b9;
mod held;
mod late;
mod node;
mod os;
mod plot;

/// PostgreSQL: `QUARTZ_PG_URL`, or the local server.
fn pg_url() -> String {
    std::env::var("QUARTZ_PG_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// MariaDB/MySQL: `QUARTZ_MYSQL_URL`, or the local server.
fn mysql_url() -> String {
    std::env::var("QUARTZ_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

/// Redis: `QUARTZ_REDIS_URL`, or the local server.
fn redis_url() -> String {
    std::env::var("QUARTZ_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/0".to_owned())
}

/// Runs a workload on a two-thread runtime, as the machine's two cores.
fn block_on<F: std::future::Future>(workload: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(workload)
}

/// The workload's own connection to the database (a few connections: it
/// reads the ledger and the clock, the nodes do the work).
async fn connect(url: &str) -> quartz_store::AnyStore {
    sqlx::any::install_default_drivers();
    let options = quartz_store::StoreOptions {
        max_connections: 4,
        ..quartz_store::StoreOptions::default()
    };
    quartz_store::AnyStore::connect_with(url, &options).await.unwrap()
}

/// What a server's autovacuum would have done between two runs. On a
/// PostgreSQL whose autovacuum is off (this machine's test server is set
/// so), the dead rows of the runs before would make every later run pay for
/// them: the quartz tables that runs have changed are vacuumed and analysed
/// before each run, and the first time says so. A table no run has written
/// is left alone, as autovacuum leaves it: vacuumed empty, the planner would
/// take it for empty for good, and a node's plans made then (generic, kept
/// for the connection's life) would scan it whole once it fills. Other
/// servers clean up by themselves.
async fn tidy(url: &str) {
    use sqlx::{Connection as _, Executor as _, Row as _};
    static SAID: std::sync::Once = std::sync::Once::new();
    if !url.starts_with("postgres") {
        return;
    }
    let Ok(mut conn) = sqlx::AnyConnection::connect(url).await else {
        return;
    };
    let off = conn
        .fetch_one("SHOW autovacuum")
        .await
        .is_ok_and(|row| row.try_get::<String, _>(0).is_ok_and(|v| v == "off"));
    if off {
        SAID.call_once(|| {
            eprintln!("note: the server's autovacuum is off; the quartz tables are vacuumed before each run and analyzed every 10 s through it");
        });
        let changed: Vec<String> = conn
            .fetch_all(
                "SELECT relname::text FROM pg_stat_user_tables WHERE relname IN \
                 ('quartz_execute', 'quartz_fire', 'quartz_job', 'quartz_node', 'quartz_scheduler') \
                 AND n_dead_tup + n_mod_since_analyze > 0",
            )
            .await
            .map(|rows| rows.iter().filter_map(|r| r.try_get(0).ok()).collect())
            .unwrap_or_default();
        if !changed.is_empty() {
            let _ = conn
                .execute(AssertSqlSafe(format!("VACUUM ANALYZE {}", changed.join(", "))))
                .await;
        }
    }
    let _ = conn.close().await;
}

/// On a PostgreSQL server with autovacuum off (the test server), analyzes
/// the tables a run writes every 10 s until the handle is aborted, as
/// autovacuum's analyze does on a server with its default settings. Without
/// it the statistics stay those of the empty tables [`tidy`] vacuumed
/// before the run, and a statement whose cached plan was made from them
/// reads the whole ledger each time: the success batch of a node running
/// 5,000 fires a second took 1–2 s a statement until an `ANALYZE`, then
/// under a millisecond. `None` elsewhere.
async fn analyze_meanwhile(url: &str) -> Option<tokio::task::JoinHandle<()>> {
    use sqlx::{Connection as _, Executor as _, Row as _};
    if !url.starts_with("postgres") {
        return None;
    }
    let mut conn = sqlx::AnyConnection::connect(url).await.ok()?;
    let off = conn
        .fetch_one("SHOW autovacuum")
        .await
        .is_ok_and(|row| row.try_get::<String, _>(0).is_ok_and(|v| v == "off"));
    if !off {
        return None;
    }
    Some(tokio::spawn(async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(10)).await;
            let _ = conn.execute("ANALYZE quartz_fire, quartz_execute").await;
        }
    }))
}

/// A database URL for a backend, on a fresh database (or file, or Redis
/// namespace).
async fn fresh_url(backend: &str, name: &str) -> String {
    match backend {
        "sqlite" => {
            let path = std::env::temp_dir().join(format!("{name}.db"));
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
            format!("sqlite://{}", path.display())
        }
        "postgres" | "mysql" => {
            let base = if backend == "postgres" { pg_url() } else { mysql_url() };
            sqlx::any::install_default_drivers();
            let pool = sqlx::AnyPool::connect(&base).await.expect("the database server");
            let drop = if backend == "postgres" {
                format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            } else {
                format!("DROP DATABASE IF EXISTS {name}")
            };
            sqlx::query(AssertSqlSafe(drop)).execute(&pool).await.unwrap();
            sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&pool)
                .await
                .unwrap();
            pool.close().await;
            let cut = base.rfind('/').expect("a URL with a database");
            format!("{}/{name}", &base[..cut])
        }
        "redis" => {
            let server = redis_url();
            quartz_testkit::drop_namespace(&server, name).await;
            let separator = if server.contains('?') { '&' } else { '?' };
            format!("{server}{separator}namespace={name}")
        }
        other => panic!("unknown backend {other}"),
    }
}

/// Every workload as BENCHMARKS.md describes it, with defaults that finish in
/// about a quarter of an hour; plots go to `plots`.
fn all(plots: &str) {
    let pg = pg_url();
    let mysql = mysql_url();
    let redis = redis_url();
    let sqlite = format!("sqlite://{}", std::env::temp_dir().join("quartz-bench-b1.db").display());
    // B1 on each backend: SQLite has one node (one machine), the others 1 to 3.
    let b1 = [
        ("B1 on PostgreSQL", pg.as_str(), "1,2,3"),
        ("B1 on MariaDB", mysql.as_str(), "1,2,3"),
        ("B1 on SQLite", sqlite.as_str(), "1"),
        ("B1 on Redis", redis.as_str(), "1,2,3"),
    ];
    let mut runs: Vec<(&str, Vec<&str>)> = b1
        .iter()
        .map(|&(title, url, nodes)| {
            (
                title,
                vec!["b1", "--url", url, "--nodes", nodes, "--seconds", "30", "--plot", plots],
            )
        })
        .collect();
    runs.extend([
        ("B2 on PostgreSQL", vec!["b2", "--seconds", "4", "--plot", plots]),
        ("B3", vec!["b3"]),
        ("B4", vec!["b4"]),
        ("B5 on PostgreSQL", vec!["b5", "--url", &pg, "--seconds", "40"]),
        ("B5 on MariaDB", vec!["b5", "--url", &mysql, "--seconds", "40"]),
        ("B6 on PostgreSQL", vec!["b6", "--url", &pg]),
        (
            "B8 on PostgreSQL",
            vec!["b8", "--url", &pg, "--jobs", "10000", "--nodes", "3"],
        ),
    ]);
    std::fs::create_dir_all(plots).expect("the plots directory");
    for (title, args) in runs {
        println!("\n### {title}\n\n`quartz-bench {}`\n", args.join(" "));
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(&args)
            .status()
            .unwrap();
        assert!(status.success(), "{title} failed");
    }
}

/// The benchmark program: the workloads of BENCHMARKS.md.
#[derive(clap::Parser, Debug)]
#[command(name = "quartz-bench", version)]
struct Cli {
    #[command(subcommand)]
    workload: Workload,
}

/// A workload, or the node process the workloads start.
#[derive(clap::Subcommand, Debug)]
enum Workload {
    /// B1, the fire storm: S one-second triggers on K node processes.
    B1(b1::Args),
    /// B2, claims against row updates: the claim's cost next to pgbench's.
    B2(b2::Args),
    /// B3, the poll at scale: N stored executes, a few due.
    B3(b3::Args),
    /// B4, the pool against other thread pools.
    B4(b4::Options),
    /// B5, failover: a node killed mid-run.
    B5(b5::Args),
    /// B6, a database outage and its misfires.
    B6(b6::Args),
    /// B7, retention: the ledger's size held by the purge over a long run.
    B7(b7::Args),
    /// B8, the burst: N jobs whose cron fires at one second, on K nodes.
    B8(b8::Args),
    /// B9, claims behind waiting fires: a claim's cost while W fires wait
    /// under overlap policies.
    B9(b9::Args),
    /// B10, many registered schedules: N jobs registered, M of them every
    /// second, on K nodes.
    B10(b10::Args),
    /// Every workload with defaults that finish in about a quarter of an
    /// hour; plots to DIR.
    All {
        /// Where the plots go.
        #[arg(default_value = "benches")]
        plots: String,
    },
    /// A node process: what the workloads start (`URL SCHEDULER NODE_ID
    /// [SETTING=VALUE ...]`).
    #[command(hide = true)]
    Node {
        /// The node's arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() {
    // `cargo bench` adds `--bench`; nothing else is ignored.
    let args = std::env::args().filter(|a| a != "--bench");
    let cli = <Cli as clap::Parser>::parse_from(args);
    match cli.workload {
        Workload::B1(args) => b1::run(args),
        Workload::B2(args) => b2::run(args),
        Workload::B3(args) => b3::run(args),
        Workload::B4(options) => b4::run(options),
        Workload::B5(args) => b5::run(args),
        Workload::B6(args) => b6::run(args),
        Workload::B7(args) => b7::run(args),
        Workload::B8(args) => b8::run(args),
        Workload::B9(args) => b9::run(args),
        Workload::B10(args) => b10::run(args),
        Workload::All { plots } => all(&plots),
        Workload::Node { args } => node::run(&args),
    }
}
