package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/front/api"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/internal/testutil"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// recv reads n events from a watch, each within a deadline.
func recv(t *testing.T, stream apiv1.Events_WatchClient, n int) []*apiv1.Event {
	t.Helper()
	type res struct {
		e   *apiv1.Event
		err error
	}
	var out []*apiv1.Event
	for len(out) < n {
		ch := make(chan res, 1)
		go func() {
			e, err := stream.Recv()
			ch <- res{e, err}
		}()
		select {
		case r := <-ch:
			require.NoError(t, r.err)
			out = append(out, r.e)
		case <-time.After(20 * time.Second):
			t.Fatalf("timed out waiting for event %d of %d", len(out)+1, n)
		}
	}
	return out
}

// "events.watch (a server stream from a cursor that resumes without loss
// after a reconnect)"
func TestWatchResumesFromCursorWithoutLoss(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events := apiv1.NewEventsClient(b.conn)
	runN := func(n int, key string) []string {
		var ids []string
		for i := 0; i < n; i++ {
			c, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "diag.nvml"})
			require.NoError(t, err)
			ids = append(ids, c.GetId())
		}
		return ids
	}
	want := runN(3, "")

	ctx, cancel := context.WithCancel(as(tokOps))
	stream, err := events.Watch(ctx, &apiv1.WatchEventsRequest{TenantId: tenantA})
	require.NoError(t, err)
	got := recv(t, stream, 2)
	cancel() // the client goes away after two events

	want = append(want, runN(4, "")...) // written while nobody watches

	stream, err = events.Watch(as(tokOps), &apiv1.WatchEventsRequest{TenantId: tenantA, Cursor: got[1].GetCursor()})
	require.NoError(t, err)
	got = append(got, recv(t, stream, 5)...)

	want = append(want, runN(2, "")...) // followed live after the resume
	got = append(got, recv(t, stream, 2)...)

	var ids []string
	for _, e := range got {
		require.Equal(t, "node.command.queued", e.GetType())
		require.Equal(t, nodeA1, e.GetNodeId())
		ids = append(ids, e.GetData().GetFields()["commandId"].GetStringValue())
	}
	require.Equal(t, want, ids, "every event once, in order, across the reconnect")
}

func TestWatchFiltersAndVisibility(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events := apiv1.NewEventsClient(b.conn)
	_, err := b.run(t, tokOther, &apiv1.RunCommandRequest{TenantId: tenantB, NodeId: nodeB1, Kind: "diag.nvml"})
	require.NoError(t, err)
	gpu, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeGPU, Kind: "diag.nvml"})
	require.NoError(t, err)
	a1, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "diag.nvml"})
	require.NoError(t, err)
	_, err = b.commands().Cancel(as(tokOps), &apiv1.CancelCommandRequest{TenantId: tenantA, NodeId: nodeA1, CommandId: a1.GetId()})
	require.NoError(t, err)

	// narrow reads only node_gpu*: it sees the gpu node's event and no other.
	stream, err := events.Watch(as(tokNarrow), &apiv1.WatchEventsRequest{TenantId: tenantA})
	require.NoError(t, err)
	e := recv(t, stream, 1)[0]
	require.Equal(t, gpu.GetId(), e.GetData().GetFields()["commandId"].GetStringValue())

	// A type filter and a node filter.
	stream, err = events.Watch(as(tokOps), &apiv1.WatchEventsRequest{TenantId: tenantA, NodeId: nodeA1, Types: []string{"command.settled"}})
	require.NoError(t, err)
	e = recv(t, stream, 1)[0]
	require.Equal(t, "command.settled", e.GetType())
	require.Equal(t, "cancelled", e.GetData().GetFields()["state"].GetStringValue())

	// "now" starts after everything so far.
	stream, err = events.Watch(as(tokOps), &apiv1.WatchEventsRequest{TenantId: tenantA, Cursor: "now"})
	require.NoError(t, err)
	// The server sends the resolved cursor as a header once it has taken
	// the head, so everything after Header() returns is new.
	md, err := stream.Header()
	require.NoError(t, err)
	require.NotEmpty(t, md.Get("bc-cursor"))
	later, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA2, Kind: "diag.nvml"})
	require.NoError(t, err)
	// The head is the oldest running transaction in the whole cluster, so a
	// transaction of a parallel test may make "now" repeat a few recent
	// events (at least once, never lost); skip those, but never node_a2's
	// only event.
	for i := 0; ; i++ {
		require.Less(t, i, 10, "the event after the head arrives")
		e = recv(t, stream, 1)[0]
		if e.GetNodeId() == nodeA2 {
			require.Equal(t, later.GetId(), e.GetData().GetFields()["commandId"].GetStringValue())
			break
		}
	}

	stream, err = events.Watch(as(tokOps), &apiv1.WatchEventsRequest{TenantId: tenantB})
	require.NoError(t, err)
	_, err = stream.Recv()
	requireCode(t, err, errcode.NotFound)
	stream, err = events.Watch(as(tokOps), &apiv1.WatchEventsRequest{TenantId: tenantA, Cursor: "garbage"})
	require.NoError(t, err)
	_, err = stream.Recv()
	requireCode(t, err, errcode.InvalidInput)
}

