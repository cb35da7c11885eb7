//! What the in-memory store's claim under an overlap policy or a
//! concurrency limit records when it is held back.

use crate::Timestamp;
use crate::store::{Claim, ClaimBusy, FireState};
use crate::trigger::Overlap;

use super::db::{self, Db};

/// An exclusive claim under an overlap policy while its job has a fire
/// open, its trigger a fire waiting or its key no room, its execute
/// advanced: the fire recorded as skipped, or as a pending fire due at its
/// time. Under cancel the trigger's older waiting fires are skipped
/// (replaced), the job's open fires are asked to stop, and the change
/// counter moves.
pub(super) fn overlapped(
    db: &mut Db,
    c: &Claim,
    policy: Overlap,
    (scheduler, job_id): (&str, i64),
    busy: &ClaimBusy,
    now: i64,
) {
    let execute_id = c.cas.execute_id;
    let time = c.fire_time.as_millis();
    let skip = busy.skip_reason(policy);
    if let Some(reason) = skip {
        let id = db.insert_fire(
            scheduler,
            execute_id,
            job_id,
            time,
            c.attempt,
            None,
            FireState::Skipped,
            now,
        );
        if let Some(f) = id.and_then(|id| db.fires.get_mut(&id)) {
            f.record.error = Some(reason);
        }
        return;
    }
    let Some(newer) = db.insert_pending(scheduler, execute_id, job_id, time, c.attempt, time, now) else {
        return;
    };
    if busy.cancels(policy) {
        for f in db.fires.values_mut() {
            let r = &mut f.record;
            if r.execute_id == execute_id
                && r.job_id == job_id
                && r.id != newer
                && r.by_overlap()
                && r.state == FireState::Pending
            {
                r.state = FireState::Skipped;
                r.finished_at = Some(Timestamp::from_millis(now));
                r.error = Some(format!(
                    "overlap policy cancel: replaced by fire {newer} before it started"
                ));
            } else if r.job_id == job_id && db::OPEN.contains(&r.state) {
                f.cancel = true;
            }
        }
        db.sched(scheduler).changes += 1;
    }
}
