-- The ledger's start (claimed -> running: state and started_at) changes no
-- indexed column, so PostgreSQL writes it as a HOT update, on the row's own
-- page, with no index entry: the state leaves the fire-time index, and the
-- fires not ended yet (claimed, running, pending: the ones recovery, the
-- sweep, the pending poll and the health read look for) have an index of
-- their own, on finished_at IS NULL. A fill factor of 50 leaves each page
-- room for every one of its rows' starts (at 70, a third of the starts in a
-- storm of 5,000 fires a second found no room and were not HOT; at 50,
-- 95 % were); the success, which sets finished_at, is an ordinary update.
UPDATE quartz_fire SET finished_at = claimed_at
    WHERE finished_at IS NULL AND state NOT IN ('claimed', 'running', 'pending');
CREATE INDEX quartz_fire_time ON quartz_fire (scheduler, fire_time);
CREATE INDEX quartz_fire_unended ON quartz_fire (scheduler, fire_time) WHERE finished_at IS NULL;
DROP INDEX IF EXISTS quartz_fire_age;
ALTER TABLE quartz_fire SET (fillfactor = 50);
