//! The pool's behaviour, on real threads. Every wait is on a condition with a
//! deadline; no test sleeps to let something happen.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use quartz_pool::{Pool, PoolError, RejectReason};

/// Generous: these deadlines only bound a failing test, they never pace a passing one.
const DEADLINE: Duration = Duration::from_secs(20);

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

/// Tasks that block until the gate opens (when every `Gate` clone is dropped), and
/// report when they start.
struct Gate {
    open: Option<Sender<()>>,
    closed: Receiver<()>,
    started_tx: Sender<()>,
    started: Receiver<()>,
}

impl Gate {
    fn new() -> Gate {
        let (open, closed) = crossbeam_channel::bounded(0);
        let (started_tx, started) = crossbeam_channel::unbounded();
        Gate {
            open: Some(open),
            closed,
            started_tx,
            started,
        }
    }

    /// A task that signals its start, then waits for the gate.
    fn task(&self) -> impl FnOnce() + Send + 'static {
        let closed = self.closed.clone();
        let started = self.started_tx.clone();
        move || {
            started.send(()).expect("test alive");
            // Returns Err once the gate's sender is dropped: that is the opening.
            let _ = closed.recv();
        }
    }

    fn wait_started(&self, n: usize) {
        for i in 0..n {
            self.started
                .recv_timeout(DEADLINE)
                .unwrap_or_else(|_| panic!("only {i} of {n} blocking tasks started"));
        }
    }

    fn open(&mut self) {
        self.open.take();
    }
}

