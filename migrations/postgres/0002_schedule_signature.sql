-- The signature of the schedule columns an execute's next_fire_time was
-- computed from. A row whose schedule is edited by hand (or inserted without
-- one) no longer matches, and the scheduler recomputes its next fire time once,
-- by compare-and-set, at its next poll.
ALTER TABLE quartz_execute ADD COLUMN schedule_sig BIGINT NULL;
