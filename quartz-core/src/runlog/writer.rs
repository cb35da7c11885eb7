//! A node's run log file: one JSON line a `write`, appended.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{RunEvent, SUFFIX};

/// A run log kept in the process instead of a file: each event is handed
/// to this function as it happens (a simulation's witness).
pub type RunSink = Arc<dyn Fn(&RunEvent) + Send + Sync>;

/// A node process's run log, open for appending. Lines are written from
/// pool threads and tasks at once: each is formatted whole and handed to
/// one `write` on a file opened with `O_APPEND`, which the kernel appends
/// as one piece, so lines never interleave and need no lock.
pub(crate) struct RunLog {
    out: Out,
}

enum Out {
    File {
        file: File,
        path: PathBuf,
        /// Set after the first failed write, which is reported once.
        failed: AtomicBool,
    },
    Sink(RunSink),
}

impl std::fmt::Debug for RunLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.out {
            Out::File { path, .. } => f.debug_struct("RunLog").field("path", path).finish(),
            Out::Sink(_) => f.debug_struct("RunLog").field("sink", &"fn").finish(),
        }
    }
}

impl RunLog {
    /// Creates the log of a node process in `dir` (created if missing):
    /// `SCHEDULER.NODE.PID.MS.runs.jsonl`, a name no other process takes.
    pub(crate) fn create(dir: &Path, scheduler: &str, node: &str, local_ms: i64) -> std::io::Result<RunLog> {
        std::fs::create_dir_all(dir)?;
        let safe = |s: &str| -> String {
            s.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect()
        };
        let name = format!(
            "{}.{}.{}.{local_ms}{SUFFIX}",
            safe(scheduler),
            safe(node),
            std::process::id()
        );
        let path = dir.join(name);
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(RunLog {
            out: Out::File {
                file,
                path,
                failed: AtomicBool::new(false),
            },
        })
    }

    /// A log that hands each event to `sink`.
    pub(crate) fn sink(sink: RunSink) -> RunLog {
        RunLog { out: Out::Sink(sink) }
    }

    /// Appends one line; a failure is logged once (the checker then finds
    /// runs the ledger has and the log has not).
    pub(crate) fn write(&self, event: &RunEvent) {
        let (file, path, failed) = match &self.out {
            Out::Sink(sink) => return sink(event),
            Out::File { file, path, failed } => (file, path, failed),
        };
        let failed_once = |error: &str| {
            if !failed.swap(true, Ordering::Relaxed) {
                tracing::error!(path = %path.display(), error, "the run log cannot be written; runs go unrecorded there");
            }
        };
        let mut line = match serde_json::to_vec(event) {
            Ok(line) => line,
            Err(e) => return failed_once(&e.to_string()),
        };
        line.push(b'\n');
        if let Err(e) = (&*file).write_all(&line) {
            failed_once(&e.to_string());
        }
    }
}
