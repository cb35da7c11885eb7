-- A cron trigger's choice for the local times a DST change skips (shift or
-- skip) and repeats (first, second or both). NULL keeps Quartz's behaviour,
-- which every row from before this migration has.
ALTER TABLE quartz_execute ADD COLUMN dst_skipped VARCHAR(16) NULL;
ALTER TABLE quartz_execute ADD COLUMN dst_repeated VARCHAR(16) NULL;
