package hostile

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/bcd/truststore"
	"github.com/better-compute/commands/internal/testplugins"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

// node is one bcd: the real binary, run with `bcd run` on a state
// directory laid out as `bcd join` leaves it (the node key, its
// certificate, the node CA, join.json naming the gateway, and trust.json,
// the join answer's trust bundle).
type node struct {
	t       *testing.T
	bin     string
	state   string
	plugins string
	config  string
	bootID  string
	// record is the file the plugin appends each run's command id to.
	record string
	// release lets the hold kinds finish at once.
	release string

	cmd *exec.Cmd
	log *syncBuffer
}

// syncBuffer is bcd's stderr, read while bcd writes it.
type syncBuffer struct {
	lock sync.Mutex
	buf  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.lock.Lock()
	defer b.lock.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.lock.Lock()
	defer b.lock.Unlock()
	return b.buf.String()
}

// newNode lays out a joined node for id with certificate and key, joined
// through the gateway at addr with joinBundle as the join answer's bundle
// (nil: an answer without one, as a control plane without signing gives).
func newNode(t *testing.T, id trust.Identity, ca *nodeCA, addr string, joinBundle []byte) *node {
	t.Helper()
	n := &node{t: t, bin: testutil.BuildBinary(t, "./bcd/cmd/bcd"), state: t.TempDir(), plugins: t.TempDir()}
	src := testutil.BuildBinary(t, testplugins.BCDCore)
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(n.plugins, filepath.Base(src)), b, 0o755))

	tlsDir := filepath.Join(n.state, "tls")
	require.NoError(t, os.MkdirAll(tlsDir, 0o700))
	certPEM, keyPEM := ca.node(t, id)
	info, err := json.Marshal(map[string]string{"nodeId": id.NodeID, "server": addr})
	require.NoError(t, err)
	for name, data := range map[string][]byte{"node.key": keyPEM, "node.crt": certPEM, "ca.crt": ca.pem, "join.json": info} {
		require.NoError(t, os.WriteFile(filepath.Join(tlsDir, name), data, 0o600))
	}
	if joinBundle != nil {
		ts, err := truststore.Open(n.state, nil, nil)
		require.NoError(t, err)
		require.NoError(t, ts.AcceptJoin(joinBundle, time.Now()))
	}

	dir := t.TempDir()
	n.record, n.release = filepath.Join(dir, "runs"), filepath.Join(dir, "release")
	require.NoError(t, os.WriteFile(n.release, nil, 0o600))
	n.bootID = filepath.Join(dir, "boot_id")
	require.NoError(t, os.WriteFile(n.bootID, []byte("boot-hostile\n"), 0o600))
	n.config = filepath.Join(dir, "bcd.yaml")
	require.NoError(t, os.WriteFile(n.config, []byte("logLevel: debug\n"), 0o600))
	return n
}

// start runs `bcd run`; the test's end stops it.
func (n *node) start() {
	n.t.Helper()
	n.log = &syncBuffer{}
	n.cmd = exec.Command(n.bin, "run", "--config", n.config, "--plugins", n.plugins, "--state-dir", n.state, "--boot-id-file", n.bootID)
	n.cmd.Stderr, n.cmd.Stdout = n.log, n.log
	require.NoError(n.t, n.cmd.Start())
	n.t.Cleanup(n.stop)
}

// stop ends bcd with SIGTERM, as systemd does, and waits for it.
func (n *node) stop() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- n.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = n.cmd.Process.Kill()
		<-done
		n.t.Errorf("bcd did not stop on SIGTERM; its log:\n%s", n.log.String())
	}
	n.cmd = nil
}

// payload is the hold kinds' payload: record the run, finish at once.
func (n *node) payload() []byte {
	b, _ := json.Marshal(map[string]string{"countFile": n.record, "releaseFile": n.release})
	return b
}

// ran lists the command ids the plugin recorded, in order.
func (n *node) ran() []string {
	b, err := os.ReadFile(n.record)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(n.t, err)
	return strings.Fields(string(b))
}

// journal opens the stopped node's journal.
func (n *node) journal() *journal.Journal {
	n.t.Helper()
	require.Nil(n.t, n.cmd, "stop bcd before reading its journal")
	j, err := journal.Open(hclog.NewNullLogger(), n.state, journal.Options{})
	require.NoError(n.t, err)
	n.t.Cleanup(func() { _ = j.Close() })
	return j
}
