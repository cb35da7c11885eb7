-- Operating a cluster for months.
--
-- The handlers a node offers (a JSON array of names), so that the CLI can say
-- when no live node runs a job's handler.
ALTER TABLE quartz_node ADD COLUMN handlers TEXT NULL;

-- When a running fire passed its job's timeout. The fire stays running until
-- its code really returns (a thread cannot be killed), so that a job that
-- disallows concurrency stays blocked; then it is recorded failed, with both
-- times kept.
ALTER TABLE quartz_fire ADD COLUMN timed_out_at BIGINT NULL;

-- One row per scheduler: the change counter that every change made through
-- the store bumps in its own transaction (nodes read it to see changes at
-- once), and the retention bookkeeping: when the last purge began (won by
-- compare-and-set, so one node purges at a time) and the fire time before
-- which succeeded fires may have been purged (the audit checks after it).
CREATE TABLE IF NOT EXISTS quartz_scheduler (
    scheduler        TEXT NOT NULL PRIMARY KEY,
    changes          BIGINT NOT NULL DEFAULT 0,
    purge_started_at BIGINT NOT NULL DEFAULT 0,
    purged_before    BIGINT NULL
);

-- The ledger by state and fire time: open fires (claimed, running) as
-- before, and the oldest finished fires for the purge.
CREATE INDEX quartz_fire_age ON quartz_fire (scheduler, state, fire_time);
DROP INDEX IF EXISTS quartz_fire_open;
