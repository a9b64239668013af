package server_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// connectAs is a Connect-protocol (or, with connect.WithGRPCWeb, gRPC-Web)
// client of one unary method on the HTTP listener, sending token.
func connectAs[Req, Res any](r *servertest.Running, procedure, token string, opts ...connect.ClientOption) func(context.Context, *Req) (*Res, error) {
	c := connect.NewClient[Req, Res](r.HTTPClient, r.HTTPBase+procedure, opts...)
	return func(ctx context.Context, m *Req) (*Res, error) {
		req := connect.NewRequest(m)
		if token != "" {
			req.Header().Set("Authorization", "Bearer "+token)
		}
		res, err := c.CallUnary(ctx, req)
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
}

// errorInfo is the google.rpc.ErrorInfo a Connect error carries.
func errorInfo(t *testing.T, err error) (connect.Code, *errdetails.ErrorInfo) {
	t.Helper()
	var ce *connect.Error
	require.True(t, errors.As(err, &ce), "not a Connect error: %v", err)
	for _, d := range ce.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		if info, ok := v.(*errdetails.ErrorInfo); ok {
			return ce.Code(), info
		}
	}
	t.Fatalf("no ErrorInfo in %v", err)
	return 0, nil
}

// "bc-server also serves the public API in a form browsers can call (the
// Connect protocol or gRPC-Web) ... with the same authentication,
// authorization and limits as gRPC": each check on the HTTP listener,
// beside the same call over gRPC.
func TestBrowserAPIHasTheGRPCAPIsAuthAndErrors(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	get := func(token string, opts ...connect.ClientOption) func(context.Context, *apiv1.GetNodeRequest) (*apiv1.Node, error) {
		return connectAs[apiv1.GetNodeRequest, apiv1.Node](r, "/bc.api.v1.Nodes/Get", token, opts...)
	}
	ctx := context.Background()
	mine := &apiv1.GetNodeRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1}

	for name, opts := range map[string][]connect.ClientOption{
		"connect+json": {connect.WithProtoJSON()}, "connect+proto": nil, "grpc-web": {connect.WithGRPCWeb()},
	} {
		t.Run(name, func(t *testing.T) {
			n, err := get(servertest.TokRead, opts...)(ctx, mine)
			require.NoError(t, err)
			require.Equal(t, servertest.NodeA1, n.GetId())

			_, err = get("", opts...)(ctx, mine)
			code, info := errorInfo(t, err)
			require.Equal(t, connect.CodeUnauthenticated, code)
			require.Equal(t, string(errcode.Unauthenticated), info.GetReason())
			require.Equal(t, apierr.Domain, info.GetDomain())

			_, err = get("not-a-token", opts...)(ctx, mine)
			code, _ = errorInfo(t, err)
			require.Equal(t, connect.CodeUnauthenticated, code, "%v", err)

			// Another tenant's node is NOT_FOUND, with its details, as over gRPC.
			_, grpcErr := apiv1.NewNodesClient(dial(t, r.GRPC)).Get(as(servertest.TokOther), mine)
			_, err = get(servertest.TokOther, opts...)(ctx, mine)
			code, info = errorInfo(t, err)
			require.Equal(t, connect.CodeNotFound, code)
			require.Equal(t, string(errcode.NotFound), info.GetReason())
			want, ok := apierr.Parse(grpcErr)
			require.True(t, ok)
			require.NotEmpty(t, want.Details)
			require.Equal(t, want.Details, info.GetMetadata())
			var ce *connect.Error
			require.True(t, errors.As(err, &ce))
			require.Equal(t, want.Message, ce.Message())
		})
	}

	// Authorization: the reader may read but not run.
	run := connectAs[apiv1.RunCommandRequest, apiv1.Command]
	payload, err := structpb.NewStruct(map[string]any{"sections": []any{"gpus"}})
	require.NoError(t, err)
	req := &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Kind: "inventory.refresh",
		Payload: payload, IdempotencyKey: "browser-1"}
	_, err = run(r, "/bc.api.v1.Commands/Run", servertest.TokRead, connect.WithProtoJSON())(ctx, req)
	code, info := errorInfo(t, err)
	require.Equal(t, connect.CodePermissionDenied, code)
	require.Equal(t, string(errcode.PermissionDenied), info.GetReason())

	// One implementation: a command queued over Connect is the one gRPC
	// shows, and the same key over gRPC returns it.
	c, err := run(r, "/bc.api.v1.Commands/Run", servertest.TokOps, connect.WithProtoJSON())(ctx, req)
	require.NoError(t, err)
	require.Equal(t, "pending", c.GetState())
	again, err := apiv1.NewCommandsClient(dial(t, r.GRPC)).Run(as(servertest.TokOps), req)
	require.NoError(t, err)
	require.Equal(t, c.GetId(), again.GetId())

	// The same key for another kind is CONFLICT, with the API's details.
	req.Kind = "diag.nvml"
	_, err = run(r, "/bc.api.v1.Commands/Run", servertest.TokOps)(ctx, req)
	code, info = errorInfo(t, err)
	require.Equal(t, connect.CodeAlreadyExists, code)
	require.Equal(t, string(errcode.Conflict), info.GetReason())
}

