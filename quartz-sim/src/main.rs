//! `quartz-sim`: runs seeds of the simulated cluster and reports what the
//! oracles found.
//!
//! ```text
//! quartz-sim --seeds 1000                       # seeds 1 to 1000, 3 nodes, an hour each
//! quartz-sim --seed 4242                        # one seed again, bit for bit
//! quartz-sim --seeds 100000 --hours 0.25 --jobs 2  # side by side on two threads
//! quartz-sim --seeds 200 --mutant start-early   # a planted bug: it must be caught
//! quartz-sim --list-mutants
//! ```
//!
//! The last line reads `seeds N, simulated hours H, violations V, trace
//! HASH`; the same options give the same line. A seed that breaks a
//! guarantee is printed with its violations and the command that replays
//! it; the exit status is 1 when any did.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use clap::Parser;
use quartz_sim::rng::Digest;
use quartz_sim::{Options, SeedReport, run_seed};

#[derive(Debug, Parser)]
#[command(
    name = "quartz-sim",
    about = "The whole quartz-rs cluster in one deterministic simulation"
)]
struct Args {
    /// How many seeds (from --first).
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    first: u64,
    /// One seed only (replays it).
    #[arg(long)]
    seed: Option<u64>,
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Simulated hours per seed (fractions allowed: 0.25 is 15 minutes).
    #[arg(long, default_value_t = 1.0)]
    hours: f64,
    /// A planted bug to switch on (see --list-mutants).
    #[arg(long)]
    mutant: Option<String>,
    /// Lists the planted bugs, one name a line, and exits.
    #[arg(long)]
    list_mutants: bool,
    /// Stops at the first seed with a violation.
    #[arg(long)]
    stop_at_first: bool,
    /// Seeds run side by side on this many threads (default: one per
    /// core). The results do not depend on it.
    #[arg(long)]
    jobs: Option<usize>,
    /// Writes every line of the trace to this file (one seed: --seed).
    #[arg(long)]
    trace_to: Option<std::path::PathBuf>,
}

/// How often a long run says how far it got (on standard error).
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// Runs `seeds` on `jobs` threads and yields their reports in the seeds'
/// order, each as soon as it and every seed before it have run. The
/// threads stop taking seeds when the iterator is dropped.
fn in_seed_order(seeds: &[u64], jobs: usize, options: &Options) -> impl Iterator<Item = SeedReport> {
    let next = Arc::new(AtomicUsize::new(0));
    // Unbounded: one long seed holds the order back while the other threads
    // go on (a report without its trace lines is small).
    let (tx, rx) = mpsc::channel::<(usize, SeedReport)>();
    let seeds: Arc<[u64]> = seeds.into();
    for _ in 0..jobs {
        let (next, tx, seeds, options) = (Arc::clone(&next), tx.clone(), Arc::clone(&seeds), options.clone());
        std::thread::Builder::new()
            .name("quartz-sim".into())
            .stack_size(16 << 20)
            .spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&seed) = seeds.get(i) else { break };
                    // A run that panics is a seed that failed, said so,
                    // not one the order waits for for ever.
                    let report = std::panic::catch_unwind(|| run_seed(&options, seed)).unwrap_or_else(|panic| {
                        let why = panic
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                            .unwrap_or_default();
                        SeedReport {
                            seed,
                            violations: vec![format!("the run panicked: {why}")],
                            trace: 0,
                            starts: 0,
                            fire_times: 0,
                            actions: 0,
                            lines: Vec::new(),
                        }
                    });
                    if tx.send((i, report)).is_err() {
                        break;
                    }
                }
            })
            .expect("a thread for the seeds");
    }
    drop(tx);
    let mut waiting: BTreeMap<usize, SeedReport> = BTreeMap::new();
    let mut cursor = 0;
    std::iter::from_fn(move || {
        loop {
            if let Some(report) = waiting.remove(&cursor) {
                cursor += 1;
                return Some(report);
            }
            let (i, report) = rx.recv().ok()?;
            waiting.insert(i, report);
        }
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    if args.list_mutants {
        for m in quartz_core::mutants::ALL {
            println!("{}", m.name);
        }
        return ExitCode::SUCCESS;
    }
    if let Err(name) = quartz_core::mutants::set(args.mutant.as_deref()) {
        eprintln!("no mutant is named {name:?}; --list-mutants lists them");
        return ExitCode::from(2);
    }
    let minutes = (args.hours * 60.0).round().max(1.0) as u64;
    let options = Options {
        nodes: args.nodes.max(1),
        minutes,
        keep_trace: args.trace_to.is_some(),
    };
    let seeds: Vec<u64> = match args.seed {
        Some(s) => vec![s],
        None => (args.first..args.first.saturating_add(args.seeds)).collect(),
    };
    let began = Instant::now();
    let mut digest = Digest::default();
    let (mut violations, mut failed, mut starts, mut done) = (0usize, 0u64, 0u64, 0usize);
    let mut last_progress = Instant::now();
    let jobs = args.jobs.unwrap_or_else(default_jobs).clamp(1, seeds.len().max(1));
    // Seeds run on `jobs` threads, each seed on a runtime of its own; their
    // reports are taken in seed order, so that the digest, the lines
    // printed and where --stop-at-first stops do not depend on the threads.
    for report in in_seed_order(&seeds, jobs, &options) {
        let seed = report.seed;
        done += 1;
        if let Some(path) = &args.trace_to
            && let Err(e) = std::fs::write(path, report.lines.join("\n"))
        {
            eprintln!("could not write the trace to {}: {e}", path.display());
        }
        digest.feed(&report.trace.to_le_bytes());
        starts += report.starts;
        if !report.violations.is_empty() {
            failed += 1;
            violations += report.violations.len();
            println!("seed {seed}: {} violations", report.violations.len());
            for v in report.violations.iter().take(20) {
                println!("  {v}");
            }
            let mutant = args
                .mutant
                .as_deref()
                .map(|m| format!(" --mutant {m}"))
                .unwrap_or_default();
            println!(
                "  replay: quartz-sim --seed {seed} --nodes {} --hours {}{mutant}",
                options.nodes, args.hours
            );
            if args.stop_at_first {
                break;
            }
        }
        if last_progress.elapsed() >= PROGRESS_EVERY && done < seeds.len() {
            last_progress = Instant::now();
            let elapsed = began.elapsed().as_secs_f64();
            let left = elapsed / done as f64 * (seeds.len() - done) as f64;
            eprintln!(
                "{done} of {} seeds (up to seed {seed}), {failed} with violations, {starts} handler starts; \
                 {elapsed:.0} s, about {left:.0} s to go",
                seeds.len()
            );
        }
    }
    let seeds = &seeds[..done];
    let hours = seeds.len() as f64 * minutes as f64 / 60.0;
    eprintln!(
        "{} seeds with violations; {starts} handler starts; {:.1} s",
        failed,
        began.elapsed().as_secs_f64()
    );
    println!(
        "seeds {}, simulated hours {hours}, violations {violations}, trace {:016x}",
        seeds.len(),
        digest.value()
    );
    if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
