//! Whether a job's handler is offered by the scheduler's nodes: the check
//! the admin surface and a service's own transaction
//! (`quartz_store::postgres::add_job`) make before writing a job.

use super::{AdminError, views};

/// Whether the nodes of `scheduler` (all it has, live or not, as read at
/// `now`) offer `handler`, so that a misspelt handler is refused when the
/// job is written rather than failing at its first fire. A handler is known
/// when a node registered it: a live node, or a node that is down now (its
/// row keeps what it offered; the service may be restarting): `Ok(None)`,
/// or a warning when only a node that is down offered it. When no node is
/// live at all (the service that runs the job may not be deployed yet), the
/// job is accepted with a warning; when nodes are live and none of the
/// scheduler's nodes ever offered the handler, it is refused, naming what
/// they offer.
///
/// # Errors
///
/// [`AdminError::Invalid`] on the field `handler` when live nodes exist and
/// none offers it.
pub fn handler_verdict(
    scheduler: &str,
    nodes: &[crate::store::Node],
    now: crate::Timestamp,
    handler: &str,
) -> Result<Option<String>, AdminError> {
    let offers = |n: &crate::store::Node| n.handlers.iter().any(|h| h == handler);
    let live: Vec<_> = nodes.iter().filter(|n| views::is_live(n, now)).collect();
    if live.iter().any(|n| offers(n)) {
        return Ok(None);
    }
    if nodes.iter().any(offers) {
        return Ok(Some(format!(
            "no live node offers handler {handler:?} now (a node that is down offered it): \
             its fires run when one with it is back"
        )));
    }
    if live.is_empty() {
        return Ok(Some(format!(
            "no node is live, so handler {handler:?} cannot be checked: its fires run when a node \
             offering it joins, and are recorded failed past their misfire threshold until then"
        )));
    }
    let mut offered: Vec<&str> = live
        .iter()
        .flat_map(|n| n.handlers.iter().map(String::as_str))
        .collect();
    offered.sort_unstable();
    offered.dedup();
    Err(AdminError::invalid(
        "handler",
        format!(
            "no node of scheduler {scheduler:?} offers handler {handler:?}; the live nodes offer: {}",
            if offered.is_empty() {
                "none".to_owned()
            } else {
                offered.join(", ")
            }
        ),
    ))
}
