//! The benchmark program: each workload of BENCHMARKS.md (B1-B6) against the
//! databases it names, printing one Markdown table per workload. Build it in
//! release mode:
//!
//! ```text
//! cargo run --release -p quartz-bench -- all           # every workload; plots to benches/
//! cargo run --release -p quartz-bench -- b1 --triggers 1000 --nodes 1,2,3 --seconds 60
//! ```
//!
//! Databases: `QUARTZ_PG_URL`, `QUARTZ_MYSQL_URL` and `QUARTZ_REDIS_URL`
//! (defaults: the local servers); SQLite files in the temporary directory. Figures come from the
//! fire ledger and from /proc, never from the nodes' own counters.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use sqlx::AssertSqlSafe;

mod b1;
mod b2;
mod b3;
mod b4;
mod b5;
mod b6;
mod b7;
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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("b1") => b1::run(),
        Some("b2") => b2::run(),
        Some("b3") => b3::run(),
        Some("b4") => b4::run(),
        Some("b5") => b5::run(),
        Some("b6") => b6::run(),
        Some("b7") => b7::run(),
        Some("node") => node::run(&args[2..]),
        Some("all") => all(args.get(2).map_or("benches", String::as_str)),
        _ => {
            eprintln!("usage: quartz-bench b1|b2|b3|b4|b5|b6|b7|all [options]   (see the crate docs)");
            std::process::exit(2);
        }
    }
}
