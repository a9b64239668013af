package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/controlplane/front/api"
	"github.com/better-compute/commands/controlplane/trust/auth"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// "a support bundle's download link (a download endpoint on bc-server
// that streams from the blob store to a caller with the node's read
// permission)": the bundle a node uploaded comes back byte for byte to a
// reader of the node, and every other caller is told why not, as JSON.
func TestSupportBundleDownloadStreamsToANodeReader(t *testing.T) {
	t.Parallel()
	store, err := bundles.NewDirStore(bundles.DirOptions{Root: t.TempDir(), BaseURL: "https://cp.example.com/v1/blobs",
		Secret: []byte("0123456789abcdef0123456789abcdef")})
	require.NoError(t, err)
	b := setup(t, func(c *api.Config) { c.Bundles = bundles.New(store, 1<<20) })
	c, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeGPU, Kind: "logs.collect", Payload: &structpb.Struct{}, IdempotencyKey: "dl-1"})
	require.NoError(t, err)
	authn, err := auth.New(testAuthConfig())
	require.NoError(t, err)
	srv := httptest.NewServer(func() http.Handler {
		mux := http.NewServeMux()
		mux.Handle(api.BundlePath, b.api.BundleHandler(authn))
		return mux
	}())
	t.Cleanup(srv.Close)
	get := func(token, node, cmd string) (*http.Response, []byte) {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/tenants/"+tenantA+"/nodes/"+node+"/commands/"+cmd+"/bundle", nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, body
	}
	jsonCode := func(body []byte) string {
		var e struct{ Code string }
		require.NoError(t, json.Unmarshal(body, &e), string(body))
		return e.Code
	}

	// Not uploaded yet: NOT_FOUND, saying so.
	resp, body := get(tokReader, nodeGPU, c.GetId())
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, "NOT_FOUND", jsonCode(body))
	require.Contains(t, string(body), "not uploaded")

	// The node uploads through its presigned URL (the store's own handler).
	u, err := url.Parse(c.GetPayload().GetFields()["uploadUrl"].GetStringValue())
	require.NoError(t, err)
	bundle := bytes.Repeat([]byte("gzip bytes "), 1000)
	put := httptest.NewRequest(http.MethodPut, u.RequestURI(), bytes.NewReader(bundle))
	rec := httptest.NewRecorder()
	store.Handler().ServeHTTP(rec, put)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())

	resp, body = get(tokReader, nodeGPU, c.GetId())
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, bundle, body)
	require.Equal(t, "application/gzip", resp.Header.Get("Content-Type"))
	require.Contains(t, resp.Header.Get("Content-Disposition"), nodeGPU+"-"+c.GetId()+".tar.gz")

	resp, body = get("", nodeGPU, c.GetId())
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Equal(t, "UNAUTHENTICATED", jsonCode(body))
	resp, _ = get("wrong-token", nodeGPU, c.GetId())
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, body = get(tokOther, nodeGPU, c.GetId())
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "another tenant's caller does not learn the node exists")
	require.Equal(t, "NOT_FOUND", jsonCode(body))
	// The command is node_gpu1's: asked under another node, it is not found.
	resp, _ = get(tokOps, nodeA1, c.GetId())
	require.Equal(t, http.StatusNotFound, resp.StatusCode)

	// narrow reads node_gpu* only: node_a1's bundle is forbidden to it.
	a1, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "logs.collect", Payload: &structpb.Struct{}, IdempotencyKey: "dl-2"})
	require.NoError(t, err)
	resp, body = get(tokNarrow, nodeA1, a1.GetId())
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Equal(t, "PERMISSION_DENIED", jsonCode(body))

	// A command without a bundle says that only logs.collect uploads one.
	inv, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeGPU, Kind: "inventory.refresh", Payload: &structpb.Struct{}})
	require.NoError(t, err)
	resp, body = get(tokOps, nodeGPU, inv.GetId())
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, string(body), "only logs.collect uploads one")
}
