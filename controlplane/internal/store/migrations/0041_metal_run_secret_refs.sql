-- 0041_metal_run_secret_refs: the secretRefs a metal run's commands carry
-- (names of tenant secrets, never values), so that a step queued later
-- carries them too.
ALTER TABLE metal_runs ADD COLUMN secret_refs text[] NOT NULL DEFAULT '{}';
