-- 0081_forward_only_when: the forward-only trigger's function runs only
-- for a move it may have to refuse.
--
-- bc_commands_forward_only ran, as a PL/pgSQL call, for every update of a
-- command's state: two or three per command (dispatched, then the node's
-- reports), 20,000 or more in a fan-out to 10,000 nodes, each to find the
-- move allowed. The trigger's WHEN now lets through, without the call, a
-- move that is allowed on its face (the state is unchanged, or moves up
-- from a state that is not terminal); the function still decides every
-- other one (a terminal state changed, a move down: only BUSY's requeue
-- from dispatched or acked to pending is allowed), as before.
DROP TRIGGER commands_forward_only ON commands;
CREATE TRIGGER commands_forward_only BEFORE UPDATE OF state ON commands
  FOR EACH ROW
  WHEN (NEW.state IS DISTINCT FROM OLD.state
        AND (bc_state_terminal(OLD.state) IS NOT FALSE
             OR bc_state_rank(NEW.state) IS NULL
             OR bc_state_rank(OLD.state) IS NULL
             OR bc_state_rank(NEW.state) < bc_state_rank(OLD.state)))
  EXECUTE FUNCTION bc_commands_forward_only();
