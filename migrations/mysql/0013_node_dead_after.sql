-- How long a node's heartbeat may be silent before its peers declare it
-- dead (its dead_after setting, NULL for nodes registered before this
-- migration): the admin surface shows a live row past it as silent even
-- when no peer is left to declare it dead.
ALTER TABLE quartz_node ADD COLUMN dead_after_ms BIGINT NULL;
