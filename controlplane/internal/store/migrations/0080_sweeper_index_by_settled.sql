-- 0080_sweeper_index_by_settled: the sweeper's deadline index is one that
-- a node's read of its open commands cannot use.
--
-- commands_open_by_not_after and commands_open_by_node had the same
-- predicate (an open state), so a read of some nodes' open commands
-- (the gateway's ListOpenMany) could walk the whole deadline index and test
-- every open command against its node ids. PostgreSQL chose that whenever
-- the open indexes' statistics were taken while they were nearly empty,
-- which is their usual state between fan-outs: during a fan-out to 10,000
-- nodes each read of 512 nodes then tested all 10,000 open commands (170
-- ms a read; auto_explain in BenchmarkSessions), the fan-out's time grew
-- with the square of its size. The deadline index now covers the commands
-- not settled, which is the same rows (commands_settled_iff_terminal), under
-- a predicate that only the sweeper's statements name.
CREATE INDEX commands_unsettled_by_not_after ON commands (not_after) WHERE settled_at IS NULL;
DROP INDEX commands_open_by_not_after;
