package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/server/servertest"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// A ttlSeconds past the bound is INVALID_INPUT naming it, however large:
// 9223372037 s overflowed a Duration into UNAVAILABLE, and 18446744074 s
// wrapped round into a token that expired after 0.29 s. A role outside the
// agent roles and a malformed kind are INVALID_INPUT too.
func TestJoinTokenRequestOutOfRangeIsInvalidInput(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	nodes := apiv1.NewNodesClient(dial(t, r.GRPC))
	req := func(mod func(*apiv1.CreateJoinTokenRequest)) error {
		q := &apiv1.CreateJoinTokenRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1}
		mod(q)
		_, err := nodes.CreateJoinToken(as(servertest.TokOps), q)
		return err
	}
	field := func(err error, want string) {
		t.Helper()
		in, ok := apierr.Parse(err)
		require.True(t, ok, "%v", err)
		require.Equal(t, errcode.InvalidInput, in.Code, "%v", err)
		require.Equal(t, want, in.Details["field"], "%v", err)
	}
	for _, secs := range []int64{9223372037, 18446744074, 604801, -1, 1 << 62} {
		field(req(func(q *apiv1.CreateJoinTokenRequest) { q.TtlSeconds = secs }), "ttlSeconds")
	}
	for _, role := range []string{"admin", "ROOT!", "node\x00"} {
		field(req(func(q *apiv1.CreateJoinTokenRequest) { q.Role = role }), "role")
	}
	field(req(func(q *apiv1.CreateJoinTokenRequest) { q.AllowedKinds = []string{"diag.nvml", "ALL"} }), "allowedKinds[1]")

	tok, err := nodes.CreateJoinToken(as(servertest.TokOps), &apiv1.CreateJoinTokenRequest{TenantId: servertest.TenantA,
		NodeId: servertest.NodeA1, Role: "site", TtlSeconds: 604800})
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(7*24*time.Hour), tok.GetExpiresAt().AsTime(), time.Minute)
}

// JSON nested deeper than the protobuf decoder takes is the caller's
// mistake: INVALID_INPUT, where gRPC alone answers INTERNAL before any
// handler runs. Within the limit a deep payload still works.
func TestTooDeepJSONIsInvalidInput(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	conn := dial(t, r.GRPC)
	deep := func(levels int) *structpb.Struct {
		js := strings.Repeat(`{"a":`, levels) + `1` + strings.Repeat(`}`, levels)
		st := &structpb.Struct{}
		require.NoError(t, protojson.UnmarshalOptions{RecursionLimit: 1 << 20}.Unmarshal([]byte(js), st))
		return st
	}
	for _, levels := range []int{6000, 50000} {
		_, err := apiv1.NewCommandsClient(conn).Run(as(servertest.TokOps), &apiv1.RunCommandRequest{TenantId: servertest.TenantA,
			NodeId: servertest.NodeA1, Kind: "diag.nvml", Payload: deep(levels)})
		in, ok := apierr.Parse(err)
		require.True(t, ok, "%v", err)
		require.Equal(t, errcode.InvalidInput, in.Code, "%v", err)
		require.Equal(t, "too-deep", in.Details["reason"])
		_, err = apiv1.NewNodesClient(conn).SetSpec(as(servertest.TokOps), &apiv1.SetNodeSpecRequest{TenantId: servertest.TenantA,
			NodeId: servertest.NodeA1, Spec: deep(levels)})
		require.Equal(t, errcode.InvalidInput, apierr.CodeOf(err), "%v", err)
	}
	// The decoder's refusal comes before authentication, so it is the same
	// for a caller without credentials.
	_, err := apiv1.NewCommandsClient(conn).Run(as("no-such-token"), &apiv1.RunCommandRequest{TenantId: servertest.TenantA,
		NodeId: servertest.NodeA1, Kind: "diag.nvml", Payload: deep(6000)})
	require.Equal(t, errcode.InvalidInput, apierr.CodeOf(err), "%v", err)

	c, err := apiv1.NewCommandsClient(conn).Run(as(servertest.TokOps), &apiv1.RunCommandRequest{TenantId: servertest.TenantA,
		NodeId: servertest.NodeA1, Kind: "diag.nvml", Payload: deep(100)})
	require.NoError(t, err)
	require.Equal(t, "pending", c.GetState())
}
