-- 0005_waiting: a command that cannot progress says why.
--
-- waiting_reason (a bare code such as kind-mismatch) and waiting_message
-- (the words: which kind, the node's and the registry's digests) are set
-- on a pending command that the gateway holds back, and cleared when it
-- leaves pending. kind_mismatches is, per node, the kinds whose manifest
-- the node runs differs from the registry's, from its last Hello.
ALTER TABLE commands
  ADD COLUMN waiting_reason  text NOT NULL DEFAULT '',
  ADD COLUMN waiting_message text NOT NULL DEFAULT '';

ALTER TABLE nodes ADD COLUMN kind_mismatches jsonb;

-- kind_version is the version of the kind's manifest that the node the
-- command was dispatched to runs (a fleet mid-upgrade runs several).
ALTER TABLE commands ADD COLUMN kind_version text NOT NULL DEFAULT '';