// The watch streams over the Connect protocol (HTTP/1.1), and its limit is
// the gRPC API's own: one identity's watches count across both listeners.
func TestBrowserAPIWatchStreamsAndSharesTheWatchLimit(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, func(c *server.Config) { c.MaxWatchesPerIdentity = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// r.HTTPClient's 30 s timeout would end a stream; the watch gets its own.
	watch := connect.NewClient[apiv1.WatchEventsRequest, apiv1.Event](&http.Client{}, r.HTTPBase+"/bc.api.v1.Events/Watch", connect.WithProtoJSON())
	cursor := ""
	open := func(ctx context.Context) *connect.ServerStreamForClient[apiv1.Event] {
		req := connect.NewRequest(&apiv1.WatchEventsRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Cursor: cursor})
		req.Header().Set("Authorization", "Bearer "+servertest.TokOps)
		s, err := watch.CallServerStream(ctx, req)
		require.NoError(t, err)
		return s
	}
	// The command goes first: a watch from no cursor starts at the oldest
	// retained event (and its response starts with its first event).
	c, err := apiv1.NewCommandsClient(dial(t, r.GRPC)).Run(as(servertest.TokOps), &apiv1.RunCommandRequest{
		TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Kind: "diag.nvml", IdempotencyKey: "watch-1"})
	require.NoError(t, err)
	s := open(ctx)
	defer s.Close()
	for {
		require.True(t, s.Receive(), "the watch ended: %v", s.Err())
		e := s.Msg()
		if e.GetType() == "node.command.queued" && e.GetData().GetFields()["commandId"].GetStringValue() == c.GetId() {
			require.NotEmpty(t, e.GetCursor())
			break
		}
	}

	s.Close()
	cursor = "now"
	// Closing ends the client's side at once; the server releases the
	// watch (and its place under the limit) when its handler returns, which
	// its open-streams gauge shows. The next watch waits for that.
	testutil.WaitFor(t, 10*time.Second, "the server to close the first watch", func() bool {
		code, body := get(t, "http://"+r.HTTP+"/metrics")
		return code == http.StatusOK && strings.Contains(body, `bc_api_open_streams{method="/bc.api.v1.Events/Watch"} 0`)
	})

	// A watch from "now" answers at once, before any event, with the cursor
	// it starts after (bc-cursor), as the gRPC API does: a raw Connect
	// stream request, whose response (headers) must come while no event does.
	body, err := json.Marshal(map[string]any{"tenantId": servertest.TenantA, "nodeId": servertest.NodeA1, "cursor": "now"})
	require.NoError(t, err)
	frame := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(body)))
	frame = append(frame, body...)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, r.HTTPBase+"/bc.api.v1.Events/Watch", bytes.NewReader(frame))
	require.NoError(t, err)
	hreq.Header.Set("Content-Type", "application/connect+json")
	hreq.Header.Set("Connect-Protocol-Version", "1")
	hreq.Header.Set("Authorization", "Bearer "+servertest.TokOps)
	hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
	defer hcancel()
	resp, err := (&http.Client{}).Do(hreq.WithContext(hctx))
	require.NoError(t, err, "the watch's headers did not come before its first event")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("bc-cursor"))
	defer resp.Body.Close()

	// The raw Connect watch, open, holds ops' one watch: a second, over
	// gRPC, is refused with the limit's details.
	gs, err := apiv1.NewEventsClient(dial(t, r.GRPC)).Watch(as(servertest.TokOps), &apiv1.WatchEventsRequest{TenantId: servertest.TenantA})
	require.NoError(t, err)
	_, err = gs.Recv()
	require.Equal(t, errcode.InvalidState, apierr.CodeOf(err), "%v", err)
	in, _ := apierr.Parse(err)
	require.Equal(t, "too-many-watches", in.Details["reason"])
}

