-- Work enqueued from code (JobStore::enqueue, postgres::enqueue): a one-off
-- fire of a job with a payload of its own. Each piece of work is a row
-- here, and its attempts are ledger rows whose execute id is the work's id
-- negated (so they share it, and no trigger's id is ever negative). A
-- unique key is held by one row per job at a time; a holder whose fires
-- have ended and whose window (unique_until) has passed gives it up to the
-- next piece of work, in that one's transaction. Rows are purged with the
-- complete executes, once their fires have ended and their window passed.
CREATE TABLE IF NOT EXISTS quartz_work (
    id           BIGSERIAL    PRIMARY KEY,
    scheduler    VARCHAR(200) NOT NULL,
    job_id       BIGINT       NOT NULL,
    fire_time    BIGINT       NOT NULL,
    payload      TEXT,
    unique_key   VARCHAR(255),
    unique_until BIGINT,
    created_at   BIGINT       NOT NULL
);
CREATE UNIQUE INDEX quartz_work_unique ON quartz_work (scheduler, job_id, unique_key) WHERE unique_key IS NOT NULL;
CREATE INDEX quartz_work_age ON quartz_work (scheduler, created_at);
