-- PostgreSQL keys its due index on the minute of the next fire time, so
-- that most claims are HOT updates there (see its 0021). InnoDB and SQLite
-- have no HOT updates to win: their due index keeps the exact time. The
-- version is kept so that every backend has the same migrations.
DO 0;
