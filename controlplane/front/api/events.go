package api

import (
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/commands/fleetruns"
	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/trust/auth"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

type eventsServer struct {
	apiv1.UnimplementedEventsServer
	s *Server
}

// CursorNow starts a watch at the newest event.
const CursorNow = "now"

// HeaderCursor is the response header that carries the cursor a watch
// starts after.
const HeaderCursor = "bc-cursor"

// watchBatch is how many events one outbox read takes.
const watchBatch = 500

// Watch sends the tenant's events after the request's cursor, then follows
// new ones. The outbox is read in (txid, id) order below the oldest running
// transaction, so an event committed late still lands after every cursor
// already handed out: a client that reconnects with its last cursor misses
// nothing and sees nothing twice. Events of nodes the caller may not read
// (compute:nodes:read) are left out.
func (e *eventsServer) Watch(req *apiv1.WatchEventsRequest, stream grpc.ServerStreamingServer[apiv1.Event]) error {
	s := e.s
	ctx := stream.Context()
	id, err := identity(ctx)
	if err != nil {
		return err
	}
	if err := validID("tenantId", req.GetTenantId()); err != nil {
		return err
	}
	if err := validOptionalID("nodeId", req.GetNodeId()); err != nil {
		return err
	}
	if !id.SeesTenant(req.GetTenantId()) {
		return apierr.New(errcode.NotFound, "tenant "+req.GetTenantId()+" not found", map[string]string{"tenantId": req.GetTenantId()})
	}
	release, ok := s.watches.acquire(id.Name)
	if !ok {
		return apierr.New(errcode.InvalidState, "identity "+id.Name+" already holds "+strconv.Itoa(s.watches.max)+
			" open event watches on this server, its limit: close one (one watch of the tenant, filtered on the client, serves many consumers)",
			map[string]string{"reason": "too-many-watches", "limit": strconv.Itoa(s.watches.max)})
	}
	defer release()
	after := req.GetCursor()
	if after == CursorNow {
		if after, err = events.Head(ctx, s.pool); err != nil {
			return s.fail(ctx, "events.watch", err)
		}
	} else if _, _, err := events.ParseCursor(after); err != nil {
		return apierr.New(errcode.InvalidInput, err.Error(), map[string]string{"field": "cursor"})
	}
	// The resolved cursor goes out as a header before any event, which
	// tells a client that started at "now" from when on it sees everything
	// (the CLI's --wait reads the command only after this).
	if err := stream.SendHeader(metadata.Pairs(HeaderCursor, after)); err != nil {
		return err
	}
	types := map[string]bool{}
	for _, t := range req.GetTypes() {
		types[t] = true
	}
	wake, unsubscribe := s.hub.subscribe()
	defer unsubscribe()
	for {
		evs, err := events.Read(ctx, s.pool, req.GetTenantId(), after, watchBatch)
		if err != nil {
			return s.fail(ctx, "events.watch", err)
		}
		s.outage.OK()
		for _, ev := range evs {
			after = ev.Cursor
			out := eventToProto(ev)
			if req.GetNodeId() != "" && out.GetNodeId() != req.GetNodeId() {
				continue
			}
			if len(types) > 0 && !types[ev.Topic] {
				continue
			}
			if out.GetNodeId() != "" && !id.Allowed(auth.PermNodesRead, auth.NodeResource(out.GetNodeId())) {
				continue
			}
			if strings.HasPrefix(ev.Topic, fleetruns.TopicPrefix) && !id.Allowed(auth.PermRunsRead, auth.TenantResource(req.GetTenantId())) &&
				out.GetData().GetFields()["requester"].GetStringValue() != id.Name {
				// A fleet run's events name no node: they reach whoever
				// may read the run (fleetRuns.get's rule).
				continue
			}
			if err := stream.Send(out); err != nil {
				return err
			}
		}
		if len(evs) == watchBatch {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.done:
			return apierr.New(errcode.Unavailable, "the server is shutting down; resume the watch from your last cursor",
				map[string]string{"cursor": after})
		case <-wake:
		}
	}
}

func eventToProto(ev events.Event) *apiv1.Event {
	data := toStruct(ev.Payload)
	out := &apiv1.Event{
		Cursor:     ev.Cursor,
		Type:       ev.Topic,
		TenantId:   ev.TenantID,
		OccurredAt: timestamppb.New(ev.CreatedAt),
		Data:       data,
	}
	if v, ok := data.GetFields()["nodeId"]; ok {
		out.NodeId = v.GetStringValue()
	}
	return out
}

// DefaultMaxWatchesPerIdentity is how many event watches one identity may
// hold open on one server. Each watch reads the outbox on every wake-up, so
// a few hundred from one caller slow every other call: 300 watches of one
// read-only identity took commands.run's median from 2 ms to 99 ms.
const DefaultMaxWatchesPerIdentity = 16

// watchLimit counts the open watches of each identity.
type watchLimit struct {
	// max is the bound; 0 or less is none.
	max int
	// lock guards open.
	lock sync.Mutex
	open map[string]int
}

func newWatchLimit(max int) *watchLimit {
	if max == 0 {
		max = DefaultMaxWatchesPerIdentity
	}
	return &watchLimit{max: max, open: map[string]int{}}
}

// acquire takes one of identity's watches; ok is false at the limit.
// release gives it back, once.
func (w *watchLimit) acquire(identity string) (release func(), ok bool) {
	w.lock.Lock()
	defer w.lock.Unlock()
	if w.max > 0 && w.open[identity] >= w.max {
		return nil, false
	}
	w.open[identity]++
	var once sync.Once
	return func() {
		once.Do(func() {
			w.lock.Lock()
			defer w.lock.Unlock()
			if w.open[identity]--; w.open[identity] <= 0 {
				delete(w.open, identity)
			}
		})
	}, true
}