fn counting_task(counter: &Arc<AtomicUsize>) -> impl FnOnce() + Send + 'static {
    let counter = Arc::clone(counter);
    move || {
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn the_pool_grows_past_core_only_when_the_queue_is_full() {
    let pool = Pool::builder().core(1).max(3).queue_capacity(2).build().unwrap();
    let mut gate = Gate::new();

    pool.try_submit(gate.task()).unwrap();
    gate.wait_started(1);
    assert_eq!(pool.metrics().threads, 1);

    // The core thread is busy: the next two wait in the queue, no thread starts.
    pool.try_submit(gate.task()).unwrap();
    pool.try_submit(gate.task()).unwrap();
    let m = pool.metrics();
    assert_eq!((m.threads, m.queued), (1, 2));

    // Queue full: each further task starts a thread of its own, up to max.
    pool.try_submit(gate.task()).unwrap();
    assert_eq!(pool.metrics().threads, 2);
    pool.try_submit(gate.task()).unwrap();
    let m = pool.metrics();
    assert_eq!((m.threads, m.queued, m.largest), (3, 2, 3));
    gate.wait_started(2);

    gate.open();
    wait_until("all five tasks completed", || pool.metrics().completed == 5);
    assert!(pool.shutdown(DEADLINE).is_clean());
}

#[test]
fn a_task_refused_at_max_is_handed_back_and_reported_to_the_handler() {
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let seen_by_handler = Arc::clone(&seen);
    let pool = Pool::builder()
        .core(1)
        .max(1)
        .queue_capacity(1)
        .rejection_handler(move |reason, metrics| seen_by_handler.lock().push((reason, metrics.busy, metrics.queued)))
        .build()
        .unwrap();
    let mut gate = Gate::new();
    pool.try_submit(gate.task()).unwrap();
    gate.wait_started(1);
    pool.try_submit(gate.task()).unwrap();

    let ran = Arc::new(AtomicBool::new(false));
    let ran_in_task = Arc::clone(&ran);
    let rejected = pool
        .try_submit(move || ran_in_task.store(true, Ordering::SeqCst))
        .expect_err("queue full at max must refuse");
    assert_eq!(rejected.reason, RejectReason::QueueFull);
    assert_eq!(*seen.lock(), vec![(RejectReason::QueueFull, 1, 1)]);
    assert_eq!(pool.metrics().rejected, 1);

    // The task came back whole: the caller can still run it.
    assert!(!ran.load(Ordering::SeqCst));
    rejected.into_task().run();
    assert!(ran.load(Ordering::SeqCst));

    gate.open();
    assert!(pool.shutdown(DEADLINE).is_clean());
    assert_eq!(pool.metrics().completed, 2);
}

#[test]
fn a_zero_capacity_queue_hands_each_task_straight_to_a_thread() {
    let pool = Pool::builder().core(0).max(2).queue_capacity(0).build().unwrap();
    let mut gate = Gate::new();
    pool.try_submit(gate.task()).unwrap();
    pool.try_submit(gate.task()).unwrap();
    gate.wait_started(2);
    assert_eq!(pool.metrics().threads, 2);
    let rejected = pool.try_submit(|| {}).expect_err("both threads busy, nowhere to queue");
    assert_eq!(rejected.reason, RejectReason::QueueFull);
    gate.open();
    assert!(pool.shutdown(DEADLINE).is_clean());
}

#[test]
fn threads_above_core_exit_after_keep_alive_and_the_pool_grows_again() {
    let pool = Pool::builder()
        .core(1)
        .max(4)
        .queue_capacity(1)
        .keep_alive(Duration::from_millis(50))
        .build()
        .unwrap();
    for round in 0..2 {
        let mut gate = Gate::new();
        pool.try_submit(gate.task()).unwrap();
        gate.wait_started(1);
        // The core thread is busy; one task fills the queue, three more need threads.
        for _ in 0..4 {
            pool.try_submit(gate.task()).unwrap();
        }
        gate.wait_started(3);
        assert_eq!(pool.metrics().threads, 4, "round {round}: grown to max");
        gate.open();
        wait_until("threads back to core", || pool.metrics().threads == 1);
    }
    let m = pool.metrics();
    assert_eq!((m.largest, m.completed), (4, 10));
}

#[test]
fn core_threads_time_out_when_allowed_and_a_new_task_still_runs() {
    let pool = Pool::builder()
        .core(2)
        .max(2)
        .keep_alive(Duration::from_millis(20))
        .allow_core_timeout(true)
        .prestart_core_threads(true)
        .build()
        .unwrap();
    assert_eq!(pool.metrics().threads, 2);
    wait_until("every core thread timed out", || pool.metrics().threads == 0);

    let counter = Arc::new(AtomicUsize::new(0));
    pool.try_submit(counting_task(&counter)).unwrap();
    wait_until("the task ran on a new thread", || counter.load(Ordering::SeqCst) == 1);
}

#[test]
fn raising_core_starts_threads_for_queued_tasks_at_once() {
    let pool = Pool::builder().core(1).max(4).queue_capacity(10).build().unwrap();
    let mut gate = Gate::new();
    for _ in 0..4 {
        pool.try_submit(gate.task()).unwrap();
    }
    gate.wait_started(1);
    assert_eq!(pool.metrics().queued, 3);

    pool.set_core(3).unwrap();
    gate.wait_started(2);
    let m = pool.metrics();
    assert_eq!((m.threads, m.core, m.queued), (3, 3, 1));
    gate.open();
    assert!(pool.shutdown(DEADLINE).is_clean());
    assert_eq!(pool.metrics().completed, 4);
}

#[test]
fn lowering_max_retires_threads_as_they_finish_their_task() {
    let pool = Pool::builder()
        .core(1)
        .max(4)
        .queue_capacity(1)
        .keep_alive(Duration::from_secs(3600))
        .build()
        .unwrap();
    let mut gate = Gate::new();
    for _ in 0..5 {
        pool.try_submit(gate.task()).unwrap();
    }
    gate.wait_started(4);
    pool.set_max(2).unwrap();
    gate.open();
    // The keep-alive is an hour: only the lowered max can bring the count down.
    wait_until("threads down to the new max", || pool.metrics().threads <= 2);
    wait_until("every task completed", || pool.metrics().completed == 5);
}

#[test]
fn settings_that_contradict_each_other_are_refused_and_change_nothing() {
    let err = Pool::builder().core(4).max(2).build().unwrap_err();
    assert!(matches!(err, PoolError::InvalidConfig { .. }), "{err}");
    assert!(matches!(
        Pool::builder().max(0).core(0).build(),
        Err(PoolError::InvalidConfig { .. })
    ));
    assert!(matches!(
        Pool::builder()
            .keep_alive(Duration::ZERO)
            .allow_core_timeout(true)
            .build(),
        Err(PoolError::InvalidConfig { .. })
    ));

    let pool = Pool::builder().core(2).max(4).build().unwrap();
    assert!(matches!(pool.set_core(5), Err(PoolError::InvalidConfig { .. })));
    assert!(matches!(pool.set_max(1), Err(PoolError::InvalidConfig { .. })));
    assert!(matches!(pool.set_max(0), Err(PoolError::InvalidConfig { .. })));
    let m = pool.metrics();
    assert_eq!((m.core, m.max), (2, 4));
}

#[test]
fn resizing_under_load_runs_every_task_exactly_once() {
    const SUBMITTERS: usize = 4;
    const PER_SUBMITTER: usize = 5_000;
    let pool = Arc::new(
        Pool::builder()
            .core(2)
            .max(4)
            .queue_capacity(16)
            .keep_alive(Duration::from_millis(1))
            .build()
            .unwrap(),
    );
    let runs: Arc<Vec<AtomicU8>> = Arc::new((0..SUBMITTERS * PER_SUBMITTER).map(|_| AtomicU8::new(0)).collect());
    let done = Arc::new(AtomicBool::new(false));

    let resizer = {
        let pool = Arc::clone(&pool);
        let done = Arc::clone(&done);
        thread::spawn(move || {
            let sizes = [(0, 1), (4, 8), (1, 2), (2, 3), (0, 6), (3, 3)];
            let mut changes = 0u64;
            while !done.load(Ordering::SeqCst) {
                for &(core, max) in &sizes {
                    // Lower core before max and raise max before core, so every
                    // intermediate state is valid.
                    if max < pool.metrics().core {
                        pool.set_core(core).unwrap();
                        pool.set_max(max).unwrap();
                    } else {
                        pool.set_max(max).unwrap();
                        pool.set_core(core).unwrap();
                    }
                    pool.set_keep_alive(Duration::from_millis(changes % 3)).unwrap();
                    changes += 1;
                }
            }
            changes
        })
    };
    let submitters: Vec<_> = (0..SUBMITTERS)
        .map(|s| {
            let pool = Arc::clone(&pool);
            let runs = Arc::clone(&runs);
            thread::spawn(move || {
                for i in s * PER_SUBMITTER..(s + 1) * PER_SUBMITTER {
                    let runs = Arc::clone(&runs);
                    pool.submit_timeout(move || _ = runs[i].fetch_add(1, Ordering::SeqCst), DEADLINE)
                        .expect("back-pressure, not rejection");
                }
            })
        })
        .collect();
    for s in submitters {
        s.join().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let changes = resizer.join().unwrap();
    assert!(changes > 0);

    let report = pool.shutdown(DEADLINE);
    assert!(report.is_clean(), "{report:?}");
    let counts: Vec<u8> = runs.iter().map(|r| r.load(Ordering::SeqCst)).collect();
    assert!(counts.iter().all(|&c| c == 1), "every task ran exactly once");
    let m = pool.metrics();
    assert_eq!((m.completed, m.rejected), ((SUBMITTERS * PER_SUBMITTER) as u64, 0));
}

#[test]
fn a_panicking_task_is_caught_counted_and_its_worker_goes_on() {
    let pool = Pool::builder().core(1).max(1).build().unwrap();
    pool.try_submit(|| panic!("a job failed badly")).unwrap();
    pool.try_submit(|| std::panic::panic_any(17_u32)).unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    pool.try_submit(move || tx.send(thread::current().name().map(str::to_owned)).unwrap())
        .unwrap();
    let name = rx.recv_timeout(DEADLINE).expect("the task after the panics ran");
    assert_eq!(
        name.as_deref(),
        Some("quartz-worker-1"),
        "the same worker, not a replacement"
    );
    let m = pool.metrics();
    assert_eq!((m.panicked, m.threads, m.largest), (2, 1, 1));
    wait_until("the last task counted", || pool.metrics().completed == 1);
}

#[test]
fn shutdown_refuses_new_tasks_and_drains_the_queue() {
    let pool = Arc::new(Pool::builder().core(1).max(1).queue_capacity(100).build().unwrap());
    let mut gate = Gate::new();
    let counter = Arc::new(AtomicUsize::new(0));
    pool.try_submit(gate.task()).unwrap();
    gate.wait_started(1);
    for _ in 0..50 {
        pool.try_submit(counting_task(&counter)).unwrap();
    }

    let shutting_down = {
        let pool = Arc::clone(&pool);
        thread::spawn(move || pool.shutdown(DEADLINE))
    };
    wait_until("shutdown has begun", || pool.is_shut_down());
    let rejected = pool
        .try_submit(counting_task(&counter))
        .expect_err("no intake after shutdown");
    assert_eq!(rejected.reason, RejectReason::ShutDown);
    let rejected = pool
        .submit_timeout(counting_task(&counter), Duration::from_millis(1))
        .expect_err("no intake after shutdown");
    assert_eq!(rejected.reason, RejectReason::ShutDown);

    gate.open();
    let report = shutting_down.join().unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(counter.load(Ordering::SeqCst), 50, "every queued task ran");
    assert_eq!(pool.metrics().threads, 0);

    // A second shutdown is harmless.
    assert!(pool.shutdown(Duration::ZERO).is_clean());
}

#[test]
fn shutdown_returns_at_its_deadline_and_hands_back_unstarted_tasks() {
    let pool = Pool::builder().core(1).max(1).queue_capacity(10).build().unwrap();
    let mut gate = Gate::new();
    pool.try_submit(gate.task()).unwrap();
    gate.wait_started(1);
    let counter = Arc::new(AtomicUsize::new(0));
    for _ in 0..3 {
        pool.try_submit(counting_task(&counter)).unwrap();
    }

    let report = pool.shutdown(Duration::from_millis(50));
    assert_eq!(report.still_running, 1);
    assert_eq!(report.not_started.len(), 3);
    assert!(!report.is_clean());

    // The blocked worker finishes and exits without running what was handed back.
    gate.open();
    wait_until("the last worker exited", || pool.metrics().threads == 0);
    assert_eq!(counter.load(Ordering::SeqCst), 0);
    for task in report.not_started {
        task.run();
    }
    assert_eq!(counter.load(Ordering::SeqCst), 3);
}

#[test]
fn dropping_the_pool_still_runs_every_queued_task() {
    let pool = Pool::builder().core(1).max(1).queue_capacity(10).build().unwrap();
    let mut gate = Gate::new();
    let counter = Arc::new(AtomicUsize::new(0));
    pool.try_submit(gate.task()).unwrap();
    for _ in 0..10 {
        pool.try_submit(counting_task(&counter)).unwrap();
    }
    drop(pool);
    gate.open();
    wait_until("the queued tasks ran after the drop", || {
        counter.load(Ordering::SeqCst) == 10
    });
}

#[test]
fn many_submitters_under_rejection_lose_and_duplicate_no_task() {
    const SUBMITTERS: usize = 8;
    const PER_SUBMITTER: usize = 20_000;
    let pool = Arc::new(
        Pool::builder()
            .core(2)
            .max(4)
            .queue_capacity(8)
            .keep_alive(Duration::from_millis(5))
            .build()
            .unwrap(),
    );
    let runs: Arc<Vec<AtomicU8>> = Arc::new((0..SUBMITTERS * PER_SUBMITTER).map(|_| AtomicU8::new(0)).collect());
    let rejections = Arc::new(AtomicU64::new(0));
    let submitters: Vec<_> = (0..SUBMITTERS)
        .map(|s| {
            let (pool, runs, rejections) = (Arc::clone(&pool), Arc::clone(&runs), Arc::clone(&rejections));
            thread::spawn(move || {
                for i in s * PER_SUBMITTER..(s + 1) * PER_SUBMITTER {
                    let runs = Arc::clone(&runs);
                    let mut offered = pool.try_submit(move || _ = runs[i].fetch_add(1, Ordering::SeqCst));
                    // A rejection hands the task back; offer that same task again.
                    while let Err(rejected) = offered {
                        assert_eq!(rejected.reason, RejectReason::QueueFull);
                        rejections.fetch_add(1, Ordering::SeqCst);
                        thread::yield_now();
                        offered = pool.try_resubmit(rejected.into_task());
                    }
                }
            })
        })
        .collect();
    for s in submitters {
        s.join().unwrap();
    }
    let report = pool.shutdown(DEADLINE);
    assert!(report.is_clean(), "{report:?}");
    let total = SUBMITTERS * PER_SUBMITTER;
    let counts: Vec<u8> = runs.iter().map(|r| r.load(Ordering::SeqCst)).collect();
    assert_eq!(
        counts.iter().filter(|&&c| c == 1).count(),
        total,
        "every task ran exactly once"
    );
    let m = pool.metrics();
    assert_eq!(m.completed, total as u64);
    assert_eq!(
        m.rejected,
        rejections.load(Ordering::SeqCst),
        "every rejection was counted"
    );
    assert!(m.largest <= 4);
}

/// A task refused a hundred thousand times and offered again each time
/// runs as it was first given, on a worker with a small stack: offering it
/// again nests nothing.
#[test]
fn a_task_offered_again_after_many_refusals_runs_as_given() {
    const REFUSALS: u64 = 100_000;
    let pool = Pool::builder()
        .core(1)
        .max(1)
        .queue_capacity(0)
        .stack_size(128 * 1024)
        .build()
        .unwrap();
    let mut gate = Gate::new();
    pool.try_submit(gate.task()).unwrap();
    gate.wait_started(1);
    let (tx, rx) = crossbeam_channel::bounded(1);
    let mut offered = pool.try_submit(move || tx.send(()).unwrap());
    let mut refusals = 0;
    while let Err(rejected) = offered {
        assert_eq!(rejected.reason, RejectReason::QueueFull);
        refusals += 1;
        if refusals == REFUSALS {
            gate.open();
        }
        offered = pool.try_resubmit(rejected.into_task());
    }
    assert!(refusals >= REFUSALS);
    rx.recv_timeout(DEADLINE).expect("the task ran");
    assert_eq!(pool.metrics().rejected, refusals);
}

#[test]
fn workers_are_named_and_the_default_sizing_follows_the_cores() {
    let pool = Pool::builder().build().unwrap();
    let cores = thread::available_parallelism().unwrap().get();
    let m = pool.metrics();
    assert_eq!((m.core, m.max, m.queue_capacity), (cores, 4 * cores, 256));
    assert_eq!(m.keep_alive, Duration::from_secs(60));
    assert!(!m.allow_core_timeout);

    let (tx, rx) = crossbeam_channel::bounded(1);
    pool.try_submit(move || tx.send(thread::current().name().map(str::to_owned)).unwrap())
        .unwrap();
    assert_eq!(rx.recv_timeout(DEADLINE).unwrap().as_deref(), Some("quartz-worker-1"));
}
