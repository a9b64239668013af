package wakes_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/wakes"
)

// "wf:<workflowId>:… wakes that workflow": the owner a key names.
func TestOwnerOf(t *testing.T) {
	for key, want := range map[string]string{
		"wf:health-01J:node.reboot":     "wf:health-01J",
		"wf:health-01J:node.reboot:2":   "wf:health-01J",
		"acceptance:node_1:3:diag.nvml": "acceptance:node_1",
		"api:abc":                       "",
		"":                              "",
		"wf::step":                      "",
		"rollout:x":                     "",
	} {
		require.Equal(t, want, wakes.OwnerOf(key), key)
	}
}

// The longest registered prefix wins; api: keys and doubled prefixes are
// refused; owner-shaped keys wake even before a waker registers.
func TestRegistry(t *testing.T) {
	r := wakes.NewRegistry()
	nop := wakes.WakerFunc(func(context.Context, wakes.Wake) error { return nil })
	var hit string
	long := wakes.WakerFunc(func(_ context.Context, w wakes.Wake) error { hit = w.Owner; return nil })
	require.NoError(t, r.Register("wf:", nop))
	require.NoError(t, r.Register("wf:health-", long))
	require.Error(t, r.Register("wf:health-", nop))
	require.ErrorContains(t, r.Register("api:", nop), "api:")
	w, owner, ok := r.Lookup("wf:health-1:node.reboot")
	require.True(t, ok)
	require.Equal(t, "wf:health-1", owner)
	require.NoError(t, w.Wake(context.Background(), wakes.Wake{Owner: owner}))
	require.Equal(t, "wf:health-1", hit)
	require.True(t, r.Wakes("acceptance:n:1:diag.nvml"), "an owner key waits for its waker")
	require.False(t, r.Wakes("api:x"))
	require.False(t, r.Wakes(""))
	require.Equal(t, []string{"wf:", "wf:health-"}, r.Prefixes())
}

// OwnerOf never panics and names an owner only for owner-shaped keys.
func FuzzOwnerOf(f *testing.F) {
	for _, s := range []string{"wf:a:b", "acceptance:n:1:k", "api:x", "wf:", "wf::", ":", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		o := wakes.OwnerOf(key)
		if o == "" {
			return
		}
		if !strings.HasPrefix(key, o) || strings.Count(o, ":") != 1 || strings.HasSuffix(o, ":") {
			t.Fatalf("OwnerOf(%q) = %q", key, o)
		}
	})
}
