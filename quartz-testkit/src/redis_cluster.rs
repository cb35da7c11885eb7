//! A Redis Cluster of a test's own: `redis-server` processes in cluster
//! mode on loopback ports ([`PrivateRedis`]), joined by `redis-cli --cluster
//! create`, masters and replicas, with a short `cluster-node-timeout` so
//! that a killed master's replica is promoted within seconds.
//!
//! ```no_run
//! use quartz_testkit::redis_cluster::RedisCluster;
//!
//! let mut cluster = RedisCluster::start(3, 1, 2_000); // three masters, a replica each
//! let url = cluster.url(); // redis+cluster://127.0.0.1:P1,127.0.0.1:P2,...
//! let master = cluster.master_of("quartz:{billing}:due").unwrap();
//! cluster.kill(master); // its replica is promoted after the node timeout
//! cluster.wait_until_served("quartz:{billing}:due");
//! ```

use std::process::Command;
use std::time::{Duration, Instant};

use crate::redis_server::PrivateRedis;

/// A cluster's servers; killed when dropped.
pub struct RedisCluster {
    servers: Vec<Option<PrivateRedis>>,
}

impl RedisCluster {
    /// Starts `masters × (1 + replicas)` servers, makes them a cluster and
    /// waits until every slot is served. Panics when Debian's
    /// `redis-server` and `redis-cli` are missing or the cluster does not
    /// form within 30 s.
    pub fn start(masters: usize, replicas: usize, node_timeout_ms: u64) -> RedisCluster {
        let timeout = node_timeout_ms.to_string();
        let servers: Vec<PrivateRedis> = (0..masters * (1 + replicas))
            .map(|_| {
                PrivateRedis::start(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    &timeout,
                    "--appendonly",
                    "no",
                ])
            })
            .collect();
        let addresses: Vec<String> = servers.iter().map(|s| format!("127.0.0.1:{}", s.port())).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli (Debian's redis-tools) makes the cluster");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = RedisCluster {
            servers: servers.into_iter().map(Some).collect(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        // Formed, and every master's replicas in sync (online), so that a
        // write can be acknowledged by them from the first.
        while !cluster.alive().all(|s| {
            s.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok") && {
                let info = s.cli(&["INFO", "replication"]);
                !info.contains("role:master") || info.matches("state=online").count() >= replicas
            }
        }) {
            assert!(Instant::now() < deadline, "the cluster did not form within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster
    }

    fn alive(&self) -> impl Iterator<Item = &PrivateRedis> {
        self.servers.iter().flatten()
    }

    /// The URL of the cluster, naming every server as a seed.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.alive().map(|s| format!("127.0.0.1:{}", s.port())).collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// How many servers were started (killed ones included).
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Whether it has no server.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Runs `redis-cli` against the `i`th server.
    pub fn cli(&self, i: usize, args: &[&str]) -> String {
        self.servers[i].as_ref().map(|s| s.cli(args)).unwrap_or_default()
    }

    /// The index of the server that is, as a living server sees it, the
    /// master of the slot of `key`; `None` when no living master serves it.
    pub fn master_of(&self, key: &str) -> Option<usize> {
        let witness = self.alive().next()?;
        let slot: u16 = witness.cli(&["CLUSTER", "KEYSLOT", key]).parse().ok()?;
        let nodes = witness.cli(&["CLUSTER", "NODES"]);
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
                continue;
            }
            let serves = fields[8..].iter().any(|range| {
                let (low, high) = range.split_once('-').unwrap_or((range, range));
                matches!((low.parse::<u16>(), high.parse::<u16>()), (Ok(l), Ok(h)) if (l..=h).contains(&slot))
            });
            if !serves {
                continue;
            }
            let port = fields[1].split(['@', ':']).nth(1)?.parse::<u16>().ok()?;
            return self
                .servers
                .iter()
                .position(|s| s.as_ref().is_some_and(|s| s.port() == port));
        }
        None
    }

    /// Kills the `i`th server with SIGKILL, for good.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut server) = self.servers[i].take() {
            server.crash();
        }
    }

    /// Waits (up to 30 s) until a living master serves the slot of `key`
    /// and the cluster says it is whole again; how long that took.
    pub fn wait_until_served(&self, key: &str) -> Duration {
        let began = Instant::now();
        while self.master_of(key).is_none()
            || !self
                .alive()
                .all(|s| s.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        {
            assert!(
                began.elapsed() < Duration::from_secs(30),
                "no master took over the slot of {key} within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        began.elapsed()
    }
}
