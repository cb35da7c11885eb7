//! Workload B4 of the project's BENCHMARKS.md: the elastic pool against
//! `std::thread::spawn` per task, the `threadpool` crate, `rayon::spawn` and tokio's
//! `spawn_blocking`, all in one run.
//!
//! ```text
//! cargo run --release -p quartz-bench -- b4 [--tiny N --repeat N --bursts N --burst-size N --keep-alive-ms N]
//! ```
//!
//! 1. Tiny tasks: N tasks (default 1,000,000) that each increment a counter; figure:
//!    tasks per second, from the first submission until the last task ran; reference:
//!    the fastest contender.
//! 2. Bursts: bursts of 10,000 tasks that each block 1 ms, separated by idle gaps
//!    longer than the keep-alive; figures: completion time per burst, peak threads,
//!    threads after the gap (read from /proc, so every contender is counted alike).
//! 3. Queue full at max: tasks submitted faster than the pool can run them, with
//!    `try_submit`; figures: accepted, rejected (returned, handled, counted) and
//!    completed. Nothing may be lost: accepted + rejected = submitted, and every
//!    accepted task runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use quartz_pool::{DEFAULT_QUEUE_CAPACITY, Pool};

/// B4's options.
#[derive(clap::Args, Debug)]
pub struct Options {
    /// Tiny tasks submitted in the throughput run.
    #[arg(long, default_value_t = 1_000_000)]
    tiny: usize,
    /// Bursts in the burst run.
    #[arg(long, default_value_t = 2)]
    bursts: usize,
    /// Tasks per burst.
    #[arg(long, default_value_t = 10_000)]
    burst_size: usize,
    /// How long an idle thread above core lives, in milliseconds.
    #[arg(long = "keep-alive-ms", default_value = "500", value_parser = keep_alive)]
    keep_alive: Duration,
    /// Runs of each figure (the median is shown).
    #[arg(long, default_value_t = 5, value_parser = at_least_one)]
    repeat: usize,
}

fn at_least_one(n: &str) -> Result<usize, String> {
    match n.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{n:?} is not a whole number of at least 1")),
    }
}

fn keep_alive(ms: &str) -> Result<Duration, std::num::ParseIntError> {
    ms.parse().map(Duration::from_millis)
}

/// Counts finished tasks and signals once when the last one of a batch is done.
#[derive(Clone)]
struct Done {
    count: Arc<AtomicUsize>,
    target: usize,
    signal: Sender<()>,
}

impl Done {
    fn new(target: usize) -> (Done, crossbeam_channel::Receiver<()>) {
        let (signal, rx) = crossbeam_channel::bounded(1);
        (
            Done {
                count: Arc::new(AtomicUsize::new(0)),
                target,
                signal,
            },
            rx,
        )
    }

    fn task(&self) -> impl FnOnce() + Send + 'static {
        let done = self.clone();
        move || done.finish_one()
    }

    fn blocking_task(&self) -> impl FnOnce() + Send + 'static {
        let done = self.clone();
        move || {
            thread::sleep(Duration::from_millis(1));
            done.finish_one();
        }
    }

    fn finish_one(&self) {
        if self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.target {
            let _ = self.signal.send(());
        }
    }
}

/// A way to run a closure on some pool.
type Submit = Box<dyn Fn(Box<dyn FnOnce() + Send>)>;

/// The contenders, by name; each is built only when its turn comes, so that the
/// threads of one never count against another.
const CONTENDERS: [&str; 5] = ["quartz-pool", "threadpool", "rayon", "tokio", "thread::spawn"];

/// Builds one contender with the given thread budget. The pool's queue is `queue`;
/// the others queue without bound.
fn contender(kind: &str, cores: usize, max: usize, keep_alive: Duration, queue: usize) -> (String, Submit) {
    match kind {
        "quartz-pool" => {
            let pool = Pool::builder()
                .core(cores)
                .max(max)
                .queue_capacity(queue)
                .keep_alive(keep_alive)
                .build()
                .unwrap();
            (
                format!("quartz-pool (core {cores}, max {max}, queue {queue})"),
                Box::new(move |f| pool.submit_timeout(f, Duration::from_secs(60)).unwrap()),
            )
        }
        "threadpool" => {
            let pool = threadpool::ThreadPool::new(max);
            (
                format!("threadpool ({max} threads)"),
                Box::new(move |f| pool.execute(f)),
            )
        }
        "rayon" => {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(max).build().unwrap();
            (
                format!("rayon::spawn ({max} threads)"),
                Box::new(move |f| pool.spawn(f)),
            )
        }
        "tokio" => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .max_blocking_threads(max)
                .thread_keep_alive(keep_alive)
                .build()
                .unwrap();
            (
                format!("tokio spawn_blocking (max {max}, 1 worker)"),
                Box::new(move |f| drop(runtime.spawn_blocking(f))),
            )
        }
        _ => (
            "std::thread::spawn per task".to_owned(),
            Box::new(|f| drop(thread::spawn(f))),
        ),
    }
}

/// Waits until the process's thread count has not changed for 100 ms, so that
/// threads of an earlier contender that are still exiting are not counted.
fn settled_threads() -> usize {
    let mut last = os_threads();
    let mut stable_since = Instant::now();
    while stable_since.elapsed() < Duration::from_millis(100) {
        thread::sleep(Duration::from_millis(5));
        let now = os_threads();
        if now != last {
            last = now;
            stable_since = Instant::now();
        }
    }
    last
}

fn os_threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

