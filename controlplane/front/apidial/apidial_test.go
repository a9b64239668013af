package apidial_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/better-compute/commands/controlplane/front/apidial"
	"github.com/better-compute/commands/internal/testutil"
)

// seen is what the server saw of a call: its bearer header and the common
// name of the client's certificate, if any.
type seen struct {
	auth, clientCN string
}

// serve starts a gRPC server with the health service on 127.0.0.1, TLS
// with the PKI's server certificate when tlsCfg is set (plaintext
// otherwise), and returns its address and a channel of what each call
// showed it.
func serve(t *testing.T, tlsCfg *tls.Config) (string, <-chan seen) {
	t.Helper()
	calls := make(chan seen, 16)
	record := func(ctx context.Context) {
		var s seen
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("authorization"); len(v) > 0 {
			s.auth = v[0]
		}
		if p, ok := peer.FromContext(ctx); ok {
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
				s.clientCN = ti.State.PeerCertificates[0].Subject.CommonName
			}
		}
		calls <- s
	}
	opts := []grpc.ServerOption{
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			record(ctx)
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			record(ss.Context())
			return h(srv, ss)
		}),
	}
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	gs := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go gs.Serve(lis) //nolint:errcheck // Stop ends it
	t.Cleanup(gs.Stop)
	return lis.Addr().String(), calls
}

func serverTLS(t *testing.T, p testutil.PKIFiles, requireClient bool) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
	require.NoError(t, err)
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if requireClient {
		b, err := os.ReadFile(p.CA)
		require.NoError(t, err)
		pool := x509.NewCertPool()
		require.True(t, pool.AppendCertsFromPEM(b))
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg
}

func check(ctx context.Context, t *testing.T, s apidial.Settings) error {
	t.Helper()
	conn, err := apidial.Dial(s)
	require.NoError(t, err)
	defer conn.Close()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// The server is verified against --ca-cert, and the token rides over TLS
// on unary and streaming calls alike.
func TestTLSVerifiesTheServerAndCarriesTheToken(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := testutil.WritePKI(t, t.TempDir(), "robot")
	addr, calls := serve(t, serverTLS(t, p, false))

	s := apidial.Settings{Endpoint: addr, Token: "s3cret", CACert: p.CA}
	require.NoError(t, check(ctx, t, s))
	require.Equal(t, seen{auth: "Bearer s3cret"}, <-calls)

	conn, err := apidial.Dial(s)
	require.NoError(t, err)
	defer conn.Close()
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = w.Recv()
	require.NoError(t, err)
	require.Equal(t, seen{auth: "Bearer s3cret"}, <-calls)
}

// Without the server's CA the handshake fails: the system roots do not
// trust a private CA.
func TestAnUnknownServerIsRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := testutil.WritePKI(t, t.TempDir(), "robot")
	addr, _ := serve(t, serverTLS(t, p, false))

	err := check(ctx, t, apidial.Settings{Endpoint: addr})
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "certificate")
}

// A client certificate is presented to a server that demands one; without
// it the server refuses the handshake.
func TestClientCertificate(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := testutil.WritePKI(t, t.TempDir(), "robot.example.com")
	addr, calls := serve(t, serverTLS(t, p, true))

	require.NoError(t, check(ctx, t, apidial.Settings{Endpoint: "https://" + addr, CACert: p.CA, Cert: p.ClientCert, Key: p.ClientKey}))
	require.Equal(t, seen{clientCN: "robot.example.com"}, <-calls)

	err := check(ctx, t, apidial.Settings{Endpoint: addr, CACert: p.CA})
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
}

// The endpoint's scheme overrides the plaintext setting both ways.
func TestTheEndpointSchemeDecidesTheTransport(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plainAddr, plainCalls := serve(t, nil)
	require.NoError(t, check(ctx, t, apidial.Settings{Endpoint: "http://" + plainAddr, Token: "t"}))
	require.Equal(t, seen{auth: "Bearer t"}, <-plainCalls)
	require.NoError(t, check(ctx, t, apidial.Settings{Endpoint: plainAddr, Plaintext: true}))
	require.Equal(t, seen{}, <-plainCalls, "no token, no header")

	p := testutil.WritePKI(t, t.TempDir(), "robot")
	tlsAddr, tlsCalls := serve(t, serverTLS(t, p, false))
	require.NoError(t, check(ctx, t, apidial.Settings{Endpoint: "https://" + tlsAddr, Plaintext: true, CACert: p.CA}))
	require.Equal(t, seen{}, <-tlsCalls)

	for _, c := range []struct {
		endpoint  string
		plaintext bool
		target    string
		plain     bool
	}{
		{"h:1", false, "h:1", false},
		{"h:1", true, "h:1", true},
		{"http://h:1", false, "h:1", true},
		{"https://h:1", true, "h:1", false},
	} {
		target, plain := apidial.Target(c.endpoint, c.plaintext)
		require.Equal(t, c.target, target, c.endpoint)
		require.Equal(t, c.plain, plain, c.endpoint)
	}
}

// Bad files fail Dial itself, each with an error that says which file.
func TestBadFilesFailTheDial(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := testutil.WritePKI(t, dir, "robot")
	notPEM := filepath.Join(dir, "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))

	for _, c := range []struct {
		name string
		s    apidial.Settings
		want string
	}{
		{"missing CA", apidial.Settings{Endpoint: "h:1", CACert: filepath.Join(dir, "nope.pem")}, "reading CA certificate: open "},
		{"CA without PEM", apidial.Settings{Endpoint: "h:1", CACert: notPEM}, "CA certificate " + notPEM + " holds no PEM certificate"},
		{"cert without key", apidial.Settings{Endpoint: "h:1", Cert: p.ClientCert}, "loading client certificate: "},
		{"key of another cert", apidial.Settings{Endpoint: "h:1", Cert: p.ClientCert, Key: p.ServerKey}, "loading client certificate: "},
	} {
		_, err := apidial.Dial(c.s)
		require.ErrorContains(t, err, c.want, c.name)
	}
	// Plaintext never reads the files.
	conn, err := apidial.Dial(apidial.Settings{Endpoint: "h:1", Plaintext: true, CACert: notPEM})
	require.NoError(t, err)
	require.NoError(t, conn.Close())
}
