package mcp

import (
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The fleet-run tools' names. There is no approve, pause or resume tool.
const (
	ToolCreateRun      = "create_fleet_run"
	ToolProposeRun     = "propose_fleet_run"
	ToolGetRun         = "get_fleet_run"
	ToolListRuns       = "list_fleet_runs"
	ToolListRunTargets = "list_fleet_run_targets"
)

// runStates and targetStates are the filters the API takes.
var (
	runStates    = []any{"active", "running", "paused", "stopping", "cancelling", "succeeded", "failed", "cancelled"}
	targetStates = []any{"waiting", "started", "succeeded", "failed", "rejected", "expired", "cancelled", "not-started", "refused", "failures"}
)

// targetsSchema is FleetRunTargets: each criterion given must hold.
func targetsSchema() *jsonschema.Schema {
	return object(nil, props{
		"nodeIds": {Type: "array", Description: "Node ids (node_…), up to 10000.", Items: idString("A node id."), MaxItems: new(10000), UniqueItems: true},
		"pool":    {Type: "string", Description: "Only the nodes of this pool.", MinLength: new(1), MaxLength: new(128)},
		"selector": {Type: "string", Description: "Only the nodes whose labels match: comma-separated requirements, each key=value, key!=value, " +
			"key in (v1,v2), key notin (v1,v2), key (the label exists) or !key; for example gpu=h200,rack in (r1,r2).", MinLength: new(1), MaxLength: new(1024)},
		"conditions": {Type: "array", Description: "Only the nodes on which each named condition is True (RowRemapPending, ...).", Items: idString("A condition type."), MaxItems: new(16)},
		"all":        {Type: "boolean", Description: "Every node of the tenant; takes no other criterion."},
	})
}

// runProps are the inputs create_fleet_run and propose_fleet_run share.
func runProps(kinds []string) props {
	return props{
		"kind":           {Type: "string", Description: "The command kind: " + strings.Join(kinds, ", ") + ".", MinLength: new(1), MaxLength: new(128)},
		"targets":        targetsSchema(),
		"payload":        {Type: "object", Description: "The kind's payload, the same for every node (see the kind reference)."},
		"maxConcurrency": {Type: "string", Description: "How many of the run's commands may be open at once: a count (\"10\") or a percentage of the targets (\"25%\"); default \"10%\".", Pattern: `^[0-9]+(\.[0-9]+)?%?$`, MaxLength: new(16)},
		"maxErrors":      {Type: "string", Description: "How many failures the run tolerates before it starts no new command: a count or a percentage; default \"0\" (the first failure stops it).", Pattern: `^[0-9]+(\.[0-9]+)?%?$`, MaxLength: new(16)},
		"notAfterSeconds": {Type: "integer", Description: "How long each node's command may wait for its node, 10 to 3600 seconds from when it is queued (default 600).",
			Minimum: new(10.0), Maximum: new(3600.0)},
		"idempotencyKey": {Type: "string", Description: "Required: a key you choose for this run (1 to 128 characters); a retry with it returns the run already created.", MinLength: new(1), MaxLength: new(128)},
	}
}

// addRunTools registers the fleet-run tools. create_fleet_run is additive
// (it starts read-only work, idempotently per key); propose_fleet_run
// carries destructiveHint, as propose_command_batch does.
func (s *Server) addRunTools(readOnly *gomcp.ToolAnnotations) {
	create := runProps(s.allow)
	create["reason"] = &jsonschema.Schema{Type: "string", Description: "Why, in words (up to 500 characters).", MaxLength: new(500)}
	gomcp.AddTool(s.mcp, &gomcp.Tool{
		Name:  ToolCreateRun,
		Title: "Run a diagnostic on many nodes",
		Description: "Create a fleet run: one read-only kind (" + strings.Join(s.allow, ", ") + ") on every node the targets select " +
			"(node ids, a pool, a label selector, conditions; each criterion given must hold), at most maxConcurrency at a time, " +
			"stopping once failures exceed maxErrors. A node you may not run the kind on is listed as refused with the reason. " +
			"Follow it with get_fleet_run. Destructive kinds go through propose_fleet_run.",
		Annotations: &gomcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: new(false), IdempotentHint: true, OpenWorldHint: new(true)},
		InputSchema: object([]string{"kind", "targets", "idempotencyKey"}, create),
	}, s.createRun)

	propose := runProps(s.batchOnly)
	propose["reason"] = &jsonschema.Schema{Type: "string", Description: "Why, in words the approvers read (1 to 500 characters).", MinLength: new(1), MaxLength: new(500)}
	propose["approvalDeadlineSeconds"] = &jsonschema.Schema{Type: "integer",
		Description: "How long the run's batch may wait for approvals, and how long the approval lasts, 60 to 86400 seconds (default 86400).",
		Minimum:     new(60.0), Maximum: new(86400.0)}
	gomcp.AddTool(s.mcp, &gomcp.Tool{
		Name:  ToolProposeRun,
		Title: "Propose a destructive fleet run",
		Description: "Propose destructive work (" + strings.Join(s.batchOnly, ", ") + ") on many nodes as a fleet run under one batch that " +
			"people must approve with their approver keys before any node starts; each pool's disruption budget then paces it. " +
			"Returns the run and batch ids, a summary and the exact command a person runs to approve it. You cannot approve it.",
		Annotations: &gomcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: new(true), IdempotentHint: true, OpenWorldHint: new(true)},
		InputSchema: object([]string{"kind", "targets", "reason", "idempotencyKey"}, propose),
	}, s.proposeRun)

	gomcp.AddTool(s.mcp, &gomcp.Tool{
		Name:  ToolGetRun,
		Title: "Get a fleet run",
		Description: "Show a fleet run: its state (running, paused, stopping, cancelling, succeeded, failed, cancelled) and why, " +
			"counts per target state and reason, what it waits for (awaiting-approval, a pool's budget), and the targets refused at creation.",
		Annotations: readOnly,
		InputSchema: object([]string{"runId"}, props{"runId": idString("The run id (run_…).")}),
	}, s.getRun)

	gomcp.AddTool(s.mcp, &gomcp.Tool{
		Name:        ToolListRuns,
		Title:       "List fleet runs",
		Description: "Show the tenant's fleet runs, newest first (your own, or every run with compute:runs:read). Page with nextCursor.",
		Annotations: readOnly,
		InputSchema: object(nil, props{
			"state":  {Type: "string", Description: "Only runs in this state; active: those not yet ended.", Enum: runStates},
			"limit":  {Type: "integer", Description: "Page size, 1 to 50 (default 20).", Minimum: new(1.0), Maximum: new(float64(maxListRuns))},
			"cursor": {Type: "string", Description: "nextCursor from the previous page.", MaxLength: new(512)},
		}),
	}, s.listRuns)

	gomcp.AddTool(s.mcp, &gomcp.Tool{
		Name:  ToolListRunTargets,
		Title: "List a fleet run's nodes",
		Description: "Show a fleet run's nodes in its order: each one's state, command id (read it with get_command), reason and message. " +
			"state failures lists failed, rejected and expired together. Page with nextCursor.",
		Annotations: readOnly,
		InputSchema: object([]string{"runId"}, props{
			"runId":  idString("The run id (run_…)."),
			"state":  {Type: "string", Description: "Only targets in this state.", Enum: targetStates},
			"limit":  {Type: "integer", Description: "Page size, 1 to 200 (default 100).", Minimum: new(1.0), Maximum: new(float64(maxListTargets))},
			"cursor": {Type: "string", Description: "nextCursor from the previous page.", MaxLength: new(512)},
		}),
	}, s.listRunTargets)
}
