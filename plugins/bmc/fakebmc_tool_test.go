package bmc_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/plugins/bmc"
	"github.com/better-compute/commands/plugins/bmc/manifest"
	"github.com/better-compute/commands/plugins/internal/site"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/kindtest"
)

// startFakeBMC runs the bc-fake-bmc binary in a new directory and waits
// for its ready file; it is stopped with SIGTERM at the end of the test.
func startFakeBMC(t *testing.T, args ...string) string {
	t.Helper()
	bin := testutil.BuildBinary(t, "./internal/tools/bc-fake-bmc")
	dir := t.TempDir()
	cmd := exec.Command(bin, append([]string{"--dir", dir, "--delay", "100ms"}, args...)...)
	logs := &syncLog{}
	cmd.Stderr = logs
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("bc-fake-bmc:\n%s", logs.String())
		}
	})
	testutil.WaitFor(t, 30*time.Second, "bc-fake-bmc to be ready", func() bool {
		_, err := os.Stat(filepath.Join(dir, "ready"))
		return err == nil
	})
	return dir
}

// fakeState reads bc-fake-bmc's state.json.
func fakeState(t *testing.T, dir string) map[string]struct {
	Provider string         `json:"provider"`
	Power    string         `json:"power"`
	Boot     map[string]any `json:"boot"`
} {
	t.Helper()
	var st map[string]struct {
		Provider string         `json:"provider"`
		Power    string         `json:"power"`
		Boot     map[string]any `json:"boot"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &st))
	return st
}

// Issue 35: "the fake Redfish BMC … exist[s] only as Go test libraries". The
// bc-fake-bmc binary serves several machines (two Redfish, one IPMI) and
// writes a site inventory and credential that the real bc-kind-bmc takes
// as they are: a power off through Redfish and through IPMI, and a boot
// override, each verified by the plugin and shown in state.json.
func TestFakeBMCBinaryServesThePlugin(t *testing.T) {
	dir := startFakeBMC(t)
	inventory := filepath.Join(dir, "site-inventory.yaml")
	inv, err := site.LoadInventory(inventory)
	require.NoError(t, err, "the inventory bc-fake-bmc writes is one the site plugins accept")
	require.Len(t, inv.BMCs, 3)
	st := fakeState(t, dir)
	require.Equal(t, "On", st["fake-r1"].Power)
	require.Equal(t, "On", st["fake-i1"].Power)

	bin := testutil.BuildBinary(t, "./plugins/bmc/cmd/bc-kind-bmc")
	p := kindtest.Start(t, bin, kindtest.Options{Env: []string{site.EnvInventory + "=" + inventory, bmc.EnvPollInterval + "=50ms", bmc.EnvProviderTimeout + "=5s"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, m := range []string{"fake-r1", "fake-i1"} {
		r, err := p.Execute(ctx, manifest.PowerKind, json.RawMessage(`{"bmc":"`+m+`","action":"off"}`), nil)
		require.NoError(t, err)
		require.Equal(t, kind.StatusSucceeded, r.Status, "%s: %s %s", m, r.Reason, r.Message)
		var res bmc.PowerResult
		require.NoError(t, json.Unmarshal(r.Data, &res))
		require.True(t, res.Verified, m)
	}
	r, err := p.Execute(ctx, manifest.BootKind, json.RawMessage(`{"bmc":"fake-r2","device":"disk","persistent":true}`), nil)
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, r.Status, "%s %s", r.Reason, r.Message)
	const wantPower = "fake-r1 Off\nfake-r2 On\nfake-i1 Off\n"
	// The fake writes state.json, then the power file: wait for both (a
	// read between the two writes saw the power file one change behind).
	var power []byte
	testutil.WaitFor(t, 10*time.Second, "state.json and the power file to show the changes", func() bool {
		st := fakeState(t, dir)
		power, _ = os.ReadFile(filepath.Join(dir, "power"))
		return st["fake-r1"].Power == "Off" && st["fake-i1"].Power == "Off" && st["fake-r2"].Power == "On" &&
			st["fake-r2"].Boot["BootSourceOverrideTarget"] == "Hdd" && st["fake-r2"].Boot["BootSourceOverrideEnabled"] == "Continuous" &&
			string(power) == wantPower
	})
	require.Equal(t, wantPower, string(power), "one line per machine, for a shell's grep")
}

// syncLog is a process's stderr, read while it runs.
type syncLog struct {
	lock sync.Mutex
	b    strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.lock.Lock()
	defer l.lock.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.lock.Lock()
	defer l.lock.Unlock()
	return l.b.String()
}
