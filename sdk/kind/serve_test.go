package kind

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/stretchr/testify/require"

	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
	"github.com/better-compute/commands/sdk/wire"
)

func testManifest(name string) Manifest {
	return Manifest{
		Kind:          name,
		Lane:          LaneControl,
		Timeout:       Duration(time.Minute),
		Roles:         []string{"node"},
		Version:       "1.0.0",
		PayloadSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"additionalProperties":false}`),
	}
}

// started signals each handler start; the waiting handler blocks until cancelled.
type waitingHandler struct{ started chan struct{} }

func (h waitingHandler) Handle(ctx context.Context, req Request) (any, error) {
	req.Progress.Report(50, "half way")
	h.started <- struct{}{}
	<-ctx.Done()
	return map[string]string{"did": "half"}, ctx.Err()
}

// connect serves kinds in-process over real gRPC (go-plugin's test conn).
func connect(t *testing.T, kinds ...Kind) *wire.Client {
	t.Helper()
	srv, err := NewServer(hclog.NewNullLogger(), kinds...)
	require.NoError(t, err)
	client, _ := plugin.TestPluginGRPCConn(t, false, wire.PluginSet(srv.bind))
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense(wire.PluginName)
	require.NoError(t, err)
	return raw.(*wire.Client)
}

func collect(t *testing.T, stream pluginv1.KindPlugin_ExecuteClient) ([]*pluginv1.Progress, *pluginv1.Result) {
	t.Helper()
	var progress []*pluginv1.Progress
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			t.Fatal("stream ended without a result")
		}
		require.NoError(t, err)
		if p := ev.GetProgress(); p != nil {
			progress = append(progress, p)
		}
		if r := ev.GetResult(); r != nil {
			return progress, r
		}
	}
}

func exec(t *testing.T, c *wire.Client, id, kindName, payload string) (*pluginv1.Result, []*pluginv1.Progress) {
	t.Helper()
	stream, err := c.Execute(context.Background(), &pluginv1.ExecuteRequest{Command: &pluginv1.Command{Id: id, Kind: kindName, Payload: []byte(payload)}})
	require.NoError(t, err)
	p, r := collect(t, stream)
	return r, p
}

func TestServer_Manifests_SortedWithSDKVersion(t *testing.T) {
	c := connect(t,
		Kind{Manifest: testManifest("b.kind"), Handler: HandlerFunc(func(context.Context, Request) (any, error) { return nil, nil })},
		Kind{Manifest: testManifest("a.kind"), Handler: HandlerFunc(func(context.Context, Request) (any, error) { return nil, nil })},
	)
	resp, err := c.Manifests(context.Background(), &pluginv1.ManifestsRequest{})
	require.NoError(t, err)
	require.Equal(t, SDKVersion, resp.GetSdkVersion())
	require.Len(t, resp.GetManifests(), 2)
	require.Equal(t, "a.kind", resp.GetManifests()[0].GetKind())
	require.Equal(t, testManifest("a.kind").Digest(), manifestFromProto(resp.GetManifests()[0]).Digest())
}

func TestServer_Execute_RefusesABadPayload_NamingTheField_AndKeepsServing(t *testing.T) {
	ran := false
	c := connect(t, Kind{Manifest: testManifest("t.kind"), Handler: HandlerFunc(func(context.Context, Request) (any, error) {
		ran = true
		return map[string]int{"ok": 1}, nil
	})})
	r, _ := exec(t, c, "cmd_1", "t.kind", `{"n":"seven"}`)
	require.Equal(t, pluginv1.Status_STATUS_FAILED, r.GetStatus())
	require.Equal(t, ReasonInvalidPayload, r.GetReason())
	require.Contains(t, r.GetMessage(), "/n")
	require.False(t, ran, "the handler never sees a bad payload")

	r, _ = exec(t, c, "cmd_2", "t.kind", `{"n":7}`)
	require.Equal(t, pluginv1.Status_STATUS_SUCCEEDED, r.GetStatus())
	require.JSONEq(t, `{"ok":1}`, string(r.GetResult()))
}

func TestServer_Execute_UnknownKind(t *testing.T) {
	c := connect(t, Kind{Manifest: testManifest("t.kind"), Handler: HandlerFunc(func(context.Context, Request) (any, error) { return nil, nil })})
	r, _ := exec(t, c, "cmd_1", "other.kind", `{}`)
	require.Equal(t, ReasonUnknownKind, r.GetReason())
}

func TestServer_Execute_PanicIsAFailedResult(t *testing.T) {
	c := connect(t, Kind{Manifest: testManifest("t.kind"), Handler: HandlerFunc(func(context.Context, Request) (any, error) { panic("boom") })})
	r, _ := exec(t, c, "cmd_1", "t.kind", `{}`)
	require.Equal(t, pluginv1.Status_STATUS_FAILED, r.GetStatus())
	require.Equal(t, ReasonPanic, r.GetReason())
	require.Contains(t, r.GetMessage(), "boom")
	r, _ = exec(t, c, "cmd_2", "t.kind", `{}`)
	require.Equal(t, ReasonPanic, r.GetReason(), "still serving")
}

func TestServer_Cancel_StopsTheRunningCommand_WhichReportsItsRealOutcome(t *testing.T) {
	h := waitingHandler{started: make(chan struct{}, 1)}
	c := connect(t, Kind{Manifest: testManifest("t.kind"), Handler: h})
	stream, err := c.Execute(context.Background(), &pluginv1.ExecuteRequest{Command: &pluginv1.Command{Id: "cmd_1", Kind: "t.kind"}})
	require.NoError(t, err)
	select {
	case <-h.started:
	case <-time.After(10 * time.Second):
		t.Fatal("handler did not start")
	}
	resp, err := c.Cancel(context.Background(), &pluginv1.CancelRequest{CommandId: "cmd_1"})
	require.NoError(t, err)
	require.True(t, resp.GetRunning())
	progress, r := collect(t, stream)
	require.Equal(t, pluginv1.Status_STATUS_CANCELLED, r.GetStatus())
	require.JSONEq(t, `{"did":"half"}`, string(r.GetResult()), "what was done is reported")
	require.Equal(t, int32(50), progress[0].GetPercent())
}

func TestServer_Cancel_BeforeExecute_StartsTheCommandCancelled(t *testing.T) {
	h := waitingHandler{started: make(chan struct{}, 1)}
	c := connect(t, Kind{Manifest: testManifest("t.kind"), Handler: h})
	resp, err := c.Cancel(context.Background(), &pluginv1.CancelRequest{CommandId: "cmd_early"})
	require.NoError(t, err)
	require.False(t, resp.GetRunning())
	r, _ := exec(t, c, "cmd_early", "t.kind", `{}`)
	require.Equal(t, pluginv1.Status_STATUS_CANCELLED, r.GetStatus())
	// Only that id: another command runs normally until its own cancel.
	stream, err := c.Execute(context.Background(), &pluginv1.ExecuteRequest{Command: &pluginv1.Command{Id: "cmd_other", Kind: "t.kind"}})
	require.NoError(t, err)
	<-h.started
	<-h.started
	_, err = c.Cancel(context.Background(), &pluginv1.CancelRequest{CommandId: "cmd_other"})
	require.NoError(t, err)
	_, r = collect(t, stream)
	require.Equal(t, pluginv1.Status_STATUS_CANCELLED, r.GetStatus())
}

func TestServer_Execute_DeadlineIsATimeout(t *testing.T) {
	h := waitingHandler{started: make(chan struct{}, 1)}
	c := connect(t, Kind{Manifest: testManifest("t.kind"), Handler: h})
	stream, err := c.Execute(context.Background(), &pluginv1.ExecuteRequest{Command: &pluginv1.Command{
		Id: "cmd_1", Kind: "t.kind", Deadline: timestampIn(50 * time.Millisecond),
	}})
	require.NoError(t, err)
	_, r := collect(t, stream)
	require.Equal(t, pluginv1.Status_STATUS_FAILED, r.GetStatus())
	require.Equal(t, "timeout", r.GetReason())
}

func TestNewServer_RefusesInvalidOrDuplicateKinds(t *testing.T) {
	h := HandlerFunc(func(context.Context, Request) (any, error) { return nil, nil })
	_, err := NewServer(hclog.NewNullLogger())
	require.ErrorContains(t, err, "no kinds")
	bad := testManifest("t.kind")
	bad.Lane = "sideways"
	_, err = NewServer(hclog.NewNullLogger(), Kind{Manifest: bad, Handler: h})
	require.ErrorContains(t, err, `lane "sideways"`)
	_, err = NewServer(hclog.NewNullLogger(), Kind{Manifest: testManifest("t.kind"), Handler: h}, Kind{Manifest: testManifest("t.kind"), Handler: h})
	require.ErrorContains(t, err, "served twice")
	_, err = NewServer(hclog.NewNullLogger(), Kind{Manifest: testManifest("t.kind")})
	require.ErrorContains(t, err, "no handler")
}

// A nil ProgressFunc in a Request reads as no progress reporter: the handler
// reports and Run neither panics nor fails the command. Before, Report
// called the nil func and the command failed with reason panic.
func TestRun_NilProgressFuncIsNone(t *testing.T) {
	var none ProgressFunc
	res := Run(context.Background(), HandlerFunc(func(_ context.Context, req Request) (any, error) {
		req.Progress.Report(50, "half way")
		return map[string]int{"done": 1}, nil
	}), Request{Progress: none})
	require.Equal(t, StatusSucceeded, res.Status, res.Message)
	require.JSONEq(t, `{"done":1}`, string(res.Data))
	require.NotPanics(t, func() { none.Report(1, "direct") })
}
