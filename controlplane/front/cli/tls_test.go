package cli_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/front/cli"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/controlplane/trust/auth"
)

// writePKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate with common name cn, as PEM files in dir.
func writePKI(t *testing.T, dir, cn string) (ca, srvCert, srvKey, cliCert, cliKey string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return p
	}
	issue := func(name string, serial int64, tmpl *x509.Certificate) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		require.NoError(t, err)
		kb, err := x509.MarshalPKCS8PrivateKey(key)
		require.NoError(t, err)
		return write(name+".crt", "CERTIFICATE", der), write(name+".key", "PRIVATE KEY", kb)
	}
	ca = write("ca.crt", "CERTIFICATE", caDER)
	srvCert, srvKey = issue("server", 2, &x509.Certificate{Subject: pkix.Name{CommonName: "server"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}})
	cliCert, cliKey = issue("client", 3, &x509.Certificate{Subject: pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return ca, srvCert, srvKey, cliCert, cliKey
}

// TLS end to end: the server's certificate verified by --ca-cert, a client
// certificate (mTLS) as the identity, and a bearer token over TLS.
func TestTLSAndClientCertificates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, srvCert, srvKey, cliCert, cliKey := writePKI(t, dir, "robot.example.com")
	r := servertest.Start(t, func(c *server.Config) {
		c.TLS = server.TLSConfig{Cert: srvCert, Key: srvKey, ClientCA: ca}
		c.Auth.Identities = append(c.Auth.Identities, auth.IdentityConfig{
			Name: "robot", Tenants: []string{servertest.TenantA}, CertCommonNames: []string{"robot.example.com"},
			Grants: []auth.Grant{{Permission: auth.PermNodesRead, Resource: "compute-node/*"}}})
	})
	ctx := context.Background()
	list := []string{"commands", "list", "tenantId=tenant_a", "nodeId=node_a1", "--endpoint", "https://" + r.GRPC, "--ca-cert", ca}

	res := cliRun(ctx, map[string]string{}, append(list, "--cert", cliCert, "--key", cliKey)...)
	require.Equal(t, cli.ExitOK, res.code, "client certificate: %s", res.stderr)

	res = cliRun(ctx, map[string]string{"BC_TOKEN": servertest.TokOps}, list...)
	require.Equal(t, cli.ExitOK, res.code, "bearer token over TLS: %s", res.stderr)

	res = cliRun(ctx, map[string]string{}, list...)
	require.Equal(t, cli.ExitError, res.code)
	require.Contains(t, res.stderr, "UNAUTHENTICATED")

	res = cliRun(ctx, map[string]string{}, append(list, "--cert", cliCert, "--key", cliKey, "--tenant", "x")...)
	require.Equal(t, cli.ExitOK, res.code, "an explicit tenantId beats --tenant: %s", res.stderr)

	res = cliRun(ctx, map[string]string{"BC_CERT": cliCert, "BC_KEY": cliKey},
		"api", "commands.run", "tenantId=tenant_a", "nodeId=node_a1", "kind=diag.nvml", "--endpoint", "https://"+r.GRPC, "--ca-cert", ca)
	require.Equal(t, cli.ExitError, res.code)
	require.Contains(t, res.stderr, "PERMISSION_DENIED", "the certificate's identity only reads")
}
