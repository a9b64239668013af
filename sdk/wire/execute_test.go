package wire

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
)

// oldPlugin predates Cancel: it only notices the stream's own cancellation.
type oldPlugin struct {
	pluginv1.UnimplementedKindPluginServer
	started chan struct{}
}

func (p *oldPlugin) Execute(_ *pluginv1.ExecuteRequest, stream grpc.ServerStreamingServer[pluginv1.ExecuteEvent]) error {
	_ = stream.Send(&pluginv1.ExecuteEvent{Event: &pluginv1.ExecuteEvent_Progress{Progress: &pluginv1.Progress{Percent: 1}}})
	close(p.started)
	<-stream.Context().Done()
	return stream.Context().Err()
}

// newPlugin knows Cancel and reports its real outcome after it.
type newPlugin struct {
	pluginv1.UnimplementedKindPluginServer
	cancel chan struct{}
}

func (p *newPlugin) Execute(_ *pluginv1.ExecuteRequest, stream grpc.ServerStreamingServer[pluginv1.ExecuteEvent]) error {
	_ = stream.Send(&pluginv1.ExecuteEvent{Event: &pluginv1.ExecuteEvent_Progress{Progress: &pluginv1.Progress{Percent: 1}}})
	<-p.cancel
	return stream.Send(&pluginv1.ExecuteEvent{Event: &pluginv1.ExecuteEvent_Result{Result: &pluginv1.Result{
		Status: pluginv1.Status_STATUS_CANCELLED, Result: []byte(`{"done":1}`),
	}}})
}

func (p *newPlugin) Cancel(context.Context, *pluginv1.CancelRequest) (*pluginv1.CancelResponse, error) {
	close(p.cancel)
	return &pluginv1.CancelResponse{Running: true}, nil
}

func dial(t *testing.T, srv pluginv1.KindPluginServer) *Client {
	client, _ := plugin.TestPluginGRPCConn(t, false, PluginSet(func(*plugin.GRPCBroker) pluginv1.KindPluginServer { return srv }))
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense(PluginName)
	require.NoError(t, err)
	return raw.(*Client)
}

func TestExecute_Cancel_KeepsTheStreamForTheRealOutcome(t *testing.T) {
	c := dial(t, &newPlugin{cancel: make(chan struct{})})
	ctx, cancel := context.WithCancel(context.Background())
	res, err := Execute(ctx, c, &pluginv1.ExecuteRequest{Command: &pluginv1.Command{Id: "cmd_1"}}, func(*pluginv1.Progress) { cancel() }, time.Minute)
	require.NoError(t, err)
	require.Equal(t, pluginv1.Status_STATUS_CANCELLED, res.GetStatus())
	require.JSONEq(t, `{"done":1}`, string(res.GetResult()))
}

func TestExecute_Cancel_APluginWithoutCancelGetsItsStreamCut(t *testing.T) {
	p := &oldPlugin{started: make(chan struct{})}
	c := dial(t, p)
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	_, err := Execute(ctx, c, &pluginv1.ExecuteRequest{Command: &pluginv1.Command{Id: "cmd_1"}}, func(*pluginv1.Progress) { cancel() }, time.Minute)
	require.ErrorIs(t, err, ErrNoOutcome)
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), 30*time.Second, "Unimplemented cuts at once, not after the grace")
}

func TestExecute_Cancel_APluginThatSaysNothingIsCutAfterTheGrace(t *testing.T) {
	// This plugin's Cancel succeeds but its Execute never reports.
	c := dial(t, silentPlugin{})
	ctx, cancel := context.WithCancel(context.Background())
	_, err := Execute(ctx, c, &pluginv1.ExecuteRequest{Command: &pluginv1.Command{Id: "cmd_1"}}, func(*pluginv1.Progress) { cancel() }, 100*time.Millisecond)
	require.True(t, errors.Is(err, ErrNoOutcome), "got %v", err)
}

type silentPlugin struct {
	pluginv1.UnimplementedKindPluginServer
}

func (silentPlugin) Execute(_ *pluginv1.ExecuteRequest, stream grpc.ServerStreamingServer[pluginv1.ExecuteEvent]) error {
	_ = stream.Send(&pluginv1.ExecuteEvent{Event: &pluginv1.ExecuteEvent_Progress{Progress: &pluginv1.Progress{Percent: 1}}})
	<-stream.Context().Done()
	return nil
}

func (silentPlugin) Cancel(context.Context, *pluginv1.CancelRequest) (*pluginv1.CancelResponse, error) {
	return &pluginv1.CancelResponse{Running: true}, nil
}

func TestExecute_StreamEndingWithoutAResult(t *testing.T) {
	c := dial(t, endsEarly{})
	_, err := Execute(context.Background(), c, &pluginv1.ExecuteRequest{Command: &pluginv1.Command{Id: "cmd_1"}}, nil, time.Second)
	require.ErrorIs(t, err, ErrNoResult)
}

type endsEarly struct {
	pluginv1.UnimplementedKindPluginServer
}

func (endsEarly) Execute(*pluginv1.ExecuteRequest, grpc.ServerStreamingServer[pluginv1.ExecuteEvent]) error {
	return nil
}