// "CORS off unless configured": without browser.corsOrigins no origin is
// allowed; with it, only the origins named.
func TestBrowserAPICORS(t *testing.T) {
	t.Parallel()
	preflight := func(r *servertest.Running, origin string) http.Header {
		req, err := http.NewRequest(http.MethodOptions, r.HTTPBase+"/bc.api.v1.Nodes/Get", nil)
		require.NoError(t, err)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		// Sorted and lower-case, as browsers send it.
		req.Header.Set("Access-Control-Request-Headers", "authorization,connect-protocol-version,content-type")
		resp, err := r.HTTPClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.Header
	}
	off := servertest.Start(t, nil)
	require.Empty(t, preflight(off, "https://ops.example.com").Get("Access-Control-Allow-Origin"))

	on := servertest.Start(t, func(c *server.Config) { c.Browser.CORSOrigins = []string{"https://ops.example.com"} })
	h := preflight(on, "https://ops.example.com")
	require.Equal(t, "https://ops.example.com", h.Get("Access-Control-Allow-Origin"))
	require.Contains(t, h.Get("Access-Control-Allow-Headers"), "authorization")
	require.Empty(t, preflight(on, "https://evil.example.com").Get("Access-Control-Allow-Origin"))
}

// browser.disabled turns the API for browsers off: its paths are not found.
func TestBrowserAPIDisabled(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, func(c *server.Config) { c.Browser.Disabled = true })
	_, err := connectAs[apiv1.GetNodeRequest, apiv1.Node](r, "/bc.api.v1.Nodes/Get", servertest.TokRead)(context.Background(),
		&apiv1.GetNodeRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1})
	require.Equal(t, connect.CodeUnimplemented, connect.CodeOf(err), "%v", err)
}

// The console is served by bc-server from the assets embedded in it, at
// /console/ (where / redirects), with a policy that lets it run only its own
// script and talk only to its own origin.
func TestConsoleIsServedFromTheBinary(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(r.HTTPBase + "/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusFound, resp.StatusCode)
	require.Equal(t, "/console/", resp.Header.Get("Location"))

	get := func(path string) (*http.Response, string) {
		resp, err := r.HTTPClient.Get(r.HTTPBase + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}
	resp, body := get("/console/")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "<title>better-compute console</title>")
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "connect-src 'self'")
	resp, body = get("/console/console.js")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "javascript")
	require.True(t, strings.Contains(body, apierr.Domain), "the bundle carries the client, which knows the API's error domain")

	off := servertest.Start(t, func(c *server.Config) { c.Browser.Disabled = true })
	resp, err = off.HTTPClient.Get(off.HTTPBase + "/console/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}
