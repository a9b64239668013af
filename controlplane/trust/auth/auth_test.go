package auth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/trust/auth"
)

func TestMatchWildcards(t *testing.T) {
	t.Parallel()
	cases := []struct {
		pattern, s string
		want       bool
	}{
		{"compute:nodes:exec", "compute:nodes:exec", true},
		{"compute:nodes:exec", "compute:nodes:read", false},
		{"compute:nodes:*", "compute:nodes:exec", true},
		{"compute:*", "compute:nodes:read", true},
		{"*", "anything/at:all", true},
		{"compute-node/*", "compute-node/node_1", true},
		{"compute-node/node_a*", "compute-node/node_b1", false},
		{"compute-node/node_*_gpu", "compute-node/node_7_gpu", true},
		{"compute-node/node_*_gpu", "compute-node/node_7_cpu", false},
		{"a*b*b", "ab", false},
		{"a*b*b", "abb", true},
		{"tenant_*", "tenant_x", true},
	}
	for _, c := range cases {
		require.Equal(t, c.want, auth.Match(c.pattern, c.s), "%q ~ %q", c.pattern, c.s)
	}
}

func TestGrantsAndTenants(t *testing.T) {
	t.Parallel()
	id := &auth.Identity{
		Name:    "ops",
		Tenants: []string{"tenant_a"},
		Grants: []auth.Grant{
			{Permission: auth.PermNodesRead, Resource: "compute-node/*"},
			{Permission: "compute:nodes:*", Resource: "compute-node/node_gpu*"},
		},
	}
	require.True(t, id.SeesTenant("tenant_a"))
	require.False(t, id.SeesTenant("tenant_b"))
	require.True(t, id.Allowed(auth.PermNodesRead, auth.NodeResource("node_x")))
	require.False(t, id.Allowed(auth.PermNodesExec, auth.NodeResource("node_x")))
	require.True(t, id.Allowed(auth.PermNodesExec, auth.NodeResource("node_gpu7")))
}

func TestParseConfigRejectsBadIdentities(t *testing.T) {
	t.Parallel()
	_, err := auth.ParseConfig([]byte(`identities:
  - name: a
    tokens: [x]
  - name: a
    tenants: ["*"]
    tokenSha256: [nothex]
`))
	require.Error(t, err)
	require.Contains(t, err.Error(), "tenants is required")
	require.Contains(t, err.Error(), "name is used twice")
	require.Contains(t, err.Error(), "not a hex SHA-256")

	_, err = auth.ParseConfig([]byte("identities:\n  - name: a\n    tenant: x\n"))
	require.ErrorContains(t, err, "tenant", "unknown fields are errors, so a typo does not drop a grant")
}

