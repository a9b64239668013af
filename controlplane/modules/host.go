package modules

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/commands/wakes"
)

// HostOptions configure a Host.
type HostOptions struct {
	// Wakes tunes River (timeouts, rescue, poll); its Workers, Queues and
	// Logger are the host's.
	Wakes wakes.Options
	// Logger logs; null when nil.
	Logger hclog.Logger
}

// Host loads the modules into one control plane process: it registers their
// kinds and wakers, installs the settle hook that records owner wakes in
// the queue, and (Run) runs River's workers and the modules' loops.
type Host struct {
	modules  []Module
	contexts map[string]*Context
	svc      *wakes.Service
	logger   hclog.Logger
}

// NewHost loads modules. Every process that settles commands (gateway,
// sweeper, API) must load the same modules, so that the same keys get
// wakes; only the process that runs them calls Run.
func NewHost(pool *pgxpool.Pool, q *queue.Queue, reg *kinds.Registry, opts HostOptions, modules ...Module) (*Host, error) {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	h := &Host{modules: modules, contexts: map[string]*Context{}, logger: opts.Logger.Named("modules")}
	for _, m := range kindsOf(modules) {
		if _, ok := reg.Get(m.Kind); ok {
			continue
		}
		if err := reg.Register(m); err != nil {
			return nil, fmt.Errorf("registering kind %s: %w", m.Kind, err)
		}
	}
	workers := river.NewWorkers()
	queues := map[string]river.QueueConfig{}
	registry := wakes.NewRegistry()
	seen := map[string]bool{}
	for _, m := range modules {
		if seen[m.Name()] {
			return nil, fmt.Errorf("module %s loaded twice", m.Name())
		}
		seen[m.Name()] = true
		if w, ok := m.(Waker); ok {
			for _, p := range w.Prefixes() {
				if err := registry.Register(p, wakes.WakerFunc(w.Wake)); err != nil {
					return nil, fmt.Errorf("module %s: %w", m.Name(), err)
				}
			}
		}
		if wp, ok := m.(WorkerProvider); ok {
			qs, err := wp.AddWorkers(workers)
			if err != nil {
				return nil, fmt.Errorf("module %s: adding its workers: %w", m.Name(), err)
			}
			for name, qc := range qs {
				queues[name] = qc
			}
		}
	}
	wo := opts.Wakes
	wo.Workers, wo.Queues, wo.Logger = workers, queues, opts.Logger
	svc, err := wakes.New(pool, registry, wo)
	if err != nil {
		return nil, err
	}
	h.svc = svc
	for _, m := range modules {
		mc := newContext(m.Name(), pool, q, svc.Client(), opts.Logger)
		h.contexts[m.Name()] = mc
		if in, ok := m.(Initializer); ok {
			if err := in.Init(mc); err != nil {
				return nil, fmt.Errorf("module %s: %w", m.Name(), err)
			}
		}
	}
	q.OnSettle(svc.Hook())
	return h, nil
}

// Wakes is the wake service (River).
func (h *Host) Wakes() *wakes.Service { return h.svc }

// Context is module name's context, nil for one not loaded.
func (h *Host) Context(name string) *Context { return h.contexts[name] }

// Run starts River's workers and every Runner module, and returns when ctx
// ends, after River stopped (waiting up to 10 s for running wakers) and
// the loops returned.
func (h *Host) Run(ctx context.Context) error {
	if err := h.svc.Start(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, m := range h.modules {
		r, ok := m.(Runner)
		if !ok {
			continue
		}
		mc := h.contexts[m.Name()]
		wg.Go(func() {
			for ctx.Err() == nil {
				err := r.Run(ctx, mc)
				if ctx.Err() != nil || err == nil {
					return
				}
				h.logger.Error("module loop failed; restarting it", "module", m.Name(), "error", err)
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Second):
				}
			}
		})
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := h.svc.Stop(stopCtx)
	wg.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("stopping river: %w", err)
	}
	return nil
}
