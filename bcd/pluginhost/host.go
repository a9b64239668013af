// Package pluginhost is bcd's go-plugin host: it discovers the kind plugin
// binaries in one directory, starts each once and keeps it running, reads and
// validates their manifests, runs commands on them, and restarts a plugin that
// exits, with backoff and a new go-plugin client each time.
//
// Each plugin leads its own process group and the whole group is killed with
// it, so the tools a plugin runs (nvidia-smi, dcgmi) never outlive it. A
// plugin gets an allowlisted environment, never bcd's own, and its stderr
// lands in bcd's log under the plugin binary's name.
package pluginhost

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/wire"
)

// Sentinel errors; each returned error wraps one of them.
var (
	// ErrRefused is wrapped by every refusal of a plugin binary at Start:
	// a symlink escaping the directory, a pinned digest that differs, an
	// invalid manifest, a kind claimed twice.
	ErrRefused = errors.New("plugin refused")
	// ErrUnknownKind is returned by Execute for a kind no plugin serves.
	ErrUnknownKind = errors.New("no plugin serves this kind")
	// ErrPluginCrashed is returned by Execute when the plugin process exited
	// (or lost its connection) while the command ran.
	ErrPluginCrashed = errors.New("plugin crashed")
	// ErrPluginUnavailable is returned by Execute when the kind's plugin was
	// down and did not come back before the command's context ended.
	ErrPluginUnavailable = errors.New("plugin unavailable")
	// ErrClosed is returned once Close has been called.
	ErrClosed = errors.New("plugin host closed")
)

// Failure reasons the host itself reports, beside the plugin's own; the
// spellings are sdk/kind's, defined once.
const (
	ReasonPluginCrashed     = kind.ReasonPluginCrashed
	ReasonPluginUnavailable = kind.ReasonPluginUnavailable
	ReasonPluginError       = kind.ReasonPluginError
	ReasonInterrupted       = kind.ReasonInterrupted
	ReasonTimeout           = kind.ReasonTimeout
)

// Config configures the host.
type Config struct {
	// Dir is the plugin directory. Only regular, executable files directly
	// in it are plugins; a symlink is followed only when it stays inside Dir;
	// files writable by group or others are refused.
	Dir string
	// SHA256 optionally pins binaries: file name -> hex SHA-256. A pinned
	// binary whose digest differs is refused, at Start and at every restart.
	SHA256 map[string]string
	// Env is extra environment (KEY=VALUE) passed to every plugin. Plugins
	// never get bcd's environment: only PATH, LANG, LC_ALL, TZ and TMPDIR
	// from it, then these.
	Env []string
	// StartTimeout bounds one plugin start (exec until handshake).
	StartTimeout time.Duration
	// RestartBackoffMin and RestartBackoffMax bound the exponential backoff
	// between restarts of a plugin that exited.
	RestartBackoffMin, RestartBackoffMax time.Duration
	// LogLevel is the plugins' log level (trace, debug, info, warn, error).
	LogLevel string
	// CancelGrace is how long a cancelled or timed-out command has to report
	// its real outcome before the host stops waiting; 10 s when 0.
	CancelGrace time.Duration
	// KillTimeout bounds a graceful plugin stop before its group is killed;
	// 2 s when 0.
	KillTimeout time.Duration
	// OnEvent, when set, is told of each plugin process's life: EventStart
	// (the first start served its manifests), EventCrash (a process exited
	// while the host was open) and EventRestart (a restarted process
	// serves again). plugin is the binary's file name. bcd's metrics count
	// them; it is called on the supervisor's goroutine, so keep it cheap.
	OnEvent func(plugin string, event Event)
}

// Event is a plugin process's life event, as Config.OnEvent reports it.
type Event string

// The events Config.OnEvent reports.
const (
	EventStart   Event = "start"
	EventCrash   Event = "crash"
	EventRestart Event = "restart"
)

func (c Config) event(plugin string, e Event) {
	if c.OnEvent != nil {
		c.OnEvent(plugin, e)
	}
}

func (c Config) withDefaults() Config {
	if c.StartTimeout <= 0 {
		c.StartTimeout = wire.DefaultStartTimeout
	}
	if c.RestartBackoffMin <= 0 {
		c.RestartBackoffMin = 500 * time.Millisecond
	}
	if c.RestartBackoffMax < c.RestartBackoffMin {
		c.RestartBackoffMax = max(time.Minute, c.RestartBackoffMin)
	}
	if c.CancelGrace <= 0 {
		c.CancelGrace = wire.DefaultCancelGrace
	}
	if c.KillTimeout <= 0 {
		c.KillTimeout = 2 * time.Second
	}
	return c
}

// pluginEnv builds a plugin's whole environment: wire.BaseEnv (PATH, LANG,
// LC_ALL, TZ, TMPDIR), the log level, then Config.Env.
func (c Config) pluginEnv() []string {
	env := wire.BaseEnv()
	if c.LogLevel != "" {
		env = append(env, wire.EnvLogLevel+"="+c.LogLevel)
	}
	return append(env, c.Env...)
}

