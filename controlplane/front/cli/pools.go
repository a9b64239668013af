package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// jsonFlag adds --json to cmd.
func jsonFlag(cmd *cobra.Command, v *bool) {
	cmd.Flags().BoolVar(v, "json", false, "print JSON instead of a table")
}

// callPrint calls method with pairs and prints JSON or the table.
func (a *app) callPrint(cmd *cobra.Command, method string, pairs []string, asJSON bool, table func(proto.Message) error) error {
	resp, err := a.call(cmd, method, pairs)
	if err != nil {
		return err
	}
	if asJSON {
		return a.printJSON(resp)
	}
	return table(resp)
}

// poolsCommand shows and sets the pools' disruption budgets.
func (a *app) poolsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pools",
		Short: "Show pools and their disruption budgets; set budgets, move nodes, reset a breaker",
		Long: `pools wraps the pools.* methods. A node carries a pool (set when it is created,
joins, or with set-node); each pool has a disruption budget: how many of its
nodes may be in disruptive maintenance (a platform reboot or GPU reset) at
once, how many may start it per window, and a breaker that stops all
remediation in the pool when too many fail within its window.

  better-compute pools list
  better-compute pools set-budget pool=gpu-a maxConcurrent=2 maxPerWindow=10 windowSeconds=3600
  better-compute pools set-node nodeId=node_… pool=gpu-a
  better-compute pools reset-breaker pool=gpu-a
  better-compute locks list
  better-compute reconciler plan`,
	}
	var listJSON, getJSON, setJSON, nodeJSON, resetJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the tenant's pools with their budgets and what uses them now",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.callPrint(cmd, "pools.list", nil, listJSON, func(m proto.Message) error {
				return a.poolsTable(m.(*apiv1.ListPoolsResponse).GetItems()...)
			})
		},
	}
	jsonFlag(list, &listJSON)
	get := &cobra.Command{
		Use:   "get pool=…",
		Short: "Show one pool",
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.callPrint(cmd, "pools.get", idArg(args, "pool"), getJSON, func(m proto.Message) error { return a.poolsTable(m.(*apiv1.Pool)) })
		},
	}
	jsonFlag(get, &getJSON)
	set := &cobra.Command{
		Use:   "set-budget pool=… [maxConcurrent=N] [maxPerWindow=N] [windowSeconds=N] [breakerFailures=N] [breakerWindowSeconds=N] [stopAllMaintenance=true]",
		Short: "Change a pool's disruption budget: only the fields given (compute:pools:admin)",
		Long: `set-budget changes the fields it names and keeps the others; a pool without a
budget starts from the defaults (maxConcurrent 1, no window limit, a breaker at
3 failures per 3600 s). maxConcurrent is how many nodes may be in disruptive
maintenance at once; maxPerWindow how many may start it per windowSeconds (0:
no limit; a window of 0 is the default 3600); breakerFailures failed or
unverified remediations within breakerWindowSeconds trip the pool's breaker
(0 never trips it). maxConcurrent=0 stops all disruptive maintenance in the
pool (remediation and rollouts) and is refused unless stopAllMaintenance=true
says that is meant.

  better-compute pools set-budget pool=gpu-a maxPerWindow=10 windowSeconds=1800
  better-compute pools set-budget pool=gpu-a maxConcurrent=0 stopAllMaintenance=true`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.callPrint(cmd, "pools.setBudget", args, setJSON, func(m proto.Message) error { return a.poolsTable(m.(*apiv1.Pool)) })
		},
	}
	jsonFlag(set, &setJSON)
	node := &cobra.Command{
		Use:   "set-node nodeId=node_… pool=…",
		Short: "Move a node into a pool (compute:nodes:admin on the node, compute:pools:admin on the pool)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.callPrint(cmd, "pools.setNodePool", args, nodeJSON, func(m proto.Message) error {
				np := m.(*apiv1.NodePool)
				_, err := fmt.Fprintf(a.env.Stdout, "node %s is in pool %s\n", np.GetNodeId(), np.GetPool())
				return err
			})
		},
	}
	jsonFlag(node, &nodeJSON)
	reset := &cobra.Command{
		Use:   "reset-breaker pool=…",
		Short: "Close a pool's tripped breaker so remediation runs again (compute:pools:admin)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.callPrint(cmd, "pools.resetBreaker", idArg(args, "pool"), resetJSON, func(m proto.Message) error { return a.poolsTable(m.(*apiv1.Pool)) })
		},
	}
	jsonFlag(reset, &resetJSON)
	cmd.AddCommand(list, get, set, node, reset)
	return cmd
}

