-- 0030_rollouts: the daemon version as desired state. A node's Hello names
-- its daemon version; the rollout module converges each pool to its
-- desired version with daemon.upgrade, in waves within the pool's
-- disruption budget, and pauses on the first rollback.

ALTER TABLE nodes ADD COLUMN daemon_version text NOT NULL DEFAULT '';

-- rollouts: one desired daemon version per tenant and pool, with the
-- signed release that daemon.upgrade carries. generation rises with each
-- new target; a node's row belongs to one generation.
CREATE TABLE rollouts (
  tenant_id             text NOT NULL REFERENCES tenants (id),
  pool                  text NOT NULL,
  generation            bigint NOT NULL DEFAULT 1,
  target_version        text NOT NULL,
  package_url           text NOT NULL,
  package_size          bigint NOT NULL,
  package_sha256        text NOT NULL,
  release               bytea NOT NULL,
  rejoin_window_seconds integer NOT NULL DEFAULT 300,
  paused                boolean NOT NULL DEFAULT false,
  paused_reason         text NOT NULL DEFAULT '',
  created_at            timestamptz NOT NULL DEFAULT now(),
  updated_at            timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, pool),
  CONSTRAINT rollouts_package CHECK (package_size > 0 AND package_sha256 ~ '^[0-9a-f]{64}$')
);

-- rollout_nodes: each node's progress towards its pool's target.
CREATE TABLE rollout_nodes (
  node_id        text PRIMARY KEY REFERENCES nodes (id),
  tenant_id      text NOT NULL,
  pool           text NOT NULL,
  generation     bigint NOT NULL,
  target_version text NOT NULL,
  state          text NOT NULL,
  -- attempts counts the node's commands in this generation: a command
  -- cancelled before it ran (the wave stopped) is followed by another.
  attempts       integer NOT NULL DEFAULT 1,
  command_id     text NOT NULL DEFAULT '',
  reason         text NOT NULL DEFAULT '',
  message        text NOT NULL DEFAULT '',
  updated_at     timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT rollout_nodes_state CHECK (state IN ('pending', 'upgrading', 'upgraded', 'rolled-back', 'failed'))
);

CREATE INDEX rollout_nodes_pool ON rollout_nodes (tenant_id, pool, state);
