//! The run log: what each node's handlers really did, written by the node
//! apart from the database, and the checker that judges the cluster from it.
//!
//! The ledger is the system's own account of its fires; a check that counts
//! duplicates or losses from it is the system grading itself (its unique key
//! makes a second row of a fire impossible, whether or not a handler ran
//! twice). The run log is the other witness: with
//! [`Settings::run_log`](crate::engine::Settings::run_log) set, a node
//! appends one JSON line to a file of its own for every handler start and
//! end, just before the handler is called and just after it returns, and
//! for what decides who may run a fire: its registrations, the incarnations
//! it declared dead, and the moment it found itself declared dead. Each
//! line is one `write` to a file opened for appending, so a line a process
//! wrote survives the process (SIGKILL included); it is not synced to disk,
//! so a crash of the machine may lose the last lines.
//!
//! [`check`] matches every fire time each trigger should have had against
//! those runs, in the manner of Jepsen's checkers: **lost** (no run, and no
//! record of its policy in the ledger), **run twice** (two starts of one
//! fire time and attempt, or an attempt started after another had
//! succeeded), **started by a fenced node** (after its incarnation was
//! declared dead or replaced), **early** (before its fire time), **late**
//! (a first attempt past the misfire threshold without a misfire record),
//! and where the ledger and the runs disagree. `quartz audit --runs DIR`
//! prints it.
//!
//! ```no_run
//! # async fn check_runs(store: &dyn quartz_core::store::Store) -> Result<(), Box<dyn std::error::Error>> {
//! use quartz_core::runlog::{CheckParams, check, read_dir};
//!
//! let runs = read_dir(std::path::Path::new("/var/log/quartz-runs"))?;
//! let now = store.now().await?;
//! let report = check(store, &runs, &CheckParams::last_hour(now)).await?;
//! assert!(report.violations.is_empty(), "{:#?}", report.violations);
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod check;
mod writer;

pub use check::{CheckParams, Lateness, RunCheck, RunViolation, RunViolationKind, check};
pub(crate) use writer::RunLog;
pub use writer::RunSink;

/// The file name suffix of a run log: `SCHEDULER.NODE.PID.MS.runs.jsonl`.
pub const SUFFIX: &str = ".runs.jsonl";

/// One line of a run log. Times are epoch milliseconds: `local_ms` on the
/// node's own clock, `db_ms` on its estimate of the database's clock (which
/// never runs ahead of it; every guarantee is judged on it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunEvent {
    /// The log was opened (the node is starting).
    Open {
        /// The scheduler (cluster) name.
        scheduler: String,
        /// The node's id.
        node: String,
        /// Its host name.
        host: String,
        /// Its process id.
        pid: u32,
        /// When, on the node's clock.
        local_ms: i64,
    },
    /// The node registered, with this incarnation; from then on, every
    /// older incarnation of the same node id is retired.
    Registered {
        /// The node's id.
        node: String,
        /// The incarnation the database gave it.
        incarnation: i64,
        /// When its answer came back (database time, estimated).
        db_ms: i64,
        /// The same instant on the node's clock.
        local_ms: i64,
    },
    /// A handler is about to be called.
    Start(RunStart),
    /// A handler returned (or was dropped).
    End(RunEnd),
    /// This node declared another node's incarnation dead.
    Retired {
        /// The node declared dead.
        node: String,
        /// Its incarnation.
        incarnation: i64,
        /// The node that declared it.
        by: String,
        /// When the answer came back (database time, estimated).
        db_ms: i64,
        /// The same instant on the node's clock.
        local_ms: i64,
    },
    /// This node fenced itself: it found its incarnation declared dead (a
    /// heartbeat refused), or its membership lease ran out (no renewal went
    /// through in time), and asked its running handlers to stop.
    Fenced {
        /// The node's id.
        node: String,
        /// The incarnation.
        incarnation: i64,
        /// `declared dead` or `lease ran out`.
        reason: String,
        /// When (database time, estimated).
        db_ms: i64,
        /// The same instant on the node's clock.
        local_ms: i64,
    },
    /// The node shut down; nothing follows.
    Close {
        /// The node's id.
        node: String,
        /// When (database time, estimated).
        db_ms: i64,
        /// The same instant on the node's clock.
        local_ms: i64,
    },
}

/// A handler start: which fire, which attempt, on which node and
/// incarnation, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStart {
    /// The node's id.
    pub node: String,
    /// The incarnation that started it.
    pub incarnation: i64,
    /// The fire's ledger id.
    pub fire_id: i64,
    /// The execute (trigger).
    pub execute_id: i64,
    /// The job's id.
    pub job_id: i64,
    /// The job's name.
    pub job: String,
    /// The scheduled fire time (database time).
    pub fire_time: i64,
    /// The attempt, from 1.
    pub attempt: u32,
    /// Why it runs ([`RunKind::as_str`](crate::engine::RunKind::as_str)).
    pub kind: String,
    /// When, on the node's clock.
    pub local_ms: i64,
    /// When (database time, estimated): the start the ledger records.
    pub db_ms: i64,
    /// How far behind the database's clock `db_ms` may be: the round trip
    /// of the clock reading the estimate came from (0 in logs written
    /// before it was recorded). The start happened in `[db_ms, db_ms +
    /// db_spread_ms]` of database time.
    #[serde(default)]
    pub db_spread_ms: i64,
}

/// A handler's end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunEnd {
    /// The node's id.
    pub node: String,
    /// The incarnation that ran it.
    pub incarnation: i64,
    /// The fire's ledger id.
    pub fire_id: i64,
    /// The execute (trigger).
    pub execute_id: i64,
    /// The job's id.
    pub job_id: i64,
    /// The scheduled fire time.
    pub fire_time: i64,
    /// The attempt.
    pub attempt: u32,
    /// `succeeded`, `failed`, or `dropped` (an async handler dropped past
    /// its timeout).
    pub outcome: String,
    /// When, on the node's clock.
    pub local_ms: i64,
    /// When (database time, estimated).
    pub db_ms: i64,
}

impl RunEnd {
    /// Whether the handler returned success.
    pub fn succeeded(&self) -> bool {
        self.outcome == "succeeded"
    }
}

/// The lines of one node process's run log, in the order written.
#[derive(Debug, Clone, Default)]
pub struct RunFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its lines.
    pub events: Vec<RunEvent>,
    /// Lines that could not be read (a line cut short by a crash of the
    /// machine), with their line numbers.
    pub unreadable: Vec<(usize, String)>,
}

/// Reads one run log.
///
/// # Errors
///
/// The file's IO error.
pub fn read_file(path: &Path) -> std::io::Result<RunFile> {
    let text = std::fs::read_to_string(path)?;
    let mut file = RunFile {
        path: path.to_owned(),
        ..RunFile::default()
    };
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<RunEvent>(line) {
            Ok(event) => file.events.push(event),
            Err(e) => file.unreadable.push((i + 1, e.to_string())),
        }
    }
    Ok(file)
}

/// Reads every run log (`*.runs.jsonl`) in a directory, in name order.
///
/// # Errors
///
/// The directory's or a file's IO error.
pub fn read_dir(dir: &Path) -> std::io::Result<Vec<RunFile>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.to_str().is_some_and(|s| s.ends_with(SUFFIX)))
        .collect();
    paths.sort();
    paths.iter().map(|p| read_file(p)).collect()
}
