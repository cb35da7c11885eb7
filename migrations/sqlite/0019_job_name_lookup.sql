-- A job is looked up by name through its unique index on (scheduler, name).
-- The indexes on (scheduler, limit_key) and (scheduler, parent_job) hold
-- only the jobs that have a concurrency limit or a parent, as on
-- PostgreSQL (where, without statistics, a lookup by name could read every
-- job of the scheduler through either of them): smaller, and written only
-- for those jobs. Their queries name a key or a parent (limit_key = ?,
-- parent_job IS NOT NULL), which implies the condition.
DROP INDEX IF EXISTS quartz_job_limit;
CREATE INDEX quartz_job_limit ON quartz_job (scheduler, limit_key) WHERE limit_key IS NOT NULL;
DROP INDEX IF EXISTS quartz_job_parent;
CREATE INDEX quartz_job_parent ON quartz_job (scheduler, parent_job) WHERE parent_job IS NOT NULL;
