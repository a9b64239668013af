package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/pgtest"
	"github.com/better-compute/commands/internal/testutil"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// No result is lost in a PostgreSQL outage. A command runs on the real bcd
// and succeeds while the control plane's database is unreachable for about
// ten seconds (a proxy between bc-server and PostgreSQL is cut; the shared
// cluster keeps running): the gateway cannot store the result, so it does
// not acknowledge it ("UpdateAck tells the node an update is stored"), and
// bcd sends it again on the same session with a backoff until it is. Once
// the database is back, the command ends succeeded exactly once, with one
// command.settled and no failed timeout, and it ran once.
func TestE2E_ResultLandsAfterADatabaseOutage(t *testing.T) {
	proxy := pgtest.NewProxy(t)
	c := newCluster(t, func(cfg *server.Config) {
		pc, err := pgconn.ParseConfig(cfg.DatabaseURL)
		require.NoError(t, err)
		cfg.DatabaseURL = proxy.DSN(pc.Database)
	})
	n := c.join()
	n.start()
	sessions := n.sessions()

	h := newHold(t)
	p, err := structpb.NewStruct(h.payload())
	require.NoError(t, err)
	// With not_after 10s, a result that never lands would be failed by the
	// sweeper (reason timeout) once not_after plus the kind's timeout passed.
	ten := int32(10)
	cmd, err := c.api.Run(c.ctx(), &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1,
		Kind: kindHold, Payload: p, NotAfterSeconds: &ten})
	require.NoError(t, err)
	h.waitStarted(t)
	c.waitState(cmd.GetId(), "running")

	proxy.Cut()
	h.releaseNow(t)
	testutil.WaitFor(t, 30*time.Second, "bcd to finish the command during the outage", func() bool {
		return logged(n, "command finished", cmd.GetId())
	})
	// The outage lasts while bcd resends the unacknowledged result on its
	// live session, after 1s, 2s and 4s: about ten seconds in all.
	testutil.WaitFor(t, 60*time.Second, "bcd to resend the result three times", func() bool {
		return strings.Count(n.logs.String(), "resending unacknowledged updates") >= 3
	})
	var state string
	require.NoError(t, c.srv.Pool.QueryRow(context.Background(), `SELECT state FROM commands WHERE id = $1`, cmd.GetId()).Scan(&state))
	require.Equal(t, "running", state, "nothing was stored during the outage")
	proxy.Restore()

	got := c.waitState(cmd.GetId(), "succeeded")
	require.Equal(t, float64(1), got.GetResult().GetStructValue().AsMap()["runs"])
	require.Equal(t, 1, h.runs(t), "it ran once")
	require.Equal(t, sessions, n.sessions(), "the result landed on the session that outlived the outage")
	require.Equal(t, 1, c.settledCount(cmd.GetId()), "exactly one command.settled")
	var settled string
	require.NoError(t, c.srv.Pool.QueryRow(context.Background(),
		`SELECT payload->>'state' || '/' || coalesce(payload->>'reason', '') FROM outbox WHERE topic = 'command.settled' AND payload->>'commandId' = $1`,
		cmd.GetId()).Scan(&settled))
	require.Equal(t, "succeeded/", settled, "settled succeeded, never failed timeout")
}

// logged reports whether bcd logged a line with msg that names id.
func logged(n *node, msg, id string) bool {
	for _, line := range strings.Split(n.logs.String(), "\n") {
		if strings.Contains(line, msg) && strings.Contains(line, id) {
			return true
		}
	}
	return false
}
