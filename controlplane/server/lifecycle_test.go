package server_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/internal/pgtest"
	"github.com/better-compute/commands/internal/testutil"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// Issue 32: "A server with a lifecycle ... every goroutine under an
// errgroup and waited for before the pool closes ... A test kills the
// database and stops the server mid-fan-out and shows nothing runs after
// Close returns." Twenty nodes hold sessions; a fan-out to all of them is
// half settled (every other node hangs on it) when the database is cut,
// then the server stops. Once Run returned, not one goroutine the server
// started is left: goleak compares the process's goroutines with those
// before the test (it is not parallel, so no other test's run meanwhile).
func TestStopMidFanOutWithTheDatabaseCutLeavesNoGoroutine(t *testing.T) {
	proxy := pgtest.NewProxy(t)
	before := goleak.IgnoreCurrent()
	existing := goroutines()
	r := servertest.StartLogged(t, hclog.NewNullLogger(), func(cfg *server.Config) {
		pc, err := pgconn.ParseConfig(cfg.DatabaseURL)
		require.NoError(t, err)
		cfg.DatabaseURL = proxy.DSN(pc.Database)
	})
	ctx := context.Background()

	const nodes = 20
	var ids []string
	for i := range nodes {
		n, err := r.Queue.CreateNode(ctx, r.Pool, queue.Node{ID: fmt.Sprintf("node_life%02d", i), TenantID: servertest.TenantA})
		require.NoError(t, err)
		ids = append(ids, n.ID)
	}
	var (
		daemons           []*fakedaemon.Daemon
		conns             []*grpc.ClientConn
		dctx, stopDaemons = context.WithCancel(ctx)
		running           atomic.Int32
		done              = make(chan struct{}, nodes)
	)
	for i, id := range ids {
		conn, err := grpc.NewClient(r.Gateway, grpc.WithTransportCredentials(r.JoinNode(t, id)))
		require.NoError(t, err)
		conns = append(conns, conn)
		d := fakedaemon.New(id)
		d.Kinds = kindDigests(r)
		if i%2 == 1 {
			d.Script = func(*agentv1.Command) fakedaemon.Action {
				running.Add(1)
				return fakedaemon.Action{Kind: fakedaemon.Hang}
			}
		}
		daemons = append(daemons, d)
		go func() { _ = d.Run(dctx, conn); done <- struct{}{} }()
	}
	for _, d := range daemons {
		testutil.WaitFor(t, 30*time.Second, "the Welcome of "+d.NodeID, func() bool { return d.Welcome() != nil })
	}
	cmds := make([]string, 0, nodes)
	require.NoError(t, pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		for _, id := range ids {
			c, _, err := r.Queue.Enqueue(ctx, tx, queue.EnqueueParams{TenantID: servertest.TenantA, NodeID: id, Kind: "diag.nvml"})
			if err != nil {
				return err
			}
			cmds = append(cmds, c.ID)
		}
		return nil
	}))
	testutil.WaitFor(t, 30*time.Second, "half the fan-out settled and the other half running", func() bool {
		var settled int
		require.NoError(t, r.Pool.QueryRow(ctx, `SELECT count(*) FROM commands WHERE id = ANY($1) AND state = 'succeeded'`, cmds).Scan(&settled))
		return settled == nodes/2 && running.Load() == nodes/2
	})

	proxy.Cut()
	require.NoError(t, r.Stop(), "Run returns nil on a stop, with the database gone")
	// At once, with no grace: not one goroutine runs control-plane code
	// but the test's own nodes (goleak below waits a little for stragglers;
	// this does not).
	for id, stack := range goroutines() {
		if _, old := existing[id]; old || !strings.Contains(stack, "better-compute/commands/controlplane/") {
			continue
		}
		if strings.Contains(stack, "controlplane/testing/fakedaemon") || strings.Contains(stack, "lifecycle_test.go") {
			continue
		}
		t.Errorf("goroutine %s still runs after Run returned:\n%s", id, stack)
	}

	// The nodes and the test's own pool are the test's, not the server's:
	// stop them, then nothing else may be left.
	stopDaemons()
	for range daemons {
		<-done
	}
	for _, c := range conns {
		require.NoError(t, c.Close())
	}
	r.Pool.Close()
	goleak.VerifyNone(t, before,
		// The proxy's own accept loop and its copies end at the test's
		// cleanup (it outlives the server on purpose).
		goleak.IgnoreAnyFunction("github.com/better-compute/commands/internal/pgtest.(*Proxy).accept"),
		goleak.IgnoreAnyFunction("github.com/better-compute/commands/internal/pgtest.(*Proxy).serve"),
	)
}

// goroutines are the process's goroutines by id, each with its stack.
func goroutines() map[string]string {
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	out := map[string]string{}
	for _, g := range strings.Split(b.String(), "\n\n") {
		if f := strings.Fields(g); len(f) > 1 && f[0] == "goroutine" {
			out[f[1]] = g
		}
	}
	return out
}