fn tiny(o: &Options, cores: usize, max: usize) {
    println!(
        "\n#### B4.1 tiny tasks: {} counter increments, median of {} runs\n",
        o.tiny, o.repeat
    );
    println!("| contender | tasks | tasks/s | time | slower than fastest by |");
    println!("|---|---:|---:|---:|---:|");
    let mut rows = Vec::new();
    // The pool with its default queue and with a queue as large as the run (the
    // others all queue without bound); spawning a thread per task is measured on
    // at most 100,000 tasks, which is enough for its rate.
    let runs = CONTENDERS
        .iter()
        .map(|&kind| (kind, DEFAULT_QUEUE_CAPACITY))
        .chain([("quartz-pool", o.tiny)]);
    for (kind, queue) in runs {
        let n = if kind == "thread::spawn" {
            o.tiny.min(100_000)
        } else {
            o.tiny
        };
        let (name, submit) = contender(kind, cores, max, o.keep_alive, queue);
        let mut times: Vec<Duration> = (0..o.repeat)
            .map(|_| {
                let (done, finished) = Done::new(n);
                let start = Instant::now();
                for _ in 0..n {
                    submit(Box::new(done.task()));
                }
                finished.recv().unwrap();
                start.elapsed()
            })
            .collect();
        times.sort();
        rows.push((name, n, times[times.len() / 2]));
    }
    let rate = |n: usize, t: Duration| n as f64 / t.as_secs_f64();
    let fastest = rows.iter().map(|&(_, n, t)| rate(n, t)).fold(0.0, f64::max);
    for (name, n, t) in &rows {
        println!(
            "| {name} | {n} | {:.0} | {:.3} s | {:.2}x |",
            rate(*n, *t),
            t.as_secs_f64(),
            fastest / rate(*n, *t)
        );
    }
}

fn bursts(o: &Options, cores: usize, max: usize) {
    let gap = o.keep_alive * 3;
    println!(
        "\n#### B4.2 bursts: {} bursts of {} tasks blocking 1 ms, idle gaps of {} ms (keep-alive {} ms)\n",
        o.bursts,
        o.burst_size,
        gap.as_millis(),
        o.keep_alive.as_millis()
    );
    println!("| contender | burst | completion | peak threads | threads after gap |");
    println!("|---|---:|---:|---:|---:|");
    for kind in CONTENDERS {
        let baseline = settled_threads();
        let (name, submit) = contender(kind, cores, max, o.keep_alive, DEFAULT_QUEUE_CAPACITY);
        for burst in 1..=o.bursts {
            let peak = Arc::new(AtomicUsize::new(0));
            let sampling = Arc::new(AtomicBool::new(true));
            let sampler = {
                let (peak, sampling) = (Arc::clone(&peak), Arc::clone(&sampling));
                // The sampler is one thread of its own, subtracted below.
                thread::spawn(move || {
                    while sampling.load(Ordering::Relaxed) {
                        peak.fetch_max(os_threads(), Ordering::Relaxed);
                        thread::sleep(Duration::from_millis(1));
                    }
                })
            };
            let (done, finished) = Done::new(o.burst_size);
            let start = Instant::now();
            for _ in 0..o.burst_size {
                submit(Box::new(done.blocking_task()));
            }
            finished.recv().unwrap();
            let elapsed = start.elapsed();
            sampling.store(false, Ordering::Relaxed);
            sampler.join().unwrap();
            thread::sleep(gap);
            println!(
                "| {name} | {burst} | {:.3} s | {} | {} |",
                elapsed.as_secs_f64(),
                peak.load(Ordering::Relaxed).saturating_sub(baseline + 1),
                os_threads().saturating_sub(baseline),
            );
        }
    }
}

fn queue_full(cores: usize, max: usize) {
    let submitted = 20_000usize;
    println!("\n#### B4.3 queue full at max: {submitted} tasks blocking 1 ms, try_submit, no retry\n");
    let handled = Arc::new(AtomicU64::new(0));
    let handled_in_handler = Arc::clone(&handled);
    let pool = Pool::builder()
        .core(cores)
        .max(max)
        .queue_capacity(256)
        .rejection_handler(move |_, _| _ = handled_in_handler.fetch_add(1, Ordering::Relaxed))
        .build()
        .unwrap();
    let ran = Arc::new(AtomicU64::new(0));
    let (mut accepted, mut returned) = (0u64, 0u64);
    for _ in 0..submitted {
        let ran = Arc::clone(&ran);
        match pool.try_submit(move || {
            thread::sleep(Duration::from_millis(1));
            ran.fetch_add(1, Ordering::Relaxed);
        }) {
            Ok(()) => accepted += 1,
            Err(rejected) => {
                returned += 1;
                drop(rejected.into_task());
            }
        }
    }
    let report = pool.shutdown(Duration::from_secs(120));
    let m = pool.metrics();
    println!("| submitted | accepted | rejected (returned) | rejected (handler) | rejected (metrics) | ran | lost |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {submitted} | {accepted} | {returned} | {} | {} | {} | {} |",
        handled.load(Ordering::Relaxed),
        m.rejected,
        ran.load(Ordering::Relaxed),
        (submitted as u64) - ran.load(Ordering::Relaxed) - returned,
    );
    assert!(report.is_clean());
}

/// Runs B4 with the options on the command line.
pub fn run(o: Options) {
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    let max = cores * quartz_pool::DEFAULT_MAX_PER_CORE;
    println!("#### B4: the pool ({cores} cores; thread budget {max} for every contender)");
    tiny(&o, cores, max);
    bursts(&o, cores, max);
    queue_full(cores, max);
}