func (a *app) poolsTable(ps ...*apiv1.Pool) error {
	w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "POOL\tNODES\tIN MAINTENANCE\tMAX CONCURRENT\tSTARTED/WINDOW\tFAILURES/BREAKER\tBREAKER")
	for _, p := range ps {
		window := fmt.Sprintf("%d/no limit (%ds)", p.GetStartedInWindow(), p.GetWindowSeconds())
		if p.GetMaxPerWindow() > 0 {
			window = fmt.Sprintf("%d/%d per %ds", p.GetStartedInWindow(), p.GetMaxPerWindow(), p.GetWindowSeconds())
		}
		breaker := "closed"
		if p.GetBreakerTrippedAt() != nil {
			breaker = "OPEN since " + stamp(p.GetBreakerTrippedAt()) + ": " + p.GetBreakerReason()
		}
		name := p.GetName()
		if !p.GetConfigured() {
			name += " (defaults)"
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\t%d/%d per %ds\t%s\n", name, p.GetNodes(), p.GetInMaintenance(), p.GetMaxConcurrent(), window,
			p.GetFailuresInWindow(), p.GetBreakerFailures(), p.GetBreakerWindowSeconds(), breaker)
	}
	return w.Flush()
}

// locksCommand shows the maintenance locks.
func (a *app) locksCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "locks",
		Short: "Show the per-node maintenance locks (one remediation per node)",
	}
	var asJSON bool
	list := &cobra.Command{
		Use:   "list [pool=…]",
		Short: "List the maintenance locks, oldest first",
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.callPrint(cmd, "pools.listLocks", args, asJSON, func(m proto.Message) error {
				w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NODE\tPOOL\tHOLDER\tACTION\tREMEDIATION\tSINCE\tREASON")
				for _, l := range m.(*apiv1.ListMaintenanceLocksResponse).GetItems() {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.GetNodeId(), l.GetPool(), l.GetHolder(), l.GetAction(), l.GetRemediationId(),
						stamp(l.GetAcquiredAt()), l.GetReason())
				}
				return w.Flush()
			})
		},
	}
	jsonFlag(list, &asJSON)
	cmd.AddCommand(list)
	return cmd
}

// reconcilerCommand shows the platform's remediation plan.
func (a *app) reconcilerCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reconciler",
		Short: "Show the health reconciler's plan, what it waits for, and the batches it proposed",
		Long: `reconciler shows the platform's own destructive work: the provision module's
GPU resets (RowRemapPending once no allocation is live) and the health
reconciler's reboots and resets. plan lists each remediation with its state
and, while it waits, what for (WAITING FOR: the budget, the node's lock, a
hold on the GPU, the breaker, a stale session, approvals). batches lists the
batches the platform created for them (requester platform:…); with approver
keys configured, people approve them with better-compute batch approve.`,
	}
	var planJSON, all, batchesJSON bool
	plan := &cobra.Command{
		Use:   "plan [pool=…]",
		Short: "List the open remediations (--all adds those finished in the last 7 days)",
		RunE: func(cmd *cobra.Command, args []string) error {
			if all {
				args = append(args, "includeFinished=true")
			}
			return a.callPrint(cmd, "reconciler.plan", args, planJSON, func(m proto.Message) error {
				w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NODE\tPOOL\tACTION\tGPU\tTRIGGER\tSTATE\tWAITING FOR\tBATCH\tCOMMAND\tOUTCOME")
				for _, r := range m.(*apiv1.ReconcilerPlan).GetItems() {
					waiting := "-"
					if r.GetWaitingReason() != "" {
						waiting = r.GetWaitingReason() + ": " + r.GetWaitingMessage()
					}
					outcome := r.GetOutcome()
					if r.GetOutcomeMessage() != "" {
						outcome += ": " + r.GetOutcomeMessage()
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.GetNodeId(), r.GetPool(), r.GetAction(), dash(r.GetGpu()),
						r.GetTrigger(), r.GetState(), waiting, dash(r.GetBatchId()), dash(r.GetCommandId()), dash(outcome))
				}
				return w.Flush()
			})
		},
	}
	jsonFlag(plan, &planJSON)
	plan.Flags().BoolVar(&all, "all", false, "include the remediations finished in the last 7 days")
	batches := &cobra.Command{
		Use:   "batches [limit=N]",
		Short: "List the batches the platform created for its destructive work, newest first",
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.callPrint(cmd, "reconciler.listBatches", args, batchesJSON, func(m proto.Message) error {
				w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "BATCH\tSTATE\tAPPROVALS\tREQUESTER\tLEAVES\tREASON")
				for _, b := range m.(*apiv1.ListPlatformBatchesResponse).GetItems() {
					leaves := ""
					for i, l := range b.GetScope() {
						if i > 0 {
							leaves += ", "
						}
						leaves += l.GetSubject() + " " + l.GetKind()
					}
					fmt.Fprintf(w, "%s\t%s\t%d/%d\t%s\t%s\t%s\n", b.GetId(), b.GetState(), len(b.GetApprovals()), b.GetThreshold(), b.GetRequester(), leaves, b.GetReason())
				}
				return w.Flush()
			})
		},
	}
	jsonFlag(batches, &batchesJSON)
	cmd.AddCommand(plan, batches)
	return cmd
}
