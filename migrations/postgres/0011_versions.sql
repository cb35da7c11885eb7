-- A version per job and per calendar, moved on by every change of its
-- definition or state through the admin surface: the API's ETag, and the
-- compare-and-set of a write made with If-Match (a stale one is refused
-- rather than overwriting a change made meanwhile).
ALTER TABLE quartz_job ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
ALTER TABLE quartz_calendar ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
