-- quartz-rs schema, version 1. Times are epoch milliseconds of the database clock.

CREATE TABLE IF NOT EXISTS quartz_node (
    scheduler     TEXT NOT NULL,
    node_id       TEXT NOT NULL,
    host          TEXT NOT NULL,
    pid           BIGINT       NOT NULL,
    weight        BIGINT       NOT NULL DEFAULT 1,
    state         TEXT  NOT NULL,
    incarnation   BIGINT       NOT NULL,
    registered_at BIGINT       NOT NULL,
    heartbeat_at  BIGINT       NOT NULL,
    PRIMARY KEY (scheduler, node_id)
);

CREATE TABLE IF NOT EXISTS quartz_job (
    id                INTEGER      PRIMARY KEY AUTOINCREMENT,
    scheduler         TEXT NOT NULL,
    name              TEXT NOT NULL,
    handler           TEXT NOT NULL,
    payload           TEXT         NOT NULL,
    description       TEXT         NOT NULL,
    state             TEXT  NOT NULL DEFAULT 'enabled',
    requests_recovery BIGINT       NOT NULL DEFAULT 0,
    allow_concurrent  BIGINT       NOT NULL DEFAULT 1,
    timeout_ms        BIGINT,
    max_attempts      BIGINT       NOT NULL DEFAULT 1,
    backoff_ms        BIGINT       NOT NULL DEFAULT 0,
    parent_job        TEXT,
    created_at        BIGINT       NOT NULL,
    updated_at        BIGINT       NOT NULL,
    CONSTRAINT quartz_job_name UNIQUE (scheduler, name)
);

CREATE TABLE IF NOT EXISTS quartz_execute (
    id              INTEGER      PRIMARY KEY AUTOINCREMENT,
    job_id          BIGINT       NOT NULL REFERENCES quartz_job (id) ON DELETE CASCADE,
    scheduler       TEXT NOT NULL,
    kind            TEXT  NOT NULL,
    cron_expression TEXT,
    time_zone       TEXT,
    interval_ms     BIGINT,
    start_time      BIGINT       NOT NULL,
    end_time        BIGINT,
    repeat_limit    BIGINT,
    times_triggered BIGINT       NOT NULL DEFAULT 0,
    misfire_policy  TEXT  NOT NULL DEFAULT 'smart',
    priority        BIGINT       NOT NULL DEFAULT 0,
    state           TEXT  NOT NULL DEFAULT 'waiting',
    prev_fire_time  BIGINT,
    next_fire_time  BIGINT,
    node_id         TEXT,
    incarnation     BIGINT,
    error           TEXT,
    updated_at      BIGINT       NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS quartz_execute_due ON quartz_execute (scheduler, state, next_fire_time);
CREATE INDEX IF NOT EXISTS quartz_execute_job ON quartz_execute (job_id);

CREATE TABLE IF NOT EXISTS quartz_fire (
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
    CONSTRAINT quartz_fire_once UNIQUE (execute_id, fire_time, attempt)
);
CREATE INDEX IF NOT EXISTS quartz_fire_open ON quartz_fire (scheduler, state);
CREATE INDEX IF NOT EXISTS quartz_fire_job ON quartz_fire (job_id, id);
