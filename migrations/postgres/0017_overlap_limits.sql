-- A trigger's overlap policy (allow, skip, buffer_one, buffer_all, cancel):
-- what its fire does when a fire of its job is still claimed or running.
-- NULL keeps the job's own rule (allow_concurrent).
ALTER TABLE quartz_execute ADD COLUMN overlap VARCHAR(16) NULL;
-- A running fire asked to stop by a newer fire under the cancel policy:
-- when (database time); the node that runs it reads the request and
-- signals the handler's cancellation.
ALTER TABLE quartz_fire ADD COLUMN cancel_at BIGINT NULL;
-- A job's cluster-wide concurrency limit: at most concurrency_limit fires
-- claimed or running at once among the jobs whose limit_key (the
-- concurrency_key template resolved from the job's handler and payload) is
-- the same. A claim locks the key's first job row and counts the key's open
-- fires.
ALTER TABLE quartz_job ADD COLUMN concurrency_limit BIGINT NULL;
ALTER TABLE quartz_job ADD COLUMN concurrency_key VARCHAR(255) NULL;
ALTER TABLE quartz_job ADD COLUMN limit_key VARCHAR(255) NULL;
CREATE INDEX quartz_job_limit ON quartz_job (scheduler, limit_key);
