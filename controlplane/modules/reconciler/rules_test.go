package reconciler_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/controlplane/modules/reconciler"
	"github.com/better-compute/commands/controlplane/modules/remediation"
)

func view(conds string, inv string) modules.NodeView {
	var n modules.NodeView
	if conds != "" {
		if err := json.Unmarshal([]byte(conds), &n.Conditions); err != nil {
			panic(err)
		}
	}
	if inv != "" {
		n.Inventory = json.RawMessage(inv)
	}
	return n
}

// The table: RebootRequired → node.reboot; reset-class XIDs → gpu.reset;
// reboot-class (79) → node.reboot; application XIDs and ignored ones →
// nothing; "a reboot supersedes a reset on the same node".
func TestRulesTable(t *testing.T) {
	rebootRequired := `[{"type":"RebootRequired","status":"True","message":"packages wait for a reboot: linux-image"}]`
	for _, tc := range []struct {
		name, conds, inv string
		want             []reconciler.Finding
	}{
		{"healthy", `[{"type":"RebootRequired","status":"False"}]`, `{"gpus":[{"uuid":"GPU-a"}]}`, nil},
		{"reboot required", rebootRequired, "", []reconciler.Finding{{Action: remediation.ActionNodeReboot, Trigger: "RebootRequired"}}},
		{"xid 48 resets its GPU", "", `{"gpus":[{"uuid":"GPU-a","xids":[{"xid":48,"count":1}]}]}`,
			[]reconciler.Finding{{Action: remediation.ActionGPUReset, GPU: "GPU-a", Trigger: "xid:48"}}},
		{"xid 119 classified reset by bcd", "", `{"gpus":[{"uuid":"GPU-b","xids":[{"xid":119,"action":"reset","count":3}]}]}`,
			[]reconciler.Finding{{Action: remediation.ActionGPUReset, GPU: "GPU-b", Trigger: "xid:119"}}},
		{"xid 79 reboots, never resets", "", `{"gpus":[{"uuid":"GPU-a","xids":[{"xid":79,"count":1}]}]}`,
			[]reconciler.Finding{{Action: remediation.ActionNodeReboot, Trigger: "xid:79"}}},
		{"fallen off the bus, no GPU left", "", `{"gpus":[],"unmatchedXids":[{"xid":79,"busId":"0000:3b:00","count":1}]}`,
			[]reconciler.Finding{{Action: remediation.ActionNodeReboot, Trigger: "xid:79"}}},
		{"application xids need nothing", "", `{"gpus":[{"uuid":"GPU-a","xids":[{"xid":13,"count":9},{"xid":31,"count":1}]}]}`, nil},
		{"ignored xid needs nothing", "", `{"gpus":[{"uuid":"GPU-a","xids":[{"xid":48,"ignored":true,"count":1}]}]}`, nil},
		{"reboot supersedes the reset", rebootRequired, `{"gpus":[{"uuid":"GPU-a","xids":[{"xid":95,"count":1}]}]}`,
			[]reconciler.Finding{{Action: remediation.ActionNodeReboot, Trigger: "RebootRequired"}}},
		{"one reset per GPU", "", `{"gpus":[{"uuid":"GPU-a","xids":[{"xid":48,"count":1},{"xid":95,"count":1}]},{"uuid":"GPU-0","xids":[{"xid":64,"count":1}]}]}`,
			[]reconciler.Finding{{Action: remediation.ActionGPUReset, GPU: "GPU-0", Trigger: "xid:64"}, {Action: remediation.ActionGPUReset, GPU: "GPU-a", Trigger: "xid:48"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := reconciler.Evaluate(view(tc.conds, tc.inv))
			for i := range got {
				require.NotEmpty(t, got[i].Message)
				got[i].Message = ""
			}
			require.Equal(t, tc.want, got)
		})
	}
	got := reconciler.Evaluate(view(rebootRequired, `{"gpus":[{"uuid":"GPU-a","xids":[{"xid":95,"count":1}]}]}`))
	require.Contains(t, got[0].Message, "also covers xid:95 on GPU-a")
}

// The check the engine verifies with: the trigger's rule says whether it
// still holds.
func TestStillNeeded(t *testing.T) {
	r := remediation.Row{Action: remediation.ActionNodeReboot, Trigger: "RebootRequired"}
	still, _ := reconciler.StillNeeded(view(`[{"type":"RebootRequired","status":"True"}]`, ""), r)
	require.True(t, still)
	still, why := reconciler.StillNeeded(view(`[{"type":"RebootRequired","status":"False"}]`, ""), r)
	require.False(t, still)
	require.Contains(t, why, "no longer")
	r = remediation.Row{Action: remediation.ActionGPUReset, GPU: "GPU-a", Trigger: "xid:48"}
	still, _ = reconciler.StillNeeded(view("", `{"gpus":[{"uuid":"GPU-a","xids":[{"xid":48,"count":1}]}]}`), r)
	require.True(t, still)
	still, _ = reconciler.StillNeeded(view("", `{"gpus":[{"uuid":"GPU-a"}]}`), r)
	require.False(t, still)
}

// Evaluate reads an inventory a node sent: whatever its bytes, it never
// panics, asks for at most one reboot, and never for a reset beside one.
func FuzzEvaluate(f *testing.F) {
	for _, s := range []string{
		`{"gpus":[{"uuid":"GPU-a","xids":[{"xid":48,"count":1}]}]}`,
		`{"gpus":[{"uuid":"GPU-a","xids":[{"xid":79}]}],"unmatchedXids":[{"xid":79,"busId":"0000:3b:00"}]}`,
		`{"gpus":null}`, `[]`, `{"gpus":[{"xids":[{"xid":"x"}]}]}`, ``,
	} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, inv string, reboot bool) {
		n := view("", "")
		n.Inventory = json.RawMessage(inv)
		if reboot {
			n.Conditions = []modules.Condition{{Type: "RebootRequired", Status: "True"}}
		}
		out := reconciler.Evaluate(n)
		reboots := 0
		for _, f := range out {
			if f.Action == remediation.ActionNodeReboot {
				reboots++
			}
		}
		if reboots > 1 || (reboots == 1 && len(out) != 1) {
			t.Fatalf("Evaluate(%q) = %+v", inv, out)
		}
		if reboot && reboots != 1 {
			t.Fatalf("RebootRequired asked for no reboot: %+v", out)
		}
	})
}
