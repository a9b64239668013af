package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/commands/internal/trust"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/commands/sweeper"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/internal/testutil"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// noCertConn dials the gateway with server-auth TLS only, as a node that has
// not joined yet.
func noCertConn(t *testing.T, r *servertest.Running) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(r.Gateway, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: r.CA.Pool(), MinVersion: tls.VersionTLS12})))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func kindDigests(r *servertest.Running) []*agentv1.KindDigest {
	var out []*agentv1.KindDigest
	for _, m := range r.Queue.Registry().All() {
		out = append(out, &agentv1.KindDigest{Kind: m.Kind, Digest: m.Digest()})
	}
	return out
}

// "A join endpoint exchanges a one-time join token for a node certificate
// ... No session without a valid node certificate."
func TestJoinedNodeRunsACommandThroughTheServersGateway(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	require.NotEmpty(t, r.Gateway)
	require.FileExists(t, r.CADir+"/ca.pem")

	// Without a certificate the Session service refuses the stream.
	stream, err := agentv1.NewSessionClient(noCertConn(t, r)).Connect(context.Background())
	require.NoError(t, err)
	_, err = stream.Recv()
	require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)

	creds := r.JoinNode(t, servertest.NodeA1)
	conn, err := grpc.NewClient(r.Gateway, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	d := fakedaemon.New(servertest.NodeA1)
	d.Kinds = kindDigests(r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx, conn) }()
	t.Cleanup(func() { cancel(); <-done })
	testutil.WaitFor(t, 10*time.Second, "welcome", func() bool { return d.Welcome() != nil })

	var c queue.Command
	require.NoError(t, pgx.BeginFunc(context.Background(), r.Pool, func(tx pgx.Tx) error {
		c, _, err = r.Queue.Enqueue(context.Background(), tx, queue.EnqueueParams{TenantID: servertest.TenantA, NodeID: servertest.NodeA1, Kind: "diag.nvml"})
		return err
	}))
	testutil.WaitFor(t, 10*time.Second, "the command to succeed", func() bool {
		got, err := r.Queue.Get(context.Background(), r.Pool, servertest.NodeA1, c.ID)
		return err == nil && got.State == queue.Succeeded
	})
}

func TestJoinTokenIsOneTime(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	tok := r.JoinToken(t, servertest.NodeA1)
	client := agentv1.NewJoinClient(noCertConn(t, r))
	_, csr, err := trust.NewKeyAndCSR(servertest.NodeA1)
	require.NoError(t, err)

	// Two concurrent joins with one token make one certificate.
	var (
		wg   sync.WaitGroup
		lock sync.Mutex
		oks  int
		errs []error
	)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := client.Join(context.Background(), &agentv1.JoinRequest{Token: tok, Csr: csr})
			lock.Lock()
			defer lock.Unlock()
			if err == nil {
				oks++
			} else {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 1, oks)
	for _, err := range errs {
		require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	}
}

// The server runs the CommandSweeper: a pending command past not_after
// becomes expired, and the registered node controller is woken.
func TestServerSweepsAndWakesNodeControllers(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	woken := make(chan string, 8)
	unregister := r.Server.NodeWakers().Register(sweeper.WakerFunc(func(_ context.Context, id string) {
		select {
		case woken <- id:
		default:
		}
	}))
	defer unregister()
	var c queue.Command
	require.NoError(t, pgx.BeginFunc(context.Background(), r.Pool, func(tx pgx.Tx) error {
		var err error
		c, _, err = r.Queue.Enqueue(context.Background(), tx, queue.EnqueueParams{TenantID: servertest.TenantA, NodeID: servertest.NodeA1, Kind: "diag.nvml"})
		return err
	}))
	_, err := r.Pool.Exec(context.Background(), `UPDATE commands SET not_after = now() - interval '1 second' WHERE id = $1`, c.ID)
	require.NoError(t, err)
	select {
	case id := <-woken:
		require.Equal(t, servertest.NodeA1, id)
	case <-time.After(10 * time.Second):
		t.Fatal("the node controller was not woken")
	}
	got, err := r.Queue.Get(context.Background(), r.Pool, servertest.NodeA1, c.ID)
	require.NoError(t, err)
	require.Equal(t, queue.Expired, got.State)
	require.True(t, r.Server.Sweeper().Leading())
}

func x509VerifyOptions(r *servertest.Running) x509.VerifyOptions {
	return x509.VerifyOptions{Roots: r.CA.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
}
