package bmc_test

import (
	"context"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/plugins/bmc"
	"github.com/better-compute/commands/plugins/internal/site"
)

// FuzzRedfishSystem serves a fuzzed ComputerSystem document as a BMC's
// only system and reads its power state and boot override through the
// Redfish provider: a BMC's answer gives a state or an error, never a
// panic, and an accepted power state is one the BMC wrote.
func FuzzRedfishSystem(f *testing.F) {
	for _, s := range []string{
		`{"@odata.id":"/redfish/v1/Systems/1","Id":"1","PowerState":"On","Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideEnabled":"Once","BootSourceOverrideMode":"UEFI"}}`,
		`{"@odata.id":"/redfish/v1/Systems/1","Id":"1","PowerState":"PoweringOff","Actions":{"#ComputerSystem.Reset":{"target":"/x","ResetType@Redfish.AllowableValues":["On"]}}}`,
		`{"@odata.id":"/redfish/v1/Systems/1","Id":"1"}`,
		`{"@odata.id":"/redfish/v1/Systems/1","PowerState":7,"Boot":[]}`,
		`not json`,
	} {
		f.Add([]byte(s))
	}
	var doc atomic.Value
	doc.Store([]byte(`{}`))
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/redfish/v1/", "/redfish/v1":
			_, _ = w.Write([]byte(`{"@odata.id":"/redfish/v1/","Systems":{"@odata.id":"/redfish/v1/Systems"}}`))
		case "/redfish/v1/Systems":
			_, _ = w.Write([]byte(`{"Members":[{"@odata.id":"/redfish/v1/Systems/1"}],"Members@odata.count":1}`))
		default:
			_, _ = w.Write(doc.Load().([]byte))
		}
	}))
	defer srv.Close()
	dir := f.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	require.NoError(f, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644))
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	pn, _ := strconv.Atoi(port)
	b := site.BMC{ID: "f", Address: host, Providers: []string{"redfish"}, Redfish: site.RedfishConfig{Port: pn, System: "1", CAFile: ca}}
	f.Fuzz(func(t *testing.T, body []byte) {
		doc.Store(body)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p, err := bmc.OpenRedfish(ctx, b, site.Credential{Username: "u", Password: "p"})
		if err != nil {
			return
		}
		defer p.Close()
		if st, err := p.PowerState(ctx); err == nil {
			require.NotEmpty(t, st)
		}
		_, _ = p.Boot(ctx)
	})
}
