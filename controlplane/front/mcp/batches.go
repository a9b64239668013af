package mcp

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

type leafIn struct {
	Subject       string `json:"subject"`
	Kind          string `json:"kind"`
	PayloadSHA256 string `json:"payloadSha256,omitempty"`
}

type proposeIn struct {
	Reason          string   `json:"reason"`
	Scope           []leafIn `json:"scope"`
	IdempotencyKey  string   `json:"idempotencyKey"`
	DeadlineSeconds int32    `json:"deadlineSeconds,omitempty"`
}

// BatchOut is propose_command_batch's answer.
type BatchOut struct {
	Notice          string         `json:"notice" jsonschema:"what the agent can and cannot do with the batch"`
	BatchID         string         `json:"batchId" jsonschema:"the batch id (batch_…): pass it to exec_command as batchId"`
	State           string         `json:"state" jsonschema:"awaiting-approval, approved or expired"`
	ApprovalsNeeded uint32         `json:"approvalsNeeded" jsonschema:"how many more distinct approvers must sign"`
	Threshold       uint32         `json:"threshold" jsonschema:"how many approvers the quorum needs; 0 means recorded for audit only"`
	Summary         string         `json:"summary" jsonschema:"the proposal in words, for the person who approves it"`
	ApproveCommand  string         `json:"approveCommand" jsonschema:"the command a person with an approver key runs to approve the batch"`
	Batch           map[string]any `json:"batch" jsonschema:"the batch as bc.api.v1 shows it, without the statement bytes"`
}

// batchIDPattern is the batch id grammar (ids.Batch): the answer's id goes
// into a shell command line, so anything else is refused.
var batchIDPattern = regexp.MustCompile(`^batch_[0-9A-Z]{26}$`)

// shellSafe matches words a shell takes as they are.
var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_.:/=@%+-]+$`)

const proposeNotice = "The batch is a proposal: nothing runs until people approve it with their approver keys, " +
	"and you cannot approve it (there is no tool for it, and the API refuses approvals from an agent). " +
	"Show the approveCommand to a person. " + UntrustedNotice

func (s *Server) proposeBatch(ctx context.Context, _ *gomcp.CallToolRequest, in proposeIn) (*gomcp.CallToolResult, BatchOut, error) {
	if strings.TrimSpace(in.IdempotencyKey) == "" {
		return nil, BatchOut{}, fmt.Errorf("propose_command_batch: idempotencyKey is required")
	}
	req := &apiv1.CreateCommandBatchRequest{TenantId: s.cfg.Tenant, Reason: in.Reason, IdempotencyKey: in.IdempotencyKey}
	for _, l := range in.Scope {
		req.Scope = append(req.Scope, &apiv1.BatchLeaf{Subject: l.Subject, Kind: l.Kind, PayloadSha256: l.PayloadSHA256})
	}
	if in.DeadlineSeconds != 0 {
		req.DeadlineSeconds = new(in.DeadlineSeconds)
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	b, err := s.batches.Create(cctx, req)
	if err != nil {
		return nil, BatchOut{}, s.apiError("commandBatches.create", err)
	}
	if !batchIDPattern.MatchString(b.GetId()) {
		return nil, BatchOut{}, fmt.Errorf("commandBatches.create answered a malformed batch id %q", cleanString(b.GetId(), 64))
	}
	view, err := s.batchView(b)
	if err != nil {
		return nil, BatchOut{}, err
	}
	out := BatchOut{
		Notice:          proposeNotice,
		BatchID:         b.GetId(),
		State:           cleanString(b.GetState(), 64),
		ApprovalsNeeded: b.GetApprovalsNeeded(),
		Threshold:       b.GetThreshold(),
		ApproveCommand:  s.approveCommand(b.GetId()),
		Batch:           view,
	}
	out.Summary = s.summary(b, out.ApproveCommand)
	return answer(out)
}

// approveCommand is the CLI line a person runs to sign the batch.
func (s *Server) approveCommand(batchID string) string {
	tenant := s.cfg.Tenant
	if !shellSafe.MatchString(tenant) {
		tenant = "'" + strings.ReplaceAll(tenant, "'", `'\''`) + "'"
	}
	return "better-compute batch approve --tenant " + tenant + " --batch " + batchID + " --key approver.pem"
}

// summary says the proposal in words: what, where, why, how many approvals,
// until when, and how to approve.
func (s *Server) summary(b *apiv1.CommandBatch, approve string) string {
	var leaves []string
	for i, l := range b.GetScope() {
		if i == 10 {
			leaves = append(leaves, fmt.Sprintf("and %d more", len(b.GetScope())-10))
			break
		}
		leaves = append(leaves, cleanString(l.GetKind(), 128)+" on "+cleanString(l.GetSubject(), 128))
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "Batch %s in tenant %s (%s): %s. Reason: %q.", b.GetId(), s.cfg.Tenant, cleanString(b.GetState(), 64),
		strings.Join(leaves, ", "), cleanString(b.GetReason(), 500))
	if b.GetThreshold() == 0 {
		sb.WriteString(" No approver quorum is configured: the batch is recorded for audit only, and bc-mcp will not queue a batch-only kind in it.")
	} else {
		fmt.Fprintf(&sb, " It needs %d more approval(s) of %d", b.GetApprovalsNeeded(), b.GetThreshold())
		if d := b.GetDeadline(); d != nil {
			fmt.Fprintf(&sb, " before %s", d.AsTime().UTC().Format("2006-01-02T15:04:05Z"))
		}
		sb.WriteString("; the requester cannot approve it. A person with an approver key runs: " + approve)
	}
	return sb.String()
}
