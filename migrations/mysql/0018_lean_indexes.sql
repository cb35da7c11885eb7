-- PostgreSQL and SQLite index an execute's calendar only when it has one,
-- and pending fires by the time they are due, in partial indexes. MySQL and
-- MariaDB have no partial indexes, and InnoDB's update of a row writes only
-- the secondary indexes whose columns it changes: a claim, which moves the
-- next fire time, never wrote the calendar index here. Nothing to change;
-- the version is kept so that every backend has the same migrations.
DO 0;
