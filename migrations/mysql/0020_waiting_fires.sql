-- The fires of one trigger that wait (pending: under an overlap policy or a
-- concurrency limit, a retry, a late run) are looked up by the trigger's
-- execute: by every exclusive claim while its job is busy (is one of its
-- fires already waiting?), by a claim of a pending fire (does an older one
-- wait before it?), under cancel (the older ones are replaced), and by a
-- late run that allows one pending fire per execute. Those lookups read
-- every fire of the scheduler not ended (through quartz_fire_unended), so a
-- claim behind a slow job cost more with each fire waiting behind it.
-- PostgreSQL and SQLite index the waiting fires by execute in a partial
-- index. MySQL and MariaDB have none: a virtual column holds the execute
-- while the fire waits (NULL otherwise) and is indexed, and the lookups
-- name it. A start changes neither its value nor its index entry; a
-- success changes them only for a fire that waited.
ALTER TABLE quartz_fire
    ADD COLUMN waiting_execute BIGINT AS (CASE WHEN finished_at IS NULL AND due_at IS NOT NULL THEN execute_id END) VIRTUAL,
    ADD INDEX quartz_fire_waiting (waiting_execute, fire_time);
