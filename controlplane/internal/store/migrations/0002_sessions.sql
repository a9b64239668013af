-- 0002_sessions: what the gateway, the join endpoint and the sweeper need.

-- bc_dispatch wakes the gateway session of one node: a new command, a cancel
-- request or a new spec generation. The payload is the node id, so a gateway
-- with thousands of sessions wakes only the one concerned.
CREATE FUNCTION bc_dispatch_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('bc_dispatch', NEW.node_id);
  RETURN NULL;
END
$$;

CREATE TRIGGER commands_dispatch_notify_insert AFTER INSERT ON commands
  FOR EACH ROW EXECUTE FUNCTION bc_dispatch_notify();

CREATE TRIGGER commands_dispatch_notify_cancel AFTER UPDATE OF cancel_requested_at, state ON commands
  FOR EACH ROW WHEN (NEW.cancel_requested_at IS DISTINCT FROM OLD.cancel_requested_at
                     OR (NEW.state = 'pending' AND OLD.state <> 'pending'))
  EXECUTE FUNCTION bc_dispatch_notify();

CREATE FUNCTION bc_spec_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('bc_dispatch', 'spec:' || NEW.node_id);
  RETURN NULL;
END
$$;

CREATE TRIGGER node_specs_dispatch_notify AFTER INSERT ON node_specs
  FOR EACH ROW EXECUTE FUNCTION bc_spec_notify();

-- join_tokens are one-time tokens a node exchanges for its certificate.
CREATE TABLE join_tokens (
  token_sha256  bytea PRIMARY KEY,
  node_id       text NOT NULL REFERENCES nodes (id),
  role          text NOT NULL DEFAULT 'node',
  allowed_kinds text[],
  expires_at    timestamptz NOT NULL,
  used_at       timestamptz,
  created_at    timestamptz NOT NULL DEFAULT now()
);

-- leader_leases elect the fleet's singletons (the CommandSweeper). A term can
-- renew only itself, and only before it expires, so an old leader that woke
-- up late cannot extend a lease that someone else now holds.
CREATE TABLE leader_leases (
  name       text PRIMARY KEY,
  holder     text NOT NULL,
  term       text NOT NULL,
  elected_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL
);
