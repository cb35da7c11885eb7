-- Calendars: the times a trigger does not fire at. A calendar's definition
-- is its JSON (kind, days, range, invert, cron, time zone, base by name).
-- A trigger names its calendar; its calendar stamp moves whenever a calendar
-- it uses changes and its next fire time is recomputed, and every
-- compare-and-set on the row compares it.
CREATE TABLE IF NOT EXISTS quartz_calendar (
    id         BIGINT       AUTO_INCREMENT PRIMARY KEY,
    scheduler  VARCHAR(200) NOT NULL,
    name       VARCHAR(200) NOT NULL,
    definition TEXT         NOT NULL,
    created_at BIGINT       NOT NULL,
    updated_at BIGINT       NOT NULL,
    CONSTRAINT quartz_calendar_name UNIQUE (scheduler, name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
ALTER TABLE quartz_execute ADD COLUMN calendar VARCHAR(200) NULL;
ALTER TABLE quartz_execute ADD COLUMN calendar_stamp BIGINT NOT NULL DEFAULT 0;
CREATE INDEX quartz_execute_calendar ON quartz_execute (scheduler, calendar);
