// Package lanes runs each command lane on its own fixed pool of workers. Lanes
// bound the work in flight per node: a lane whose workers are all busy refuses
// more work at once (BUSY) instead of queueing it, because the gateway keeps
// the command pending and retries it with a backoff.
package lanes

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/better-compute/commands/sdk/kind"
)

// ErrBusy is returned when every worker of a lane is busy.
var ErrBusy = errors.New("lane busy")

// ErrClosed is returned once the pool is closed.
var ErrClosed = errors.New("lane pool closed")

// Sizes are the worker counts per lane.
type Sizes struct {
	Control   int `json:"control,omitempty"`
	Provision int `json:"provision,omitempty"`
	Bulk      int `json:"bulk,omitempty"`
}

// DefaultSizes match the gateway's credits: 8 control, 4 provision, 2 bulk.
var DefaultSizes = Sizes{Control: 8, Provision: 4, Bulk: 2}

// Of returns the size of lane l.
func (s Sizes) Of(l kind.Lane) int {
	switch l {
	case kind.LaneControl:
		return s.Control
	case kind.LaneProvision:
		return s.Provision
	case kind.LaneBulk:
		return s.Bulk
	}
	return 0
}

// WithDefaults fills every unset (zero) size from DefaultSizes.
func (s Sizes) WithDefaults() Sizes {
	if s.Control == 0 {
		s.Control = DefaultSizes.Control
	}
	if s.Provision == 0 {
		s.Provision = DefaultSizes.Provision
	}
	if s.Bulk == 0 {
		s.Bulk = DefaultSizes.Bulk
	}
	return s
}

// Validate refuses negative sizes and sizes above 1024.
func (s Sizes) Validate() error {
	var errs []error
	for _, l := range kind.Lanes {
		if n := s.Of(l); n < 0 || n > 1024 {
			errs = append(errs, fmt.Errorf("lane %s: size %d: must be 1 to 1024 (0 means the default)", l, n))
		}
	}
	return errors.Join(errs...)
}

// Pool is a fixed set of worker goroutines per lane. A lane's slots count
// the jobs handed to it and not yet finished; a job takes a slot before it is
// queued and gives it back when its worker returns, so a worker between two
// jobs never makes the lane look full.
type Pool struct {
	sizes Sizes
	slots map[kind.Lane]chan struct{}
	jobs  map[kind.Lane]chan Job
	wg    sync.WaitGroup

	// closeLock guards closed; it is held for reading while a job is handed
	// over so that Close never closes a channel under a sender.
	closeLock sync.RWMutex
	closed    bool
}

// New starts the workers: sizes.WithDefaults() of them per lane.
func New(sizes Sizes) *Pool {
	sizes = sizes.WithDefaults()
	p := &Pool{sizes: sizes, slots: map[kind.Lane]chan struct{}{}, jobs: map[kind.Lane]chan Job{}}
	for _, l := range kind.Lanes {
		n := sizes.Of(l)
		p.slots[l] = make(chan struct{}, n)
		// As many queue places as slots: a hand-over after taking a slot
		// never blocks.
		ch := make(chan Job, n)
		p.jobs[l] = ch
		for i := 0; i < n; i++ {
			p.wg.Add(1)
			go p.work(p.slots[l], ch)
		}
	}
	return p
}

func (p *Pool) work(slots chan struct{}, ch chan Job) {
	defer p.wg.Done()
	for job := range ch {
		var once sync.Once
		release := func() { once.Do(func() { <-slots }) }
		job(release)
		release()
	}
}

// Job is work for a lane worker. It may call release once its command's
// outcome is settled, before it reports it: whoever gets the outcome may
// send the next command at once and must find the worker free. The worker
// releases the slot itself when the job returns, if the job did not.
type Job func(release func())

// Sizes returns the worker counts.
func (p *Pool) Sizes() Sizes { return p.sizes }

// TryRun hands job to a worker of lane l, or returns ErrBusy at once when
// every worker of the lane has a job.
func (p *Pool) TryRun(l kind.Lane, job Job) error {
	p.closeLock.RLock()
	defer p.closeLock.RUnlock()
	if p.closed {
		return ErrClosed
	}
	slots, ok := p.slots[l]
	if !ok {
		return fmt.Errorf("unknown lane %q", l)
	}
	select {
	case slots <- struct{}{}:
		p.jobs[l] <- job
		return nil
	default:
		return fmt.Errorf("lane %s: all %d workers busy: %w", l, p.sizes.Of(l), ErrBusy)
	}
}

// Run hands job to lane l as soon as one of its workers is free, waiting
// until ctx ends. Recovery uses it: re-running the journal's commands must
// not fail because there are more of them than workers.
func (p *Pool) Run(ctx context.Context, l kind.Lane, job Job) error {
	p.closeLock.RLock()
	defer p.closeLock.RUnlock()
	if p.closed {
		return ErrClosed
	}
	slots, ok := p.slots[l]
	if !ok {
		return fmt.Errorf("unknown lane %q", l)
	}
	select {
	case slots <- struct{}{}:
		p.jobs[l] <- job
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for a %s worker: %w", l, ctx.Err())
	}
}

// InUse returns how many workers of lane l have a job.
func (p *Pool) InUse(l kind.Lane) int { return len(p.slots[l]) }

// Queued returns how many of lane l's jobs wait for a worker to pick them
// up (handed over, not yet started).
func (p *Pool) Queued(l kind.Lane) int { return len(p.jobs[l]) }

// Free reports whether lane l has a free worker right now. It is a hint for
// the acceptance checks; TryRun is the authority.
func (p *Pool) Free(l kind.Lane) bool { return p.InUse(l) < p.sizes.Of(l) }

// Close stops taking jobs and waits for the queued and running ones to
// return. Cancel the context of any Run call first: Close waits for it.
func (p *Pool) Close() {
	p.closeLock.Lock()
	if !p.closed {
		p.closed = true
		for _, ch := range p.jobs {
			close(ch)
		}
	}
	p.closeLock.Unlock()
	p.wg.Wait()
}
