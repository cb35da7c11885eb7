//! libfaketime, for tests that run `quartz` processes with a clock other
//! than the machine's: nodes skewed an hour apart, or a node (and its
//! embedded SQLite database, whose clock is the process's) living through
//! a daylight-saving change.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where Debian installs the library.
const DIRS: [&str; 3] = [
    "/usr/lib/x86_64-linux-gnu/faketime",
    "/usr/lib/aarch64-linux-gnu/faketime",
    "/usr/lib/faketime",
];

/// libfaketime's library (`LD_PRELOAD` it, with `FAKETIME` set), installing
/// Debian's package `libfaketime` when it is missing; looked up once per
/// process, as the backends' tests run side by side and would otherwise
/// both take dpkg's lock.
///
/// When it cannot be installed this says so loudly on stderr, naming what
/// the test leaves out (`needed_for`), and returns `None`; with `CI=true`
/// it panics instead.
pub fn library(needed_for: &str) -> Option<PathBuf> {
    static FOUND: std::sync::Mutex<Option<Option<PathBuf>>> = std::sync::Mutex::new(None);
    let mut found = FOUND.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if found.is_none() {
        *found = Some(find_or_install());
    }
    let lib = found.clone().flatten();
    if lib.is_none() {
        let message = format!(
            "\n*** libfaketime could not be installed (`apt-get install -y libfaketime`): cannot {needed_for}\n"
        );
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "{message}*** CI=true: failing instead of leaving it out."
        );
        eprintln!("{message}*** left out of this run.\n");
    }
    lib
}

fn find() -> Option<PathBuf> {
    DIRS.iter()
        .map(|d| Path::new(d).join("libfaketime.so.1"))
        .find(|p| p.exists())
}

fn find_or_install() -> Option<PathBuf> {
    if let Some(lib) = find() {
        return Some(lib);
    }
    eprintln!("libfaketime is missing: installing Debian's package libfaketime");
    // Waits for dpkg's lock when another installation holds it.
    let install = "apt-get -o DPkg::Lock::Timeout=300 install -y libfaketime || \
         (apt-get -o DPkg::Lock::Timeout=300 update && apt-get -o DPkg::Lock::Timeout=300 install -y libfaketime)";
    let status = Command::new("sh").args(["-c", install]).stdout(Stdio::null()).status();
    if !status.as_ref().is_ok_and(|s| s.success()) {
        eprintln!("installing libfaketime failed: {status:?}");
    }
    find()
}
