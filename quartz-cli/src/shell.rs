//! The `shell` handler of `quartz run`: an external program, run only when the
//! node was started with an allow-list that names it.
//!
//! Write access to the database is enough to add a job, so a handler that runs
//! whatever a row names would hand every node's user account to anyone who can
//! write a row. Here the node's operator decides, at start, which programs a
//! row may name (`--allow-shell`); a program outside the list is recorded
//! failed, "not allowed on this node", and nothing runs. The program gets a
//! clean environment (`PATH`, the `QUARTZ_*` fire variables and what
//! `--pass-env` names; never the node's database URL or other secrets), no
//! standard input, the working directory the operator chose, and its own
//! process group: when the fire times out or the node shuts down, the whole
//! group is stopped (SIGTERM, then SIGKILL after [`KILL_GRACE`]), and when the
//! program exits, whatever it left running in its group is killed too.

use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use nix::sys::signal::Signal;
use parking_lot::Mutex;
use quartz_core::engine::{JobContext, JobResult};

/// How much of a program's output (standard output and error together, the
/// tail) a failure keeps in the ledger's error text.
pub const OUTPUT_TAIL: usize = 2_000;

/// How long a cancelled program's process group has between SIGTERM and
/// SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(2);

/// How long the output readers are waited for once the process group is gone
/// (a process that left the group may hold the pipes open).
const READER_GRACE: Duration = Duration::from_millis(500);

