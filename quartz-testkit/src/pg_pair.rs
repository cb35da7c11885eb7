//! A PostgreSQL primary and a streaming standby of a test's own, on
//! loopback ports, made with the server's own `initdb` and `pg_basebackup`
//! as the `postgres` user (the machine's PostgreSQL packages): the primary
//! can be killed and the standby promoted, as a managed failover does.
//!
//! ```no_run
//! use quartz_testkit::pg_pair::{PgPair, Replication};
//!
//! let pair = PgPair::start(Replication::Synchronous);
//! let url = pair.url(); // postgres://postgres@127.0.0.1:P1,127.0.0.1:P2/postgres?target_session_attrs=read-write
//! pair.kill_primary();
//! pair.promote_standby();
//! # drop(url);
//! ```

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How the standby follows the primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// A commit returns once the standby has it (`synchronous_commit = on`,
    /// the standby named in `synchronous_standby_names`).
    Synchronous,
    /// A commit returns at once; the standby follows a moment later.
    Asynchronous,
}

/// A primary and its standby, stopped and removed when dropped.
#[derive(Debug)]
pub struct PgPair {
    dir: PathBuf,
    bin: PathBuf,
    /// The primary's and the standby's ports.
    pub ports: (u16, u16),
}

/// The directory of the newest PostgreSQL server binaries installed.
fn server_bin() -> PathBuf {
    let root = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .unwrap_or_else(|e| panic!("no PostgreSQL server installed under {}: {e}", root.display()))
        .filter_map(|d| {
            let d = d.ok()?;
            let v = d.file_name().to_str()?.parse().ok()?;
            Some((v, d.path().join("bin")))
        })
        .collect();
    versions.sort();
    versions.pop().expect("a PostgreSQL server version").1
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Runs a server command as the `postgres` user, failing the test with its
/// output when it fails.
fn as_postgres(bin: &Path, tool: &str, args: &[&str]) {
    let out = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(bin.join(tool))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {tool} as postgres: {e}"));
    assert!(
        out.status.success(),
        "{tool} {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl PgPair {
    /// Whether this machine can make a pair: the PostgreSQL server binaries
    /// under `/usr/lib/postgresql`, and root to run them as `postgres`.
    /// When not, says so loudly for `who` (the test that needed it) and
    /// answers false, or fails under `CI=true`.
    pub fn can_start(who: &str) -> bool {
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        if root && Path::new("/usr/lib/postgresql").is_dir() {
            return true;
        }
        let why = format!("{who} needs the PostgreSQL server binaries under /usr/lib/postgresql and root");
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("\n!!!!!!!! SKIPPED: {why} !!!!!!!!\n");
        false
    }

    /// Makes and starts a primary and a standby streaming from it, and waits
    /// until the standby streams (in sync, for [`Replication::Synchronous`]).
    pub fn start(replication: Replication) -> PgPair {
        let bin = server_bin();
        let dir = std::env::temp_dir().join(format!("quartz-pg-pair-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        let chown = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(chown.success(), "cannot give {} to the postgres user", dir.display());
        let ports = (free_port(), free_port());
        let pair = PgPair { dir, bin, ports };
        let primary = pair.path("primary");
        as_postgres(
            &pair.bin,
            "initdb",
            &["-D", &primary, "-U", "postgres", "--auth=trust", "--no-sync"],
        );
        let sync_names = match replication {
            Replication::Synchronous => "standby1",
            Replication::Asynchronous => "",
        };
        pair.configure(
            "primary",
            &format!(
                "port = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
                 wal_level = replica\nmax_wal_senders = 5\nfsync = off\n\
                 synchronous_standby_names = '{sync_names}'\nsynchronous_commit = on\n",
                ports.0,
                pair.dir.display()
            ),
        );
        pair.pg_ctl(&["-D", &primary, "-l", &pair.path("primary.log"), "-w", "start"]);
        let standby = pair.path("standby");
        as_postgres(
            &pair.bin,
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &ports.0.to_string(),
                "-U",
                "postgres",
                "-D",
                &standby,
                "-R",
                "-X",
                "stream",
                "--no-sync",
            ],
        );
        pair.configure(
            "standby",
            &format!(
                "port = {}\nprimary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name=standby1'\n\
                 synchronous_standby_names = ''\n",
                ports.1, ports.0
            ),
        );
        pair.pg_ctl(&["-D", &standby, "-l", &pair.path("standby.log"), "-w", "start"]);
        let want = match replication {
            Replication::Synchronous => "sync",
            Replication::Asynchronous => "async",
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let state = pair.psql(
                ports.0,
                "SELECT COALESCE(string_agg(sync_state, ','), '') FROM pg_stat_replication WHERE state = 'streaming'",
            );
            if state == want {
                break;
            }
            assert!(Instant::now() < deadline, "the standby does not stream ({state:?})");
            std::thread::sleep(Duration::from_millis(100));
        }
        pair
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    fn configure(&self, server: &str, lines: &str) {
        let file = self.dir.join(server).join("postgresql.auto.conf");
        let mut text = std::fs::read_to_string(&file).unwrap_or_default();
        text.push_str(lines);
        std::fs::write(&file, text).unwrap();
    }

    fn pg_ctl(&self, args: &[&str]) {
        as_postgres(&self.bin, "pg_ctl", args);
    }

    /// One value a query returns on the server at `port` (psql, unaligned).
    pub fn psql(&self, port: u16, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "postgres",
                "-At",
                "-c",
                sql,
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The URL that follows the primary: both hosts, a writable one asked
    /// for, on `database`.
    pub fn url_of(&self, database: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{database}?target_session_attrs=read-write",
            self.ports.0, self.ports.1
        )
    }

    /// [`PgPair::url_of`] the `postgres` database.
    pub fn url(&self) -> String {
        self.url_of("postgres")
    }

    /// Stops the primary at once, as a crash does (`pg_ctl stop -m
    /// immediate`: no checkpoint, every connection cut).
    pub fn kill_primary(&self) {
        self.pg_ctl(&["-D", &self.path("primary"), "-m", "immediate", "stop"]);
    }

    /// Promotes the standby and waits until it takes writes.
    pub fn promote_standby(&self) {
        self.pg_ctl(&["-D", &self.path("standby"), "-w", "promote"]);
    }
}

impl Drop for PgPair {
    fn drop(&mut self) {
        for server in ["primary", "standby"] {
            let data = self.path(server);
            let _ = Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(self.bin.join("pg_ctl"))
                .args(["-D", &data, "-m", "immediate", "stop"])
                .output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
