-- 0120_blocked_by: why a pending command cannot progress until a person
-- acts, with its details (both digests, the refused plugin, the fix), kept
-- on the command, also once it expired waiting (issue 33); and what the
-- node's last Hello reported: its kinds with their versions and digests,
-- and the plugin files its bcd refused. All nullable, no default: adding
-- them rewrites nothing.
ALTER TABLE commands ADD COLUMN waiting_detail jsonb;
ALTER TABLE nodes ADD COLUMN hello_kinds jsonb,
  ADD COLUMN refused_plugins jsonb;
