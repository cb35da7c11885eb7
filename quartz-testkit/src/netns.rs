//! A host of a test's own on this machine: a network namespace joined to
//! the machine by a pair of virtual Ethernet links (`ip netns`, `ip link`,
//! Debian's iproute2), so that a process started in it reaches the machine
//! over a real path that the test can make drop packets, both ways or one
//! way only. Nothing is refused, reset or delivered later by the path:
//! sockets stay open and silent, as behind a failed switch or a firewall
//! that drops.
//!
//! Packets are dropped by a queue of length zero (`tc qdisc … pfifo limit
//! 0`) on the sending side of the link: on the namespace's side for what the
//! process sends, on the machine's side for what it receives.
//!
//! Making one needs root (`CAP_NET_ADMIN`): [`NetNs::create`] answers `None`
//! where it cannot, having said so loudly, and fails under `CI=true`.
//!
//! ```no_run
//! use quartz_testkit::netns::{Drop as Lose, NetNs};
//! use quartz_testkit::proxy::FaultProxy;
//!
//! let host = NetNs::create("a test").expect("a namespace");
//! // The database is on the machine's loopback: a proxy on the link's
//! // machine end forwards to it.
//! let proxy = FaultProxy::start_on(host.machine_ip(), "127.0.0.1:5432");
//! let mut node = host.command("/path/to/node");
//! node.env("DATABASE_URL", proxy.url("postgres://postgres@127.0.0.1:5432/test"));
//! host.lose(Lose::Both);
//! host.heal();
//! ```

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Which packets the path loses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drop {
    /// Every packet, either way.
    Both,
    /// What the namespace's processes send; what they are sent still arrives.
    Outgoing,
    /// What the namespace's processes are sent; what they send still arrives.
    Incoming,
}

/// A network namespace and its link to the machine, removed when dropped.
#[derive(Debug)]
pub struct NetNs {
    name: String,
    /// The link's end on the machine's side (the other end is `{link}n`,
    /// inside the namespace).
    link: String,
    machine_ip: String,
    ns_ip: String,
}

/// Runs `ip` (or `tc`) with `args`; its error output when it fails.
fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl NetNs {
    /// A new namespace with its loopback up and a link to the machine, its
    /// two ends on a `/30` of `10.0.0.0/8` chosen from the process id; or
    /// `None`, said loudly on behalf of `who`, where the machine does not
    /// allow it (no root, no iproute2). Under `CI=true` that fails instead.
    ///
    /// # Panics
    /// Under `CI=true`, when the namespace cannot be made.
    pub fn create(who: &str) -> Option<NetNs> {
        static SERIAL: AtomicU32 = AtomicU32::new(0);
        let serial = SERIAL.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        // Interface names hold 15 bytes at most.
        let name = format!("qz{pid}-{serial}");
        let link = format!("qz{:x}{serial}", pid & 0xf_ffff);
        let subnet = (pid.wrapping_mul(16).wrapping_add(serial)) % (1 << 20);
        let base = format!("10.{}.{}", 16 + (subnet >> 14) % 200, (subnet >> 6) & 0xff);
        let last = (subnet & 0x3f) * 4;
        let ns = NetNs {
            name,
            link,
            machine_ip: format!("{base}.{}", last + 1),
            ns_ip: format!("{base}.{}", last + 2),
        };
        match ns.set_up() {
            Ok(()) => Some(ns),
            Err(e) => {
                let why = format!("{who} needs a network namespace of its own (root, iproute2): {e}");
                drop(ns);
                assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
                eprintln!("\n!!!!!!!! SKIPPED: {why} !!!!!!!!\n");
                None
            }
        }
    }

    fn set_up(&self) -> Result<(), String> {
        let peer = format!("{}n", self.link);
        run("ip", &["netns", "add", &self.name])?;
        run("ip", &["netns", "exec", &self.name, "ip", "link", "set", "lo", "up"])?;
        run(
            "ip",
            &["link", "add", &self.link, "type", "veth", "peer", "name", &peer],
        )?;
        run("ip", &["link", "set", &peer, "netns", &self.name])?;
        run(
            "ip",
            &["addr", "add", &format!("{}/30", self.machine_ip), "dev", &self.link],
        )?;
        run("ip", &["link", "set", &self.link, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &self.name];
            all.extend_from_slice(args);
            run("ip", &all)
        };
        inside(&["ip", "addr", "add", &format!("{}/30", self.ns_ip), "dev", &peer])?;
        inside(&["ip", "link", "set", &peer, "up"])?;
        Ok(())
    }

    /// The address of the link's end on the machine's side: what a
    /// process in the namespace connects to (listen on it).
    pub fn machine_ip(&self) -> &str {
        &self.machine_ip
    }

    /// The namespace's own address.
    pub fn ns_ip(&self) -> &str {
        &self.ns_ip
    }

    /// A command that runs `program` inside the namespace (`ip netns exec`,
    /// which replaces itself with the program: the child's pid is the
    /// program's, for signals).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name]).arg(program);
        command
    }

    /// Makes the path lose `which` packets, until [`NetNs::heal`].
    ///
    /// # Panics
    /// When `tc` fails.
    pub fn lose(&self, which: Drop) {
        self.heal();
        let peer = format!("{}n", self.link);
        let zero = ["root", "pfifo", "limit", "0"];
        if matches!(which, Drop::Both | Drop::Outgoing) {
            let mut args = vec!["netns", "exec", &self.name, "tc", "qdisc", "add", "dev", &peer];
            args.extend_from_slice(&zero);
            run("ip", &args).unwrap();
        }
        if matches!(which, Drop::Both | Drop::Incoming) {
            let mut args = vec!["qdisc", "add", "dev", self.link.as_str()];
            args.extend_from_slice(&zero);
            run("tc", &args).unwrap();
        }
    }

    /// The path carries every packet again (what TCP sent meanwhile is
    /// retransmitted by the sockets still open).
    pub fn heal(&self) {
        let peer = format!("{}n", self.link);
        // A link with no queue of ours answers an error: nothing to remove.
        let _ = run(
            "ip",
            &["netns", "exec", &self.name, "tc", "qdisc", "del", "dev", &peer, "root"],
        );
        let _ = run("tc", &["qdisc", "del", "dev", &self.link, "root"]);
    }
}

