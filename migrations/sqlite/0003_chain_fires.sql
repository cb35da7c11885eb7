-- Chains: a child job's fire is a ledger row of its parent's execute and fire
-- time with the child's job id, so the unique key that makes a duplicate claim
-- impossible takes the job id too. For a trigger's own job nothing changes:
-- its job id follows from its execute id. SQLite cannot alter a table
-- constraint: the ledger is rebuilt, ids and all, inside the migration's
-- transaction.
CREATE TABLE quartz_fire_next (
    id            INTEGER      PRIMARY KEY AUTOINCREMENT,
    scheduler     TEXT NOT NULL,
    execute_id    BIGINT       NOT NULL,
    job_id        BIGINT       NOT NULL,
    fire_time     BIGINT       NOT NULL,
    attempt       BIGINT       NOT NULL,
    node_id       TEXT,
    incarnation   BIGINT       NOT NULL DEFAULT 0,
    state         TEXT  NOT NULL,
    claimed_at    BIGINT       NOT NULL,
    started_at    BIGINT,
    finished_at   BIGINT,
    duration_ms   BIGINT,
    error         TEXT,
    skipped_until BIGINT,
    fire_count    BIGINT       NOT NULL DEFAULT 1,
    CONSTRAINT quartz_fire_once UNIQUE (execute_id, job_id, fire_time, attempt)
);
INSERT INTO quartz_fire_next (id, scheduler, execute_id, job_id, fire_time, attempt, node_id, incarnation, state,
    claimed_at, started_at, finished_at, duration_ms, error, skipped_until, fire_count)
SELECT id, scheduler, execute_id, job_id, fire_time, attempt, node_id, incarnation, state,
    claimed_at, started_at, finished_at, duration_ms, error, skipped_until, fire_count
FROM quartz_fire;
-- Ids are never reused, even those of rows deleted from the end.
UPDATE sqlite_sequence SET seq = (SELECT seq FROM sqlite_sequence WHERE name = 'quartz_fire')
WHERE name = 'quartz_fire_next' AND EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'quartz_fire');
DROP TABLE quartz_fire;
ALTER TABLE quartz_fire_next RENAME TO quartz_fire;
CREATE INDEX quartz_fire_open ON quartz_fire (scheduler, state);
CREATE INDEX quartz_fire_job ON quartz_fire (job_id, id);
