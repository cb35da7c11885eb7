//! Outside tools a test checks our output with: a Debian package's program
//! (`promtool` from `prometheus`) or Python packages in a virtual
//! environment (`openapi-spec-validator`), installed on first use.
//!
//! When one cannot be had, the test says so loudly on stderr, naming what
//! it leaves out, and gets `None`; with `CI=true` it fails instead.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, PoisonError};

/// Installs (once per process) what `key` names with `install`, remembering
/// the answer, and reports a failure as the module says.
fn once(key: &str, what: &str, needed_for: &str, install: impl FnOnce() -> Option<PathBuf>) -> Option<PathBuf> {
    static FOUND: Mutex<Option<HashMap<String, Option<PathBuf>>>> = Mutex::new(None);
    let mut found = FOUND.lock().unwrap_or_else(PoisonError::into_inner);
    let map = found.get_or_insert_with(HashMap::new);
    if !map.contains_key(key) {
        let got = install();
        map.insert(key.to_owned(), got);
    }
    let got = map[key].clone();
    if got.is_none() {
        let message = format!("\n*** {what} could not be installed: cannot {needed_for}\n");
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "{message}*** CI=true: failing instead of leaving it out."
        );
        eprintln!("{message}*** left out of this run.\n");
    }
    got
}

/// A program from a Debian package, installing the package when the
/// program is not on the `PATH` (or in `/usr/bin`).
pub fn debian_program(program: &str, package: &str, needed_for: &str) -> Option<PathBuf> {
    let what = format!("{program} (Debian package {package})");
    once(&format!("deb:{program}"), &what, needed_for, || {
        if let Some(found) = which(program) {
            return Some(found);
        }
        eprintln!("{program} is missing: installing Debian's package {package}");
        let install = format!(
            "apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends {package} || \
             (apt-get -o DPkg::Lock::Timeout=300 update && \
              apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends {package})"
        );
        let status = Command::new("sh").args(["-c", &install]).stdout(Stdio::null()).status();
        if !status.as_ref().is_ok_and(|s| s.success()) {
            eprintln!("installing {package} failed: {status:?}");
        }
        which(program)
    })
}

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// The Python interpreter of a virtual environment holding `packages`
/// (pip names), made under the system's temporary directory and kept for
/// later runs; made afresh beside it and moved into place, so two test
/// processes never see a half-made one.
pub fn python_with(packages: &[&str], needed_for: &str) -> Option<PathBuf> {
    let key = packages.join(" ");
    let what = format!("a Python virtual environment with {key}");
    once(&format!("venv:{key}"), &what, needed_for, || make_venv(packages))
}

fn make_venv(packages: &[&str]) -> Option<PathBuf> {
    let name: String = packages
        .join("-")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let home = std::env::temp_dir().join(format!("quartz-test-venv-{name}"));
    let python = home.join("bin/python");
    if ready(&python, packages) {
        return Some(python);
    }
    let scratch = std::env::temp_dir().join(format!("quartz-test-venv-{name}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let made = |venv: &Path| {
        Command::new("python3")
            .args(["-m", "venv"])
            .arg(venv)
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !made(&scratch) {
        eprintln!("python3 -m venv failed: installing Debian's python3-venv");
        let _ = Command::new("sh")
            .args(["-c", "apt-get -o DPkg::Lock::Timeout=300 install -y python3-venv"])
            .stdout(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&scratch);
        if !made(&scratch) {
            return None;
        }
    }
    eprintln!("installing {} into a virtual environment", packages.join(", "));
    let pip = Command::new(scratch.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args(packages)
        .status();
    if !pip.as_ref().is_ok_and(|s| s.success()) {
        eprintln!("pip install {} failed: {pip:?}", packages.join(" "));
        let _ = std::fs::remove_dir_all(&scratch);
        return None;
    }
    // A venv's scripts name its directory: the rename keeps the
    // interpreter usable (`python -m`), which is all the tests run.
    let _ = std::fs::remove_dir_all(&home);
    if std::fs::rename(&scratch, &home).is_err() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    ready(&python, packages).then_some(python)
}

/// Whether `python` runs and has every package.
fn ready(python: &Path, packages: &[&str]) -> bool {
    python.is_file()
        && Command::new(python)
            .args(["-m", "pip", "show", "--quiet"])
            .args(packages)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}
