package server_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/controlplane/trust/pki"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// With httpTls the HTTP listener serves HTTPS: a real TLS client that
// trusts the certificate's CA reads health and metrics and uploads a
// support bundle to the dir blob store through an https:// URL (the
// operator guide's baseURL: https://…:9464/v1/blobs), and plain HTTP gets
// no answer from it.
func TestHTTPListenerServesTLS(t *testing.T) {
	t.Parallel()
	ca, err := pki.NewCA("test http")
	require.NoError(t, err)
	certPEM, keyPEM, err := ca.IssueServer("127.0.0.1", "localhost")
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "http.crt"), filepath.Join(dir, "http.key")
	require.NoError(t, os.WriteFile(certFile, certPEM, 0o600))
	require.NoError(t, os.WriteFile(keyFile, keyPEM, 0o600))
	r := servertest.Start(t, func(cfg *server.Config) {
		cfg.HTTPTLS = server.HTTPTLSConfig{Cert: certFile, Key: keyFile}
		cfg.SupportBundles.Blob.Dir.BaseURL = "https://127.0.0.1:9464/v1/blobs"
	})
	require.True(t, strings.HasPrefix(r.HTTPBase, "https://"))

	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(ca.CertPEM))
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := client.Get("https://" + r.HTTP + path)
		require.NoError(t, err, path)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
		require.NotNil(t, resp.TLS, "%s came over TLS", path)
	}
	resp, err := http.Get("http://" + r.HTTP + "/healthz")
	if err == nil {
		resp.Body.Close()
		require.NotEqual(t, http.StatusOK, resp.StatusCode, "plain HTTP is not served")
	}

	// A logs.collect's presigned URL, sent to the listener (the example's
	// port is not the test's), takes the bundle over TLS.
	c, err := apiv1.NewCommandsClient(dial(t, r.GRPC)).Run(as(servertest.TokOps), &apiv1.RunCommandRequest{
		TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Kind: "logs.collect", IdempotencyKey: "tls-0412"})
	require.NoError(t, err)
	u, err := url.Parse(c.GetPayload().GetFields()["uploadUrl"].GetStringValue())
	require.NoError(t, err)
	require.Equal(t, "https", u.Scheme)
	u.Host = r.HTTP
	req, err := http.NewRequest(http.MethodPut, u.String(), strings.NewReader("bundle bytes"))
	require.NoError(t, err)
	resp, err = client.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	stored, err := os.ReadFile(filepath.Join(r.Config.SupportBundles.Blob.Dir.Path, c.GetBundleKey()))
	require.NoError(t, err)
	require.Equal(t, "bundle bytes", string(stored))
}

// Half a certificate is a configuration error, found at start.
func TestHTTPTLSNeedsCertAndKey(t *testing.T) {
	t.Parallel()
	cfg := server.DefaultConfig()
	cfg.HTTPListen = "127.0.0.1:0"
	cfg.HTTPTLS = server.HTTPTLSConfig{Cert: "/nonexistent/http.crt"}
	_, err := server.New(t.Context(), cfg, nil, nil)
	require.ErrorContains(t, err, "httpTls")
}
