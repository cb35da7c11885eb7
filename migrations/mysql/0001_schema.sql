-- quartz-rs schema, version 1. Times are epoch milliseconds of the database clock.

CREATE TABLE IF NOT EXISTS quartz_node (
    scheduler     VARCHAR(200) NOT NULL,
    node_id       VARCHAR(200) NOT NULL,
    host          VARCHAR(255) NOT NULL,
    pid           BIGINT       NOT NULL,
    weight        BIGINT       NOT NULL DEFAULT 1,
    state         VARCHAR(16)  NOT NULL,
    incarnation   BIGINT       NOT NULL,
    registered_at BIGINT       NOT NULL,
    heartbeat_at  BIGINT       NOT NULL,
    PRIMARY KEY (scheduler, node_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS quartz_job (
    id                BIGINT       AUTO_INCREMENT PRIMARY KEY,
    scheduler         VARCHAR(200) NOT NULL,
    name              VARCHAR(200) NOT NULL,
    handler           VARCHAR(200) NOT NULL,
    payload           LONGTEXT        NOT NULL,
    description       TEXT         NOT NULL,
    state             VARCHAR(16)  NOT NULL DEFAULT 'enabled',
    requests_recovery BIGINT       NOT NULL DEFAULT 0,
    allow_concurrent  BIGINT       NOT NULL DEFAULT 1,
    timeout_ms        BIGINT,
    max_attempts      BIGINT       NOT NULL DEFAULT 1,
    backoff_ms        BIGINT       NOT NULL DEFAULT 0,
    parent_job        VARCHAR(200),
    created_at        BIGINT       NOT NULL,
    updated_at        BIGINT       NOT NULL,
    CONSTRAINT quartz_job_name UNIQUE (scheduler, name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS quartz_execute (
    id              BIGINT       AUTO_INCREMENT PRIMARY KEY,
    job_id          BIGINT       NOT NULL ,
    scheduler       VARCHAR(200) NOT NULL,
    kind            VARCHAR(16)  NOT NULL,
    cron_expression VARCHAR(512),
    time_zone       VARCHAR(64),
    interval_ms     BIGINT,
    start_time      BIGINT       NOT NULL,
    end_time        BIGINT,
    repeat_limit    BIGINT,
    times_triggered BIGINT       NOT NULL DEFAULT 0,
    misfire_policy  VARCHAR(48)  NOT NULL DEFAULT 'smart',
    priority        BIGINT       NOT NULL DEFAULT 0,
    state           VARCHAR(16)  NOT NULL DEFAULT 'waiting',
    prev_fire_time  BIGINT,
    next_fire_time  BIGINT,
    node_id         VARCHAR(200),
    incarnation     BIGINT,
    error           TEXT,
    updated_at      BIGINT       NOT NULL DEFAULT 0,
    INDEX quartz_execute_due (scheduler, state, next_fire_time),
    CONSTRAINT quartz_execute_job FOREIGN KEY (job_id) REFERENCES quartz_job (id) ON DELETE CASCADE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS quartz_fire (
    id            BIGINT       AUTO_INCREMENT PRIMARY KEY,
    scheduler     VARCHAR(200) NOT NULL,
    execute_id    BIGINT       NOT NULL,
    job_id        BIGINT       NOT NULL,
    fire_time     BIGINT       NOT NULL,
    attempt       BIGINT       NOT NULL,
    node_id       VARCHAR(200),
    incarnation   BIGINT       NOT NULL DEFAULT 0,
    state         VARCHAR(16)  NOT NULL,
    claimed_at    BIGINT       NOT NULL,
    started_at    BIGINT,
    finished_at   BIGINT,
    duration_ms   BIGINT,
    error         TEXT,
    skipped_until BIGINT,
    fire_count    BIGINT       NOT NULL DEFAULT 1,
    CONSTRAINT quartz_fire_once UNIQUE (execute_id, fire_time, attempt),
    INDEX quartz_fire_open (scheduler, state),
    INDEX quartz_fire_job (job_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
