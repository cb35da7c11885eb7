-- The id of the job a change was made to (NULL for a calendar's, and for
-- changes made before this migration): a deleted or renamed job's history
-- is found by the name it had, through its changes.
ALTER TABLE quartz_change_log ADD COLUMN target_id BIGINT NULL;
