-- How busy a node is (fires running or queued on its pool) at its last
-- heartbeat: the least-loaded strategy offers executes to the least busy nodes
-- first.
ALTER TABLE quartz_node ADD COLUMN busy BIGINT NOT NULL DEFAULT 0;
