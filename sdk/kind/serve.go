package kind

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
	"github.com/better-compute/commands/sdk/wire"
)

// SDKVersion is reported to bcd in Manifests. A release of the SDK module
// is tagged sdk/v<SDKVersion> in the repository, and make sdk-api-check
// holds the API to it: compatible with the last release's unless the major
// changes, and a new minor for an addition. 0.3.0 moves the wire
// converters to sdk/wire/kindpb (kind keeps deprecated forwarders); 0.2.0
// serves protocol versions 1 and 2 (wire.ProtocolVersions); 0.1.0 served
// protocol 1 only.
const SDKVersion = "0.3.0"

// Serve serves kinds as a bcd plugin and never returns. It validates every
// manifest first and exits with status 1, naming what is wrong, when one is
// invalid or two claim one kind.
func Serve(kinds ...Kind) {
	logger := NewLogger()
	srv, err := NewServer(logger, kinds...)
	if err != nil {
		logger.Error("refusing to serve", "error", err)
		fmt.Fprintln(os.Stderr, "bcd plugin:", err)
		os.Exit(1)
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: wire.Handshake,
		// Every protocol version this SDK speaks: an older bcd offers only
		// the older ones, and go-plugin picks the highest both know.
		VersionedPlugins: wire.VersionedPlugins(srv.bind),
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, wire.ServerOptions()...)...)
		},
		Logger: logger,
	})
	os.Exit(0)
}

// NewLogger is the plugin's hclog logger: JSON on stderr, which bcd parses and
// re-emits under the plugin's name. The level comes from BCD_PLUGIN_LOG_LEVEL.
func NewLogger() hclog.Logger {
	level := hclog.LevelFromString(os.Getenv(wire.EnvLogLevel))
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	return hclog.New(&hclog.LoggerOptions{
		Level:      level,
		Output:     os.Stderr,
		JSONFormat: true,
	})
}

// Server is the plugin side of bc.plugin.v1. Serve uses it; tests and
// harnesses can serve it in-process.
type Server struct {
	pluginv1.UnimplementedKindPluginServer
	logger     hclog.Logger
	kinds      map[string]Kind
	validators map[string]*Validator
	broker     *plugin.GRPCBroker

	// hostLock guards hosts, the dialled Host connections by broker id.
	hostLock sync.Mutex
	hosts    map[uint32]*grpc.ClientConn

	// runningLock guards running and precancelled.
	runningLock sync.Mutex
	// running holds the cancel function of each command being executed, by id.
	running map[string]context.CancelFunc
	// precancelled holds ids whose Cancel arrived before their Execute did
	// (the two RPCs race on separate streams), with when it arrived.
	precancelled map[string]time.Time

	// injectPanic is the id of the one command whose handler panics
	// (wire.EnvInjectPanic, set only by the conformance harness); "" when
	// none does.
	injectPanic string
}

// precancelTTL bounds how long a Cancel for a command not yet started is kept.
const precancelTTL = time.Minute

// NewServer validates kinds and builds a Server.
func NewServer(logger hclog.Logger, kinds ...Kind) (*Server, error) {
	if len(kinds) == 0 {
		return nil, fmt.Errorf("no kinds to serve")
	}
	s := &Server{
		logger:     logger,
		kinds:      map[string]Kind{},
		validators: map[string]*Validator{},
		hosts:      map[uint32]*grpc.ClientConn{},

		running:      map[string]context.CancelFunc{},
		precancelled: map[string]time.Time{},
		injectPanic:  os.Getenv(wire.EnvInjectPanic),
	}
	for _, k := range kinds {
		if err := k.Manifest.Validate(); err != nil {
			return nil, fmt.Errorf("invalid manifest: %w", err)
		}
		if k.Handler == nil {
			return nil, fmt.Errorf("kind %s: no handler", k.Manifest.Kind)
		}
		if _, dup := s.kinds[k.Manifest.Kind]; dup {
			return nil, fmt.Errorf("kind %s is served twice by this binary", k.Manifest.Kind)
		}
		v, err := NewValidator(k.Manifest)
		if err != nil {
			return nil, err
		}
		s.kinds[k.Manifest.Kind] = k
		s.validators[k.Manifest.Kind] = v
	}
	return s, nil
}

func (s *Server) bind(broker *plugin.GRPCBroker) pluginv1.KindPluginServer {
	s.broker = broker
	return s
}

// Manifests lists the kinds, sorted by name. When bcd names the broker id of
// its Host service, the plugin dials it now: go-plugin drops an offered broker
// connection that nobody dials within 5 seconds.
func (s *Server) Manifests(ctx context.Context, req *pluginv1.ManifestsRequest) (*pluginv1.ManifestsResponse, error) {
	if id := req.GetHostBrokerId(); id != 0 && s.broker != nil {
		go func() {
			if _, err := s.hostClient(id); err != nil {
				s.logger.Warn("host service not reachable", "broker_id", id, "error", err)
			}
		}()
	}
	names := make([]string, 0, len(s.kinds))
	for n := range s.kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	resp := &pluginv1.ManifestsResponse{SdkVersion: SDKVersion, Capabilities: append([]string(nil), wire.Capabilities...)}
	for _, n := range names {
		resp.Manifests = append(resp.Manifests, manifestToProto(s.kinds[n].Manifest))
	}
	return resp, nil
}

