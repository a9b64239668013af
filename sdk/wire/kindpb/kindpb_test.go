//lint:file-ignore SA1019 TestDeprecatedForwardersAgree calls kind's deprecated forwarders on purpose: they must agree with kindpb

package kindpb_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/better-compute/commands/sdk/kind"
	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
	"github.com/better-compute/commands/sdk/wire/kindpb"
)

func manifest() kind.Manifest {
	return kind.Manifest{
		Kind:          "acme.flash",
		Lane:          kind.LaneBulk,
		Timeout:       kind.Duration(5 * time.Minute),
		Roles:         []string{"node"},
		Flags:         kind.Flags{RetrySafe: true, Attested: true},
		APIRunnable:   true,
		PayloadSchema: json.RawMessage(`{"type":"object"}`),
		Version:       "1.2.3",
		Description:   "Flash the firmware.",
	}
}

// The converters are kind's, reached through sdk/internal/bridge: each
// one's type assertion holds, and the round trips keep every field.
func TestConverters_RoundTrip(t *testing.T) {
	m := manifest()
	p := kindpb.ManifestToProto(m)
	require.Equal(t, pluginv1.Lane_LANE_BULK, p.GetLane())
	require.Equal(t, m, kindpb.ManifestFromProto(p))

	r := kind.Result{Status: kind.StatusCancelled, Reason: kind.ReasonCancelled, Message: "stopped", Data: json.RawMessage(`{"written":2}`)}
	pr := kindpb.ResultToProto(r)
	require.Equal(t, pluginv1.Status_STATUS_CANCELLED, pr.GetStatus())
	require.Equal(t, r, kindpb.ResultFromProto(pr))
	require.Equal(t, kind.StatusFailed, kindpb.ResultFromProto(&pluginv1.Result{}).Status, "an unknown status reads as failed")
}

// kind's deprecated names, kept for one release, are the same functions.
func TestDeprecatedForwardersAgree(t *testing.T) {
	m := manifest()
	require.Equal(t, kindpb.ManifestToProto(m).String(), kind.ManifestToProto(m).String()) //nolint:staticcheck // the forwarder under test
	require.Equal(t, m, kind.ManifestFromProto(kindpb.ManifestToProto(m)))                 //nolint:staticcheck // the forwarder under test
	r := kind.Result{Status: kind.StatusSucceeded, Data: json.RawMessage(`{}`)}
	require.Equal(t, kindpb.ResultToProto(r).String(), kind.ResultToProto(r).String()) //nolint:staticcheck // the forwarder under test
	require.Equal(t, r, kind.ResultFromProto(kindpb.ResultToProto(r)))                 //nolint:staticcheck // the forwarder under test
}

type staticHost struct{}

func (staticHost) Inventory(context.Context) (json.RawMessage, time.Time, error) {
	return json.RawMessage(`{"gpus":[]}`), time.Unix(100, 0).UTC(), nil
}
func (staticHost) PutInventory(context.Context, json.RawMessage) error { return nil }
func (staticHost) NodeSpec(context.Context) (int64, json.RawMessage, error) {
	return 7, json.RawMessage(`{}`), nil
}
func (staticHost) Conditions(context.Context) ([]kind.Condition, error) { return nil, nil }
func (staticHost) Journal(context.Context, int) ([]json.RawMessage, error) {
	return nil, nil
}

// The Host service over real gRPC, served and dialled through kindpb, as
// bcd serves it and a harness calls it; a nil Host is kind.ErrNoHost's case.
func TestHostService_OverGRPC(t *testing.T) {
	dial := func(h kind.Host) kind.Host {
		conn, _ := plugin.TestGRPCConn(t, func(s *grpc.Server) { pluginv1.RegisterHostServer(s, kindpb.NewHostServer(h)) })
		t.Cleanup(func() { _ = conn.Close() })
		return kindpb.NewHostClient(pluginv1.NewHostClient(conn))
	}
	ctx := context.Background()
	inv, at, err := dial(staticHost{}).Inventory(ctx)
	require.NoError(t, err)
	require.JSONEq(t, `{"gpus":[]}`, string(inv))
	require.True(t, at.Equal(time.Unix(100, 0)))
	gen, _, err := dial(staticHost{}).NodeSpec(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 7, gen)

	_, _, err = dial(nil).Inventory(ctx)
	require.ErrorContains(t, err, "no host service")
}
