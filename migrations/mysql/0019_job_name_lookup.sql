-- PostgreSQL and SQLite index a job's concurrency key and parent only when
-- it has one, so that a lookup by name goes through the unique index on
-- (scheduler, name) even without statistics. MySQL and MariaDB have no
-- partial indexes, and InnoDB keeps statistics from the first rows on: the
-- lookup by name already uses the unique index. Nothing to change; the
-- version is kept so that every backend has the same migrations.
DO 0;
