-- 0070_command_key_probe: the idempotency key's unique index is the only
-- index an idempotency lookup can use.
--
-- commands.run looks a command up by (node_id, idempotency_key) on generic
-- plans, which PostgreSQL builds once per connection and keeps until the
-- table is analyzed again. Three other indexes start with node_id, and on a
-- small table (a new fleet, a benchmark's first seconds) they cost the same
-- as the key's, so a plan built then could probe through one of them and
-- read every command of the node: 7 ms a lookup with 20,000 commands on it,
-- growing with each. This index compares its columns under the "C"
-- collation (for text, equality is the same under every deterministic
-- collation: the bytes are equal), and the lookups compare under "C" too
-- (queue's keyProbe), which no other index on node_id matches: the planner
-- has one index to choose, whatever the table's size or statistics.
-- ON CONFLICT (node_id, idempotency_key) infers it as its arbiter.
CREATE UNIQUE INDEX commands_node_key_probe ON commands (node_id COLLATE "C", idempotency_key COLLATE "C");
ALTER TABLE commands DROP CONSTRAINT commands_node_key;
