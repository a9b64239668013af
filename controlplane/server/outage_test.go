package server_test

import (
	"bytes"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/pgtest"
	"github.com/better-compute/commands/internal/testutil"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

type syncBuf struct {
	lock sync.Mutex
	b    bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.lock.Lock()
	defer s.lock.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.lock.Lock()
	defer s.lock.Unlock()
	return s.b.String()
}

// apiLine matches a line of the API's own logger (not its event listener).
var apiLine = regexp.MustCompile(`(?m)^\S+ \[[A-Z]+\] +api: .*$`)

// A database outage costs the API's log two lines however many requests
// fail meanwhile: the outage's start, with the first error on one line,
// and its end, with how many requests failed. Each request still answers
// UNAVAILABLE.
func TestDatabaseOutageIsLoggedOnceAndItsEndOnce(t *testing.T) {
	t.Parallel()
	proxy := pgtest.NewProxy(t)
	logs := &syncBuf{}
	r := servertest.StartLogged(t, hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug}), func(cfg *server.Config) {
		pc, err := pgconn.ParseConfig(cfg.DatabaseURL)
		require.NoError(t, err)
		cfg.DatabaseURL = proxy.DSN(pc.Database)
	})
	conn := dial(t, r.GRPC)
	cmds := apiv1.NewCommandsClient(conn)
	nodes := apiv1.NewNodesClient(conn)
	run := func() error {
		_, err := cmds.Run(as(servertest.TokOps), &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Kind: "diag.nvml"})
		return err
	}
	require.NoError(t, run())
	before := len(apiLine.FindAllString(logs.String(), -1))

	proxy.Cut()
	const failures = 30
	for i := 0; i < failures; i++ {
		var err error
		switch i % 3 {
		case 0:
			err = run()
		case 1:
			_, err = cmds.List(as(servertest.TokRead), &apiv1.ListCommandsRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1})
		case 2:
			_, err = nodes.Get(as(servertest.TokRead), &apiv1.GetNodeRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1})
		}
		require.Equal(t, errcode.Unavailable, apierr.CodeOf(err), "%v", err)
	}
	proxy.Restore()
	testutil.WaitFor(t, 30*time.Second, "the API to reach the database again", func() bool { return run() == nil })

	lines := apiLine.FindAllString(logs.String(), -1)[before:]
	require.Len(t, lines, 2, "the API logged:\n%s", logs.String())
	require.Contains(t, lines[0], "database unreachable; API requests fail with UNAVAILABLE until it returns")
	require.Contains(t, lines[1], "database reachable again")
	m := regexp.MustCompile(`failed_operations=(\d+)`).FindStringSubmatch(lines[1])
	require.NotNil(t, m, lines[1])
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, failures)
	require.Contains(t, lines[1], "by_operation=")
	t.Logf("the API logged:\n%s\n%s", lines[0], lines[1])
}
