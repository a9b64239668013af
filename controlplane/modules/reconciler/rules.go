// Package reconciler is the health reconciler: a module that reads every
// node's conditions and GPU inventory, level-triggered, and asks the
// remediation engine for the platform's own destructive work through a
// table of rules: RebootRequired → node.reboot; the XID rules of
// shared research gpu.md (reset-class XIDs → gpu.reset, reboot-class →
// node.reboot); a reboot supersedes a reset on the same node. The engine
// keeps the work within the pool's budget under the node's lock and a
// platform batch, skips nodes whose session is stale, verifies (the boot id
// changed, the condition cleared), trips the pool's breaker, and turns a
// node's fifth remediation within 7 days into a hardware ticket event.
package reconciler

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/controlplane/modules/remediation"
)

// TriggerRebootRequired is the condition bcd reports when a host setting
// waits for a boot.
const TriggerRebootRequired = "RebootRequired"

// The XID actions, as the inventory's XID conditions carry them.
const (
	xidReset  = "reset"
	xidReboot = "reboot"
	xidInfo   = "information"
)

// XIDActions is the XID table of gpu.md ("NVIDIA bucket" and the daemon's
// column): 79 (fallen off the bus) needs a reboot and never a reset; the
// RESET_GPU class needs a reset; the application and informational XIDs
// need nothing. The inventory's own classification (bcd applies the same
// table and the node's ignore list) wins when it has one.
var XIDActions = map[int]string{
	79: xidReboot,
	48: xidReset, 64: xidReset, 74: xidReset, 95: xidReset, 119: xidReset, 120: xidReset,
	46: xidReset, 62: xidReset, 110: xidReset, 136: xidReset, 140: xidReset, 143: xidReset,
	155: xidReset, 156: xidReset, 158: xidReset,
	13: xidInfo, 31: xidInfo, 43: xidInfo, 45: xidInfo, 94: xidInfo, 63: xidInfo, 92: xidInfo, 109: xidInfo,
}

// Finding is what one rule asks for on one node.
type Finding struct {
	Action, GPU, Trigger, Message string
}

// Rule is one row of the reconciler's table.
type Rule struct {
	// Name names the rule in docs and tests.
	Name string
	// Match returns what the node needs by this rule.
	Match func(n modules.NodeView) []Finding
	// Holds says whether the trigger of a remediation this rule made
	// still holds on n (the engine's StillNeeded).
	Holds func(n modules.NodeView, r remediation.Row) (bool, string)
}

// xidCondition is the part of an inventory XID condition the rules read.
type xidCondition struct {
	XID     int    `json:"xid"`
	BusID   string `json:"busId"`
	Action  string `json:"action"`
	Ignored bool   `json:"ignored"`
	Count   int    `json:"count"`
}

type inventory struct {
	GPUs []struct {
		UUID string         `json:"uuid"`
		XIDs []xidCondition `json:"xids"`
	} `json:"gpus"`
	UnmatchedXIDs []xidCondition `json:"unmatchedXids"`
}

func parseInventory(n modules.NodeView) inventory {
	var inv inventory
	if len(n.Inventory) > 0 {
		_ = json.Unmarshal(n.Inventory, &inv)
	}
	return inv
}

func actionOf(x xidCondition) string {
	if x.Ignored {
		return xidInfo
	}
	if x.Action != "" {
		return x.Action
	}
	return XIDActions[x.XID]
}

func xidTrigger(x int) string { return "xid:" + strconv.Itoa(x) }

