-- The ledger's start (claimed -> running: state and started_at) changes no
-- indexed column: the state leaves the fire-time index, and the fires not
-- ended yet (claimed, running, pending) have an index of their own, on
-- finished_at IS NULL.
UPDATE quartz_fire SET finished_at = claimed_at
    WHERE finished_at IS NULL AND state NOT IN ('claimed', 'running', 'pending');
CREATE INDEX quartz_fire_time ON quartz_fire (scheduler, fire_time);
CREATE INDEX quartz_fire_unended ON quartz_fire (scheduler, fire_time) WHERE finished_at IS NULL;
DROP INDEX IF EXISTS quartz_fire_age;
