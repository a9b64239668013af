-- 0130_history_retention: the history archiver (issue 34) finds a tenant's
-- events by the hour they were created in. The outbox had only its read
-- position (txid, id); without this index each hour's probe would read the
-- whole outbox. Commands need none: commands_tenant_state_settled (0090)
-- answers their hours, River's own (state, finalized_at) index its jobs'.
CREATE INDEX outbox_tenant_created ON outbox (tenant_id, created_at);
