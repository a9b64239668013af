package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// metalCommand is the metal module's workflows: metal.power and metal.bulk
// queue a BMC action per machine on a site agent, under a batch of their
// own, and metal get reports each machine.
func (a *app) metalCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "metal",
		Short: "Power and boot machines through their BMCs (metal.power, metal.bulk), under a batch",
		Long: `metal runs the metal module's workflows. Each run queues one BMC command per
machine on the site agent (a bcd with role site, whose site inventory names the
machines' BMCs), all in a batch the run creates; the batch's leaves bind each
machine's exact payload. With approver keys configured nothing happens until
enough approvers sign the batch:

  better-compute metal power --site node_site1 --machines rack4-u12,rack4-u13 --action cycle \
      --reason "Cycle rack 4 after the PDU swap"
  better-compute batch approve --batch batch_… --key approver.pem      # each approver
  better-compute metal get mrun_…

A power action is done only when a later read of the BMC agrees; each
machine's row says what the BMC last said and which provider (redfish, ipmi)
worked.`,
	}
	cmd.AddCommand(a.metalPowerCommand(), a.metalBulkCommand(), a.metalGetCommand())
	return cmd
}

type metalFlags struct {
	site, machines, reason, key string
	secretRefs                  []string
	deadline                    uint32
	asJSON                      bool
}

func (f *metalFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.site, "site", "", "the site agent's node id (role site) whose inventory names the machines")
	cmd.Flags().StringVar(&f.machines, "machines", "", "comma-separated BMC ids of the site inventory")
	cmd.Flags().StringVar(&f.reason, "reason", "", "why, for the approvers (required)")
	cmd.Flags().StringVar(&f.key, "idempotency-key", "", "a retry with the same key returns the first run")
	cmd.Flags().Uint32Var(&f.deadline, "deadline-seconds", 0, "how long the batch may wait for approvals and the commands for the site agent (3600 by default)")
	cmd.Flags().StringSliceVar(&f.secretRefs, "secret-ref", nil, "a tenant secret every command may fetch (the BMC credential, named as the inventory's credentialRef); repeatable")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print JSON instead of a table")
}

func (f *metalFlags) check() ([]string, error) {
	if f.site == "" || f.reason == "" {
		return nil, usageErr("--site and --reason are required")
	}
	var ms []string
	for _, m := range strings.Split(f.machines, ",") {
		if m = strings.TrimSpace(m); m != "" {
			ms = append(ms, m)
		}
	}
	return ms, nil
}

func (f *metalFlags) pairs() []string {
	out := []string{"siteNodeId=" + f.site, "reason=" + f.reason}
	if f.key != "" {
		out = append(out, "idempotencyKey="+f.key)
	}
	if f.deadline > 0 {
		out = append(out, fmt.Sprintf("deadlineSeconds=%d", f.deadline))
	}
	if len(f.secretRefs) > 0 {
		b, _ := json.Marshal(f.secretRefs)
		out = append(out, "secretRefs="+string(b))
	}
	return out
}

func (a *app) metalPowerCommand() *cobra.Command {
	var f metalFlags
	var action string
	cmd := &cobra.Command{
		Use:   "power --site node_… --machines a,b,c --action on|off|soft|cycle|reset --reason …",
		Short: "Run one power action on many machines (metal.power)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ms, err := f.check()
			if err != nil {
				return err
			}
			if len(ms) == 0 || action == "" {
				return usageErr("--machines and --action are required")
			}
			b, _ := json.Marshal(ms)
			resp, err := a.call(cmd, "metal.power", append(f.pairs(), "action="+action, "machines="+string(b)))
			if err != nil {
				return err
			}
			return a.metalOut(resp.(*apiv1.MetalRun), f.asJSON)
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&action, "action", "", "on, off (forced), soft (graceful shutdown), cycle, reset")
	return cmd
}

