-- Which jobs have children is read at every poll: through this index it
-- costs what the chained jobs cost, not a join of every job with every job.
CREATE INDEX quartz_job_parent ON quartz_job (scheduler, parent_job);
