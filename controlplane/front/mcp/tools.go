package mcp

import (
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tool names. There is no approve tool, by design.
const (
	ToolListNodes    = "list_nodes"
	ToolGetNode      = "get_node"
	ToolListCommands = "list_commands"
	ToolGetCommand   = "get_command"
	ToolExecCommand  = "exec_command"
	ToolProposeBatch = "propose_command_batch"
)

// addTools registers the tools: the six of nodes, commands and batches
// here, the fleet runs' in addRunTools. Each read tool carries
// readOnlyHint; exec_command is additive (it queues a command, idempotently
// per key); propose_command_batch carries destructiveHint, since the batch
// it records is for destructive work once people approve it.
func (s *Server) addTools() {
	readOnly := &gomcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: new(false)}

	gomcp.AddTool(s.mcp, &gomcp.Tool{
		Name:  ToolListNodes,
		Title: "List nodes",
		Description: "Show a summary (role, conditions, applied generation; no inventory) of each named node. " +
			"There is no node listing in the API yet: pass the node ids you know (at most 20). " +
			"A node that cannot be read is listed under errors.",
		Annotations: readOnly,
		InputSchema: object([]string{"nodeIds"}, props{
			"nodeIds": {Type: "array", Description: "Node ids (node_…), 1 to 20.", Items: idString("A node id."),
				MinItems: new(1), MaxItems: new(maxListNodes), UniqueItems: true},
		}),
	}, s.listNodes)

	gomcp.AddTool(s.mcp, &gomcp.Tool{
		Name:        ToolGetNode,
		Title:       "Get a node",
		Description: "Show one node: role, inventory (GPUs and more, as the node reported it), conditions and applied spec generation.",
		Annotations: readOnly,
		InputSchema: object([]string{"nodeId"}, props{"nodeId": idString("The node id (node_…).")}),
	}, s.getNode)

	gomcp.AddTool(s.mcp, &gomcp.Tool{
		Name:  ToolListCommands,
		Title: "List commands",
		Description: "Show a node's commands, or without nodeId the tenant's on every node you may read, newest first, " +
			"with state and a short preview of results (get_command shows a result in full, up to its cap). " +
			"kind, reason and runId filter (runId: one fleet run's commands). Page with nextCursor.",
		Annotations: readOnly,
		InputSchema: object(nil, props{
			"nodeId": idString("The node id (node_…); leave it out for the whole tenant."),
			"state": {Type: "string", Description: "Only commands in this state.",
				Enum: []any{"pending", "dispatched", "acked", "running", "succeeded", "failed", "rejected", "expired", "cancelled"}},
			"kind":   {Type: "string", Description: "Only commands of this kind.", MinLength: new(1), MaxLength: new(128)},
			"reason": {Type: "string", Description: "Only commands that ended with this reason (not_after, checks-failed, ...).", MinLength: new(1), MaxLength: new(128)},
			"runId":  idString("Only the commands of this fleet run (run_…)."),
			"limit":  {Type: "integer", Description: "Page size, 1 to 50 (default 20).", Minimum: new(1.0), Maximum: new(float64(maxListCommands))},
			"cursor": {Type: "string", Description: "nextCursor from the previous page.", MaxLength: new(512)},
		}),
	}, s.listCommands)

	gomcp.AddTool(s.mcp, &gomcp.Tool{
		Name:        ToolGetCommand,
		Title:       "Get a command",
		Description: "Show one command: its state, reason, progress and result (cut to a preview when large, with resultTruncated: true).",
		Annotations: readOnly,
		InputSchema: object([]string{"commandId"}, props{
			"nodeId":    idString("The node id (node_…); optional: the command id alone finds the command."),
			"commandId": idString("The command id (cmd_…)."),
		}),
	}, s.getCommand)

	gomcp.AddTool(s.mcp, &gomcp.Tool{
		Name:  ToolExecCommand,
		Title: "Run a diagnostic command",
		Description: "Queue a command on a node and return it (state pending); poll get_command for its result. " +
			"Kinds: " + strings.Join(s.allow, ", ") + "." + s.batchKindsNote() +
			" A retry with the same idempotencyKey returns the command already queued, never a second one.",
		Annotations: &gomcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: new(false), IdempotentHint: true, OpenWorldHint: new(true)},
		InputSchema: object([]string{"nodeId", "kind", "idempotencyKey"}, props{
			"nodeId":          idString("The node id (node_…)."),
			"kind":            {Type: "string", Description: "The command kind: " + strings.Join(slices.Concat(s.allow, s.batchOnly), ", ") + ".", MinLength: new(1), MaxLength: new(128)},
			"payload":         {Type: "object", Description: "The kind's payload (see the kind reference), for example {\"expectedCount\": 8} for diag.nvml."},
			"idempotencyKey":  {Type: "string", Description: "Required: a key you choose for this command (1 to 128 characters); reuse it to retry safely.", MinLength: new(1), MaxLength: new(128)},
			"batchId":         {Type: "string", Description: "A batch (batch_…) from propose_command_batch that the command belongs to.", Pattern: "^batch_[0-9A-Z]{26}$"},
			"notAfterSeconds": {Type: "integer", Description: "How long the command may wait for the node, 10 to 3600 seconds (default 600).", Minimum: new(10.0), Maximum: new(3600.0)},
		}),
	}, s.execCommand)

	gomcp.AddTool(s.mcp, &gomcp.Tool{
		Name:  ToolProposeBatch,
		Title: "Propose a destructive batch",
		Description: "Record a proposal for destructive work (a reboot, for example): a batch of (subject, kind) leaves that people " +
			"must approve with their approver keys before any of its commands runs. Returns the batch id, a summary and the exact " +
			"command a person runs to approve it. You cannot approve it. Once proposed, queue each command with exec_command and the batchId.",
		Annotations: &gomcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: new(true), IdempotentHint: true, OpenWorldHint: new(true)},
		InputSchema: object([]string{"reason", "scope", "idempotencyKey"}, props{
			"reason": {Type: "string", Description: "Why, in words the approvers read (1 to 500 characters).", MinLength: new(1), MaxLength: new(500)},
			"scope": {Type: "array", Description: "The leaves the batch allows, 1 to 100.", MinItems: new(1), MaxItems: new(100),
				Items: object([]string{"subject", "kind"}, props{
					"subject":       idString("The node id for a node's own kinds."),
					"kind":          {Type: "string", Description: "The command kind, for example node.reboot.", MinLength: new(1), MaxLength: new(128)},
					"payloadSha256": {Type: "string", Description: "Binds the leaf to one exact payload: the SHA-256 (hex) of its JSON.", Pattern: "^[0-9a-f]{64}$"},
				})},
			"idempotencyKey":  {Type: "string", Description: "Required: a key you choose (1 to 128 characters); a retry with it returns the batch already proposed.", MinLength: new(1), MaxLength: new(128)},
			"deadlineSeconds": {Type: "integer", Description: "How long the batch may wait for approvals, 60 to 86400 seconds (default 3600).", Minimum: new(60.0), Maximum: new(86400.0)},
		}),
	}, s.proposeBatch)

	s.addRunTools(readOnly)
}

func (s *Server) batchKindsNote() string {
	if len(s.batchOnly) == 0 {
		return ""
	}
	return " In a batch only (batchId from propose_command_batch; held until people approve it): " + strings.Join(s.batchOnly, ", ") + "."
}

// props is a schema's properties.
type props = map[string]*jsonschema.Schema

// object is a closed object schema: unknown arguments are refused, so a
// misspelt field is an error rather than silently ignored.
func object(required []string, p props) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "object", Properties: p, Required: required, AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}}}
}

func idString(desc string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "string", Description: desc, MinLength: new(1), MaxLength: new(128)}
}
