-- 0001_init: tenants, nodes, the command queue, the event outbox, node specs.

-- bc_state_rank orders command states. A transition lands only when it moves
-- the rank up, so a late `running` after `succeeded` changes nothing; the
-- database enforces it, not only Go.
CREATE FUNCTION bc_state_rank(state text) RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $$
  SELECT CASE state
    WHEN 'pending'    THEN 0
    WHEN 'dispatched' THEN 1
    WHEN 'acked'      THEN 2
    WHEN 'running'    THEN 3
    WHEN 'succeeded'  THEN 4
    WHEN 'failed'     THEN 4
    WHEN 'rejected'   THEN 4
    WHEN 'expired'    THEN 4
    WHEN 'cancelled'  THEN 4
  END
$$;

-- bc_state_terminal says whether a state ends a command.
CREATE FUNCTION bc_state_terminal(state text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $$
  SELECT state IN ('succeeded', 'failed', 'rejected', 'expired', 'cancelled')
$$;

CREATE TABLE tenants (
  id         text PRIMARY KEY,
  name       text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE nodes (
  id                 text PRIMARY KEY,
  tenant_id          text NOT NULL REFERENCES tenants (id),
  next_cmd_seq       bigint NOT NULL DEFAULT 1,
  session_epoch      bigint NOT NULL DEFAULT 0,
  applied_generation bigint NOT NULL DEFAULT 0,
  created_at         timestamptz NOT NULL DEFAULT now(),
  deleted_at         timestamptz,
  role               text NOT NULL DEFAULT 'node',
  -- allowed_kinds is NULL for a full identity; a restricted identity (a
  -- discovery ramdisk) lists the only kinds it accepts.
  allowed_kinds      text[],
  journal_id         text NOT NULL DEFAULT '',
  boot_id            text NOT NULL DEFAULT '',
  inventory          jsonb,
  conditions         jsonb,
  CONSTRAINT nodes_next_cmd_seq_positive CHECK (next_cmd_seq >= 1)
);

CREATE INDEX nodes_tenant ON nodes (tenant_id) WHERE deleted_at IS NULL;

CREATE TABLE commands (
  seq                 bigint NOT NULL,
  min_generation      bigint NOT NULL DEFAULT 0,
  dispatched_epoch    bigint NOT NULL DEFAULT 0,
  not_after           timestamptz NOT NULL,
  not_before          timestamptz,
  next_attempt_at     timestamptz,
  cancel_requested_at timestamptz,
  created_at          timestamptz NOT NULL DEFAULT now(),
  updated_at          timestamptz NOT NULL DEFAULT now(),
  settled_at          timestamptz,
  attempts            int NOT NULL DEFAULT 0,
  retry_safe          boolean NOT NULL DEFAULT false,
  destructive         boolean NOT NULL DEFAULT false,
  self_terminating    boolean NOT NULL DEFAULT false,
  attested            boolean NOT NULL DEFAULT false,
  rebooted            boolean NOT NULL DEFAULT false,
  id                  text PRIMARY KEY,
  tenant_id           text NOT NULL REFERENCES tenants (id),
  node_id             text NOT NULL REFERENCES nodes (id),
  kind                text NOT NULL,
  lane                text NOT NULL,
  state               text NOT NULL DEFAULT 'pending',
  reason              text NOT NULL DEFAULT '',
  -- idempotency_key is NULL for a command enqueued without one.
  idempotency_key     text,
  batch_id            text NOT NULL DEFAULT '',
  bundle_key          text NOT NULL DEFAULT '',
  payload             jsonb NOT NULL DEFAULT '{}',
  progress            jsonb,
  result              jsonb,
  result_sha256       bytea,
  node_sig            bytea,
  CONSTRAINT commands_state_known CHECK (bc_state_rank(state) IS NOT NULL),
  CONSTRAINT commands_lane_known CHECK (lane IN ('control', 'provision', 'bulk')),
  -- As River does for finalized_at: settled exactly when terminal.
  CONSTRAINT commands_settled_iff_terminal CHECK ((settled_at IS NOT NULL) = bc_state_terminal(state)),
  CONSTRAINT commands_seq_positive CHECK (seq >= 1),
  CONSTRAINT commands_node_seq UNIQUE (node_id, seq),
  CONSTRAINT commands_node_key UNIQUE (node_id, idempotency_key)
);

-- The guarded UPDATEs already refuse to move a state backwards; this trigger
-- makes the database refuse it from any writer. The one move down is BUSY's
-- requeue, from dispatched or acked back to pending, and a terminal state
-- never changes.
CREATE FUNCTION bc_commands_forward_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.state = OLD.state THEN
    RETURN NEW;
  END IF;
  IF bc_state_terminal(OLD.state) THEN
    RAISE EXCEPTION 'command %: state % is terminal; refusing %', OLD.id, OLD.state, NEW.state
      USING ERRCODE = 'check_violation';
  END IF;
  IF bc_state_rank(NEW.state) < bc_state_rank(OLD.state)
     AND NOT (NEW.state = 'pending' AND OLD.state IN ('dispatched', 'acked')) THEN
    RAISE EXCEPTION 'command %: state may not move back from % to %', OLD.id, OLD.state, NEW.state
      USING ERRCODE = 'check_violation';
  END IF;
  RETURN NEW;
END
$$;

CREATE TRIGGER commands_forward_only BEFORE UPDATE OF state ON commands
  FOR EACH ROW EXECUTE FUNCTION bc_commands_forward_only();

-- Dispatch and replay read a node's open commands in seq order; the sweeper
-- reads open commands by deadline. Both indexes hold only open rows, so they
-- cost the same with ten million settled rows as with none.
CREATE INDEX commands_open_by_node ON commands (node_id, seq)
  WHERE state IN ('pending', 'dispatched', 'acked', 'running');
CREATE INDEX commands_open_by_not_after ON commands (not_after)
  WHERE state IN ('pending', 'dispatched', 'acked', 'running');
-- commands.list filters one node's commands by state, newest first.
CREATE INDEX commands_node_state_seq ON commands (node_id, state, seq);

-- The outbox: events written in the transaction that caused them. txid is the
-- writer's transaction id. An event id is taken before its transaction
-- commits, so ids do not follow commit order; readers order by (txid, id) and
-- take only rows below bc_outbox_horizon(), under which every writer has
-- finished, so a late commit can never land behind a reader's cursor.
CREATE TABLE outbox (
  id         bigserial PRIMARY KEY,
  txid       xid8 NOT NULL DEFAULT pg_current_xact_id(),
  created_at timestamptz NOT NULL DEFAULT now(),
  tenant_id  text NOT NULL DEFAULT '',
  topic      text NOT NULL,
  payload    jsonb NOT NULL
);

CREATE INDEX outbox_position ON outbox (txid, id);

-- bc_outbox_horizon is the oldest transaction id that may still write an
-- event in this database: the oldest of this database's running transactions
-- (prepared ones included), or the next id to be assigned when none runs. It
-- looks only at this database, so a long transaction elsewhere on the cluster
-- does not hold events back. Running transactions come from the statement's
-- snapshot and are kept when pg_stat_activity (read later) still shows them
-- here; one that ended in between is visible to a reader's later snapshot.
CREATE FUNCTION bc_outbox_horizon() RETURNS xid8
LANGUAGE sql VOLATILE AS $$
  WITH s AS (SELECT pg_current_snapshot() AS snap),
  here AS (
    SELECT backend_xid::text AS x FROM pg_stat_activity
    WHERE datname = current_database() AND backend_xid IS NOT NULL
    UNION ALL
    SELECT transaction::text FROM pg_prepared_xacts WHERE database = current_database()
  )
  SELECT least(pg_snapshot_xmax(s.snap),
    (SELECT min(r) FROM pg_snapshot_xip(s.snap) AS r
     WHERE (r::text::numeric % 4294967296)::text IN (SELECT x FROM here)))
  FROM s
$$;

-- bc_outbox_read returns events after (after_txid, after_id) in position
-- order. The horizon is computed first and the rows are read under a later
-- snapshot (a VOLATILE function takes one per statement), so everything below
-- the horizon is committed or gone by then. Call it in READ COMMITTED.
CREATE FUNCTION bc_outbox_read(after_txid xid8, after_id bigint, tenant text, lim int)
RETURNS TABLE (id bigint, txid xid8, tenant_id text, topic text, payload jsonb, created_at timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  h xid8;
BEGIN
  SELECT bc_outbox_horizon() INTO h;
  RETURN QUERY
    SELECT o.id, o.txid, o.tenant_id, o.topic, o.payload, o.created_at
    FROM outbox o
    WHERE (o.txid, o.id) > (after_txid, after_id) AND o.txid < h
      AND (tenant = '' OR o.tenant_id = tenant)
    ORDER BY o.txid, o.id
    LIMIT lim;
END
$$;

-- One NOTIFY per inserting statement; PostgreSQL folds identical
-- notifications within a transaction and sends them at commit.
CREATE FUNCTION bc_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('bc_events', '');
  RETURN NULL;
END
$$;

CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
  FOR EACH STATEMENT EXECUTE FUNCTION bc_outbox_notify();

-- node_specs holds each signed generation of a node's desired state; the
-- sessions work fills it.
CREATE TABLE node_specs (
  node_id    text NOT NULL REFERENCES nodes (id),
  generation bigint NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  spec       jsonb NOT NULL,
  signature  bytea,
  PRIMARY KEY (node_id, generation)
);
