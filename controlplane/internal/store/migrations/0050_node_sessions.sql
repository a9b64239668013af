-- 0160_node_sessions: a node's session as the API shows it (nodes.get and
-- nodes.list). session_epoch, boot_id, role, daemon_version and
-- session_seen_at already record the last Hello and when a gateway last held
-- the session; what was missing is whether the session is still open.
--
-- session_gateway names the gateway (replica) that holds, or last held, the
-- session; session_opened_at is when it began (set with each Hello);
-- session_closed_at is when it ended, NULL while it is open. A gateway that
-- dies without closing its sessions stops refreshing session_seen_at, so the
-- API also calls a session whose session_seen_at is stale disconnected.
ALTER TABLE nodes ADD COLUMN session_gateway text NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN session_opened_at timestamptz;
ALTER TABLE nodes ADD COLUMN session_closed_at timestamptz;
