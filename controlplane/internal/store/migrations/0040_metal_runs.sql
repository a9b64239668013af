-- 0040_metal_runs: the metal module's workflow runs (metal.power, metal.bulk).
--
-- A run is one batch of BMC commands queued on one site agent, one command
-- per machine, each named in the batch's scope by a leaf bound to its exact
-- payload (which names the machine's BMC). steps holds the machine, kind,
-- payload and command id of each; the commands' own rows hold their state.
CREATE TABLE metal_runs (
  id              text PRIMARY KEY,
  tenant_id       text NOT NULL REFERENCES tenants (id),
  requester       text NOT NULL,
  idempotency_key text NOT NULL DEFAULT '',
  workflow        text NOT NULL,
  site_node_id    text NOT NULL REFERENCES nodes (id),
  batch_id        text NOT NULL REFERENCES command_batches (id),
  reason          text NOT NULL,
  steps           jsonb NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT metal_runs_workflow CHECK (workflow IN ('metal.power', 'metal.bulk'))
);

CREATE UNIQUE INDEX metal_runs_idempotency ON metal_runs (tenant_id, requester, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX metal_runs_tenant ON metal_runs (tenant_id, created_at DESC);
