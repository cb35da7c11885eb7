-- Chains: a child job's fire is a ledger row of its parent's execute and fire
-- time with the child's job id, so the unique key that makes a duplicate claim
-- impossible takes the job id too. For a trigger's own job nothing changes:
-- its job id follows from its execute id. One statement, so the key is never
-- missing.
ALTER TABLE quartz_fire
    DROP INDEX quartz_fire_once,
    ADD CONSTRAINT quartz_fire_once UNIQUE (execute_id, job_id, fire_time, attempt);
