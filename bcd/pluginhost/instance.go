package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/internal/backoff"
	"github.com/better-compute/commands/sdk/kind"
	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
	"github.com/better-compute/commands/sdk/wire"
	"github.com/better-compute/commands/sdk/wire/kindpb"
)

// instance supervises one plugin binary: one process at a time, restarted
// with backoff when it exits, until the host closes.
type instance struct {
	h      *Host
	bin    binary
	logger hclog.Logger

	// manifests are read at the first start and never change: a restarted
	// process must serve the same kinds. protocol, sdkVersion and
	// capabilities are what that first process negotiated and said.
	manifests    []kind.Manifest
	protocol     int
	sdkVersion   string
	capabilities []string

	// procLock guards cur, ready, closing and downErr.
	procLock sync.Mutex
	// cur is the running process, nil while the plugin is down.
	cur *proc
	// ready is closed when cur is set or the instance closes; a new one is
	// made each time the plugin goes down.
	ready   chan struct{}
	closing bool
	// downErr is why the last restart failed, nil once one succeeds. When
	// it wraps ErrRefused (a pin that differs, a file now untrusted, other
	// manifests), waiting for the next attempt is pointless: commands fail
	// at once.
	downErr error

	// inflight counts the commands routed to this instance and not yet
	// finished; retired is set once a reload replaced or removed it. A
	// retired instance is closed when its last command finishes, and is not
	// restarted if its process exits.
	inflight atomic.Int64
	retired  atomic.Bool

	// supervised is closed when the supervisor goroutine returns.
	supervised chan struct{}
}

// proc is one plugin process.
type proc struct {
	*wire.Process
	// brokerID is where the Host service is served to this process.
	brokerID uint32
	started  time.Time
	// sdkVersion and capabilities are what its ManifestsResponse said.
	sdkVersion   string
	capabilities []string
}

func newInstance(h *Host, b binary) *instance {
	return &instance{
		h:          h,
		bin:        b,
		logger:     h.logger.With("plugin", b.name),
		ready:      make(chan struct{}),
		supervised: make(chan struct{}),
	}
}

// start runs the plugin for the first time and reads its manifests. An error
// wraps ErrRefused and names the binary.
func (in *instance) start(ctx context.Context) error {
	p, ms, err := in.spawn(ctx)
	if err != nil {
		close(in.supervised)
		return fmt.Errorf("%w: %s: %w", ErrRefused, in.bin.name, err)
	}
	in.manifests = ms
	in.protocol, in.sdkVersion, in.capabilities = p.Kind.Protocol, p.sdkVersion, p.capabilities
	in.procLock.Lock()
	in.cur = p
	close(in.ready)
	in.procLock.Unlock()
	in.h.cfg.event(in.bin.name, EventStart)
	go in.supervise(p) //nolint:gosec,contextcheck // G118, contextcheck: the supervisor lives as long as the plugin, not as the start call whose ctx is in scope
	return nil
}

// spawn starts one process, serves it the Host service and reads its
// manifests.
func (in *instance) spawn(ctx context.Context) (*proc, []kind.Manifest, error) {
	// The file is checked again at every start: one that became writable
	// by others since discovery must not run at a restart.
	info, err := os.Stat(in.bin.path)
	if err != nil {
		return nil, nil, err
	}
	if why := trusted(in.bin.path, info); why != "" {
		return nil, nil, fmt.Errorf("%w: %s", ErrRefused, why)
	}
	wp, err := wire.Start(wire.Launch{
		Path:         in.bin.path,
		Env:          in.h.cfg.pluginEnv(),
		Logger:       in.h.logger,
		StartTimeout: in.h.cfg.StartTimeout,
		SHA256:       in.bin.sha256,
	})
	if err != nil {
		return nil, nil, err
	}
	p := &proc{Process: wp, started: time.Now()}
	p.brokerID = wp.ServeHost(kindpb.NewHostServer(in.h.services))
	ms, err := in.readManifests(ctx, p)
	if err != nil {
		in.stop(p)
		return nil, nil, err
	}
	return p, ms, nil
}