impl std::ops::Drop for NetNs {
    fn drop(&mut self) {
        // Removing the namespace removes its end of the link, and with it
        // the pair; the machine's end is removed too in case it was not.
        let _ = run("ip", &["netns", "del", &self.name]);
        let _ = run("ip", &["link", "del", &self.link]);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::net::TcpListener;
    use std::time::Duration;

    /// A listener on the machine's end and a client in the namespace: a
    /// byte crosses; with packets lost either way, one way or the other,
    /// nothing does and nothing closes; healed, the connection carries
    /// what was sent meanwhile.
    #[test]
    fn the_path_loses_packets_one_way_or_both_and_heals() {
        let Some(ns) = NetNs::create("the namespace's own test") else {
            return;
        };
        let listener = TcpListener::bind((ns.machine_ip(), 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let echo = std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().unwrap();
            let mut byte = [0u8; 1];
            while socket.read_exact(&mut byte).is_ok() {
                if socket.write_all(&byte).is_err() {
                    break;
                }
            }
        });
        // A client in the namespace: sends one byte per line of its input
        // and prints what came back within a second, or "silent".
        let script = format!(
            "import socket,sys\n\
             s=socket.create_connection(('{}',{port}),timeout=5)\n\
             s.settimeout(1)\n\
             for line in sys.stdin:\n\
             \x20   s.sendall(line.strip().encode())\n\
             \x20   try: print(s.recv(10).decode(), flush=True)\n\
             \x20   except socket.timeout: print('silent', flush=True)\n",
            ns.machine_ip()
        );
        let mut client = ns
            .command("python3")
            .args(["-c", &script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = client.stdin.take().unwrap();
        let mut output = std::io::BufReader::new(client.stdout.take().unwrap());
        let mut ask = |what: &str| {
            use std::io::BufRead as _;
            writeln!(input, "{what}").unwrap();
            let mut line = String::new();
            output.read_line(&mut line).unwrap();
            line.trim().to_owned()
        };
        assert_eq!(ask("a"), "a");
        for which in [Drop::Both, Drop::Outgoing, Drop::Incoming] {
            ns.lose(which);
            assert_eq!(ask("b"), "silent", "{which:?}");
            ns.heal();
            // What was lost is sent again by TCP once the path carries it:
            // the echo of the byte, or the byte and then its echo.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            let mut got = String::new();
            while got != "b" {
                assert!(std::time::Instant::now() < deadline, "{which:?}: nothing after healing");
                got = ask("");
            }
        }
        drop(input);
        let _ = client.wait();
        drop(ns);
        let _ = echo.join();
    }
}