/// The `PATH` a program gets, and bare names are looked up on
/// (`--pass-env PATH` gives it the node's instead).
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Programs that run other programs their arguments name (`find -exec`,
/// `env`, `xargs`, shells and interpreters): naming one in the allow-list
/// allows everything, which the node warns of at start.
const RUNS_OTHERS: [&str; 14] = [
    "find", "env", "xargs", "sh", "bash", "dash", "zsh", "busybox", "nice", "nohup", "timeout", "sudo", "python3",
    "perl",
];

/// What a node lets the `shell` handler run, and how.
#[derive(Debug, Clone)]
pub struct ShellPolicy {
    allow: Vec<glob::Pattern>,
    /// The allow-list with every symbolic link in its literal part resolved
    /// (`/bin/echo` is `/usr/bin/echo` where `/bin` links to `/usr/bin`): the
    /// file a program resolves to must match one of these too, so that a link
    /// placed in an allowed directory (`ok-sh -> /bin/sh`) runs nothing the
    /// operator did not name.
    resolved: Vec<glob::Pattern>,
    pass_env: Vec<String>,
    workdir: PathBuf,
    path: String,
}

impl ShellPolicy {
    /// A policy from `--allow-shell` patterns (absolute paths, `*`, `?` and
    /// `[...]` matching within one path segment), `--pass-env` names and the
    /// working directory.
    ///
    /// # Errors
    ///
    /// A pattern that is not absolute or not a valid glob, a variable name
    /// that is empty or holds `=`, or a working directory that is not an
    /// existing directory.
    pub fn new(allow: &[String], pass_env: &[String], workdir: Option<PathBuf>) -> anyhow::Result<ShellPolicy> {
        let allow = allow
            .iter()
            .map(|p| {
                anyhow::ensure!(
                    p.starts_with('/'),
                    "--allow-shell takes absolute paths or globs, and {p:?} is not absolute"
                );
                glob::Pattern::new(p).with_context(|| format!("--allow-shell {p:?} is not a valid glob"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        for name in pass_env {
            anyhow::ensure!(
                !name.is_empty() && !name.contains('=') && !name.contains('\0'),
                "--pass-env takes variable names, and {name:?} is not one"
            );
        }
        let resolved = allow
            .iter()
            .flat_map(|p| resolved_patterns(p.as_str()))
            .collect::<Vec<_>>();
        for pattern in &allow {
            for place in guarded_places(pattern.as_str()) {
                trusted(&place)
                    .map_err(|why| anyhow::anyhow!("--allow-shell {}: {} {why}", pattern.as_str(), place.display()))?;
            }
            let program = pattern.as_str().rsplit('/').next().unwrap_or_default();
            if RUNS_OTHERS.contains(&program) {
                tracing::warn!(
                    pattern = pattern.as_str(),
                    "the shell allow-list names a program that runs other programs (its arguments name \
                     them): any program can then run through it"
                );
            }
        }
        let workdir = workdir.unwrap_or_else(|| PathBuf::from("/"));
        anyhow::ensure!(workdir.is_dir(), "--shell-dir {} is not a directory", workdir.display());
        trusted(&workdir).map_err(|why| anyhow::anyhow!("--shell-dir {} {why}", workdir.display()))?;
        Ok(ShellPolicy {
            allow,
            resolved,
            pass_env: pass_env.to_vec(),
            workdir,
            // Never the node's own: its entries may be relative, or
            // directories others write to.
            path: DEFAULT_PATH.to_owned(),
        })
    }

    /// Whether any program is allowed: without an allow-list, a node does not
    /// offer the `shell` handler at all.
    pub fn is_enabled(&self) -> bool {
        !self.allow.is_empty()
    }

    /// The allow-list, as given.
    pub fn allowed(&self) -> Vec<&str> {
        self.allow.iter().map(glob::Pattern::as_str).collect()
    }

    /// The absolute path a job's command names, when the allow-list admits it.
    ///
    /// A bare name is looked up on the program's `PATH`; a path must be
    /// absolute and hold no `.` or `..` segment, so that `*` in a pattern can
    /// never reach outside its directory.
    ///
    /// # Errors
    ///
    /// Why the program may not run here.
    pub fn resolve(&self, command: &str) -> Result<PathBuf, String> {
        let path = if command.contains('/') {
            PathBuf::from(command)
        } else {
            self.path
                .split(':')
                .filter(|dir| dir.starts_with('/'))
                .map(|dir| Path::new(dir).join(command))
                .find(|candidate| is_executable(candidate))
                .ok_or_else(|| format!("{command:?} is not allowed on this node: not found on the PATH"))?
        };
        let plain = path.is_absolute()
            && path
                .components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
        if !plain {
            return Err(format!(
                "{command:?} is not allowed on this node: a program is named by an absolute path without . or .."
            ));
        }
        let options = glob::MatchOptions {
            case_sensitive: true,
            require_literal_separator: true,
            require_literal_leading_dot: true,
        };
        if !self.allow.iter().any(|p| p.matches_path_with(&path, options)) {
            return Err(format!(
                "{} is not allowed on this node (its --allow-shell list: {})",
                path.display(),
                self.allowed().join(" ")
            ));
        }
        // The name matched; the file it names must too. The resolved file is
        // what runs, so a link changed after this check changes nothing.
        let real = std::fs::canonicalize(&path).map_err(|e| {
            format!(
                "{} is not allowed on this node: it cannot be resolved: {e}",
                path.display()
            )
        })?;
        if self.resolved.iter().any(|p| p.matches_path_with(&real, options)) {
            Ok(real)
        } else {
            Err(format!(
                "{} is not allowed on this node: it resolves to {}, which its --allow-shell list does not name",
                path.display(),
                real.display()
            ))
        }
    }

    /// Runs a fire's program under this policy. See the [module docs](self).
    ///
    /// # Errors
    ///
    /// A payload that is not `{"command": ..., "args": [...]}` or a command
    /// string, a program not allowed here, one that cannot start, a non-zero
    /// exit (with its status and the tail of its output), or a cancellation
    /// (timeout or shutdown) that stopped its process group.
    pub fn run(&self, ctx: &JobContext) -> JobResult {
        let (command, args) = command_of(ctx)?;
        let program = self.resolve(&command)?;
        let mut cmd = Command::new(&program);
        cmd.args(&args)
            .env_clear()
            .env("PATH", &self.path)
            .env("QUARTZ_JOB", ctx.job_name())
            .env("QUARTZ_FIRE_ID", ctx.fire_id().to_string())
            .env("QUARTZ_FIRE_TIME", ctx.scheduled_fire_time().as_millis().to_string())
            .env("QUARTZ_ATTEMPT", ctx.attempt().to_string())
            .current_dir(&self.workdir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so that stopping it reaches every
            // process it started (unless one starts a session of its own).
            .process_group(0);
        for name in &self.pass_env {
            if let Some(value) = std::env::var_os(name) {
                cmd.env(name, value);
            }
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        let output = Output::capture(&mut child);
        let cancelled = wait_or_stop(&child, ctx);
        // The program has exited (it is a zombie until reaped, so its process
        // group id cannot be reused): whatever it left in its group goes too.
        kill_group(&child, Signal::SIGKILL);
        let status = child
            .wait()
            .map_err(|e| format!("waiting for {}: {e}", program.display()))?;
        let tail = output.finish();
        if let Some(reason) = cancelled {
            return Err(format!(
                "{} stopped with its process group ({reason}): {tail}",
                program.display()
            )
            .into());
        }
        if status.success() {
            return Ok(());
        }
        Err(format!("{} exited with {status}: {tail}", program.display()).into())
    }
}

/// The JSON Schema of a shell job's payload, which `quartz run` publishes:
/// a job or work whose payload does not fit is refused when it is written
/// (naming the field), not failed at each fire by [`command_of`].
pub fn payload_schema() -> serde_json::Value {
    serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "shell",
        "description": "{\"command\": \"...\", \"args\": [...]} or a command string",
        "type": ["object", "string"],
        "minLength": 1,
        "properties": {
            "command": { "type": "string", "minLength": 1 },
            "args": { "type": "array" },
        },
        "required": ["command"],
    })
}

/// A job's `(command, args)`: `{"command": "...", "args": [...]}` or a bare
/// command string.
fn command_of(ctx: &JobContext) -> Result<(String, Vec<String>), String> {
    let shape = "a shell job's payload is {\"command\": \"...\", \"args\": [...]} or a command string";
    match ctx
        .payload::<serde_json::Value>()
        .map_err(|e| format!("{shape}: {e}"))?
    {
        serde_json::Value::String(s) => Ok((s, Vec::new())),
        serde_json::Value::Object(map) => {
            let Some(serde_json::Value::String(command)) = map.get("command") else {
                return Err("a shell job's payload needs a \"command\" string".to_owned());
            };
            let args = match map.get("args") {
                None => Vec::new(),
                Some(serde_json::Value::Array(items)) => items
                    .iter()
                    .map(|a| match a {
                        serde_json::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect(),
                Some(_) => return Err("a shell job's \"args\" is a list of strings".to_owned()),
            };
            Ok((command.clone(), args))
        }
        _ => Err(shape.to_owned()),
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Waits for the program to exit, without reaping it; when the fire is
/// cancelled first, stops its process group (SIGTERM, then SIGKILL after
/// [`KILL_GRACE`]) and returns why.
fn wait_or_stop(child: &Child, ctx: &JobContext) -> Option<String> {
    let mut term_sent: Option<Instant> = None;
    loop {
        if has_exited(child) {
            return term_sent.map(|_| reason(ctx));
        }
        match term_sent {
            None if ctx.is_cancelled() => {
                kill_group(child, Signal::SIGTERM);
                term_sent = Some(Instant::now());
            }
            Some(at) if at.elapsed() >= KILL_GRACE => {
                kill_group(child, Signal::SIGKILL);
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn reason(ctx: &JobContext) -> String {
    ctx.cancellation()
        .reason()
        .map_or_else(|| "cancelled".to_owned(), |r| r.to_string())
}

/// Whether the program has exited, leaving it unreaped (`WNOWAIT`): its pid,
/// and so its process group's id, stay reserved until `Child::wait`.
fn has_exited(child: &Child) -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let Some(pid) = pid_of(child) else { return true };
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    !matches!(waitid(Id::Pid(pid), flags), Ok(WaitStatus::StillAlive))
}

/// Sends `signal` to the program's process group (its id is the program's
/// pid, see `process_group(0)`). A group already empty is not an error.
fn kill_group(child: &Child, signal: Signal) {
    if let Some(pgid) = pid_of(child) {
        let _ = nix::sys::signal::killpg(pgid, signal);
    }
}

fn pid_of(child: &Child) -> Option<nix::unistd::Pid> {
    i32::try_from(child.id()).ok().map(nix::unistd::Pid::from_raw)
}

/// The program's standard output and error, drained as it writes, keeping the
/// last [`OUTPUT_TAIL`] bytes.
struct Output {
    text: Arc<Mutex<String>>,
    done: std::sync::mpsc::Receiver<()>,
    readers: usize,
}

impl Output {
    fn capture(child: &mut Child) -> Output {
        let text = Arc::new(Mutex::new(String::new()));
        let (tx, done) = std::sync::mpsc::channel();
        let pipes: Vec<Box<dyn std::io::Read + Send>> = [
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        .collect();
        let readers = pipes.len();
        for mut pipe in pipes {
            let text = Arc::clone(&text);
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let mut out = text.lock();
                    out.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if out.len() > 2 * OUTPUT_TAIL {
                        let cut = tail_start(&out, OUTPUT_TAIL);
                        out.drain(..cut);
                    }
                }
                let _ = tx.send(());
            });
        }
        Output { text, done, readers }
    }

    /// The tail of the output, once the readers are done (or after
    /// [`READER_GRACE`], when a process outside the group holds a pipe).
    fn finish(self) -> String {
        let deadline = Instant::now() + READER_GRACE;
        for _ in 0..self.readers {
            if self
                .done
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .is_err()
            {
                break;
            }
        }
        let out = self.text.lock();
        out[tail_start(&out, OUTPUT_TAIL)..].trim().to_owned()
    }
}

/// Where the last `keep` bytes of `s` start, on a character boundary.
fn tail_start(s: &str, keep: usize) -> usize {
    let start = s.len().saturating_sub(keep);
    (start..s.len()).find(|i| s.is_char_boundary(*i)).unwrap_or(s.len())
}

/// A pattern's forms with the symbolic links of its literal part resolved:
/// the pattern itself, its directory resolved when the directory holds no
/// glob character, and the file it names resolved when it holds none at all.
fn resolved_patterns(pattern: &str) -> Vec<glob::Pattern> {
    let literal = |s: &str| !s.contains(['*', '?', '[']);
    let mut forms = vec![pattern.to_owned()];
    let path = Path::new(pattern);
    if literal(pattern)
        && let Ok(real) = std::fs::canonicalize(path)
    {
        forms.push(real.to_string_lossy().into_owned());
    }
    if let (Some(dir), Some(name)) = (path.parent(), path.file_name())
        && literal(&dir.to_string_lossy())
        && let Ok(real) = std::fs::canonicalize(dir)
    {
        forms.push(real.join(name).to_string_lossy().into_owned());
    }
    forms.iter().filter_map(|f| glob::Pattern::new(f).ok()).collect()
}

/// The existing places an allow-list pattern trusts: the directory of its
/// literal part (the part before any `*`, `?` or `[`), and the file itself
/// when the pattern names one.
fn guarded_places(pattern: &str) -> Vec<PathBuf> {
    let literal_end = pattern.find(['*', '?', '[']).unwrap_or(pattern.len());
    let literal = &pattern[..literal_end];
    let mut places = Vec::new();
    let dir = match literal.rfind('/') {
        Some(0) => "/",
        Some(i) => &literal[..i],
        None => return places,
    };
    if Path::new(dir).is_dir() {
        places.push(PathBuf::from(dir));
    }
    if literal_end == pattern.len() && Path::new(pattern).exists() {
        places.push(PathBuf::from(pattern));
    }
    places
}

/// Whether a place the node trusts is owned by root or by the node's own
/// user and writable by nobody else: a directory others may write to lets
/// them put a program where the allow-list (or the working directory)
/// points.
fn trusted(place: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(place).map_err(|e| format!("cannot be checked: {e}"))?;
    let me = nix::unistd::getuid().as_raw();
    if meta.uid() != 0 && meta.uid() != me {
        return Err(format!(
            "is owned by user {}, not by root or this node's user",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "may be written by other users (mode {:o}): choose one only its owner writes",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str]) -> ShellPolicy {
        let allow: Vec<String> = allow.iter().map(|s| (*s).to_owned()).collect();
        ShellPolicy::new(&allow, &[], None).expect("valid policy")
    }

    #[test]
    fn patterns_must_be_absolute_globs() {
        assert!(ShellPolicy::new(&["echo".to_owned()], &[], None).is_err());
        assert!(ShellPolicy::new(&["/usr/bin/[".to_owned()], &[], None).is_err());
        assert!(ShellPolicy::new(&[], &["A=B".to_owned()], None).is_err());
        assert!(!policy(&[]).is_enabled());
    }

    #[test]
    fn places_others_may_write_to_are_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("quartz-shell-open-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let pattern = format!("{}/*", dir.display());
        let err = ShellPolicy::new(&[pattern], &[], None).unwrap_err().to_string();
        assert!(err.contains("may be written by other users"), "{err}");
        let err = ShellPolicy::new(&["/usr/bin/echo".to_owned()], &[], Some(dir.clone()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("--shell-dir"), "{err}");
        // The temporary directory is everyone's: never the default.
        assert!(ShellPolicy::new(&["/usr/bin/echo".to_owned()], &[], Some(std::env::temp_dir())).is_err());
        let p = policy(&["/usr/bin/echo"]);
        assert_eq!(p.workdir, PathBuf::from("/"));
        assert_eq!(p.path, DEFAULT_PATH, "not the node's PATH");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(ShellPolicy::new(&[format!("{}/*", dir.display())], &[], None).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_program_is_allowed_only_by_a_matching_pattern() {
        let p = policy(&["/usr/bin/echo", "/opt/jobs/*"]);
        assert_eq!(p.resolve("/usr/bin/echo"), Ok(PathBuf::from("/usr/bin/echo")));
        assert!(p.resolve("/opt/jobs/backup").is_err(), "no such file");
        assert!(p.resolve("/usr/bin/env").is_err());
        // `*` stays within its directory, and `..` never reaches a match.
        assert!(p.resolve("/opt/jobs/sub/tool").is_err());
        assert!(p.resolve("/opt/jobs/../../bin/sh").is_err());
        assert!(p.resolve("/opt/jobs/./x").is_err());
        assert!(p.resolve("relative/tool").is_err());
    }

    #[test]
    fn a_bare_name_is_looked_up_on_the_path() {
        let p = policy(&["/usr/bin/*", "/bin/*"]);
        let sh = p.resolve("sh").expect("sh is on the PATH");
        assert!(sh.is_absolute(), "{}", sh.display());
        let err = p.resolve("no-such-program-anywhere").unwrap_err();
        assert!(err.contains("not allowed on this node"), "{err}");
    }

    #[test]
    fn a_link_in_an_allowed_directory_runs_only_what_the_list_names() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("quartz-shell-links-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let own = dir.join("backup");
        std::fs::write(&own, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o755)).unwrap();
        let link = dir.join("ok-sh");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/bin/sh", &link).unwrap();
        let inside = dir.join("also-backup");
        let _ = std::fs::remove_file(&inside);
        std::os::unix::fs::symlink(&own, &inside).unwrap();
        let p = policy(&[&format!("{}/*", dir.display())]);
        let real_dir = std::fs::canonicalize(&dir).unwrap();
        assert_eq!(p.resolve(&own.to_string_lossy()), Ok(real_dir.join("backup")));
        let err = p.resolve(&link.to_string_lossy()).unwrap_err();
        assert!(err.contains("resolves to"), "{err}");
        assert_eq!(
            p.resolve(&inside.to_string_lossy()),
            Ok(real_dir.join("backup")),
            "a link to a file the list names runs that file"
        );
        // A program named through a linked directory (/bin -> /usr/bin) is
        // the file the operator named.
        let echo = policy(&["/bin/echo"]);
        assert!(echo.resolve("/bin/echo").is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
