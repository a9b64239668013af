-- 0100_command_contradictions: a node's terminal report that contradicts
-- the terminal state already stored is kept beside it, never dropped.
--
-- The forward-only rule keeps a command's first terminal state: a report
-- that comes later changes nothing. Some later reports are news, though:
-- the old bcd that a daemon.upgrade's helper restarted reports the upgrade
-- failed (rolled-back) after the control plane had settled it another way.
-- Each such report is one row here (a repeat of it is not), published as
-- command.report.contradicted, shown as a node condition
-- (UpgradeRolledBack for a rolled-back upgrade) and given to the command's
-- owner as a wake, so that the rollout acts on it.
CREATE TABLE command_contradictions (
  command_id       text NOT NULL,
  node_id          text NOT NULL,
  tenant_id        text NOT NULL,
  kind             text NOT NULL,
  stored_state     text NOT NULL,
  stored_reason    text NOT NULL DEFAULT '',
  reported_state   text NOT NULL,
  reported_reason  text NOT NULL DEFAULT '',
  reported_message text NOT NULL DEFAULT '',
  result           jsonb,
  reported_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (command_id, reported_state, reported_reason)
);

CREATE INDEX command_contradictions_node ON command_contradictions (node_id, reported_at);
