//! A `redis-server` of a test's own, for what the machine's shared Redis
//! cannot give: its settings (eviction, the append-only file), a crash and a
//! restart from its files, its clients killed.
//!
//! ```no_run
//! use quartz_testkit::redis_server::PrivateRedis;
//!
//! // Append-only, every write on disk before it is answered.
//! let mut server = PrivateRedis::start(&["--appendonly", "yes", "--appendfsync", "always"]);
//! // ... connect to server.url() ...
//! server.crash(); // SIGKILL: what the append-only file holds is all that is left
//! server.restart(); // the same port, directory and settings
//! ```

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::TempDir;

/// A `redis-server` on a free port of 127.0.0.1, with a data directory of its
/// own, killed (and the directory removed) when dropped. It saves no RDB
/// snapshots; what persists is what `options` ask for.
pub struct PrivateRedis {
    child: Option<Child>,
    port: u16,
    options: Vec<String>,
    dir: TempDir,
}

impl PrivateRedis {
    /// Starts a server with these extra `redis-server` options and waits
    /// until it accepts connections. Panics when Debian's `redis-server`
    /// binary is missing or the server does not start within 10 s.
    pub fn start(options: &[&str]) -> PrivateRedis {
        let port = free_port_with_bus();
        let dir = std::env::temp_dir().join(format!("quartz-redis-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut server = PrivateRedis {
            child: None,
            port,
            options: options.iter().map(|o| (*o).to_owned()).collect(),
            dir: TempDir(dir),
        };
        server.restart();
        server
    }

    /// Its URL, `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server process's id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Its data directory.
    pub fn dir(&self) -> &PathBuf {
        &self.dir.0
    }

    /// Runs `redis-cli` against it; its standard output, trimmed.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// Kills the server with SIGKILL, as a crash would, and waits for it to
    /// be gone. Nothing is flushed: what reached its files is what is left.
    pub fn crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again (after [`crash`](Self::crash)) on the same
    /// port, directory and options, and waits until it accepts connections
    /// and has loaded its files.
    pub fn restart(&mut self) {
        self.crash();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .arg("--dir")
            .arg(&self.dir.0)
            .args(&self.options)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server (Debian's redis-server package) runs the private servers");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        // PING answers LOADING until the append-only file is read back.
        while self.cli(&["PING"]) != "PONG" {
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not start",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A free port of 127.0.0.1 whose cluster bus port (10000 above it) is
/// free too.
fn free_port_with_bus() -> u16 {
    loop {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        if port < 55_000 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.crash();
    }
}
