package kind

// The reasons a command can end with that the platform itself writes, each
// defined once here and used by bcd, the plugins and the control plane, so
// that a consumer matching on a reason (a workflow, an alert rule, the
// console) sees one spelling. A reason is always a bare machine code; the
// words for people travel beside it as the message. Kinds add their own
// reasons (checks-failed, reset-failed, ...) in their packages.
const (
	// ReasonNotAfter: the command was still pending at its not_after and
	// expired (the sweeper).
	ReasonNotAfter = "not_after"
	// ReasonTimeout: the command was in flight past not_after plus the
	// kind's timeout (the sweeper), or the kind's timeout ended its run on
	// the node.
	ReasonTimeout = "timeout"
	// ReasonInterrupted: the daemon accepted the command, then stopped or
	// crashed before it finished, and the kind is not retry-safe.
	ReasonInterrupted = "interrupted"
	// ReasonJournalLost: the node came back with a new journal id and the
	// in-flight command is not retry-safe.
	ReasonJournalLost = "journal-lost"
	// ReasonRebooted: a new boot (or role) on rejoin completed a
	// self-terminating kind as succeeded.
	ReasonRebooted = "rebooted"
	// ReasonCancelled: the command was cancelled before or while it ran.
	ReasonCancelled = "cancelled"
	// ReasonNodeDeleted: the node was deleted with the command not yet
	// terminal.
	ReasonNodeDeleted = "node-deleted"
	// ReasonPluginCrashed: the kind's plugin process died during the run.
	ReasonPluginCrashed = "plugin-crashed"
	// ReasonPluginUnavailable: the kind's plugin could not be started (or
	// was refused) on the node.
	ReasonPluginUnavailable = "plugin-unavailable"
	// ReasonPluginError: the plugin answered with a protocol error.
	ReasonPluginError = "plugin-error"
	// ReasonGPUBusy: gpu.reset or diag.dcgm refused GPUs with a live
	// allocation.
	ReasonGPUBusy = "gpu-busy"

	// ReasonInvalidPayload: the payload does not match the kind's schema.
	ReasonInvalidPayload = "invalid-payload"
	// ReasonPanic: the handler panicked.
	ReasonPanic = "panic"
	// ReasonUnknownKind: the plugin does not serve the kind asked for.
	ReasonUnknownKind = "unknown-kind"
	// ReasonHandlerError: the handler returned an error that is not a
	// *Failure with its own reason.
	ReasonHandlerError = "error"
	// ReasonBadResult: the handler's result is not valid JSON.
	ReasonBadResult = "bad-result"
)
