//! The handle other stages launch won fires through (the dispatcher,
//! recovery, the backlog, the runner for a chain's children), apart from
//! the launcher itself so that none of them depends on it.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::context::Ctx;
use super::run::RunFire;
use crate::time::Timestamp;

/// A handle on the launch stage, for the stages that hand it won fires
/// (the dispatcher, recovery, the backlog, the runner).
#[derive(Clone)]
pub(super) struct Launch {
    ctx: Arc<Ctx>,
    inbox: mpsc::UnboundedSender<(Timestamp, Vec<RunFire>)>,
}

/// Where a [`Launch`] handle's fires arrive: the launcher's inbox.
pub(super) type Inbox = mpsc::UnboundedReceiver<(Timestamp, Vec<RunFire>)>;

impl Launch {
    /// A handle on a launch stage, and the inbox its fires arrive on (for
    /// [`Launcher::new`](super::launch::Launcher::new), or a test that stands
    /// in for the launcher).
    pub(super) fn new(ctx: Arc<Ctx>) -> (Launch, Inbox) {
        let (inbox_tx, inbox) = mpsc::unbounded_channel();
        (Launch { ctx, inbox: inbox_tx }, inbox)
    }

    /// Launches fires won for `fire_time`: started a start lead ahead, handed
    /// to the pool at their time (at once if it has passed). They are known
    /// as won and not started from now ([`Flights::unstarted`](super::flight::Flights::unstarted)).
    pub(super) fn launch_at(&self, fire_time: Timestamp, runs: Vec<RunFire>) {
        self.ctx.flights.unstarted(runs.iter().map(|r| r.fire_id));
        let _ = self.inbox.send((fire_time, runs));
    }

    /// Launches one won fire at its time (at once if it has passed).
    pub(super) fn launch(&self, run: RunFire) {
        self.launch_at(run.fire_time, vec![run]);
    }
}
