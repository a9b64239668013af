package secrets

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/internal/sealed"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// The exchange's error codes (SecretResponse.error).
const (
	// CodeDenied: the node holds no live command that names the ref.
	CodeDenied = "secret-denied"
	// CodeNotFound: the command names the ref, and the tenant has no such
	// secret (deleted, or never put).
	CodeNotFound = "secret-not-found"
	// CodeUnavailable: the store could not answer; bcd retries.
	CodeUnavailable = "secrets-unavailable"
	// CodeBadRequest: the request itself is malformed.
	CodeBadRequest = "bad-request"
)

// liveStates are the states of a command a node is running: only then may
// it fetch the command's secrets.
var liveStates = []queue.State{queue.Dispatched, queue.Acked, queue.Running}

// Exchanger answers SecretRequests. The rule: a node may fetch a ref only
// while it holds a live command (dispatched, acked or running on it) whose
// signed bytes name that ref, and gets the value of the command's tenant,
// sealed to the one-time key it sent for the run.
type Exchanger struct {
	Pool   *pgxpool.Pool
	Store  Store
	Logger hclog.Logger
}

// Exchange answers req from the session of nodeID. It never fails: a
// refusal is a response with an error code and a message for bcd to
// report in the command's result.
func (x *Exchanger) Exchange(ctx context.Context, nodeID string, req *agentv1.SecretRequest) *agentv1.SecretResponse {
	resp := &agentv1.SecretResponse{RequestId: req.GetRequestId(), CommandId: req.GetCommandId()}
	deny := func(code, format string, args ...any) *agentv1.SecretResponse {
		resp.Error, resp.Message = code, fmt.Sprintf(format, args...)
		x.logger().Warn("secret exchange refused", "node_id", nodeID, "command_id", req.GetCommandId(), "refs", req.GetRefs(), "code", code, "why", resp.Message)
		return resp
	}
	if len(req.GetRefs()) == 0 {
		return deny(CodeBadRequest, "the request names no ref")
	}
	if err := sealed.ValidRefs(req.GetRefs()); err != nil {
		return deny(CodeBadRequest, "%v", err)
	}
	held, err := queue.SignedOf(ctx, x.Pool, nodeID, req.GetCommandId())
	if errcode.CodeOf(err) == errcode.NotFound {
		return deny(CodeDenied, "node %s holds no command %s", nodeID, req.GetCommandId())
	}
	if err != nil {
		return deny(CodeUnavailable, "%v", err)
	}
	tenantID := held.TenantID
	if !slices.Contains(liveStates, held.State) {
		return deny(CodeDenied, "command %s is %s: secrets go only to a command the node is running", req.GetCommandId(), held.State)
	}
	var c agentv1.Command
	if err := proto.Unmarshal(held.Bytes, &c); err != nil {
		return deny(CodeUnavailable, "command %s's stored bytes do not parse: %v", req.GetCommandId(), err)
	}
	for _, ref := range req.GetRefs() {
		if !slices.Contains(c.GetSecretRefs(), ref) {
			return deny(CodeDenied, "command %s does not name secretRef %q (it names %v)", req.GetCommandId(), ref, c.GetSecretRefs())
		}
	}
	for _, ref := range req.GetRefs() {
		v, err := x.Store.Value(ctx, tenantID, ref)
		if errors.Is(err, ErrNotFound) {
			resp.Secrets = nil
			return deny(CodeNotFound, "tenant %s has no secret %q: put it with `better-compute secrets put`", tenantID, ref)
		}
		if err != nil {
			resp.Secrets = nil
			return deny(CodeUnavailable, "%v", err)
		}
		ct, err := sealed.Seal(req.GetKemId(), req.GetPublicKey(), nodeID, req.GetCommandId(), ref, v)
		sealed.Wipe(v)
		if err != nil {
			resp.Secrets = nil
			return deny(CodeBadRequest, "%v", err)
		}
		resp.Secrets = append(resp.Secrets, &agentv1.SealedSecret{Ref: ref, Sealed: ct})
	}
	x.logger().Info("secrets sealed for a command", "node_id", nodeID, "command_id", req.GetCommandId(), "tenant_id", tenantID, "refs", req.GetRefs())
	return resp
}

func (x *Exchanger) logger() hclog.Logger {
	if x.Logger == nil {
		return hclog.NewNullLogger()
	}
	return x.Logger
}
