//! A fault-injecting TCP proxy between a node and its database: the
//! network's own faults, which killed sessions and restarts never show.
//!
//! A [`FaultProxy`] listens on a loopback port and forwards every connection
//! to the database's address, in one of three [`Mode`]s that a test switches
//! at any moment, for the connections already open and the ones to come:
//!
//! - [`Mode::Pass`]: bytes go through as they come;
//! - [`Mode::Latency`]: each chunk waits before it is passed on, either way;
//! - [`Mode::Stall`]: nothing passes either way and nothing is closed, as
//!   when a partition or a dead load balancer drops packets: sockets stay
//!   open and silent, no reset, queries hang. A connection opened meanwhile
//!   is accepted and hears nothing. What was sent during the stall is held
//!   and delivered when it lifts, as TCP retransmits once the path heals.
//!
//! The proxy runs on a thread and a runtime of its own, so a test on tokio's
//! paused clock, or one whose runtime ends first, does not stop it; dropping
//! the proxy closes its listener and every connection.
//!
//! ```no_run
//! use quartz_testkit::proxy::{FaultProxy, Mode};
//!
//! let proxy = FaultProxy::start("127.0.0.1:5432");
//! // A node connects through the proxy ...
//! let url = proxy.url("postgres://postgres@127.0.0.1:5432/test");
//! assert!(url.starts_with("postgres://postgres@127.0.0.1:"));
//! // ... and is cut off without a reset, then heals.
//! proxy.set(Mode::Stall);
//! proxy.set(Mode::Pass);
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does to the bytes it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Passes them on as they come.
    Pass,
    /// Passes each chunk on after this long, in both directions.
    Latency(Duration),
    /// Passes nothing and closes nothing.
    Stall,
}

/// A TCP proxy to one address whose [`Mode`] a test switches.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: String,
    mode: Arc<watch::Sender<Mode>>,
    open: Arc<AtomicUsize>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// A proxy to `upstream` (`host:port`), listening on a free loopback
    /// port, in [`Mode::Pass`].
    pub fn start(upstream: &str) -> FaultProxy {
        FaultProxy::start_on("127.0.0.1", upstream)
    }

    /// A proxy to `upstream`, listening on a free port of the address `ip`
    /// (one end of a network namespace's link, say: see
    /// [`crate::netns`]), in [`Mode::Pass`].
    pub fn start_on(ip: &str, upstream: &str) -> FaultProxy {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let std_listener = std::net::TcpListener::bind((ip, 0)).unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap();
        let (mode, _) = watch::channel(Mode::Pass);
        let mode = Arc::new(mode);
        let open = Arc::new(AtomicUsize::new(0));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let (m, o, to) = (Arc::clone(&mode), Arc::clone(&open), upstream.to_owned());
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = TcpListener::from_std(std_listener).unwrap();
                    tokio::select! {
                        () = accept(listener, to, m, o) => {}
                        _ = stopped => {}
                    }
                });
                // Dropping the runtime drops every connection's tasks, and
                // with them the sockets.
            })
            .unwrap();
        FaultProxy {
            addr,
            upstream: upstream.to_owned(),
            mode,
            open,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The address to connect to instead of the upstream one.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `url` with the upstream's `host:port` replaced by the proxy's.
    ///
    /// # Panics
    /// When `url` does not name the upstream address.
    pub fn url(&self, url: &str) -> String {
        assert!(
            url.contains(&self.upstream),
            "{url} does not name the proxy's upstream {}",
            self.upstream
        );
        url.replacen(&self.upstream, &self.addr.to_string(), 1)
    }

    /// Switches the mode, for the connections open and those to come.
    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// The mode in force.
    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// How many connections are open through the proxy.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept(listener: TcpListener, upstream: String, mode: Arc<watch::Sender<Mode>>, open: Arc<AtomicUsize>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let (upstream, mode, open) = (upstream.clone(), mode.subscribe(), Arc::clone(&open));
        connections.spawn(async move {
            // A connection opened during a stall waits for it to lift before
            // it reaches the server: the client hears nothing meanwhile.
            let mut before = mode.clone();
            if until_flowing(&mut before).await.is_none() {
                return;
            }
            let Ok(server) = TcpStream::connect(&upstream).await else {
                return;
            };
            let _ = (client.set_nodelay(true), server.set_nodelay(true));
            open.fetch_add(1, Ordering::SeqCst);
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::join!(
                pump(client_read, server_write, mode.clone()),
                pump(server_read, client_write, mode)
            );
            open.fetch_sub(1, Ordering::SeqCst);
        });
        // Finished connections leave the set as new ones come.
        while connections.try_join_next().is_some() {}
    }
}

/// Waits while the mode is [`Mode::Stall`]; the mode then in force, or
/// `None` once the proxy is gone.
async fn until_flowing(mode: &mut watch::Receiver<Mode>) -> Option<Mode> {
    mode.wait_for(|m| *m != Mode::Stall).await.ok().map(|m| *m)
}

/// Carries one direction of a connection until either end closes it.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut mode: watch::Receiver<Mode>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if until_flowing(&mut mode).await.is_none() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // Bytes read just before a stall began are held until it lifts.
        match until_flowing(&mut mode).await {
            None => return,
            Some(Mode::Latency(d)) => tokio::time::sleep(d).await,
            Some(_) => {}
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server, the proxy in front of it, and one client: bytes pass,
    /// wait in a stall without the connection closing, and arrive when it
    /// lifts; latency delays them.
    #[test]
    fn passes_stalls_and_delays_without_closing() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let upstream = echo.local_addr().unwrap().to_string();
            tokio::spawn(async move {
                while let Ok((socket, _)) = echo.accept().await {
                    tokio::spawn(async move {
                        let (mut r, mut w) = socket.into_split();
                        let _ = tokio::io::copy(&mut r, &mut w).await;
                    });
                }
            });
            let proxy = FaultProxy::start(&upstream);
            assert_eq!(
                proxy.url(&format!("tcp://{upstream}/x")),
                format!("tcp://{}/x", proxy.addr())
            );
            let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
            let mut got = [0u8; 4];

            client.write_all(b"ping").await.unwrap();
            client.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"ping");
            assert_eq!(proxy.open_connections(), 1);

            proxy.set(Mode::Stall);
            client.write_all(b"held").await.unwrap();
            let silent = tokio::time::timeout(Duration::from_millis(300), client.read_exact(&mut got)).await;
            assert!(silent.is_err(), "nothing passes in a stall, and nothing closes");
            proxy.set(Mode::Pass);
            client.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"held", "what was sent in the stall arrives after it");

            proxy.set(Mode::Latency(Duration::from_millis(150)));
            let sent = std::time::Instant::now();
            client.write_all(b"slow").await.unwrap();
            client.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"slow");
            assert!(sent.elapsed() >= Duration::from_millis(300), "once each way");

            // A connection opened in a stall hears nothing until it lifts.
            proxy.set(Mode::Stall);
            let mut late = TcpStream::connect(proxy.addr()).await.unwrap();
            late.write_all(b"late").await.unwrap();
            let silent = tokio::time::timeout(Duration::from_millis(300), late.read_exact(&mut got)).await;
            assert!(silent.is_err());
            proxy.set(Mode::Pass);
            late.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"late");
            drop(proxy);
            let mut rest = Vec::new();
            let closed = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut rest)).await;
            assert!(closed.is_ok(), "dropping the proxy closes its connections");
        });
    }
}
