-- 0110_node_health: a node's latest diag.nvml verdict, kept on its row by
-- the settle of each diag.nvml (controlplane/nodehealth), so that
-- nodes.list filters and fleet.summary counts healthy and unhealthy nodes,
-- and nodes per failed check, from the nodes table alone at fleet size.
ALTER TABLE nodes ADD COLUMN failed_checks text[] NOT NULL DEFAULT '{}',
  ADD COLUMN checked_at timestamptz;
