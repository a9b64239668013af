package kind

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
)

func timestampIn(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(time.Now().Add(d)) }

type memHost struct{ inv json.RawMessage }

func (h *memHost) Inventory(context.Context) (json.RawMessage, time.Time, error) {
	return h.inv, time.Unix(100, 0).UTC(), nil
}
func (h *memHost) PutInventory(_ context.Context, inv json.RawMessage) error { h.inv = inv; return nil }
func (h *memHost) NodeSpec(context.Context) (int64, json.RawMessage, error) {
	return 3, json.RawMessage(`{"holds":[{"gpu":"GPU-1"}]}`), nil
}
func (h *memHost) Conditions(context.Context) ([]Condition, error) {
	return []Condition{{Type: "RebootRequired", Status: true, Since: time.Unix(200, 0).UTC()}}, nil
}
func (h *memHost) Journal(_ context.Context, limit int) ([]json.RawMessage, error) {
	if limit != 2 {
		return nil, errors.New("limit not passed")
	}
	return []json.RawMessage{json.RawMessage(`{"id":"cmd_2"}`), json.RawMessage(`{"id":"cmd_1"}`)}, nil
}

// The Host round trip over real gRPC: newHostServer on bcd's side,
// newHostClient on the plugin's.
func TestHostServer_RoundTrip(t *testing.T) {
	serve := func(h Host) Host {
		conn, _ := plugin.TestGRPCConn(t, func(s *grpc.Server) { pluginv1.RegisterHostServer(s, newHostServer(h)) })
		t.Cleanup(func() { _ = conn.Close() })
		return newHostClient(pluginv1.NewHostClient(conn))
	}
	ctx := context.Background()
	c := serve(&memHost{inv: json.RawMessage(`{"gpus":[]}`)})
	inv, at, err := c.Inventory(ctx)
	require.NoError(t, err)
	require.JSONEq(t, `{"gpus":[]}`, string(inv))
	require.True(t, at.Equal(time.Unix(100, 0)))
	require.NoError(t, c.PutInventory(ctx, json.RawMessage(`{"gpus":["x"]}`)))
	inv, _, err = c.Inventory(ctx)
	require.NoError(t, err)
	require.JSONEq(t, `{"gpus":["x"]}`, string(inv))
	gen, spec, err := c.NodeSpec(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, gen)
	require.JSONEq(t, `{"holds":[{"gpu":"GPU-1"}]}`, string(spec))
	conds, err := c.Conditions(ctx)
	require.NoError(t, err)
	require.Equal(t, "RebootRequired", conds[0].Type)
	require.True(t, conds[0].Since.Equal(time.Unix(200, 0)))
	recs, err := c.Journal(ctx, 2)
	require.NoError(t, err)
	require.Len(t, recs, 2)

	none := serve(nil)
	_, _, err = none.Inventory(ctx)
	require.ErrorContains(t, err, "no host service")
}