// readManifests asks the process for its manifests and validates them.
func (in *instance) readManifests(ctx context.Context, p *proc) ([]kind.Manifest, error) {
	ctx, cancel := context.WithTimeout(ctx, in.h.cfg.StartTimeout)
	defer cancel()
	resp, err := p.Kind.Manifests(ctx, &pluginv1.ManifestsRequest{HostBrokerId: p.brokerID})
	if err != nil {
		return nil, fmt.Errorf("reading manifests: %w", err)
	}
	if len(resp.GetManifests()) == 0 {
		return nil, errors.New("serves no kinds")
	}
	p.sdkVersion = resp.GetSdkVersion()
	if p.Kind.Protocol >= wire.ProtocolVersion2 {
		// A protocol-1 plugin knows no capabilities: never read any.
		p.capabilities = resp.GetCapabilities()
	}
	var errs []error
	seen := map[string]bool{}
	ms := make([]kind.Manifest, 0, len(resp.GetManifests()))
	for _, pm := range resp.GetManifests() {
		m := kindpb.ManifestFromProto(pm)
		if err := m.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("invalid manifest: %w", err))
			continue
		}
		if seen[m.Kind] {
			errs = append(errs, fmt.Errorf("kind %s is served twice", m.Kind))
			continue
		}
		seen[m.Kind] = true
		ms = append(ms, m)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: %w", errBadManifests, err)
	}
	return ms, nil
}

// errBadManifests is wrapped by readManifests' validation failures.
var errBadManifests = errors.New("the plugin serves invalid manifests")

