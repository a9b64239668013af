package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// bcServer is the bc-server binary running on the cluster's configuration,
// so that a test can kill -9 it.
type bcServer struct {
	t    *testing.T
	bin  string
	conf string
	proc *exec.Cmd
	done chan struct{}
	logs *lockedBuffer
	// runs is the fleet runs API of this process, which start waits on;
	// the cluster's (c.conn) when nil.
	runs apiv1.FleetRunsClient
	// gateway is its gateway's address (a replica's; c.cfg's otherwise).
	gateway string
}

// swapToBinary stops the in-process server and runs the bc-server binary
// on the same configuration (database, addresses, node CA, identities,
// kinds): what an operator's systemd unit runs. Everything the binary
// needs travels in that YAML file (the modules' intervals, pki's keys
// included); what the in-process server got through Go arguments instead
// does not: the binary registers the first-party kinds (and the modules'
// and the kinds directory's) rather than servertest.Manifests' test
// kinds, and logs to b.logs. The test's own pool (c.srv.Pool) stays open.
func (c *cluster) swapToBinary() *bcServer {
	c.t.Helper()
	b := &bcServer{t: c.t, bin: testutil.BuildBinary(c.t, "./controlplane/cmd/bc-server"), conf: filepath.Join(c.t.TempDir(), "server.yaml"), logs: &lockedBuffer{}}
	y, err := yaml.Marshal(c.cfg)
	require.NoError(c.t, err)
	require.NoError(c.t, os.WriteFile(b.conf, y, 0o600))
	require.NoError(c.t, c.srv.Stop())
	c.t.Cleanup(func() {
		b.kill()
		if c.t.Failed() {
			c.t.Logf("bc-server (binary) log:\n%s", b.logs.String())
		}
	})
	b.start(c)
	return b
}

// start runs bc-server on b.conf and waits until its API answers; a
// process that exits first fails the test with its log.
func (b *bcServer) start(c *cluster) {
	b.t.Helper()
	b.proc = exec.Command(b.bin, "--config", b.conf)
	b.proc.Stdout, b.proc.Stderr = b.logs, b.logs
	require.NoError(b.t, b.proc.Start())
	b.done = make(chan struct{})
	go func(p *exec.Cmd, done chan struct{}) { _ = p.Wait(); close(done) }(b.proc, b.done)
	runs := b.runs
	if runs == nil {
		runs = apiv1.NewFleetRunsClient(c.conn)
	}
	testutil.WaitFor(b.t, 60*time.Second, "bc-server to serve", func() bool {
		select {
		case <-b.done:
			b.proc = nil
			b.t.Fatalf("bc-server exited before it served:\n%s", b.logs.String())
		default:
		}
		_, err := runs.List(c.ctx(), &apiv1.ListFleetRunsRequest{TenantId: servertest.TenantA})
		return err == nil
	})
}

// kill ends bc-server with SIGKILL: no graceful stop, no lease resigned.
func (b *bcServer) kill() {
	if b.proc == nil {
		return
	}
	_ = b.proc.Process.Signal(syscall.SIGKILL)
	<-b.done
	b.proc = nil
}
