//go:build linux

package wire

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
)

// DefaultStartTimeout bounds a plugin's start (exec until handshake). Plugins
// keep their init lazy (NVML, DCGM), so a slow start is a broken plugin.
const DefaultStartTimeout = 10 * time.Second

// LogBufferSize is the buffer for one line of plugin stderr: go-plugin's 64 KiB
// default splits long JSON log lines (go-plugin #265), a stack trace included.
const LogBufferSize = 256 << 10

// Launch says how to start one plugin binary. bcd's plugin host and the
// conformance harness (sdk/kindtest) both start plugins through it, so a
// vendor's harness run sees exactly what bcd would do.
type Launch struct {
	// Path is the plugin binary.
	Path string
	// Env is the plugin's whole environment, besides go-plugin's own
	// variables: the host's environment is never passed (SkipHostEnv), so
	// daemon secrets never reach a vendor plugin.
	Env []string
	// Logger receives go-plugin's own messages; the plugin's stderr is
	// re-emitted under Logger.Named(<binary name>) at each line's level.
	Logger hclog.Logger
	// StartTimeout bounds exec until handshake; DefaultStartTimeout when 0.
	StartTimeout time.Duration
	// SHA256, when set, pins the binary: a file whose digest differs is
	// refused before it runs.
	SHA256 []byte
	// SyncStdout receives what the plugin writes to stdout after the
	// handshake; it should be nothing. Discarded when nil.
	SyncStdout io.Writer
}

// Command builds the plugin's exec.Cmd. The plugin leads its own process
// group, so killing the group (KillGroup) also ends its children (nvidia-smi,
// dcgmi), which go-plugin's Kill would orphan (go-plugin #136). Pdeathsig
// kills the plugin when the thread that started it exits; callers that want
// it to mean "when bcd dies" start the plugin from a goroutine locked to its
// OS thread for the plugin's life (golang/go#27505).
func Command(path string, env []string) *exec.Cmd {
	cmd := exec.Command(path) //nolint:noctx // the plugin outlives any one call: go-plugin stops it (Kill, then the process group), not a context
	cmd.Env = append([]string(nil), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// NewClient returns a go-plugin client for l, speaking gRPC only. Each start
// needs a new client: a go-plugin Client cannot be restarted (go-plugin #306).
// It returns the exec.Cmd too, whose Process, once started, names the
// process group to kill.
func NewClient(l Launch) (*plugin.Client, *exec.Cmd) {
	cmd := Command(l.Path, l.Env)
	timeout := l.StartTimeout
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}
	var secure *plugin.SecureConfig
	if l.SHA256 != nil {
		// A new hash every start: SecureConfig.Check never resets it.
		secure = &plugin.SecureConfig{Checksum: l.SHA256, Hash: sha256.New()}
	}
	logger := l.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:     Handshake,
		VersionedPlugins:    VersionedPlugins(nil),
		Cmd:                 cmd,
		SecureConfig:        secure,
		AllowedProtocols:    []plugin.Protocol{plugin.ProtocolGRPC},
		StartTimeout:        timeout,
		Logger:              logger,
		SkipHostEnv:         true,
		SyncStdout:          l.SyncStdout,
		PluginLogBufferSize: LogBufferSize,
		GRPCDialOptions:     DialOptions(),
	})
	return client, cmd
}

// ErrChecksum is returned by Dispense when a pinned binary's digest differs.
var ErrChecksum = errors.New("plugin binary does not match its pinned SHA-256")

// Dispense starts the client's plugin and returns its kind client.
func Dispense(client *plugin.Client) (*Client, error) {
	rpc, err := client.Client()
	if err != nil {
		if errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
			return nil, fmt.Errorf("%w: %w", ErrChecksum, err)
		}
		return nil, fmt.Errorf("starting plugin: %w", err)
	}
	raw, err := rpc.Dispense(PluginName)
	if err != nil {
		return nil, fmt.Errorf("dispensing %q: %w", PluginName, err)
	}
	c, ok := raw.(*Client)
	if !ok {
		return nil, fmt.Errorf("dispensing %q: got %T, want *wire.Client", PluginName, raw)
	}
	c.Protocol = client.NegotiatedVersion()
	return c, nil
}

