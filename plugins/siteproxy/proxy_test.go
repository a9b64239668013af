package siteproxy_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/bmctest"
	"github.com/better-compute/commands/plugins/siteproxy"
	"github.com/better-compute/commands/plugins/siteproxy/manifest"
	"github.com/better-compute/commands/sdk/kind"
)

const (
	user     = "admin"
	password = "proxy-s3cret"
)

type env struct {
	dir, inventory string
	bmcs           []map[string]any
	p              *siteproxy.Plugin
}

// newEnv is a site with one fake Redfish BMC, m1, whose proxy rules allow
// GET below /redfish/v1 and PATCH of one system. The fake BMC listens on
// loopback, which DenyAddr refuses: the test lets exactly its address
// through.
func newEnv(t *testing.T, h http.Handler) (*env, *httptest.Server) {
	t.Helper()
	var srv *httptest.Server
	if h != nil {
		srv = httptest.NewTLSServer(h)
		t.Cleanup(srv.Close)
	} else {
		srv = bmctest.NewRedfish(t, bmctest.RedfishOptions{Username: user, Password: password}).Server
	}
	e := &env{dir: t.TempDir()}
	e.inventory = filepath.Join(e.dir, "inventory.yaml")
	require.NoError(t, os.Mkdir(filepath.Join(e.dir, "creds"), 0o700))
	b, _ := json.Marshal(map[string]string{"username": user, "password": password})
	require.NoError(t, os.WriteFile(filepath.Join(e.dir, "creds", "admin.json"), b, 0o600))
	ca := filepath.Join(e.dir, "ca.pem")
	require.NoError(t, os.WriteFile(ca, pemOf(srv), 0o644))
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	pn, _ := strconv.Atoi(port)
	e.add(t, map[string]any{"id": "m1", "address": host, "providers": []string{"redfish"}, "credentialRef": "admin",
		"redfish": map[string]any{"port": pn, "caFile": ca},
		"proxy": map[string]any{"allow": []map[string]any{
			{"methods": []string{"GET"}, "path": "/redfish/v1/**"},
			{"methods": []string{"PATCH"}, "path": "/redfish/v1/Systems/437XR1138R2"},
		}}})
	e.p = siteproxy.New(e.inventory, hclog.NewNullLogger())
	loop := netip.MustParseAddr(host)
	e.p.Deny = func(a netip.Addr) error {
		if a == loop {
			return nil
		}
		return siteproxy.DenyAddr(a)
	}
	return e, srv
}

