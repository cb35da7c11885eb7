//! The connection: one server's (`redis://`, a [`ConnectionManager`] that
//! reconnects by itself) or a Redis Cluster's (`redis+cluster://`, the
//! cluster client, which follows the slots as masters fail over). Every
//! script names its scheduler's key prefix as its one key, so the cluster
//! client sends it to the master of that scheduler's slot.

use std::time::Duration;

use quartz_core::store::StoreError;
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::{hide_password, unavailable};

/// A connection to one server or to a cluster, used as either.
#[derive(Clone)]
pub(super) enum Conn {
    One(ConnectionManager),
    Cluster(ClusterConnection),
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::One(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::One(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::One(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The URL schemes of a Redis Cluster.
const CLUSTER_SCHEMES: [(&str, &str); 2] = [("redis+cluster://", "redis://"), ("rediss+cluster://", "rediss://")];

/// The seed nodes of `redis+cluster://[USER:PASSWORD@]HOST:PORT,HOST:PORT[/]`
/// (its namespace parameter already taken out), each as a `redis://` URL
/// with the same credentials; `None` for a URL of one server.
pub(super) fn cluster_nodes(url: &str) -> Result<Option<Vec<String>>, StoreError> {
    let Some((scheme, plain)) = CLUSTER_SCHEMES.iter().find(|(scheme, _)| url.starts_with(scheme)) else {
        return Ok(None);
    };
    let invalid = |reason: &str| StoreError::InvalidUrl {
        url: hide_password(url),
        reason: reason.to_owned(),
    };
    let rest = &url[scheme.len()..];
    if rest.contains('?') {
        return Err(invalid("a Redis Cluster URL takes no parameter but namespace"));
    }
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('/') {
        return Err(invalid(
            "a Redis Cluster has one database: the URL names no database number",
        ));
    }
    let (auth, hosts) = match rest.rsplit_once('@') {
        Some((auth, hosts)) => (format!("{auth}@"), hosts),
        None => (String::new(), rest),
    };
    let nodes: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|host| format!("{plain}{auth}{host}"))
        .collect();
    if nodes.is_empty() {
        return Err(invalid(
            "a Redis Cluster URL names at least one HOST:PORT of the cluster",
        ));
    }
    Ok(Some(nodes))
}

/// Connects to a cluster through its seed nodes; the client learns the
/// rest (masters, replicas, slots) from them.
pub(super) async fn connect_cluster(
    url: &str,
    nodes: Vec<String>,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<Conn, StoreError> {
    let client = redis::cluster::ClusterClient::builder(nodes)
        .connection_timeout(connect_timeout)
        .response_timeout(response_timeout)
        .tcp_settings(super::tcp_settings())
        // A master's failover takes the cluster's node timeout and an
        // election: retries spread over several seconds ride it out.
        .retries(8)
        .min_retry_wait(100)
        .max_retry_wait(2_000)
        .build()
        .map_err(|e| StoreError::InvalidUrl {
            url: hide_password(url),
            reason: e.to_string(),
        })?;
    let conn = tokio::time::timeout(connect_timeout, client.get_async_connection())
        .await
        .map_err(|_| StoreError::Unavailable {
            reason: format!("no answer from {} within {connect_timeout:?}", hide_password(url)),
        })?
        .map_err(|e| unavailable(&e))?;
    Ok(Conn::Cluster(conn))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_name_their_seed_nodes() {
        assert_eq!(cluster_nodes("redis://h:1").unwrap(), None);
        assert_eq!(
            cluster_nodes("redis+cluster://h1:7000,h2:7001/").unwrap().unwrap(),
            ["redis://h1:7000", "redis://h2:7001"]
        );
        assert_eq!(
            cluster_nodes("rediss+cluster://u:secret@h1:7000,h2:7001")
                .unwrap()
                .unwrap(),
            ["rediss://u:secret@h1:7000", "rediss://u:secret@h2:7001"]
        );
        let e = cluster_nodes("redis+cluster://u:secret@h1:7000/2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("one database") && !e.contains("secret"), "{e}");
        assert!(cluster_nodes("redis+cluster://").is_err());
        assert!(cluster_nodes("redis+cluster://h:1?timeout=3").is_err());
    }
}
