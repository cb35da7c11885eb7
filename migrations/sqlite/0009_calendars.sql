-- Calendars: the times a trigger does not fire at. A calendar's definition
-- is its JSON (kind, days, range, invert, cron, time zone, base by name).
-- A trigger names its calendar; its calendar stamp moves whenever a calendar
-- it uses changes and its next fire time is recomputed, and every
-- compare-and-set on the row compares it.
CREATE TABLE IF NOT EXISTS quartz_calendar (
    id         INTEGER      PRIMARY KEY AUTOINCREMENT,
    scheduler  TEXT         NOT NULL,
    name       TEXT         NOT NULL,
    definition TEXT         NOT NULL,
    created_at BIGINT       NOT NULL,
    updated_at BIGINT       NOT NULL,
    UNIQUE (scheduler, name)
);
ALTER TABLE quartz_execute ADD COLUMN calendar TEXT NULL;
ALTER TABLE quartz_execute ADD COLUMN calendar_stamp BIGINT NOT NULL DEFAULT 0;
CREATE INDEX quartz_execute_calendar ON quartz_execute (scheduler, calendar);
