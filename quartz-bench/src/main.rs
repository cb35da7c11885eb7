//! The benchmark program: each workload of BENCHMARKS.md (B1-B6) against the
//! databases it names, printing one Markdown table per workload. Build it in
//! release mode:
//!
//! ```text
//! cargo run --release -p quartz-bench -- all           # every workload, short defaults
//! cargo run --release -p quartz-bench -- b1 --triggers 1000 --nodes 1,2,3 --seconds 60
//! ```
//!
//! Databases: `QUARTZ_PG_URL` and `QUARTZ_MYSQL_URL` (defaults: the local
//! servers); SQLite files in the temporary directory. Figures come from the
//! fire ledger and from /proc, never from the nodes' own counters.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod b1;
mod b2;
mod b3;
mod b4;
mod b5;
mod node;
mod os;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("b1") => b1::run(),
        Some("b2") => b2::run(),
        Some("b3") => b3::run(),
        Some("b4") => b4::run(),
        Some("b5") => b5::run(),
        Some("node") => node::run(&args[2..]),
        Some("all") => {
            for workload in ["b1", "b2", "b3", "b4", "b5"] {
                let status = std::process::Command::new(std::env::current_exe().unwrap())
                    .arg(workload)
                    .status()
                    .unwrap();
                assert!(status.success(), "{workload} failed");
            }
        }
        _ => {
            eprintln!("usage: quartz-bench b1|b2|b3|b4|b5|b6|all [options]   (see the crate docs)");
            std::process::exit(2);
        }
    }
}
