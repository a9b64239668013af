-- 0010_trace_parent: the W3C trace context a command was queued under.
--
-- trace_parent is the traceparent header value (00-<trace id>-<span id>-<flags>)
-- of the API call that queued the command, '' when none. It travels to the
-- node beside the signed command bytes (CommandEnvelope.trace_parent), never
-- inside them, so tracing changes no signature.
ALTER TABLE commands ADD COLUMN trace_parent text NOT NULL DEFAULT '';
