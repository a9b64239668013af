-- 0004_trust: signed commands and specs, attested results and bindings,
-- node certificates that can be superseded and revoked.

-- trust_bundles holds each published trust bundle version as signed. The
-- API process (the only one holding the command-signing root) publishes a
-- new version when the content changes; gateways and the join endpoint
-- relay the newest one as stored.
CREATE TABLE trust_bundles (
  version        bigint PRIMARY KEY,
  content_sha256 bytea NOT NULL,
  signed         bytea NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT trust_bundles_version_positive CHECK (version >= 1)
);

-- The trust version a node reported in its last Hello.
ALTER TABLE nodes ADD COLUMN trust_version bigint NOT NULL DEFAULT 0;

-- node_specs: the signed statement (node, generation, spec) and the worker
-- key's certificate, relayed as stored.
ALTER TABLE node_specs
  ADD COLUMN signed      bytea,
  ADD COLUMN worker_cert bytea,
  ADD CONSTRAINT node_specs_signature_has_statement CHECK ((signature IS NULL) = (signed IS NULL)),
  ADD CONSTRAINT node_specs_signature_has_cert CHECK ((signature IS NULL) = (worker_cert IS NULL));

-- result_bytes is an attested result exactly as the node reported it (the
-- jsonb result normalises key order and space, and the node's signature is
-- over the SHA-256 of the bytes it sent). message is the words beside a
-- bare reason code.
ALTER TABLE commands
  ADD COLUMN result_bytes bytea,
  ADD COLUMN message      text NOT NULL DEFAULT '';

-- node_certs records every node certificate the CA issued. A re-join
-- supersedes the node's earlier certificates; an operator can revoke them.
-- A session with a superseded or revoked certificate is refused.
CREATE TABLE node_certs (
  serial        text PRIMARY KEY,
  node_id       text NOT NULL REFERENCES nodes (id),
  role          text NOT NULL,
  allowed_kinds text[],
  not_before    timestamptz NOT NULL,
  not_after     timestamptz NOT NULL,
  cert_pem      bytea NOT NULL,
  issued_at     timestamptz NOT NULL DEFAULT now(),
  superseded_at timestamptz,
  revoked_at    timestamptz,
  revoked_by    text NOT NULL DEFAULT ''
);

CREATE INDEX node_certs_node ON node_certs (node_id, issued_at DESC);

-- allocation_bindings: each allocation a spec's holds bind on a node, and
-- whether the node's signed AllocationBound verified (bound), is awaited
-- (pending) or was refused.
CREATE TABLE allocation_bindings (
  node_id     text NOT NULL REFERENCES nodes (id),
  allocation  text NOT NULL,
  generation  bigint NOT NULL,
  gpus        text[] NOT NULL,
  state       text NOT NULL DEFAULT 'pending',
  reason      text NOT NULL DEFAULT '',
  statement   bytea,
  node_sig    bytea,
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (node_id, allocation),
  CONSTRAINT allocation_bindings_state CHECK (state IN ('pending', 'bound', 'refused'))
);
