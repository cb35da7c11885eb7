-- The fires of one trigger that wait (pending: under an overlap policy or a
-- concurrency limit, a retry, a late run) are looked up by the trigger's
-- execute: by every exclusive claim while its job is busy (is one of its
-- fires already waiting?), by a claim of a pending fire (does an older one
-- wait before it?), under cancel (the older ones are replaced), and by a
-- late run that allows one pending fire per execute. Those lookups read
-- every pending fire of the scheduler (through quartz_fire_due), or every
-- fire of the execute, so a claim behind a slow job cost more with each
-- fire waiting behind it. Indexed by scheduler and execute, only while
-- they wait: claims at their time (no due time) and ended fires have no
-- entry, and the index's columns and condition are none that a start
-- changes. The scheduler leads, so that a generic plan on a table without
-- statistics sees two of its columns matched against quartz_fire_due's one.
CREATE INDEX quartz_fire_waiting ON quartz_fire (scheduler, execute_id, fire_time)
    WHERE finished_at IS NULL AND due_at IS NOT NULL;
