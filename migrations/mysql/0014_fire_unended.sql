-- The ledger's start (claimed -> running: state and started_at) changes no
-- column of a secondary index: the state leaves the fire-time index, and the
-- fires not ended yet (claimed, running, pending) are found by finished_at
-- IS NULL, at the front of an index of their own.
UPDATE quartz_fire SET finished_at = claimed_at
    WHERE finished_at IS NULL AND state NOT IN ('claimed', 'running', 'pending');
CREATE INDEX quartz_fire_time ON quartz_fire (scheduler, fire_time);
CREATE INDEX quartz_fire_unended ON quartz_fire (scheduler, finished_at, fire_time);
ALTER TABLE quartz_fire DROP INDEX quartz_fire_age;
