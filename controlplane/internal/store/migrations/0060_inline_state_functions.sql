-- 0060_inline_state_functions: bc_state_rank and bc_state_terminal as
-- PostgreSQL can inline them. Declared STRICT, a SQL function whose body
-- the planner cannot prove strict (a CASE) is never inlined: each call ran
-- as a function call of its own, several per updated command row (the
-- guarded UPDATE, the forward-only trigger, the CHECK constraints), which
-- was a large share of what storing a fan-out's reports cost. Without
-- STRICT they return the same (NULL for NULL: no WHEN matches, and NULL IN
-- (...) is NULL) and are inlined into the statements that use them.
CREATE OR REPLACE FUNCTION bc_state_rank(state text) RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE state
    WHEN 'pending'    THEN 0
    WHEN 'dispatched' THEN 1
    WHEN 'acked'      THEN 2
    WHEN 'running'    THEN 3
    WHEN 'succeeded'  THEN 4
    WHEN 'failed'     THEN 4
    WHEN 'rejected'   THEN 4
    WHEN 'expired'    THEN 4
    WHEN 'cancelled'  THEN 4
  END
$$;

CREATE OR REPLACE FUNCTION bc_state_terminal(state text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT state IN ('succeeded', 'failed', 'rejected', 'expired', 'cancelled')
$$;
