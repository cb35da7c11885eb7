-- The whole scheduler on standby: since when (database time), NULL while it
-- runs. No node claims a fire while it is set.
ALTER TABLE quartz_scheduler ADD COLUMN paused_at BIGINT NULL;