// openWatch opens a watch and waits for its header, which the server sends
// only once the watch holds its place; err is the refusal, if any.
func openWatch(ctx context.Context, b *bundle) (apiv1.Events_WatchClient, error) {
	stream, err := apiv1.NewEventsClient(b.conn).Watch(ctx, &apiv1.WatchEventsRequest{TenantId: tenantA, Cursor: "now"})
	if err != nil {
		return nil, err
	}
	md, err := stream.Header()
	if err != nil {
		return nil, err
	}
	if len(md.Get(api.HeaderCursor)) == 0 {
		_, err := stream.Recv()
		return nil, err
	}
	return stream, nil
}

// One identity holds at most DefaultMaxWatchesPerIdentity (16) open watches
// on a server: the next one is INVALID_STATE too-many-watches, naming the
// limit, while other identities still watch; a closed watch frees its place.
func TestWatchesPerIdentityAreLimited(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.Equal(t, 16, api.DefaultMaxWatchesPerIdentity)
	var cancels []context.CancelFunc
	t.Cleanup(func() {
		for _, c := range cancels {
			c()
		}
	})
	for i := 0; i < api.DefaultMaxWatchesPerIdentity; i++ {
		ctx, cancel := context.WithCancel(as(tokReader))
		cancels = append(cancels, cancel)
		_, err := openWatch(ctx, b)
		require.NoError(t, err, "watch %d", i+1)
	}
	refused := func(token string) error {
		stream, err := apiv1.NewEventsClient(b.conn).Watch(as(token), &apiv1.WatchEventsRequest{TenantId: tenantA, Cursor: "now"})
		require.NoError(t, err)
		_, err = stream.Recv()
		return err
	}
	in := requireCode(t, refused(tokReader), errcode.InvalidState)
	require.Equal(t, "too-many-watches", in.Details["reason"])
	require.Equal(t, "16", in.Details["limit"])

	// Another identity is not held to the first one's count.
	ctx, cancel := context.WithCancel(as(tokOps))
	cancels = append(cancels, cancel)
	_, err := openWatch(ctx, b)
	require.NoError(t, err)

	// Closing one frees a place (once the server has seen the stream end).
	cancels[0]()
	testutil.WaitFor(t, 10*time.Second, "the closed watch to free its place", func() bool {
		ctx, cancel := context.WithCancel(as(tokReader))
		cancels = append(cancels, cancel)
		_, err := openWatch(ctx, b)
		if err != nil {
			requireCode(t, err, errcode.InvalidState)
			return false
		}
		return true
	})
	_, err = openWatch(as(tokReader), b)
	requireCode(t, err, errcode.InvalidState)
}

// The limit is configurable; negative turns it off.
func TestWatchLimitIsConfigurable(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *api.Config) { c.MaxWatchesPerIdentity = 1 })
	ctx, cancel := context.WithCancel(as(tokReader))
	defer cancel()
	_, err := openWatch(ctx, b)
	require.NoError(t, err)
	stream, err := apiv1.NewEventsClient(b.conn).Watch(as(tokReader), &apiv1.WatchEventsRequest{TenantId: tenantA, Cursor: "now"})
	require.NoError(t, err)
	_, err = stream.Recv()
	in := requireCode(t, err, errcode.InvalidState)
	require.Equal(t, "1", in.Details["limit"])

	u := setup(t, func(c *api.Config) { c.MaxWatchesPerIdentity = -1 })
	for i := 0; i < 20; i++ {
		ctx, cancel := context.WithCancel(as(tokReader))
		defer cancel()
		_, err := openWatch(ctx, u)
		require.NoError(t, err)
	}
}
