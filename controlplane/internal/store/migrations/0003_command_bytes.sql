-- 0003_command_bytes: the exact bytes a command travels as.
--
-- command_bytes is the serialized bc.agent.v1.Command, marshalled once in
-- the enqueue transaction; the gateway relays it unchanged in
-- CommandEnvelope.command, never re-marshals it, so that a signature over
-- these bytes verifies on the node. Only what is fixed at enqueue goes in
-- (id, node, seq, kind, payload, deadlines, generation, key, batch,
-- created_at); what changes later (the session epoch of a dispatch, a cancel,
-- attempts) travels beside it, outside the signed bytes.
--
-- signature and worker_cert are for command signing: the signature over
-- command_bytes by a worker key and that key's DER certificate, relayed in
-- CommandEnvelope.signature and .worker_cert. They stay NULL until a
-- command-signing authority fills them in the same enqueue transaction.
--
-- All three are NULL for rows queued before this migration; the gateway
-- marshals those from their columns as it did before (and only those).
ALTER TABLE commands
  ADD COLUMN command_bytes bytea,
  ADD COLUMN signature     bytea,
  ADD COLUMN worker_cert   bytea,
  ADD CONSTRAINT commands_signature_has_bytes CHECK (signature IS NULL OR command_bytes IS NOT NULL),
  ADD CONSTRAINT commands_signature_has_cert CHECK ((signature IS NULL) = (worker_cert IS NULL));
