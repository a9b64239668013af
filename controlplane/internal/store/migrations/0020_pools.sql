-- 0020_pools: pools and their disruption budgets, per-node maintenance
-- locks, and the remediations of the platform's own destructive work (the
-- provision module's GPU resets and the health reconciler's reboots).

-- A node carries a pool, a label set when it is created or joins. Every
-- pool (per tenant: a tenant's nodes make its pools) has a budget; a pool
-- without a row gets the defaults below.
ALTER TABLE nodes ADD COLUMN pool text NOT NULL DEFAULT 'default';
CREATE INDEX nodes_pool ON nodes (tenant_id, pool, id) WHERE deleted_at IS NULL;

-- A join token may carry the pool the node joins into ('' keeps its pool).
ALTER TABLE join_tokens ADD COLUMN pool text NOT NULL DEFAULT '';

-- session_seen_at is when a gateway last held the node's session: set when
-- a session starts or the node reports its status, and refreshed by every
-- gateway for the sessions it holds. The reconciler skips a node whose
-- session is stale.
ALTER TABLE nodes ADD COLUMN session_seen_at timestamptz;

CREATE FUNCTION bc_node_seen() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  NEW.session_seen_at := now();
  RETURN NEW;
END
$$;

CREATE TRIGGER nodes_session_seen BEFORE UPDATE OF session_epoch, inventory, conditions ON nodes
  FOR EACH ROW EXECUTE FUNCTION bc_node_seen();

-- pools are the disruption budgets: how many nodes may be in disruptive
-- maintenance at once (max_concurrent), how many may start it per window
-- (max_per_window, 0 for no limit, over window_seconds), and the breaker:
-- breaker_failures failed or unverified remediations within
-- breaker_window_seconds stop all remediation in the pool until an
-- operator resets it.
CREATE TABLE pools (
  tenant_id              text NOT NULL REFERENCES tenants (id),
  name                   text NOT NULL,
  max_concurrent         integer NOT NULL DEFAULT 1,
  max_per_window         integer NOT NULL DEFAULT 0,
  window_seconds         integer NOT NULL DEFAULT 3600,
  breaker_failures       integer NOT NULL DEFAULT 3,
  breaker_window_seconds integer NOT NULL DEFAULT 3600,
  breaker_tripped_at     timestamptz,
  breaker_reason         text NOT NULL DEFAULT '',
  -- breaker_reset_at: failures before an operator's reset no longer count.
  breaker_reset_at       timestamptz,
  created_at             timestamptz NOT NULL DEFAULT now(),
  updated_at             timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, name),
  CONSTRAINT pools_budget CHECK (max_concurrent >= 0 AND max_per_window >= 0 AND window_seconds > 0
    AND breaker_failures >= 0 AND breaker_window_seconds > 0)
);

-- maintenance_locks keep two remediations off one node: one row per node,
-- held from before the destructive command is queued until its outcome is
-- verified. The rows of a pool are its disruptive maintenance in progress.
CREATE TABLE maintenance_locks (
  node_id        text PRIMARY KEY REFERENCES nodes (id),
  tenant_id      text NOT NULL,
  pool           text NOT NULL,
  holder         text NOT NULL,
  remediation_id text NOT NULL,
  action         text NOT NULL,
  reason         text NOT NULL DEFAULT '',
  acquired_at    timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX maintenance_locks_pool ON maintenance_locks (tenant_id, pool);

-- remediations are the platform's destructive work, one row per planned
-- action on one node (and GPU for a reset): the reconciler's plan while
-- waiting (waiting_reason says for what: the budget, the lock, a hold, the
-- breaker, a stale session, approvals), its state while the command runs
-- and while the outcome is verified, and the record the per-window budget,
-- the breaker and the 7-day escalation count.
CREATE TABLE remediations (
  id                text PRIMARY KEY,
  node_id           text NOT NULL REFERENCES nodes (id),
  tenant_id         text NOT NULL,
  pool              text NOT NULL,
  owner             text NOT NULL,
  action            text NOT NULL,
  gpu               text NOT NULL DEFAULT '',
  trigger           text NOT NULL,
  trigger_message   text NOT NULL DEFAULT '',
  state             text NOT NULL DEFAULT 'waiting',
  waiting_reason    text NOT NULL DEFAULT '',
  waiting_message   text NOT NULL DEFAULT '',
  attempt           integer NOT NULL DEFAULT 1,
  batch_id          text NOT NULL DEFAULT '',
  command_id        text NOT NULL DEFAULT '',
  verify_command_id text NOT NULL DEFAULT '',
  boot_id_before    text NOT NULL DEFAULT '',
  outcome           text NOT NULL DEFAULT '',
  outcome_message   text NOT NULL DEFAULT '',
  superseded_by     text NOT NULL DEFAULT '',
  created_at        timestamptz NOT NULL DEFAULT now(),
  started_at        timestamptz,
  finished_at       timestamptz,
  updated_at        timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT remediations_state CHECK (state IN ('waiting', 'running', 'verifying', 'done', 'failed', 'escalated', 'superseded', 'cancelled')),
  CONSTRAINT remediations_finished CHECK ((finished_at IS NOT NULL) = (state IN ('done', 'failed', 'escalated', 'superseded', 'cancelled')))
);

-- One open remediation per node, action and GPU.
CREATE UNIQUE INDEX remediations_open ON remediations (node_id, action, gpu)
  WHERE state IN ('waiting', 'running', 'verifying');
CREATE INDEX remediations_pool_started ON remediations (tenant_id, pool, started_at) WHERE started_at IS NOT NULL;
CREATE INDEX remediations_node_finished ON remediations (node_id, finished_at);
CREATE INDEX remediations_active ON remediations (tenant_id, pool, state) WHERE state IN ('waiting', 'running', 'verifying');
