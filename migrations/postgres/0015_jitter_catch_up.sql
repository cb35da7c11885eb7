-- A trigger's jitter (each fire moved by up to jitter_ms, the offset fixed
-- per fire time by hashing jitter_seed with it) and catch-up window (missed
-- fire times older than catch_up_ms are skipped whatever the misfire
-- policy). NULL for neither, which every row from before this migration has.
ALTER TABLE quartz_execute ADD COLUMN jitter_ms BIGINT NULL;
ALTER TABLE quartz_execute ADD COLUMN jitter_seed BIGINT NULL;
ALTER TABLE quartz_execute ADD COLUMN catch_up_ms BIGINT NULL;

