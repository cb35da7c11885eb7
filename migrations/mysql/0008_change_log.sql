-- Every change made through the store (a job added, edited, paused, resumed,
-- triggered or deleted), written in the change's own transaction: who made
-- it (the actor the store acts as: an HTTP token's role, the CLI, the
-- embedding library), what it did, to which job, and when (database time).
CREATE TABLE IF NOT EXISTS quartz_change_log (
    id        BIGINT       AUTO_INCREMENT PRIMARY KEY,
    scheduler VARCHAR(200) NOT NULL,
    at        BIGINT       NOT NULL,
    actor     VARCHAR(200) NOT NULL,
    action    VARCHAR(32)  NOT NULL,
    target    VARCHAR(200) NOT NULL,
    detail    TEXT         NOT NULL,
    INDEX quartz_change_log_recent (scheduler, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