func (a *app) metalBulkCommand() *cobra.Command {
	var f metalFlags
	var boot, power, steps string
	var persistent, legacy bool
	cmd := &cobra.Command{
		Use:   "bulk --site node_… --reason … (--machines a,b [--boot pxe|disk|cd [--persistent] [--legacy]] [--power ACTION] | --steps JSON)",
		Short: "Run power and boot actions on many machines, in order per machine (metal.bulk)",
		Long: `bulk runs power and boot actions on many machines under one batch: the same
boot override (--boot) or power action (--power) on every --machines, both
(--boot pxe --power cycle: the boot override first, then the cycle), or any
sequence per machine with --steps:

  --steps '[{"machine":"a","kind":"bmc.boot","payload":{"device":"pxe"}},
            {"machine":"a","kind":"bmc.power","payload":{"action":"cycle"}},
            {"machine":"b","kind":"bmc.power","payload":{"action":"on"}}]'

Each machine's first step is queued at once; its next step once the one
before succeeded (a failed step skips the machine's rest). The batch covers
every step, so it is approved once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ms, err := f.check()
			if err != nil {
				return err
			}
			var list []map[string]any
			switch {
			case steps != "":
				if boot != "" || power != "" || len(ms) > 0 {
					return usageErr("--steps replaces --machines, --boot and --power")
				}
				if err := json.Unmarshal([]byte(steps), &list); err != nil {
					return usageErr("--steps: not a JSON list of {machine, kind, payload}: %v", err)
				}
			case boot == "" && power == "":
				return usageErr("give --boot, --power, both, or --steps")
			case len(ms) == 0:
				return usageErr("--machines is required")
			default:
				for _, m := range ms {
					if boot != "" {
						list = append(list, map[string]any{"machine": m, "kind": "bmc.boot", "payload": map[string]any{"device": boot, "persistent": persistent, "uefi": !legacy}})
					}
					if power != "" {
						list = append(list, map[string]any{"machine": m, "kind": "bmc.power", "payload": map[string]any{"action": power}})
					}
				}
			}
			b, _ := json.Marshal(list)
			resp, err := a.call(cmd, "metal.bulk", append(f.pairs(), "steps="+string(b)))
			if err != nil {
				return err
			}
			return a.metalOut(resp.(*apiv1.MetalRun), f.asJSON)
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&boot, "boot", "", "set the boot device on every machine: pxe, disk, cd")
	cmd.Flags().BoolVar(&persistent, "persistent", false, "with --boot: every boot, not only the next")
	cmd.Flags().BoolVar(&legacy, "legacy", false, "with --boot: legacy BIOS boot instead of UEFI")
	cmd.Flags().StringVar(&power, "power", "", "run a power action on every machine: on, off, soft, cycle, reset")
	cmd.Flags().StringVar(&steps, "steps", "", "a JSON list of {machine, kind, payload}, one per machine")
	return cmd
}

func (a *app) metalGetCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get mrun_… [runId=…]",
		Short: "Report a metal run per machine",
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "metal.getRun", idArg(args, "runId"))
			if err != nil {
				return err
			}
			return a.metalOut(resp.(*apiv1.MetalRun), asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func (a *app) metalOut(r *apiv1.MetalRun, asJSON bool) error {
	if asJSON {
		return a.printJSON(r)
	}
	w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "RUN\t%s (%s)\n", r.GetId(), r.GetWorkflow())
	state := r.GetState()
	if r.GetState() == "awaiting-approval" {
		state += fmt.Sprintf(": %d more approval(s) needed; each approver runs: better-compute batch approve --batch %s --key APPROVER.pem", r.GetApprovalsNeeded(), r.GetBatchId())
	}
	fmt.Fprintf(w, "STATE\t%s\n", state)
	fmt.Fprintf(w, "BATCH\t%s (%s)\n", r.GetBatchId(), r.GetBatchState())
	fmt.Fprintf(w, "SITE\t%s\n", r.GetSiteNodeId())
	fmt.Fprintf(w, "REASON\t%s\n", r.GetReason())
	fmt.Fprintln(w, "MACHINE\tSTEP\tKIND\tCOMMAND\tSTATE\tDETAIL")
	for _, m := range r.GetMachines() {
		cmdID := m.GetCommandId()
		if cmdID == "" {
			cmdID = "-"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\n", m.GetMachine(), m.GetSeq(), m.GetKind(), cmdID, m.GetState(), machineDetail(m))
	}
	return w.Flush()
}

// machineDetail says in a few words what a machine's command did or why it
// waits: the verified state and the provider that worked, or the reason.
func machineDetail(m *apiv1.MetalMachine) string {
	if m.GetAwaitingApproval() {
		return "held until the batch is approved"
	}
	res := m.GetResult().AsMap()
	var parts []string
	if p, _ := res["successfulProvider"].(string); p != "" {
		parts = append(parts, "via "+p)
	}
	if v, ok := res["verified"].(bool); ok {
		if v {
			after, _ := res["after"].(string)
			if after == "" {
				after = "as asked"
			}
			parts = append(parts, "verified: "+after)
		} else {
			parts = append(parts, "not verified")
		}
	}
	switch {
	case m.GetReason() != "":
		parts = append(parts, m.GetReason()+": "+m.GetMessage())
	case m.GetMessage() != "":
		parts = append(parts, m.GetMessage())
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}