func (e *env) add(t *testing.T, b map[string]any) {
	e.bmcs = append(e.bmcs, b)
	doc, err := json.Marshal(map[string]any{"bmcs": e.bmcs, "credentials": map[string]any{"dir": filepath.Join(e.dir, "creds")}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(e.inventory, doc, 0o600))
}

func (e *env) run(t *testing.T, payload string) (kind.Result, siteproxy.Result) {
	t.Helper()
	v, err := kind.NewValidator(manifest.Manifest)
	require.NoError(t, err)
	require.NoError(t, v.Validate([]byte(payload)))
	r := kind.Run(context.Background(), e.p.Kind().Handler, kind.Request{
		Command: kind.Command{ID: "cmd_1", Kind: manifest.KindName, Payload: json.RawMessage(payload)}, Logger: hclog.NewNullLogger()})
	require.NotContains(t, string(r.Data)+r.Message, password, "the agent never returns the BMC credential")
	var res siteproxy.Result
	if len(r.Data) > 0 {
		require.NoError(t, json.Unmarshal(r.Data, &res))
	}
	return r, res
}

func TestManifest(t *testing.T) {
	require.NoError(t, manifest.Manifest.Validate())
	require.Equal(t, []string{"site"}, manifest.Manifest.Roles)
	require.True(t, manifest.Manifest.Flags.Destructive, "break-glass needs the quorum")
	v, err := kind.NewValidator(manifest.Manifest)
	require.NoError(t, err)
	require.Error(t, v.Validate([]byte(`{"bmc":"m1","method":"CONNECT","path":"/"}`)))
	require.Error(t, v.Validate([]byte(`{"bmc":"m1","method":"GET","path":"//192.0.2.9/redfish/v1"}`)))
	require.Error(t, v.Validate([]byte(`{"bmc":"m1","method":"GET","path":"/x","headers":{"Upgrade":"websocket"}}`)))
	require.Error(t, v.Validate([]byte(`{"bmc":"m1","method":"GET","path":"/x","headers":{"Authorization":"Basic x"}}`)))
}

// The proxy injects the credential, returns the body and its SHA-256.
func TestProxiesAnAllowedGETWithTheCredentialInjected(t *testing.T) {
	e, _ := newEnv(t, nil)
	r, res := e.run(t, `{"bmc":"m1","method":"GET","path":"/redfish/v1/Systems/437XR1138R2"}`)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.Equal(t, 200, res.Status)
	require.Contains(t, res.Body, `"PowerState":"On"`)
	sum := sha256.Sum256([]byte(res.Body))
	require.Equal(t, hex.EncodeToString(sum[:]), res.SHA256)
	require.Equal(t, int64(len(res.Body)), res.Bytes)
}

// "site.httpProxy refuses a path off the allowlist".
func TestRefusesAPathOffTheAllowlist(t *testing.T) {
	e, _ := newEnv(t, nil)
	for _, c := range []struct{ payload, want string }{
		{`{"bmc":"m1","method":"GET","path":"/redfish"}`, "do not allow GET /redfish;"},
		{`{"bmc":"m1","method":"POST","path":"/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset","body":"{}"}`, "do not allow POST"},
		{`{"bmc":"m1","method":"PATCH","path":"/redfish/v1/Managers/BMC"}`, "do not allow PATCH"},
		{`{"bmc":"m1","method":"GET","path":"/redfish/v1/../../etc/passwd"}`, "dot segments"},
		{`{"bmc":"m1","method":"GET","path":"/redfish/v1/%2e%2e/admin"}`, "percent-encoded"},
		{`{"bmc":"m1","method":"GET","path":"/redfishv1"}`, "do not allow GET /redfishv1"},
	} {
		r, _ := e.run(t, c.payload)
		require.Equal(t, siteproxy.ReasonNotAllowed, r.Reason, c.payload)
		require.Contains(t, r.Message, c.want)
	}
}

// "site.httpProxy refuses ... a redirect": the BMC's 302 is reported, not followed.
func TestRefusesARedirect(t *testing.T) {
	var followed bool
	mux := http.NewServeMux()
	mux.HandleFunc("/redfish/v1/Systems", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/redfish/v1/elsewhere", http.StatusFound)
	})
	mux.HandleFunc("/redfish/v1/elsewhere", func(http.ResponseWriter, *http.Request) { followed = true })
	e, _ := newEnv(t, mux)
	r, res := e.run(t, `{"bmc":"m1","method":"GET","path":"/redfish/v1/Systems"}`)
	require.Equal(t, siteproxy.ReasonRedirect, r.Reason, r.Message)
	require.Contains(t, r.Message, "redirect to /redfish/v1/elsewhere")
	require.Equal(t, 302, res.Status)
	require.False(t, followed)
}

