package kinds_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/stretchr/testify/require"
)

var probe = kind.Manifest{
	Kind: "vendor.probe", Lane: kind.LaneBulk, Timeout: kind.Duration(time.Minute), Roles: []string{"node"},
	Version: "1.2.3", PayloadSchema: json.RawMessage(`{"type":"object","properties":{"depth":{"type":"integer","minimum":1}},"required":["depth"]}`),
}

func TestNewRegistry(t *testing.T) {
	r, err := kinds.NewRegistry(probe)
	require.NoError(t, err)
	m, ok := r.Get("vendor.probe")
	require.True(t, ok)
	require.Equal(t, probe.Digest(), m.Digest())
	require.Len(t, r.All(), 1)
	_, ok = r.Get("vendor.nope")
	require.False(t, ok)

	_, err = kinds.NewRegistry(probe, probe)
	require.ErrorIs(t, err, kinds.ErrDuplicateKind)

	bad := probe
	bad.Lane = "fast"
	_, err = kinds.NewRegistry(bad)
	require.ErrorContains(t, err, "lane")
}

// Unknown kinds are refused; payloads are checked against the schema and the
// error names the failing field.
func TestValidatePayload(t *testing.T) {
	r, err := kinds.NewRegistry(probe)
	require.NoError(t, err)
	require.NoError(t, r.ValidatePayload("vendor.probe", []byte(`{"depth":2}`)))
	require.ErrorIs(t, r.ValidatePayload("vendor.nope", nil), kinds.ErrUnknownKind)

	err = r.ValidatePayload("vendor.probe", []byte(`{"depth":0}`))
	var pe *kind.PayloadError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "/depth", pe.Field)
	err = r.ValidatePayload("vendor.probe", []byte(`{}`))
	require.ErrorAs(t, err, &pe)
}

// Third-party manifest files: JSON or YAML, one manifest or a list, each
// validated; a duplicate or an invalid file registers nothing.
func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	b, err := json.Marshal(probe)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "probe.json"), b, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "more.yaml"), []byte(`
- kind: vendor.flash
  lane: provision
  timeout: 30m
  roles: [node, discovery]
  flags: {destructive: true, attested: true}
  version: 0.1.0
- kind: vendor.ping
  lane: control
  timeout: 10s
  roles: [node]
  apiRunnable: false
  version: 1.0.0
`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README.txt"), []byte("not a manifest"), 0o644))

	r, err := kinds.NewRegistry()
	require.NoError(t, err)
	require.NoError(t, r.LoadDir(dir))
	var names []string
	for _, m := range r.All() {
		names = append(names, m.Kind)
	}
	require.Equal(t, []string{"vendor.flash", "vendor.ping", "vendor.probe"}, names)
	flash, _ := r.Get("vendor.flash")
	require.True(t, flash.Flags.Destructive)
	require.Equal(t, 30*time.Minute, flash.Timeout.D())

	// Loading the same directory again: every kind is a duplicate.
	require.ErrorIs(t, r.LoadDir(dir), kinds.ErrDuplicateKind)

	bad := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bad, "a.json"), b, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(bad, "b.yml"), []byte("kind: vendor.x\nlane: control\ntimeout: 1m\nroles: [node]\nversion: 1.0.0\napiRunable: true\n"), 0o644))
	r2, err := kinds.NewRegistry()
	require.NoError(t, err)
	require.ErrorContains(t, r2.LoadDir(bad), "apiRunable")
	require.Empty(t, r2.All(), "an invalid file registers nothing")

	require.Error(t, r2.LoadDir(filepath.Join(bad, "missing")))
}

func TestFirstPartyRegisters(t *testing.T) {
	_, err := kinds.NewRegistry(kinds.FirstParty()...)
	require.NoError(t, err)
}

func FuzzParseManifests(f *testing.F) {
	b, _ := json.Marshal(probe)
	f.Add(b)
	f.Add([]byte("kind: vendor.x\nlane: control\ntimeout: 1m\nroles: [node]\nversion: 1.0.0\n"))
	f.Add([]byte("[]"))
	f.Add([]byte("- {kind: a.b}\n"))
	f.Add([]byte("null"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := kinds.ParseManifests(data)
		if err != nil {
			return
		}
		for _, m := range ms {
			// Validation must not panic on anything that parses.
			_ = m.Validate()
		}
	})
}

// "the built-ins are diag.nvml, inventory.refresh, logs.collect, node.reboot
// and gpu.reset"; commands.run accepts the first four, not gpu.reset.
func TestFirstPartyBuiltIns(t *testing.T) {
	r, err := kinds.NewRegistry(kinds.FirstParty()...)
	require.NoError(t, err)
	for k, runnable := range map[string]bool{
		"diag.nvml": true, "inventory.refresh": true, "logs.collect": true, "node.reboot": true, "gpu.reset": false,
	} {
		m, ok := r.Get(k)
		require.True(t, ok, k)
		require.Equal(t, runnable, m.APIRunnable, k)
	}
	reboot, _ := r.Get("node.reboot")
	require.True(t, reboot.Flags.Destructive)
	require.True(t, reboot.Flags.SelfTerminating)
}

// "The registry may hold several versions of a kind; a node that runs any
// registered version is dispatched to" and "bc-server reloads kinds.d on
// SIGHUP": v2 is registered beside v1, both match, Get is the newest, and
// removing v1's file on reload leaves v2 alone.
func TestRegistry_VersionsAndReload(t *testing.T) {
	dir := t.TempDir()
	v1 := kind.Manifest{Kind: "acme.flash", Lane: kind.LaneBulk, Timeout: kind.Duration(time.Minute), Roles: []string{"node"}, Version: "1.0.0"}
	v2 := v1
	v2.Version, v2.Timeout = "2.0.0", kind.Duration(2*time.Minute)
	write := func(name string, m kind.Manifest) {
		b, err := json.Marshal(m)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o600))
	}
	write("v1.json", v1)
	r, err := kinds.NewRegistry()
	require.NoError(t, err)
	require.NoError(t, r.LoadDir(dir))
	write("v2.json", v2)
	added, removed, err := r.Reload(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"acme.flash@2.0.0"}, added)
	require.Empty(t, removed)
	got, ok := r.Get("acme.flash")
	require.True(t, ok)
	require.Equal(t, "2.0.0", got.Version)
	for _, m := range []kind.Manifest{v1, v2} {
		mm, ok := r.Matching("acme.flash", m.Digest())
		require.True(t, ok, m.Version)
		require.Equal(t, m.Version, mm.Version)
	}
	require.Len(t, r.Versions("acme.flash"), 2)

	require.NoError(t, os.Remove(filepath.Join(dir, "v1.json")))
	_, removed, err = r.Reload(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"acme.flash@1.0.0"}, removed)
	_, ok = r.Matching("acme.flash", v1.Digest())
	require.False(t, ok)

	// A bad directory changes nothing.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("kind: [oops"), 0o600))
	_, _, err = r.Reload(dir)
	require.Error(t, err)
	_, ok = r.Matching("acme.flash", v2.Digest())
	require.True(t, ok)
}
