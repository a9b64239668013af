package server_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/internal/testutil"
)

// guideSh is the first sh block after heading in the operator guide.
func guideSh(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "docs", "operator-guide.md"))
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, heading)
	require.GreaterOrEqual(t, i, 0, "the guide has %q", heading)
	s = s[i:]
	start := strings.Index(s, "```sh\n")
	require.GreaterOrEqual(t, start, 0)
	s = s[start+len("```sh\n"):]
	return s[:strings.Index(s, "```")]
}

// The operator guide's sizing section: its check of a running gateway, run
// as written (curl and awk, the default address swapped for the test
// server's), reads the sessions the gateway holds, its heap a session and
// its pool from /metrics.
func TestOperatorGuideSizingCheckRunsAsWritten(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var daemons []*fakedaemon.Daemon
	for _, id := range []string{servertest.NodeA1, servertest.NodeB1} {
		conn, err := grpc.NewClient(r.Gateway, grpc.WithTransportCredentials(r.JoinNode(t, id)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		d := fakedaemon.New(id)
		d.Kinds = kindDigests(r)
		daemons = append(daemons, d)
		go func() { _ = d.Run(ctx, conn) }()
	}
	for _, d := range daemons {
		testutil.WaitFor(t, 30*time.Second, "the Welcome of "+d.NodeID, func() bool { return d.Welcome() != nil })
	}

	script := guideSh(t, "To see where a running gateway stands against these figures")
	require.Contains(t, script, "http://127.0.0.1:9464/metrics", "the guide reads the default httpListen")
	script = strings.ReplaceAll(script, "http://127.0.0.1:9464", r.HTTPBase)
	want := regexp.MustCompile(`^2 sessions, [0-9]+ KiB of heap a session, [0-9]+ of [0-9]+ database connections in use\n$`)
	var out []byte
	testutil.WaitFor(t, 30*time.Second, "the check to count both sessions", func() bool {
		var err error
		out, err = exec.CommandContext(ctx, "sh", "-c", script).CombinedOutput()
		require.NoError(t, err, string(out))
		return want.Match(out)
	})
	m := regexp.MustCompile(`([0-9]+) of ([0-9]+) database`).FindSubmatch(out)
	size, err := strconv.Atoi(string(m[2]))
	require.NoError(t, err)
	require.GreaterOrEqual(t, size, 8, "the pool's size is maxConns, at least 8: %s", out)
}
