-- 0101_rollout_failures: a rollout pauses after max_failures nodes failed
-- (a package refused for its digest or signature, a failed self-check, an
-- upgrade that timed out) since it was set, resumed or retried, so a bad
-- release is fetched by one node, not the whole pool; and a retried node
-- that rolled back is sent retrySkipped, which its skipped target needs.
ALTER TABLE rollouts ADD COLUMN max_failures integer NOT NULL DEFAULT 1,
  ADD COLUMN failures integer NOT NULL DEFAULT 0,
  ADD CONSTRAINT rollouts_max_failures CHECK (max_failures >= 1);

ALTER TABLE rollout_nodes ADD COLUMN retry_skipped boolean NOT NULL DEFAULT false;
