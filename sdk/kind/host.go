package kind

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
	"github.com/better-compute/commands/sdk/wire"
)

// ErrNoHost is returned by Host calls when the plugin runs without bcd (a
// harness that serves no host).
var ErrNoHost = errors.New("no host service: the plugin runs without bcd")

// host returns the Host for a broker id; the connection is dialled on first
// use and kept, so a kind that never calls bcd never pays for it.
func (s *Server) host(id uint32) Host {
	if id == 0 || s.broker == nil {
		return noHost{}
	}
	return &lazyHost{s: s, id: id}
}

func (s *Server) hostClient(id uint32) (pluginv1.HostClient, error) {
	s.hostLock.Lock()
	defer s.hostLock.Unlock()
	if c, ok := s.hosts[id]; ok {
		return pluginv1.NewHostClient(c), nil
	}
	conn, err := s.broker.DialWithOptions(id, wire.DialOptions()...)
	if err != nil {
		return nil, fmt.Errorf("dialling bcd's host service: %w", err)
	}
	s.hosts[id] = conn
	return pluginv1.NewHostClient(conn), nil
}

type lazyHost struct {
	s  *Server
	id uint32
}

// newHostClient wraps a HostClient as a Host; harnesses use it (through
// sdk/wire/kindpb).
func newHostClient(c pluginv1.HostClient) Host { return grpcHost{c: c} }

func (h *lazyHost) client() (Host, error) {
	c, err := h.s.hostClient(h.id)
	if err != nil {
		return nil, err
	}
	return grpcHost{c: c}, nil
}

func (h *lazyHost) Inventory(ctx context.Context) (json.RawMessage, time.Time, error) {
	c, err := h.client()
	if err != nil {
		return nil, time.Time{}, err
	}
	return c.Inventory(ctx)
}

func (h *lazyHost) PutInventory(ctx context.Context, inv json.RawMessage) error {
	c, err := h.client()
	if err != nil {
		return err
	}
	return c.PutInventory(ctx, inv)
}

func (h *lazyHost) NodeSpec(ctx context.Context) (int64, json.RawMessage, error) {
	c, err := h.client()
	if err != nil {
		return 0, nil, err
	}
	return c.NodeSpec(ctx)
}

func (h *lazyHost) Conditions(ctx context.Context) ([]Condition, error) {
	c, err := h.client()
	if err != nil {
		return nil, err
	}
	return c.Conditions(ctx)
}

func (h *lazyHost) Journal(ctx context.Context, limit int) ([]json.RawMessage, error) {
	c, err := h.client()
	if err != nil {
		return nil, err
	}
	return c.Journal(ctx, limit)
}

type grpcHost struct{ c pluginv1.HostClient }

func (h grpcHost) Inventory(ctx context.Context) (json.RawMessage, time.Time, error) {
	r, err := h.c.GetInventory(ctx, &pluginv1.GetInventoryRequest{})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("host inventory: %w", err)
	}
	var at time.Time
	if r.GetCollectedAt() != nil {
		at = r.GetCollectedAt().AsTime()
	}
	if len(r.GetInventory()) == 0 {
		return nil, at, nil
	}
	return r.GetInventory(), at, nil
}

func (h grpcHost) PutInventory(ctx context.Context, inv json.RawMessage) error {
	if _, err := h.c.PutInventory(ctx, &pluginv1.PutInventoryRequest{Inventory: inv}); err != nil {
		return fmt.Errorf("host put inventory: %w", err)
	}
	return nil
}

func (h grpcHost) NodeSpec(ctx context.Context) (int64, json.RawMessage, error) {
	r, err := h.c.GetNodeSpec(ctx, &pluginv1.GetNodeSpecRequest{})
	if err != nil {
		return 0, nil, fmt.Errorf("host node spec: %w", err)
	}
	return r.GetGeneration(), r.GetSpec(), nil
}

func (h grpcHost) Conditions(ctx context.Context) ([]Condition, error) {
	r, err := h.c.GetConditions(ctx, &pluginv1.GetConditionsRequest{})
	if err != nil {
		return nil, fmt.Errorf("host conditions: %w", err)
	}
	out := make([]Condition, 0, len(r.GetConditions()))
	for _, c := range r.GetConditions() {
		cond := Condition{Type: c.GetType(), Status: c.GetStatus(), Reason: c.GetReason(), Message: c.GetMessage()}
		if c.GetSince() != nil {
			cond.Since = c.GetSince().AsTime()
		}
		out = append(out, cond)
	}
	return out, nil
}

func (h grpcHost) Journal(ctx context.Context, limit int) ([]json.RawMessage, error) {
	r, err := h.c.GetJournal(ctx, &pluginv1.GetJournalRequest{Limit: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("host journal: %w", err)
	}
	out := make([]json.RawMessage, 0, len(r.GetRecords()))
	for _, rec := range r.GetRecords() {
		out = append(out, rec)
	}
	return out, nil
}

type noHost struct{}

func (noHost) Inventory(context.Context) (json.RawMessage, time.Time, error) {
	return nil, time.Time{}, ErrNoHost
}
func (noHost) PutInventory(context.Context, json.RawMessage) error      { return ErrNoHost }
func (noHost) NodeSpec(context.Context) (int64, json.RawMessage, error) { return 0, nil, ErrNoHost }
func (noHost) Conditions(context.Context) ([]Condition, error)          { return nil, ErrNoHost }
func (noHost) Journal(context.Context, int) ([]json.RawMessage, error)  { return nil, ErrNoHost }
