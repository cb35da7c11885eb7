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

-- Every exclusive claim (a job that disallows concurrency, an overlap
-- policy, a concurrency limit) looks, under the job's lock, for a claimed
-- or running fire of the job. It read the scheduler's fires not ended (a
-- second and more of claims made ahead, under load, and every waiting
-- fire) or the job's whole ledger, whichever the planner took for fewer.
-- The fires not ended, by job: one more entry for each fire claimed, which
-- B1's database CPU per fire did not tell from its noise (BENCHMARKS.md,
-- B9), and none that a start changes.
CREATE INDEX quartz_fire_job_open ON quartz_fire (job_id) WHERE finished_at IS NULL;