// refusal marks a failed restart as a refusal (wrapping ErrRefused) when
// trying again cannot help until an operator acts: a pin that differs, a
// file that is not trusted, invalid or other manifests.
func refusal(err error) error {
	switch {
	case errors.Is(err, ErrRefused):
		return err
	case errors.Is(err, wire.ErrChecksum), errors.Is(err, errBadManifests):
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return err
}

// sameKinds reports whether a restarted process serves what the first did.
func (in *instance) sameKinds(ms []kind.Manifest) bool {
	if len(ms) != len(in.manifests) {
		return false
	}
	want := map[string]string{}
	for _, m := range in.manifests {
		want[m.Kind] = m.Digest()
	}
	for _, m := range ms {
		if want[m.Kind] != m.Digest() {
			return false
		}
	}
	return true
}

// supervise waits for each process to exit and starts the next, with
// exponential backoff, until the instance closes. The backoff resets once a
// process has stayed up for RestartBackoffMax.
func (in *instance) supervise(p *proc) {
	defer close(in.supervised)
	attempt := 0
	for {
		select {
		case <-p.Exited:
		case <-in.h.closed:
			return
		}
		in.procLock.Lock()
		if in.closing {
			in.procLock.Unlock()
			if in.retired.Load() {
				// A retired plugin whose last command ended closes as it
				// exits: say so whichever came first.
				in.logger.Warn("retired plugin exited; not restarting it", "pid", p.Pid)
			}
			return
		}
		if in.cur == p {
			in.cur = nil
			in.ready = make(chan struct{})
		}
		in.procLock.Unlock()
		in.h.cfg.event(in.bin.name, EventCrash)
		if in.retired.Load() {
			// A reload replaced this binary: its file may be the new
			// version now, so never restart it; its commands have failed.
			in.logger.Warn("retired plugin exited; not restarting it", "pid", p.Pid)
			in.reap(p)
			go in.h.closeRetired(in)
			return
		}
		in.logger.Error("plugin exited; restarting it", "pid", p.Pid, "up", time.Since(p.started).Round(time.Millisecond))
		in.reap(p)
		if time.Since(p.started) >= in.h.cfg.RestartBackoffMax {
			attempt = 0
		}
		for {
			delay := restartWait(in.h.cfg.RestartBackoffMin, in.h.cfg.RestartBackoffMax, attempt)
			attempt++
			timer := time.NewTimer(delay)
			select {
			case <-timer.C:
			case <-in.h.closed:
				timer.Stop()
				return
			}
			np, ms, err := in.spawn(context.Background())
			if err == nil && !in.sameKinds(ms) {
				in.stop(np)
				err = fmt.Errorf("%w: the restarted binary serves other kinds or manifests than at start; reload bcd (bcd reload, or SIGHUP) to load it", ErrRefused)
			}
			if err != nil {
				in.logger.Error("plugin restart failed", "attempt", attempt, "next_in", restartWait(in.h.cfg.RestartBackoffMin, in.h.cfg.RestartBackoffMax, attempt), "error", err)
				in.procLock.Lock()
				in.downErr = refusal(err)
				in.procLock.Unlock()
				continue
			}
			in.procLock.Lock()
			if in.closing {
				in.procLock.Unlock()
				in.stop(np)
				return
			}
			in.cur, in.downErr = np, nil
			close(in.ready)
			in.procLock.Unlock()
			in.h.cfg.event(in.bin.name, EventRestart)
			in.logger.Info("plugin restarted", "pid", np.Pid, "attempt", attempt)
			p = np
			break
		}
	}
}

// restartWait is the wait before restart attempt+1: internal/backoff's,
// from min doubled attempt times, capped at max.
func restartWait(lo, hi time.Duration, attempt int) time.Duration {
	return backoff.Nth(lo, hi, attempt+1)
}

// get returns the running process, waiting for a restart while ctx allows.
// A plugin whose last restart was refused (downErr wraps ErrRefused) is not
// waited for: that error comes back at once.
func (in *instance) get(ctx context.Context) (*proc, error) {
	for {
		in.procLock.Lock()
		p, closing, downErr := in.cur, in.closing, in.downErr
		if p != nil && isClosed(p.Exited) {
			// Exited, and the supervisor has not seen it yet: never hand
			// out a dead process; wait for its replacement.
			in.cur, p = nil, nil
			in.ready = make(chan struct{})
		}
		ready := in.ready
		in.procLock.Unlock()
		switch {
		case closing:
			return nil, ErrClosed
		case p != nil:
			return p, nil
		case errors.Is(downErr, ErrRefused):
			return nil, downErr
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// acquire counts a command routed to in; call it with the host's kindsLock
// held, so that a reload's retire sees it.
func (in *instance) acquire() { in.inflight.Add(1) }

// release ends what acquire counted; the last command of a retired
// instance closes it.
func (in *instance) release() {
	if in.inflight.Add(-1) == 0 && in.retired.Load() {
		go in.h.closeRetired(in)
	}
}

// retire marks in replaced by a reload: it takes no new commands (the
// reload routed its kinds elsewhere), finishes those it runs, then closes.
func (in *instance) retire() {
	in.retired.Store(true)
	if in.inflight.Load() == 0 {
		go in.h.closeRetired(in)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// fail treats p as crashed though its process may live on (its connection
// broke): killing its group makes it exit, and the supervisor restarts it.
// When fail returns, p is no longer handed out, so the next command waits
// for the new process instead of meeting the dead one.
func (in *instance) fail(p *proc) {
	if err := wire.KillGroup(p.Pid); err != nil {
		in.logger.Warn("killing plugin", "pid", p.Pid, "error", err)
	}
	timer := time.NewTimer(in.h.cfg.KillTimeout)
	defer timer.Stop()
	select {
	case <-p.Exited:
	case <-timer.C:
		in.logger.Warn("plugin did not exit after its group was killed", "pid", p.Pid)
	}
	in.procLock.Lock()
	defer in.procLock.Unlock()
	if in.cur == p {
		in.cur = nil
		in.ready = make(chan struct{})
	}
}

// reap cleans up after a process that exited: its children die with its
// group, and go-plugin's client is released, bounded in time since its Kill
// can hang (terraform#38940).
func (in *instance) reap(p *proc) {
	if err := wire.KillGroup(p.Pid); err != nil {
		in.logger.Warn("killing plugin process group", "pid", p.Pid, "error", err)
	}
	in.killClient(p)
}

// stop ends a process gracefully, bounded, then kills its whole group.
func (in *instance) stop(p *proc) {
	if err := p.Stop(in.h.cfg.KillTimeout); err != nil {
		in.logger.Warn("stopping plugin", "pid", p.Pid, "error", err)
	}
}

func (in *instance) killClient(p *proc) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Client.Kill()
	}()
	timer := time.NewTimer(in.h.cfg.KillTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		in.logger.Warn("go-plugin Kill did not return in time", "pid", p.Pid)
	}
}

// close stops the instance for good: waiters get ErrClosed, the process and
// its group are killed, and the supervisor has returned when close does.
func (in *instance) close() {
	in.procLock.Lock()
	if in.closing {
		in.procLock.Unlock()
		return
	}
	in.closing = true
	p := in.cur
	in.cur = nil
	select {
	case <-in.ready:
	default:
		close(in.ready)
	}
	in.procLock.Unlock()
	if p != nil {
		in.stop(p)
	}
	select {
	case <-in.supervised:
	case <-time.After(in.h.cfg.KillTimeout + in.h.cfg.StartTimeout):
		in.logger.Warn("plugin supervisor did not stop in time")
	}
}
