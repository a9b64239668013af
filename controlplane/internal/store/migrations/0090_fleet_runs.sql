-- 0090_fleet_runs: node labels, who requested each command, and fleet runs.
--
-- Labels are key=value pairs a fleet run selects nodes by; the GIN index
-- answers containment (gpu=h200) and existence (rack) within a tenant.
ALTER TABLE nodes ADD COLUMN labels jsonb NOT NULL DEFAULT '{}';
ALTER TABLE nodes ADD CONSTRAINT nodes_labels_object CHECK (jsonb_typeof(labels) = 'object');
CREATE INDEX nodes_labels ON nodes USING gin (labels) WHERE deleted_at IS NULL;

-- requester is who asked for a command (the API identity's principal, the
-- MCP server's agent principal, a module's or the reconciler's own name)
-- and requested_via how (api, mcp, module, fleet-run). The server sets
-- both; a caller cannot. Rows from before stay '' (unknown).
ALTER TABLE commands ADD COLUMN requester text NOT NULL DEFAULT '';
ALTER TABLE commands ADD COLUMN requested_via text NOT NULL DEFAULT '';
-- commands.list without a node id: the tenant's commands newest first,
-- paged by (created_at, id), on an index that a time range bounds.
CREATE INDEX commands_tenant_created ON commands (tenant_id, created_at DESC, id DESC);
-- "what failed in the last hour": settled commands by state and settle
-- time, so that the hour's failures are read without its successes.
CREATE INDEX commands_tenant_state_settled ON commands (tenant_id, state, settled_at DESC) WHERE settled_at IS NOT NULL;

-- A fleet run is a parent of ordinary commands: its targets are resolved
-- once, at creation, and each gets its command from the run's advancer
-- (a leader-elected loop) in the transaction that marks it started.
CREATE TABLE fleet_runs (
  id                  text PRIMARY KEY,
  tenant_id           text NOT NULL REFERENCES tenants (id),
  kind                text NOT NULL,
  payload             jsonb NOT NULL DEFAULT '{}',
  targets             jsonb NOT NULL,
  max_concurrency     text NOT NULL,
  max_errors          text NOT NULL,
  concurrency_limit   int NOT NULL CHECK (concurrency_limit >= 1),
  error_limit         int NOT NULL CHECK (error_limit >= 0),
  not_after_seconds   int NOT NULL,
  reason              text NOT NULL DEFAULT '',
  requester           text NOT NULL,
  requested_via       text NOT NULL,
  idempotency_key     text NOT NULL DEFAULT '',
  batch_id            text NOT NULL DEFAULT '',
  disruptive          boolean NOT NULL DEFAULT false,
  state               text NOT NULL DEFAULT 'running'
    CHECK (state IN ('running', 'paused', 'stopping', 'cancelling', 'succeeded', 'failed', 'cancelled')),
  state_reason        text NOT NULL DEFAULT '',
  state_message       text NOT NULL DEFAULT '',
  waiting_reason      text NOT NULL DEFAULT '',
  waiting_message     text NOT NULL DEFAULT '',
  -- progress is the target counts last published (fleet.run.progress).
  progress            jsonb NOT NULL DEFAULT '{}',
  created_at          timestamptz NOT NULL DEFAULT now(),
  updated_at          timestamptz NOT NULL DEFAULT now(),
  started_at          timestamptz,
  finished_at         timestamptz,
  cancel_requested_at timestamptz,
  CONSTRAINT fleet_runs_finished_iff_ended CHECK ((finished_at IS NOT NULL) = (state IN ('succeeded', 'failed', 'cancelled')))
);
CREATE UNIQUE INDEX fleet_runs_idempotency ON fleet_runs (tenant_id, requester, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX fleet_runs_tenant ON fleet_runs (tenant_id, created_at DESC, id DESC);
-- The advancer reads the runs not yet ended.
CREATE INDEX fleet_runs_active ON fleet_runs (id) WHERE finished_at IS NULL;

CREATE TABLE fleet_run_targets (
  run_id      text NOT NULL REFERENCES fleet_runs (id),
  ordinal     int NOT NULL,
  node_id     text NOT NULL,
  pool        text NOT NULL DEFAULT '',
  state       text NOT NULL DEFAULT 'waiting'
    CHECK (state IN ('waiting', 'started', 'succeeded', 'failed', 'rejected', 'expired', 'cancelled', 'not-started', 'refused')),
  command_id  text,
  reason      text NOT NULL DEFAULT '',
  message     text NOT NULL DEFAULT '',
  started_at  timestamptz,
  settled_at  timestamptz,
  PRIMARY KEY (run_id, ordinal),
  CONSTRAINT fleet_run_targets_node UNIQUE (run_id, node_id),
  -- A target has a command exactly when it was started.
  CONSTRAINT fleet_run_targets_command CHECK ((command_id IS NOT NULL) = (state NOT IN ('waiting', 'not-started', 'refused')))
);
-- The advancer counts a run's targets by state and takes the next waiting
-- ones in order.
CREATE INDEX fleet_run_targets_state ON fleet_run_targets (run_id, state, ordinal);
CREATE UNIQUE INDEX fleet_run_targets_command_id ON fleet_run_targets (command_id) WHERE command_id IS NOT NULL;