// "site.httpProxy refuses ... an address outside the inventory": a BMC id
// the inventory lacks, a path that names another host, and inventory
// entries at addresses the proxy never reaches.
func TestRefusesAnAddressOutsideTheInventory(t *testing.T) {
	e, _ := newEnv(t, nil)
	r, _ := e.run(t, `{"bmc":"m9","method":"GET","path":"/redfish/v1"}`)
	require.Equal(t, siteproxy.ReasonUnknownBMC, r.Reason)
	require.Contains(t, r.Message, "only BMCs the site inventory names")

	_, _, err := siteproxy.CheckPath("//192.0.2.9/redfish/v1")
	require.Error(t, err)
	_, _, err = siteproxy.CheckPath("/redfish/v1@192.0.2.9")
	require.NoError(t, err, "an @ in a path stays a path: the request goes to the pinned address")

	rule := map[string]any{"allow": []map[string]any{{"methods": []string{"GET"}, "path": "/redfish/v1/**"}}}
	e.add(t, map[string]any{"id": "meta", "address": "169.254.169.254", "providers": []string{"redfish"}, "credentialRef": "admin", "proxy": rule})
	e.add(t, map[string]any{"id": "v6loop", "address": "::ffff:127.0.0.2", "providers": []string{"redfish"}, "credentialRef": "admin", "proxy": rule})
	e.add(t, map[string]any{"id": "sixtofour", "address": "2002:7f00:1::1", "providers": []string{"redfish"}, "credentialRef": "admin", "proxy": rule})
	for id, want := range map[string]string{"meta": "link-local", "v6loop": "loopback", "sixtofour": "loopback"} {
		r, _ := e.run(t, `{"bmc":"`+id+`","method":"GET","path":"/redfish/v1"}`)
		require.Equal(t, siteproxy.ReasonAddress, r.Reason, id)
		require.Contains(t, r.Message, want, id)
	}
	// The agent's own addresses.
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.IsLoopback() || n.IP.IsLinkLocalUnicast() {
			continue
		}
		ip, _ := netip.AddrFromSlice(n.IP)
		require.ErrorContains(t, siteproxy.DenyAddr(ip.Unmap()), "agent's own addresses")
	}
}

func TestCapsBytesAndRedactsAnEchoedCredential(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/redfish/v1/big", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(make([]byte, 4096)) })
	mux.HandleFunc("/redfish/v1/echo", func(w http.ResponseWriter, r *http.Request) {
		u, p, _ := r.BasicAuth()
		w.Header().Set("Set-Cookie", "session="+p)
		w.Header().Set("X-Auth-Token", p)
		_, _ = w.Write([]byte(`{"user":"` + u + `","password":"` + p + `","auth":"` + r.Header.Get("Authorization") + `"}`))
	})
	e, _ := newEnv(t, mux)
	r, res := e.run(t, `{"bmc":"m1","method":"GET","path":"/redfish/v1/big","maxBytes":1024}`)
	require.Equal(t, siteproxy.ReasonTooLarge, r.Reason)
	require.Empty(t, res.Body)

	r, res = e.run(t, `{"bmc":"m1","method":"GET","path":"/redfish/v1/echo"}`)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.True(t, res.Redacted)
	require.Contains(t, res.Body, `"user":"admin"`)
	require.NotContains(t, res.Headers, "Set-Cookie")
	require.NotContains(t, res.Headers, "X-Auth-Token")
}

func pemOf(s *httptest.Server) []byte {
	return pemEncode(s.Certificate().Raw)
}

// A cancel ends a request to a BMC that never answers: the handler reports
// cancelled, and the BMC sees its request's connection go (the request is
// not left running). The conformance harness cannot check this on the
// binary, which refuses every address a test can serve a BMC on.
func TestCancelStopsAHangingRequest(t *testing.T) {
	arrived := make(chan struct{}, 1)
	gone := make(chan struct{}, 1)
	e, _ := newEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
		gone <- struct{}{}
	}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	payload := json.RawMessage(`{"bmc":"m1","method":"GET","path":"/redfish/v1"}`)
	done := make(chan kind.Result, 1)
	go func() {
		done <- kind.Run(ctx, e.p.Kind().Handler, kind.Request{
			Command: kind.Command{ID: "cmd_1", Kind: manifest.KindName, Payload: payload}, Logger: hclog.NewNullLogger()})
	}()
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the request never reached the BMC")
	}
	cancel()
	select {
	case r := <-done:
		require.Equal(t, kind.StatusCancelled, r.Status, r.Message)
	case <-time.After(10 * time.Second):
		t.Fatal("no result within 10 s of the cancel")
	}
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the BMC's request was not ended by the cancel")
	}
}
