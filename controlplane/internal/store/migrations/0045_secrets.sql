-- 0045_secrets: a tenant's secrets, encrypted at rest (controlplane/secrets).
--
-- ciphertext is AES-256-GCM under the key named by key_id (a digest of the
-- key, never the key), with nonce, over the value; the additional data is
-- the tenant and the name, so a row copied to another name or tenant does
-- not open. Commands name secrets by ref in their signed bytes and never
-- hold a value.
CREATE TABLE secrets (
  tenant_id   text NOT NULL REFERENCES tenants (id),
  name        text NOT NULL,
  key_id      text NOT NULL,
  nonce       bytea NOT NULL,
  ciphertext  bytea NOT NULL,
  value_bytes int NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, name),
  CONSTRAINT secrets_name_spelled CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$')
);
