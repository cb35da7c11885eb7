-- Every change made through the store (a job added, edited, paused, resumed,
-- triggered or deleted), written in the change's own transaction: who made
-- it (the actor the store acts as: an HTTP token's role, the CLI, the
-- embedding library), what it did, to which job, and when (database time).
CREATE TABLE IF NOT EXISTS quartz_change_log (
    id        INTEGER      PRIMARY KEY AUTOINCREMENT,
    scheduler TEXT         NOT NULL,
    at        BIGINT       NOT NULL,
    actor     TEXT         NOT NULL,
    action    TEXT         NOT NULL,
    target    TEXT         NOT NULL,
    detail    TEXT         NOT NULL
);
CREATE INDEX quartz_change_log_recent ON quartz_change_log (scheduler, id);
