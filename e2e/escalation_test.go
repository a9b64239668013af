package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/modules/remediation"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// Issue 35: "a reset whose GPU stays unhealthy escalates". A GPU whose row
// remap stays pending after gpu.reset (the fake nvidia-smi's reset does
// not clear it): the provision module resets it once, the reset reports
// the GPU still unhealthy (gpu-unhealthy), and the remediation escalates
// instead of failing and resetting again; nodes.get shows
// RemediationEscalated. (The breaker
// opening after its threshold and `pools reset-breaker` closing it are
// TestE2E_ReconcilerRebootsWithinTheBudgetAndTheBreakerStopsAFailingPool.)
func TestE2E_AResetThatDoesNotClearTheGPUEscalates(t *testing.T) {
	c := newModulesCluster(t, func(cfg *server.Config) {
		cfg.Modules.Remediation.Enabled = true
		cfg.Modules.Interval = server.Duration(300 * time.Millisecond)
	})
	n := c.join()
	smiPath, calls := remapSmi(t)
	require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(smiPath), "sticky"), nil, 0o644))
	env := baseEnv(t)
	env["BCD_NVML"] = "none"
	env["BCD_NVIDIA_SMI"] = smiPath
	env["BCD_PROC_ROOT"] = t.TempDir()
	n.configure(env)
	b, err := os.ReadFile(n.config)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(n.config, []byte(strings.Replace(string(b), `nvmlSource: "mock:dgxh200"`, `nvmlSource: "none"`, 1)), 0o600))
	n.start()
	c.waitState(c.run("inventory.refresh", map[string]any{}).GetId(), "succeeded")

	var done *apiv1.Remediation
	testutil.WaitFor(t, 2*time.Minute, "the remediation to finish", func() bool {
		for _, r := range c.plan() {
			if r.GetGpu() == fakeGPU1 && r.GetFinishedAt() != nil {
				done = r
				return true
			}
		}
		return false
	})
	require.Equal(t, remediation.StateEscalated, done.GetState(), "%s: %s", done.GetOutcome(), done.GetOutcomeMessage())
	require.Equal(t, remediation.OutcomeFailed, done.GetOutcome(), "it counts towards the breaker")
	require.Contains(t, done.GetOutcomeMessage(), "stays unhealthy")
	resets := 0
	for _, l := range readLines(t, calls) {
		if l == "--gpu-reset -i "+fakeGPU1 {
			resets++
		}
	}
	require.Equal(t, 1, resets, "one reset, then escalation, not another reset")
	node, err := apiv1.NewNodesClient(c.conn).Get(c.ctx(), &apiv1.GetNodeRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1})
	require.NoError(t, err)
	found := false
	for _, cond := range node.GetConditions() {
		if cond.GetType() == remediation.ConditionEscalated && cond.GetStatus() == "True" {
			found = true
		}
	}
	require.True(t, found, "nodes.get shows RemediationEscalated: %v", node.GetConditions())
	p, ok := c.inventoryPending(fakeGPU1)
	require.True(t, ok)
	require.True(t, p, "the GPU stays unhealthy")
}