// Execute runs one command and streams its progress and result. A bad payload
// or a panic is a failed result, never a dead plugin.
func (s *Server) Execute(req *pluginv1.ExecuteRequest, stream grpc.ServerStreamingServer[pluginv1.ExecuteEvent]) error {
	ctx := stream.Context()
	pc := req.GetCommand()
	cmd := Command{ID: pc.GetId(), Kind: pc.GetKind(), NodeID: pc.GetNodeId(), Payload: pc.GetPayload(), Secrets: pc.GetSecrets()}
	if pc.GetNotAfter() != nil {
		cmd.NotAfter = pc.GetNotAfter().AsTime()
	}
	if pc.GetDeadline() != nil {
		cmd.Deadline = pc.GetDeadline().AsTime()
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, cmd.Deadline)
		defer cancel()
	}
	logger := s.logger.With("command_id", cmd.ID, "kind", cmd.Kind)
	ctx, done := s.track(ctx, cmd.ID)
	defer done()

	// sendLock serialises sends: a handler may report progress from several goroutines.
	var sendLock sync.Mutex
	send := func(ev *pluginv1.ExecuteEvent) error {
		sendLock.Lock()
		defer sendLock.Unlock()
		return stream.Send(ev)
	}
	finish := func(r Result) error {
		return send(&pluginv1.ExecuteEvent{Event: &pluginv1.ExecuteEvent_Result{Result: resultToProto(r)}})
	}

	k, ok := s.kinds[cmd.Kind]
	if !ok {
		return finish(Result{Status: StatusFailed, Reason: ReasonUnknownKind, Message: fmt.Sprintf("this plugin does not serve kind %q", cmd.Kind)})
	}
	if err := s.validators[cmd.Kind].Validate(cmd.Payload); err != nil {
		logger.Warn("refusing payload", "error", err)
		return finish(Result{Status: StatusFailed, Reason: ReasonInvalidPayload, Message: err.Error()})
	}
	// returned is set once the handler returned: a report after it is work
	// the handler left running, which the stream can no longer carry; it is
	// logged once (wire.LateProgressMessage), for bcd's log and the harness.
	var returned, lateLogged atomic.Bool
	progress := ProgressFunc(func(percent int, message string) {
		if returned.Load() {
			if lateLogged.CompareAndSwap(false, true) {
				logger.Warn(wire.LateProgressMessage, "percent", percent, "message", message)
			}
			return
		}
		if percent < -1 || percent > 100 {
			percent = -1
		}
		// A report after the cancel (or the deadline) says the handler was
		// still at work then: the harness allows the action under way, not
		// more.
		pr := &pluginv1.Progress{Percent: int32(percent), Message: message, AfterCancel: ctx.Err() != nil}
		if err := send(&pluginv1.ExecuteEvent{Event: &pluginv1.ExecuteEvent_Progress{Progress: pr}}); err != nil {
			logger.Debug("progress not sent", "error", err)
		}
	})
	h := k.Handler
	if s.injectPanic != "" && cmd.ID == s.injectPanic {
		h = injectedPanic{}
	}
	r := Run(ctx, h, Request{
		Command:  cmd,
		Progress: progress,
		Host:     s.host(req.GetHostBrokerId()),
		Logger:   logger,
	})
	returned.Store(true)
	return finish(r)
}

// injectedPanic is the handler of the command the conformance harness
// names in wire.EnvInjectPanic: it panics where the kind's handler would
// run, under the same recover, so the harness checks the plugin's own
// serving path on a plugin with no kind that panics of its own accord.
type injectedPanic struct{}

func (injectedPanic) Handle(context.Context, Request) (any, error) {
	panic("panic injected by the conformance harness (" + wire.EnvInjectPanic + ")")
}

// Cancel tells a running command to stop between actions. The command's
// Execute stream stays open and carries its real outcome.
func (s *Server) Cancel(_ context.Context, req *pluginv1.CancelRequest) (*pluginv1.CancelResponse, error) {
	id := req.GetCommandId()
	s.runningLock.Lock()
	defer s.runningLock.Unlock()
	if cancel, ok := s.running[id]; ok {
		cancel()
		return &pluginv1.CancelResponse{Running: true}, nil
	}
	now := time.Now()
	for k, at := range s.precancelled {
		if now.Sub(at) > precancelTTL {
			delete(s.precancelled, k)
		}
	}
	if id != "" {
		s.precancelled[id] = now
	}
	return &pluginv1.CancelResponse{}, nil
}

// track registers a command as running so Cancel can reach it; done
// unregisters it. A command whose Cancel came first starts cancelled.
func (s *Server) track(ctx context.Context, id string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	if id == "" {
		return ctx, cancel
	}
	s.runningLock.Lock()
	defer s.runningLock.Unlock()
	if _, ok := s.precancelled[id]; ok {
		delete(s.precancelled, id)
		cancel()
	}
	s.running[id] = cancel
	return ctx, func() {
		s.runningLock.Lock()
		defer s.runningLock.Unlock()
		delete(s.running, id)
		cancel()
	}
}

// Run calls h and turns its outcome, or its panic, into a Result. A nil
// Logger or Progress in req (a nil ProgressFunc included) is replaced by one
// that discards, so handlers never check them.
func Run(ctx context.Context, h Handler, req Request) (r Result) {
	if req.Logger == nil {
		req.Logger = hclog.NewNullLogger()
	}
	if f, ok := req.Progress.(ProgressFunc); req.Progress == nil || (ok && f == nil) {
		req.Progress = ProgressFunc(func(int, string) {})
	}
	defer func() {
		if p := recover(); p != nil {
			if req.Logger != nil {
				req.Logger.Error("handler panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			}
			r = Result{Status: StatusFailed, Reason: ReasonPanic, Message: fmt.Sprintf("the kind's handler panicked: %v", p)}
		}
	}()
	v, err := h.Handle(ctx, req)
	return ResultOf(ctx, v, err)
}
