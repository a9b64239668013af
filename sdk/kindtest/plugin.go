//go:build linux

package kindtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/sdk/kind"
	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
	"github.com/better-compute/commands/sdk/wire"
	"github.com/better-compute/commands/sdk/wire/kindpb"
)

// Plugin is a plugin binary started out of process exactly as bcd starts it:
// go-plugin over gRPC, its own process group, an allowlisted environment,
// the Host service over the broker, Cancel before the stream is cut.
type Plugin struct {
	proc     *wire.Process
	brokerID uint32
	stdout   *lockedBuffer
	logs     *testLogWriter
	grace    time.Duration
	quiet    time.Duration
	stopOnce sync.Once
	// injectPanicID is the command id whose handler the plugin makes panic
	// (wire.EnvInjectPanic); "" unless started with Options.InjectPanic.
	injectPanicID string
}

// Start launches binary for t and stops it when t ends.
func Start(t testing.TB, binary string, opts Options) *Plugin {
	t.Helper()
	p, err := Launch(binary, opts, t)
	if err != nil {
		t.Fatalf("starting plugin %s: %v", binary, err)
	}
	t.Cleanup(p.Stop)
	return p
}

// Launch starts binary; logs (the plugin's stderr) go to t when it is not
// nil. Call Stop when done.
func Launch(binary string, opts Options, t testing.TB) (*Plugin, error) {
	opts = opts.withDefaults()
	logs := &testLogWriter{t: t, text: &lockedBuffer{}}
	stdout := &lockedBuffer{}
	env := append(append(wire.BaseEnv(), wire.EnvLogLevel+"=debug"), opts.Env...)
	var injectID string
	if opts.InjectPanic != nil {
		injectID = newCommandID() + "_panic"
		env = append(env, wire.EnvInjectPanic+"="+injectID)
	}
	proc, err := wire.Start(wire.Launch{
		Path: binary,
		Env:  env,
		Logger: hclog.New(&hclog.LoggerOptions{
			Name:   "kindtest",
			Output: logs,
			Level:  hclog.Debug,
		}),
		StartTimeout: opts.StartTimeout,
		SyncStdout:   stdout,
	})
	if err != nil {
		return nil, err
	}
	p := &Plugin{proc: proc, stdout: stdout, logs: logs, grace: opts.CancelWithin, quiet: opts.QuietWindow, injectPanicID: injectID}
	p.brokerID = proc.ServeHost(kindpb.NewHostServer(opts.Host))
	return p, nil
}

// Stop ends the plugin and its process group.
func (p *Plugin) Stop() {
	p.stopOnce.Do(func() {
		_ = p.proc.Stop(5 * time.Second)
		p.logs.close()
	})
}

// Pid is the plugin's process id.
func (p *Plugin) Pid() int { return p.proc.Pid }

// Protocol is the protocol version negotiated with the plugin
// (wire.ProtocolVersion1 for a plugin built on an SDK before versions were
// negotiated).
func (p *Plugin) Protocol() int { return p.proc.Kind.Protocol }

// Logs is what the plugin has logged so far (its stderr, as bcd re-emits it).
func (p *Plugin) Logs() string { return p.logs.text.String() }

// Exited reports whether the plugin process has exited.
func (p *Plugin) Exited() bool {
	select {
	case <-p.proc.Exited:
		return true
	default:
		return false
	}
}

// Manifests reads the plugin's manifests, as bcd does at start: with the
// Host service's broker id, and without validating them.
func (p *Plugin) Manifests(ctx context.Context) ([]kind.Manifest, error) {
	resp, err := p.proc.Kind.Manifests(ctx, &pluginv1.ManifestsRequest{HostBrokerId: p.brokerID})
	if err != nil {
		return nil, fmt.Errorf("Manifests: %w", err)
	}
	var out []kind.Manifest
	for _, m := range resp.GetManifests() {
		out = append(out, kindpb.ManifestFromProto(m))
	}
	return out, nil
}

// Execute runs one command and returns the plugin's own result. Cancelling
// ctx is the cancel, as in bcd: the plugin is told to stop and its report is
// awaited for the cancel grace (Options.CancelWithin); wire.ErrNoOutcome
// when it does not come.
func (p *Plugin) Execute(ctx context.Context, kindName string, payload json.RawMessage, progress func(percent int, message string)) (kind.Result, error) {
	var onProgress func(*pluginv1.Progress)
	if progress != nil {
		onProgress = func(pr *pluginv1.Progress) { progress(int(pr.GetPercent()), pr.GetMessage()) }
	}
	return p.execute(ctx, newCommandID(), kindName, payload, onProgress)
}

// newCommandID is a unique command id for one harness run.
func newCommandID() string { return fmt.Sprintf("cmd_kindtest_%d", time.Now().UnixNano()) }

// execute runs one command with the given id, handing each progress event
// over as the plugin sent it (after_cancel included).
func (p *Plugin) execute(ctx context.Context, id, kindName string, payload json.RawMessage, onProgress func(*pluginv1.Progress)) (kind.Result, error) {
	req := &pluginv1.ExecuteRequest{
		Command:      &pluginv1.Command{Id: id, Kind: kindName, NodeId: "node_kindtest", Payload: payload},
		HostBrokerId: p.brokerID,
	}
	if d, ok := ctx.Deadline(); ok {
		req.Command.Deadline = timestamppb.New(d)
	}
	res, err := wire.Execute(ctx, p.proc.Kind, req, onProgress, p.grace)
	if err != nil {
		return kind.Result{}, err
	}
	return kindpb.ResultFromProto(res), nil
}

// Stdout is what the plugin has written to stdout since the handshake.
func (p *Plugin) Stdout() string { return p.stdout.String() }

// lockedBuffer is a bytes.Buffer for concurrent writers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(x []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(x)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testLogWriter sends the plugin's log lines to t.Log until closed: a log
// line after the test ended would panic the test binary.
type testLogWriter struct {
	mu     sync.Mutex
	t      testing.TB
	closed bool
	// text keeps every line, for checks that read the plugin's log.
	text *lockedBuffer
}

var _ io.Writer = (*testLogWriter)(nil)

func (w *testLogWriter) Write(b []byte) (int, error) {
	_, _ = w.text.Write(b)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.t != nil && !w.closed {
		w.t.Log(strings.TrimRight(string(b), "\n"))
	}
	return len(b), nil
}

func (w *testLogWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
}
