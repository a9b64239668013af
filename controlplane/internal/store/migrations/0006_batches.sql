-- 0006_batches: destructive batches under the approver quorum.
--
-- A batch's scope is a Merkle tree over its leaves (subject, kind, optional
-- payload digest); approvers sign its statement (batch id, tree size, root
-- hash, deadline, requester). Commands run in a batch carry its id; while
-- the batch waits for approvals they are held (awaiting_approval) and get
-- not_before when it is approved.
CREATE TABLE command_batches (
  id              text PRIMARY KEY,
  tenant_id       text NOT NULL REFERENCES tenants (id),
  requester       text NOT NULL,
  idempotency_key text NOT NULL DEFAULT '',
  reason          text NOT NULL,
  scope           jsonb NOT NULL,
  tree_size       integer NOT NULL,
  root_hash       bytea NOT NULL,
  statement       bytea NOT NULL,
  state           text NOT NULL DEFAULT 'awaiting-approval',
  deadline        timestamptz NOT NULL,
  threshold       integer NOT NULL DEFAULT 0,
  created_at      timestamptz NOT NULL DEFAULT now(),
  approved_at     timestamptz,
  CONSTRAINT command_batches_state CHECK (state IN ('awaiting-approval', 'approved', 'expired', 'recorded'))
);

CREATE UNIQUE INDEX command_batches_idempotency ON command_batches (tenant_id, requester, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX command_batches_tenant ON command_batches (tenant_id, created_at DESC);

CREATE TABLE batch_approvals (
  batch_id    text NOT NULL REFERENCES command_batches (id),
  key_id      text NOT NULL,
  approver    text NOT NULL,
  signature   bytea NOT NULL,
  approved_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (batch_id, key_id)
);

ALTER TABLE commands ADD COLUMN awaiting_approval boolean NOT NULL DEFAULT false;
