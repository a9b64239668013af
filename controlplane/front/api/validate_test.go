package api_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/front/api"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// The ids that broke things: accepted and stored (and then never able to
// join, as an X.509 URI SAN is ASCII), or refused by PostgreSQL as INTERNAL.
var badIDs = map[string]string{
	"spaces":    "node with spaces",
	"long":      strings.Repeat("n", 5000),
	"unicode":   "node_ünïcode",
	"star":      "*",
	"nul":       "node\x00a1",
	"slash":     "compute-node/x",
	"very long": strings.Repeat("t", 100000),
}

// Every id, role and kind a request carries is INVALID_INPUT naming its
// field when it is not in the grammar (docs/api.md, "Names"), whoever asks.
func TestMalformedNamesAreInvalidInputNamingTheField(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nodes := apiv1.NewNodesClient(b.conn)
	for what, bad := range badIDs {
		t.Run(what, func(t *testing.T) {
			field := func(err error, want string) {
				t.Helper()
				in := requireCode(t, err, errcode.InvalidInput)
				require.Equal(t, want, in.Details["field"], "%v", err)
				require.Less(t, len(in.Message), 400, "the message quotes a long id short")
			}
			_, err := nodes.Create(as(tokAdmin), &apiv1.CreateNodeRequest{TenantId: tenantA, NodeId: bad})
			field(err, "nodeId")
			_, err = nodes.CreateTenant(as(tokAdmin), &apiv1.CreateTenantRequest{TenantId: bad})
			field(err, "tenantId")
			_, err = nodes.Create(as(tokAdmin), &apiv1.CreateNodeRequest{TenantId: bad})
			field(err, "tenantId")
			_, err = nodes.Get(as(tokOps), &apiv1.GetNodeRequest{TenantId: tenantA, NodeId: bad})
			field(err, "nodeId")
			_, err = b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: bad, Kind: "diag.nvml"})
			field(err, "nodeId")
			_, err = b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: bad, NodeId: nodeA1, Kind: "diag.nvml"})
			field(err, "tenantId")
			_, err = b.commands().Get(as(tokOps), &apiv1.GetCommandRequest{TenantId: tenantA, NodeId: nodeA1, CommandId: bad})
			field(err, "commandId")
			_, err = b.commands().Cancel(as(tokOps), &apiv1.CancelCommandRequest{TenantId: tenantA, NodeId: nodeA1, CommandId: bad})
			field(err, "commandId")
			_, err = nodes.Delete(as(tokAdmin), &apiv1.DeleteNodeRequest{TenantId: tenantA, NodeId: bad})
			field(err, "nodeId")
			stream, err := apiv1.NewEventsClient(b.conn).Watch(as(tokOps), &apiv1.WatchEventsRequest{TenantId: tenantA, NodeId: bad})
			require.NoError(t, err)
			_, err = stream.Recv()
			field(err, "nodeId")
		})
	}
	for _, role := range []string{"admin", "ROOT!", "node\x00"} {
		_, err := nodes.Create(as(tokAdmin), &apiv1.CreateNodeRequest{TenantId: tenantA, NodeId: "node_r", Role: role})
		in := requireCode(t, err, errcode.InvalidInput)
		require.Equal(t, "role", in.Details["field"])
		require.Contains(t, in.Message, "node, discovery, site")
	}
	_, err := nodes.Create(as(tokAdmin), &apiv1.CreateNodeRequest{TenantId: tenantA, NodeId: "node_k", AllowedKinds: []string{"diag.nvml", "diag nvml"}})
	in := requireCode(t, err, errcode.InvalidInput)
	require.Equal(t, "allowedKinds[1]", in.Details["field"])
	_, err = nodes.CreateTenant(as(tokAdmin), &apiv1.CreateTenantRequest{Name: "Acme\x00"})
	in = requireCode(t, err, errcode.InvalidInput)
	require.Equal(t, "name", in.Details["field"])

	// What the grammar allows still works, and nothing malformed was stored.
	for _, role := range []string{"node", "discovery", "site"} {
		n, err := nodes.Create(as(tokAdmin), &apiv1.CreateNodeRequest{TenantId: tenantA, NodeId: "node_" + role + "-0412.rack3", Role: role})
		require.NoError(t, err)
		require.Equal(t, role, n.GetRole())
	}
	var stored int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM nodes WHERE id !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'`).Scan(&stored))
	require.Zero(t, stored)
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM tenants WHERE id !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'`).Scan(&stored))
	require.Zero(t, stored)
}

// A NUL character in a payload or spec string is INVALID_INPUT naming the
// field and where in it, not INTERNAL: JSON allows \u0000, jsonb does not.
func TestNULInAPayloadIsInvalidInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p, err := structpb.NewStruct(map[string]any{"sections": []any{"gpus", "a\x00b"}})
	require.NoError(t, err)
	_, err = b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "inventory.refresh", Payload: p})
	in := requireCode(t, err, errcode.InvalidInput)
	require.Equal(t, "payload", in.Details["field"])
	require.Equal(t, "payload.sections[1]", in.Details["path"])

	p, err = structpb.NewStruct(map[string]any{"a\x00": true})
	require.NoError(t, err)
	_, err = b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "diag.nvml", Payload: p})
	in = requireCode(t, err, errcode.InvalidInput)
	require.Equal(t, "payload", in.Details["field"])

	spec, err := structpb.NewStruct(map[string]any{"holds": []any{map[string]any{"gpu": "GPU-\x00", "state": "live"}}})
	require.NoError(t, err)
	_, err = apiv1.NewNodesClient(b.conn).SetSpec(as(tokAdmin), &apiv1.SetNodeSpecRequest{TenantId: tenantA, NodeId: nodeA1, Spec: spec})
	in = requireCode(t, err, errcode.InvalidInput)
	require.Equal(t, "spec", in.Details["field"])
}

type syncBuf struct {
	lock sync.Mutex
	b    bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.lock.Lock()
	defer s.lock.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.lock.Lock()
	defer s.lock.Unlock()
	return s.b.String()
}

// An unexpected error (here a column gone from under the server) is
// INTERNAL, not "the database is unavailable; retry", and carries an error
// id that the server's log line also names, with the real error beside it.
func TestUnexpectedErrorIsInternalWithAnErrorIDInTheLog(t *testing.T) {
	t.Parallel()
	logs := &syncBuf{}
	b := setup(t, func(c *api.Config) { c.Logger = hclog.New(&hclog.LoggerOptions{Output: logs}) })
	_, err := b.pool.Exec(context.Background(), `ALTER TABLE nodes RENAME COLUMN inventory TO inventory_gone`)
	require.NoError(t, err)
	_, err = apiv1.NewNodesClient(b.conn).Get(as(tokReader), &apiv1.GetNodeRequest{TenantId: tenantA, NodeId: nodeA1})
	in := requireCode(t, err, errcode.Internal)
	errID := in.Details["errorId"]
	require.Regexp(t, `^err_[0-9A-Z]{26}$`, errID)
	require.Contains(t, in.Message, errID)
	require.NotContains(t, in.Message, "inventory", "the error's own text stays in the log")
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, errID) {
			line = l
		}
	}
	require.Contains(t, line, "internal error", logs.String())
	require.Contains(t, line, "inventory", "the log has the real error")
	require.NotContains(t, logs.String(), "unavailable")
}