// Rules is the reconciler's table.
var Rules = []Rule{
	{
		Name: "reboot-required",
		Match: func(n modules.NodeView) []Finding {
			c, ok := n.True(TriggerRebootRequired)
			if !ok {
				return nil
			}
			return []Finding{{Action: remediation.ActionNodeReboot, Trigger: TriggerRebootRequired, Message: c.Message}}
		},
		Holds: func(n modules.NodeView, r remediation.Row) (bool, string) {
			if c, ok := n.True(TriggerRebootRequired); ok {
				return true, "RebootRequired is True: " + c.Message
			}
			return false, "RebootRequired is no longer True"
		},
	},
	{
		Name: "xid-reboot",
		Match: func(n modules.NodeView) []Finding {
			inv := parseInventory(n)
			var out []Finding
			add := func(x xidCondition, where string) {
				if actionOf(x) == xidReboot {
					out = append(out, Finding{Action: remediation.ActionNodeReboot, Trigger: xidTrigger(x.XID),
						Message: fmt.Sprintf("XID %d on %s (%d this boot) needs a reboot; a GPU reset cannot recover it", x.XID, where, x.Count)})
				}
			}
			for _, g := range inv.GPUs {
				for _, x := range g.XIDs {
					add(x, g.UUID)
				}
			}
			for _, x := range inv.UnmatchedXIDs {
				add(x, "bus "+x.BusID)
			}
			return out
		},
		Holds: func(n modules.NodeView, r remediation.Row) (bool, string) {
			inv := parseInventory(n)
			for _, g := range inv.GPUs {
				for _, x := range g.XIDs {
					if xidTrigger(x.XID) == r.Trigger && actionOf(x) == xidReboot {
						return true, fmt.Sprintf("XID %d is still reported on %s this boot", x.XID, g.UUID)
					}
				}
			}
			for _, x := range inv.UnmatchedXIDs {
				if xidTrigger(x.XID) == r.Trigger && actionOf(x) == xidReboot {
					return true, fmt.Sprintf("XID %d is still reported on bus %s this boot", x.XID, x.BusID)
				}
			}
			return false, r.Trigger + " is no longer reported"
		},
	},
	{
		Name: "xid-reset",
		Match: func(n modules.NodeView) []Finding {
			inv := parseInventory(n)
			var out []Finding
			for _, g := range inv.GPUs {
				for _, x := range g.XIDs {
					if actionOf(x) == xidReset && g.UUID != "" {
						out = append(out, Finding{Action: remediation.ActionGPUReset, GPU: g.UUID, Trigger: xidTrigger(x.XID),
							Message: fmt.Sprintf("XID %d on %s (%d this boot) needs a GPU reset", x.XID, g.UUID, x.Count)})
					}
				}
			}
			return out
		},
		Holds: func(n modules.NodeView, r remediation.Row) (bool, string) {
			for _, g := range parseInventory(n).GPUs {
				if g.UUID != r.GPU {
					continue
				}
				for _, x := range g.XIDs {
					if xidTrigger(x.XID) == r.Trigger && actionOf(x) == xidReset {
						return true, fmt.Sprintf("XID %d is still reported on %s", x.XID, g.UUID)
					}
				}
			}
			return false, r.Trigger + " is no longer reported on " + r.GPU
		},
	},
}

// Evaluate runs the table over one node and applies "a reboot supersedes
// a reset on the same node": with any reboot finding, the resets go, and
// one reboot is asked for (the first trigger, the others named in its
// message). Findings come back in a stable order.
func Evaluate(n modules.NodeView) []Finding {
	var reboots, resets []Finding
	for _, r := range Rules {
		for _, f := range r.Match(n) {
			if f.Action == remediation.ActionNodeReboot {
				reboots = append(reboots, f)
			} else {
				resets = append(resets, f)
			}
		}
	}
	if len(reboots) > 0 {
		first := reboots[0]
		var also []string
		for _, f := range reboots[1:] {
			also = append(also, f.Trigger)
		}
		for _, f := range resets {
			also = append(also, f.Trigger+" on "+f.GPU)
		}
		if len(also) > 0 {
			first.Message += "; the reboot also covers " + strings.Join(also, ", ")
		}
		return []Finding{first}
	}
	seen := map[string]bool{}
	var out []Finding
	for _, f := range resets {
		if seen[f.GPU] {
			continue
		}
		seen[f.GPU] = true
		out = append(out, f)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].GPU < out[j].GPU })
	return out
}

// StillNeeded is the engine's check for the reconciler's remediations: the
// rule that made r says whether its trigger still holds on n.
func StillNeeded(n modules.NodeView, r remediation.Row) (bool, string) {
	switch {
	case r.Trigger == TriggerRebootRequired:
		return Rules[0].Holds(n, r)
	case r.Action == remediation.ActionNodeReboot:
		return Rules[1].Holds(n, r)
	default:
		return Rules[2].Holds(n, r)
	}
}
