//! The cost of `CronExpression::next_after` for typical and complex expressions.
//!
//! ```text
//! cargo bench -p quartz-core --bench cron [-- --iterations N]
//! ```
//!
//! Each expression is evaluated N times in a chain (each call starts after the
//! previous fire), in UTC and in America/New_York; the figure is the mean time per
//! call.

#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::time::Instant;

use quartz_core::Timestamp;
use quartz_core::cron::{CronExpression, parse_time_zone};

fn main() {
    let mut iterations = 100_000usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--iterations" {
            iterations = args
                .next()
                .and_then(|v| v.parse().ok())
                .expect("a number after --iterations");
        }
    }
    let cases = [
        ("every second", "* * * * * ?"),
        ("every 5 minutes", "0 */5 * * * ?"),
        ("daily at 10:15", "0 15 10 * * ?"),
        ("weekdays 09:00-17:00 every 15 min", "0 0/15 9-17 ? * MON-FRI"),
        ("last Friday of the month", "0 15 10 ? * 6L"),
        ("nearest weekday to the 15th", "0 0 12 15W * ?"),
        ("third Monday, some years", "0 0 9 ? * 2#3 2026-2030"),
        ("Feb 29 at noon (leap years)", "0 0 12 29 2 ?"),
    ];
    println!("# next_after: mean time per call over {iterations} chained calls\n");
    println!("| expression | text | UTC | America/New_York |");
    println!("|---|---|---:|---:|");
    for (name, text) in cases {
        let cron = CronExpression::parse(text).unwrap();
        let mut cells = Vec::new();
        for zone in ["UTC", "America/New_York"] {
            let zone = parse_time_zone(zone).unwrap();
            let start = Timestamp::from_millis(1_767_225_600_000);
            let mut t = start;
            let began = Instant::now();
            for _ in 0..iterations {
                t = match cron.next_after(black_box(t), zone) {
                    Some(next) => next,
                    None => start,
                };
            }
            let per_call = began.elapsed().as_nanos() as f64 / iterations as f64;
            black_box(t);
            cells.push(if per_call >= 1000.0 {
                format!("{:.2} µs", per_call / 1000.0)
            } else {
                format!("{per_call:.0} ns")
            });
        }
        println!("| {name} | `{text}` | {} | {} |", cells[0], cells[1]);
    }
}
