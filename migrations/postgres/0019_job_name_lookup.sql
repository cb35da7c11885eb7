-- A job is looked up by name (every job added, read, edited, paused, fired
-- or deleted by name) through its unique index on (scheduler, name). The
-- indexes on (scheduler, limit_key) and (scheduler, parent_job) also begin
-- with the scheduler, and on a table without statistics a generic plan (the
-- one every connection of ours uses) could read a name through either of
-- them, filtering every job of the scheduler by name: adding N jobs cost N
-- squared. Most jobs have neither a concurrency limit nor a parent; indexed
-- only when they have one, the two indexes hold only those jobs and cannot
-- serve a lookup by name. Their queries name a key or a parent
-- (limit_key = ?, parent_job IS NOT NULL), which implies the condition.
DROP INDEX IF EXISTS quartz_job_limit;
CREATE INDEX quartz_job_limit ON quartz_job (scheduler, limit_key) WHERE limit_key IS NOT NULL;
DROP INDEX IF EXISTS quartz_job_parent;
CREATE INDEX quartz_job_parent ON quartz_job (scheduler, parent_job) WHERE parent_job IS NOT NULL;
