-- Retries waiting out their backoff and late runs a misfire policy promised
-- are ledger rows in state 'pending', claimable by any node from due_at, so
-- that no node's death or restart can lose them.
ALTER TABLE quartz_fire ADD COLUMN due_at BIGINT NULL;

-- Exponential backoff: the longest delay between attempts (NULL: the backoff
-- is fixed at backoff_ms).
ALTER TABLE quartz_job ADD COLUMN backoff_max_ms BIGINT NULL;