// serve starts a real gRPC server with the interceptors and the health
// service, which echoes nothing but lets us see whether the call got through.
func serve(t *testing.T, a *auth.Authenticator, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(append(opts, grpc.UnaryInterceptor(a.UnaryInterceptor()), grpc.StreamInterceptor(a.StreamInterceptor()))...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func TestBearerTokens(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("hashed-secret"))
	a, err := auth.New(&auth.Config{Identities: []auth.IdentityConfig{
		{Name: "alice", Tenants: []string{"tenant_a"}, Tokens: []string{"plain-secret"}},
		{Name: "bob", Tenants: []string{"tenant_b"}, TokenSHA256: []string{hex.EncodeToString(sum[:])}},
	}})
	require.NoError(t, err)
	addr := serve(t, a)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	call := func(authz string) error {
		ctx := context.Background()
		if authz != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", authz)
		}
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	require.NoError(t, call("Bearer plain-secret"))
	require.NoError(t, call("bearer hashed-secret"))
	for _, bad := range []string{"", "Bearer wrong", "Basic plain-secret", "Bearer"} {
		err := call(bad)
		require.True(t, apierr.Is(err, errcode.Unauthenticated), "%q: %v", bad, err)
	}

}

func TestPublicServicesNeedNoCredentials(t *testing.T) {
	t.Parallel()
	a, err := auth.New(&auth.Config{})
	require.NoError(t, err)
	a.AllowUnauthenticated(healthpb.Health_ServiceDesc.ServiceName)
	conn, err := grpc.NewClient(serve(t, a), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	_, err = healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
}

func TestAuthenticateCarriesIdentity(t *testing.T) {
	t.Parallel()
	a, err := auth.New(&auth.Config{Identities: []auth.IdentityConfig{
		{Name: "alice", Tenants: []string{"tenant_a"}, Tokens: []string{"s"}},
	}})
	require.NoError(t, err)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer s"))
	id, err := a.Authenticate(ctx)
	require.NoError(t, err)
	require.Equal(t, "alice", id.Name)
}

func TestDuplicateCredentialsRefused(t *testing.T) {
	t.Parallel()
	_, err := auth.New(&auth.Config{Identities: []auth.IdentityConfig{
		{Name: "a", Tenants: []string{"*"}, Tokens: []string{"same"}},
		{Name: "b", Tenants: []string{"*"}, Tokens: []string{"same"}},
	}})
	require.ErrorContains(t, err, "names both a and b")
}

type pki struct {
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	pool   *x509.CertPool
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &pki{caCert: cert, caKey: key, pool: pool}
}

func (p *pki) issue(t *testing.T, cn string, server bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestClientCertificates(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	byHash := p.issue(t, "pinned", false)
	sum := sha256.Sum256(byHash.Certificate[0])
	a, err := auth.New(&auth.Config{Identities: []auth.IdentityConfig{
		{Name: "robot", Tenants: []string{"tenant_a"}, CertCommonNames: []string{"robot.example"}},
		{Name: "pinned", Tenants: []string{"tenant_a"}, CertSHA256: []string{hex.EncodeToString(sum[:])}},
	}})
	require.NoError(t, err)
	serverTLS := &tls.Config{
		Certificates: []tls.Certificate{p.issue(t, "server", true)},
		ClientCAs:    p.pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12,
	}
	addr := serve(t, a, grpc.Creds(credentials.NewTLS(serverTLS)))

	check := func(cert *tls.Certificate) error {
		cfg := &tls.Config{RootCAs: p.pool, MinVersion: tls.VersionTLS12}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		require.NoError(t, err)
		defer conn.Close()
		_, err = healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
		return err
	}
	robot := p.issue(t, "robot.example", false)
	require.NoError(t, check(&robot), "a verified certificate with a configured common name")
	require.NoError(t, check(&byHash), "a verified certificate pinned by digest")
	stranger := p.issue(t, "stranger", false)
	require.True(t, apierr.Is(check(&stranger), errcode.Unauthenticated))
	require.True(t, apierr.Is(check(nil), errcode.Unauthenticated))

	other := newPKI(t).issue(t, "robot.example", false)
	require.Error(t, check(&other), "a certificate from another CA fails the handshake")
}

// Reload swaps the identities while serving; a bad config changes nothing.
func TestReload(t *testing.T) {
	t.Parallel()
	a, err := auth.New(&auth.Config{Identities: []auth.IdentityConfig{{Name: "a", Tenants: []string{"*"}, Tokens: []string{"old"}}}})
	require.NoError(t, err)
	check := func(tok string) error {
		_, err := a.Authenticate(metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+tok)))
		return err
	}
	require.NoError(t, check("old"))
	require.NoError(t, a.Reload(&auth.Config{Identities: []auth.IdentityConfig{{Name: "a", Tenants: []string{"*"}, Tokens: []string{"new"}}}}))
	require.NoError(t, check("new"))
	require.True(t, apierr.Is(check("old"), errcode.Unauthenticated), "a rotated-out token stops working")
	require.Error(t, a.Reload(&auth.Config{Identities: []auth.IdentityConfig{{Name: "", Tokens: []string{"x"}}}}))
	require.NoError(t, check("new"), "a refused reload keeps the identities")
}