// KillGroup sends SIGKILL to the process group pgid (a plugin and every child
// it started). A group already gone is not an error.
func KillGroup(pgid int) error {
	if pgid <= 1 {
		return fmt.Errorf("refusing to kill process group %d", pgid)
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing process group %d: %w", pgid, err)
	}
	return nil
}

// baseEnv names the only variables of the host's environment a plugin gets.
var baseEnv = []string{"PATH", "LANG", "LC_ALL", "TZ", "TMPDIR"}

// DefaultPath is a plugin's PATH when the host has none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// BaseEnv is the part of the host's environment every plugin gets: PATH
// (DefaultPath when unset), LANG, LC_ALL, TZ and TMPDIR. Nothing else of
// the host's environment reaches a plugin.
func BaseEnv() []string {
	var env []string
	for _, k := range baseEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		} else if k == "PATH" {
			env = append(env, "PATH="+DefaultPath)
		}
	}
	return env
}

// Process is one started plugin process.
type Process struct {
	// Client is go-plugin's client; Kill it to stop the plugin gracefully.
	Client *plugin.Client
	// Kind is the plugin's kind service.
	Kind *Client
	// Pid is the plugin's pid, and the id of its process group.
	Pid int
	// Exited is closed once the process has exited.
	Exited <-chan struct{}
}

// Start starts a plugin and dispenses its kind service. The forking
// goroutine keeps its OS thread for the plugin's life, so the plugin's
// Pdeathsig fires when the host dies, not when a runtime thread retires. On
// error nothing is left running.
func Start(l Launch) (*Process, error) {
	type started struct {
		p   *Process
		err error
	}
	ch := make(chan started, 1)
	go func() {
		// Never unlocked: the runtime retires the thread when this returns,
		// which is after the plugin has exited.
		runtime.LockOSThread()
		client, cmd := NewClient(l)
		kc, err := Dispense(client)
		if err != nil {
			if cmd.Process != nil {
				_ = KillGroup(cmd.Process.Pid)
			}
			client.Kill()
			ch <- started{err: err}
			return
		}
		exited := make(chan struct{})
		go watchExit(cmd.Process.Pid, kc.Done.Done(), exited)
		ch <- started{p: &Process{Client: client, Kind: kc, Pid: cmd.Process.Pid, Exited: exited}}
		<-exited
	}()
	s := <-ch
	return s.p, s.err
}

// ServeHost serves h as the Host service on a new broker id of p and
// returns the id: pass it in ManifestsRequest (so the plugin dials at once)
// and in every ExecuteRequest.
func (p *Process) ServeHost(server pluginv1.HostServer) uint32 {
	id := p.Kind.Broker.NextId()
	go p.Kind.Broker.AcceptAndServe(id, func(opts []grpc.ServerOption) *grpc.Server {
		s := grpc.NewServer(append(opts, ServerOptions()...)...)
		pluginv1.RegisterHostServer(s, server)
		return s
	})
	return id
}

// Stop ends the plugin: a graceful go-plugin Kill, bounded by timeout (its
// Kill can hang, terraform#38940), then the whole process group is killed
// whatever happened, children included.
func (p *Process) Stop(timeout time.Duration) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Client.Kill()
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.Exited:
	case <-timer.C:
	}
	err := KillGroup(p.Pid)
	select {
	case <-done:
	case <-timer.C:
		return errors.Join(err, fmt.Errorf("go-plugin Kill of pid %d did not return within %s", p.Pid, timeout))
	}
	return err
}

// watchExit closes exited when process pid exits. It waits on a pidfd with
// WNOWAIT, so go-plugin still reaps the process itself. go-plugin's own done
// signal (the fallback, on kernels without pidfds) also waits for the
// plugin's stdout and stderr pipes to close, which a child still holding
// them can delay forever; the pidfd sees the plugin itself exit.
func watchExit(pid int, fallback <-chan struct{}, exited chan<- struct{}) {
	defer close(exited)
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		<-fallback
		return
	}
	defer unix.Close(fd)
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		// Exited, or already reaped (ECHILD): either way it is gone.
		return
	}
}
