//! A node's run log file: one JSON line a `write`, appended.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::{RunEvent, SUFFIX};

/// A node process's run log, open for appending. Lines are written from
/// pool threads and tasks at once: each is formatted whole and handed to
/// one `write` on a file opened with `O_APPEND`, which the kernel appends
/// as one piece, so lines never interleave and need no lock.
#[derive(Debug)]
pub(crate) struct RunLog {
    file: File,
    path: PathBuf,
    /// Set after the first failed write, which is reported once.
    failed: AtomicBool,
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
            file,
            path,
            failed: AtomicBool::new(false),
        })
    }

    /// Appends one line; a failure is logged once (the checker then finds
    /// runs the ledger has and the log has not).
    pub(crate) fn write(&self, event: &RunEvent) {
        let mut line = match serde_json::to_vec(event) {
            Ok(line) => line,
            Err(e) => return self.failed_once(&e.to_string()),
        };
        line.push(b'\n');
        if let Err(e) = (&self.file).write_all(&line) {
            self.failed_once(&e.to_string());
        }
    }

    fn failed_once(&self, error: &str) {
        if !self.failed.swap(true, Ordering::Relaxed) {
            tracing::error!(path = %self.path.display(), error, "the run log cannot be written; runs go unrecorded there");
        }
    }
}