// Host runs kind plugins. Its methods are safe for concurrent use.
type Host struct {
	logger   hclog.Logger
	cfg      Config
	services kind.Host

	// kindsLock guards kinds, instances, live, refused and pins.
	kindsLock sync.RWMutex
	// kinds routes each kind to the instance that serves it now.
	kinds map[string]route
	// instances are the current plugins, in name order: what serves new
	// commands.
	instances []*instance
	// live holds every instance not yet closed: the current ones and those
	// a reload retired that still finish their commands.
	live map[*instance]struct{}
	// refused are the plugin files the last Start or Reload refused.
	refused []Refusal
	// pins are the SHA-256 pins in force (Config.SHA256, or a reload's).
	pins map[string]string

	// reloadLock serialises Start and Reload.
	reloadLock sync.Mutex

	// started is set by the first Start; a second is refused.
	started atomic.Bool

	// closeOnce and closed mark the host closed; closed is closed by Close.
	closeOnce sync.Once
	closed    chan struct{}
}

// route is where a kind runs.
type route struct {
	manifest kind.Manifest
	inst     *instance
}

// Refusal is one plugin file the host refused to run, and why.
type Refusal struct {
	// Plugin is the file name in the plugin directory ("" for the
	// directory itself).
	Plugin string
	// Err wraps ErrRefused (or the directory's error) and says why.
	Err error
	// Reason is a stable word for why: pin-mismatch, untrusted,
	// invalid-manifest, kind-conflict, start-failed.
	Reason string
	// PinnedSHA256 and FoundSHA256 (pin-mismatch) are the SHA-256 the
	// config pins and the one the file has.
	PinnedSHA256, FoundSHA256 string
}

// Plugin describes one plugin the host runs now.
type Plugin struct {
	// Name is the binary's file name in the plugin directory.
	Name string
	// Protocol is the protocol version negotiated with it (wire.ProtocolVersion1, 2).
	Protocol int
	// SDKVersion is the sdk/kind version it was built with, as it says.
	SDKVersion string
	// Capabilities are what it listed (protocol 2 on).
	Capabilities []string
	// Kinds are the kinds it serves, sorted.
	Kinds []string
}

// New returns a host for cfg; nothing starts before Start. services is bcd's
// side of the Host callback service (inventory, node spec, conditions,
// journal), served to every plugin over go-plugin's broker; nil serves
// nothing (plugins get ErrNoHost).
func New(logger hclog.Logger, cfg Config, services kind.Host) *Host {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Host{
		logger:   logger.Named("pluginhost").With("plugin_dir", cfg.Dir),
		cfg:      cfg.withDefaults(),
		services: services,
		kinds:    map[string]route{},
		live:     map[*instance]struct{}{},
		pins:     cfg.SHA256,
		closed:   make(chan struct{}),
	}
}

// Start discovers the plugin binaries, starts each once (in parallel), reads
// and validates its manifests and keeps it running. It returns nil when every
// plugin file loaded. Otherwise it returns the refusals joined, each wrapping
// ErrRefused and naming the file (a kind claimed twice names both binaries:
// the first in name order keeps the kind, the second is stopped), each also
// logged and kept for Refused; the plugins that did load stay up and serve
// Execute, so the caller may go on. Start runs once; call Close whatever it
// returned.
func (h *Host) Start(ctx context.Context) error {
	if !h.started.CompareAndSwap(false, true) {
		return errors.New("plugin host already started")
	}
	_, err := h.load(ctx, h.cfg.SHA256)
	return err
}

// Refused lists the plugin files the last Start or Reload refused, in name
// order. bcd kinds exits non-zero when there is any.
func (h *Host) Refused() []Refusal {
	h.kindsLock.RLock()
	defer h.kindsLock.RUnlock()
	return append([]Refusal(nil), h.refused...)
}

// Plugins describes the plugins that serve new commands now, in name order.
func (h *Host) Plugins() []Plugin {
	h.kindsLock.RLock()
	defer h.kindsLock.RUnlock()
	out := make([]Plugin, 0, len(h.instances))
	for _, in := range h.instances {
		out = append(out, Plugin{Name: in.bin.name, Protocol: in.protocol, SDKVersion: in.sdkVersion,
			Capabilities: append([]string(nil), in.capabilities...), Kinds: kindNames(in.manifests)})
	}
	return out
}

func (h *Host) isClosed() bool { return isClosed(h.closed) }

func kindNames(ms []kind.Manifest) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Kind)
	}
	return out
}

// Manifests returns the loaded kinds' manifests, sorted by kind.
func (h *Host) Manifests() []kind.Manifest {
	h.kindsLock.RLock()
	defer h.kindsLock.RUnlock()
	out := make([]kind.Manifest, 0, len(h.kinds))
	for _, r := range h.kinds {
		out = append(out, r.manifest)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}

// Manifest returns one loaded kind's manifest.
func (h *Host) Manifest(kindName string) (kind.Manifest, bool) {
	h.kindsLock.RLock()
	defer h.kindsLock.RUnlock()
	r, ok := h.kinds[kindName]
	return r.manifest, ok
}

// Close stops every plugin, a retired one still finishing its commands
// included, and kills its whole process group. In-flight commands end
// failed with reason interrupted.
func (h *Host) Close() error {
	h.closeOnce.Do(func() { close(h.closed) })
	h.kindsLock.RLock()
	insts := make([]*instance, 0, len(h.live))
	for in := range h.live {
		insts = append(insts, in)
	}
	h.kindsLock.RUnlock()
	var wg sync.WaitGroup
	for _, in := range insts {
		wg.Go(in.close)
	}
	wg.Wait()
	return nil
}
