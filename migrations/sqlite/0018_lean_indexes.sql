-- Two indexes that hold only the rows their queries look for (as on
-- PostgreSQL, where a claim's new row version writes every index).
--
-- An execute's calendar is indexed only when it has one; the queries name a
-- calendar (calendar = ?, or IS NOT NULL), which implies the condition.
--
-- Pending fires (retries, late runs, fires waiting under an overlap policy
-- or a concurrency limit) carry the time they are due; the fires a trigger
-- claims at its time do not. The poll of pending fires read every fire not
-- ended to find them; it now reads an index of its own, which a claim, a
-- start or a success never writes an entry in.
DROP INDEX IF EXISTS quartz_execute_calendar;
CREATE INDEX quartz_execute_calendar ON quartz_execute (scheduler, calendar) WHERE calendar IS NOT NULL;
CREATE INDEX quartz_fire_due ON quartz_fire (scheduler, due_at) WHERE finished_at IS NULL AND due_at IS NOT NULL;
