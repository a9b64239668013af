package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// runsCommand is the fleet runs' group: one request that runs a kind on
// many nodes, within a concurrency and an error limit.
func (a *app) runsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "Run one kind on many nodes (fleet runs): create, follow, pause, resume, cancel",
		Long: `runs wraps the fleetRuns.* methods. A fleet run resolves its targets once (node
ids, a pool, a label selector, node conditions, or every node; criteria
combine), checks each node as commands.run would (a node you may not touch is
listed as refused, with the reason), and queues one ordinary command per node,
keeping at most --max-concurrency open and starting nothing new once failures
exceed --max-errors:

  better-compute nodes label node_0412 gpu=h200 rack=r1
  better-compute runs create --kind diag.nvml --selector 'gpu=h200,rack in (r1,r2)' \
      --max-concurrency 10% --max-errors 2 --wait
  better-compute runs get run_… --wait
  better-compute runs targets run_… --state failures
  better-compute runs pause run_…    # resume, cancel

A destructive kind (node.reboot) goes under one batch whose leaves name every
target node: approve it with better-compute batch approve; the run waits, and
says so, until the quorum has.

Exit codes: 0 success (with --wait: the run succeeded); 1 the call failed;
2 usage; 3 with --wait, the run ended failed or cancelled.`,
	}
	cmd.AddCommand(a.runsCreateCommand(), a.runsGetCommand(), a.runsListCommand(), a.runsTargetsCommand())
	for _, act := range []struct{ name, method, short string }{
		{"pause", "fleetRuns.pause", "Pause a run: no new command starts; open ones go on"},
		{"resume", "fleetRuns.resume", "Resume a paused run"},
		{"cancel", "fleetRuns.cancel", "Cancel a run: nothing new starts, pending commands are cancelled, in-flight ones asked to stop"},
	} {
		cmd.AddCommand(a.runsActionCommand(act.name, act.method, act.short))
	}
	return cmd
}

// runCreateFlags are runs create's flags.
type runCreateFlags struct {
	kind, payload, nodes, pool, selector   string
	node, conditions                       []string
	all                                    bool
	maxConcurrency, maxErrors, key, reason string
	notAfter, approvalDeadline             time.Duration
	follow                                 followFlags
}

// request builds the CreateFleetRunRequest the flags describe; a flag
// whose value cannot be sent is a usage error, while what the server
// decides (a limit of 0, an empty target set, a selector's grammar) is
// left to it, so its message is the one an operator reads.
func (f *runCreateFlags) request(tenantID string) (*apiv1.CreateFleetRunRequest, error) {
	if f.kind == "" {
		return nil, usageErr("--kind is required (diag.nvml, logs.collect, node.reboot, ...)")
	}
	req := &apiv1.CreateFleetRunRequest{TenantId: tenantID, Kind: f.kind, MaxConcurrency: f.maxConcurrency, MaxErrors: f.maxErrors,
		IdempotencyKey: f.key, Reason: f.reason, Targets: &apiv1.FleetRunTargets{Pool: f.pool, Selector: f.selector,
			Conditions: f.conditions, All: f.all}}
	req.Targets.NodeIds = append(req.Targets.NodeIds, f.node...)
	for _, n := range strings.Split(f.nodes, ",") {
		if n = strings.TrimSpace(n); n != "" {
			req.Targets.NodeIds = append(req.Targets.NodeIds, n)
		}
	}
	if f.payload != "" {
		var s structpb.Struct
		if err := protojson.Unmarshal([]byte(f.payload), &s); err != nil {
			return nil, usageErr("--payload %q is not a JSON object: %v", f.payload, err)
		}
		req.Payload = &s
	}
	var err error
	if req.NotAfterSeconds, err = wholeSeconds("--not-after", f.notAfter); err != nil {
		return nil, err
	}
	if req.ApprovalDeadlineSeconds, err = wholeSeconds("--approval-deadline", f.approvalDeadline); err != nil {
		return nil, err
	}
	return req, nil
}

// wholeSeconds is a duration flag as the API's seconds, nil when unset.
func wholeSeconds(flag string, d time.Duration) (*int32, error) {
	if d == 0 {
		return nil, nil
	}
	if d < 0 || d%time.Second != 0 || d >= 1<<31*time.Second {
		return nil, usageErr("%s %s: want a positive whole number of seconds (10m, 600s)", flag, d)
	}
	s := int32(d / time.Second)
	return &s, nil
}

func (a *app) runsCreateCommand() *cobra.Command {
	var f runCreateFlags
	cmd := &cobra.Command{
		Use:   "create --kind KIND (--node N... | --nodes a,b | --pool P | --selector S | --condition C... | --all) [flags]",
		Short: "Create a fleet run; with --wait, follow it until it ends",
		Long: `create calls fleetRuns.create and prints the run (--json: the API's JSON).

Targets: --node (repeatable) or --nodes a,b,c, --pool, --selector (label
requirements, all of which a node must meet: gpu=h200, rack!=r3,
rack in (r1,r2), rack notin (r3), gpu (has the label), !gpu), --condition
(repeatable: nodes on which the condition is True, e.g. RowRemapPending), or
--all. A node is a target when it matches every criterion given; the set is
resolved once, now.

--max-concurrency is a count or a percentage of the targets (default 10%);
--max-errors the failures tolerated before nothing new starts (default 0).
--not-after is each node's command's deadline from when it is queued.
A destructive kind needs --reason (its batch's approvers read it);
--approval-deadline bounds how long its batch may wait for them.

With --wait it follows the run (see runs get --wait) and exits 3 unless it
succeeded.`,
		Example: `  better-compute runs create --kind diag.nvml --selector gpu=h200 --max-concurrency 10% --max-errors 2 --wait
  better-compute runs create --kind logs.collect --payload '{"since":"6h"}' --nodes node_a,node_b --idempotency-key logs-0412
  better-compute runs create --kind node.reboot --pool gpu-a --reason "kernel 6.8.12" --max-concurrency 2 --wait`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, tenantID, err := a.fleetClient(cmd)
			if err != nil {
				return err
			}
			req, err := f.request(tenantID)
			if err != nil {
				return err
			}
			run, err := client.Create(cmd.Context(), req)
			if err != nil {
				return err
			}
			return a.showRun(cmd, run, f.follow)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.kind, "kind", "", "the kind each node's command runs (required)")
	fl.StringVar(&f.payload, "payload", "", "the kind's payload, a JSON object")
	fl.StringArrayVar(&f.node, "node", nil, "a target node id (repeatable)")
	fl.StringVar(&f.nodes, "nodes", "", "comma-separated target node ids")
	fl.StringVar(&f.pool, "pool", "", "the nodes of this pool")
	fl.StringVar(&f.selector, "selector", "", "the nodes whose labels match: gpu=h200,rack in (r1,r2)")
	fl.StringArrayVar(&f.conditions, "condition", nil, "the nodes on which this condition is True (repeatable)")
	fl.BoolVar(&f.all, "all", false, "every node of the tenant (takes no other target)")
	fl.StringVar(&f.maxConcurrency, "max-concurrency", "", "commands open at once: a count (10) or a percentage of the targets (25%); default 10%")
	fl.StringVar(&f.maxErrors, "max-errors", "", "failures tolerated: a count or a percentage; past it nothing new starts (default 0)")
	fl.DurationVar(&f.notAfter, "not-after", 0, "each command's deadline from when it is queued (10s to 1h; default 10m)")
	fl.StringVar(&f.key, "idempotency-key", "", "a retry with the same key returns the run already created")
	fl.StringVar(&f.reason, "reason", "", "why, in words (required for a destructive kind)")
	fl.DurationVar(&f.approvalDeadline, "approval-deadline", 0, "a destructive run's batch: how long it may wait for approvals (1m to 24h)")
	f.follow.add(cmd)
	return cmd
}

func (a *app) runsGetCommand() *cobra.Command {
	var f followFlags
	cmd := &cobra.Command{
		Use:   "get run_… [runId=…] [--wait]",
		Short: "Show a run: state, progress, limits, what it waits for, failures; --wait follows it",
		Long: `get calls fleetRuns.get and prints the run with its failures and refused
targets (--json: the API's JSON).

With --wait it follows the run until it ends: on a terminal, a progress bar
on stderr that updates in place (succeeded, failures, started and waiting of
the targets, the run's state, and what it waits for: approvals, a pool's
budget, a pause); otherwise one plain line per change. It follows the
events (fleet.run.*) of the run and re-reads it at least every --poll. At the
end it prints the run, the failures (node, state, reason, message) and the
refused targets, and exits 0 when the run succeeded, 3 when it ended failed
or cancelled.`,
		Example: `  better-compute runs get run_…
  better-compute runs get run_… --wait
  better-compute runs get run_… --json | jq .counts`,
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "fleetRuns.get", idArg(args, "runId"))
			if err != nil {
				return err
			}
			return a.showRun(cmd, resp.(*apiv1.FleetRun), f)
		},
	}
	f.add(cmd)
	return cmd
}

func (a *app) runsListCommand() *cobra.Command {
	var (
		asJSON, all bool
		state       string
	)
	cmd := &cobra.Command{
		Use:   "list [--state S] [limit=N] [cursor=…] [--all]",
		Short: "List the tenant's runs, newest first",
		Long: `list calls fleetRuns.list: the tenant's runs (all of them with
compute:runs:read, else your own), newest first. --state keeps one state
(running, paused, stopping, cancelling, succeeded, failed, cancelled), or
active: the runs not yet ended.`,
		Example: `  better-compute runs list
  better-compute runs list --state active`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if state != "" {
				args = append(args, "state="+state)
			}
			var items []*apiv1.FleetRun
			var last *apiv1.ListFleetRunsResponse
			pairs := args
			for {
				resp, err := a.call(cmd, "fleetRuns.list", pairs)
				if err != nil {
					return err
				}
				last = resp.(*apiv1.ListFleetRunsResponse)
				items = append(items, last.GetItems()...)
				if !all || last.GetNextCursor() == "" {
					break
				}
				pairs = append(withoutKey(args, "cursor"), "cursor="+last.GetNextCursor())
			}
			if asJSON {
				return a.printJSON(&apiv1.ListFleetRunsResponse{Items: items, NextCursor: last.GetNextCursor()})
			}
			if err := a.runListTable(items); err != nil {
				return err
			}
			if last.GetNextCursor() != "" {
				fmt.Fprintf(a.env.Stderr, "more: cursor=%s (or --all)\n", last.GetNextCursor())
			}
			return nil
		},
	}
	jsonFlag(cmd, &asJSON)
	cmd.Flags().BoolVar(&all, "all", false, "follow the cursor through every page")
	cmd.Flags().StringVar(&state, "state", "", "keep one state, or active (not yet ended)")
	return cmd
}

func (a *app) runsTargetsCommand() *cobra.Command {
	var (
		asJSON, all bool
		state       string
	)
	cmd := &cobra.Command{
		Use:   "targets run_… [--state S] [limit=N] [cursor=…] [--all]",
		Short: "List a run's nodes in order, with their state, command and reason",
		Long: `targets calls fleetRuns.listTargets: the run's nodes in the run's order, each
with its state (waiting, started, succeeded, failed, rejected, expired,
cancelled, not-started, refused), its command, and the reason and message
of a node that did not succeed. --state keeps one state, or failures
(failed, rejected and expired together).`,
		Example: `  better-compute runs targets run_… --state failures
  better-compute runs targets run_… --all --json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			args = idArg(args, "runId")
			if state != "" {
				args = append(args, "state="+state)
			}
			var items []*apiv1.FleetRunTarget
			var last *apiv1.ListFleetRunTargetsResponse
			pairs := args
			for {
				resp, err := a.call(cmd, "fleetRuns.listTargets", pairs)
				if err != nil {
					return err
				}
				last = resp.(*apiv1.ListFleetRunTargetsResponse)
				items = append(items, last.GetItems()...)
				if !all || last.GetNextCursor() == "" {
					break
				}
				pairs = append(withoutKey(args, "cursor"), "cursor="+last.GetNextCursor())
			}
			if asJSON {
				return a.printJSON(&apiv1.ListFleetRunTargetsResponse{Items: items, NextCursor: last.GetNextCursor()})
			}
			if err := a.targetTable(items); err != nil {
				return err
			}
			if last.GetNextCursor() != "" {
				fmt.Fprintf(a.env.Stderr, "more: cursor=%s (or --all)\n", last.GetNextCursor())
			}
			return nil
		},
	}
	jsonFlag(cmd, &asJSON)
	cmd.Flags().BoolVar(&all, "all", false, "follow the cursor through every page")
	cmd.Flags().StringVar(&state, "state", "", "keep one target state, or failures (failed, rejected, expired)")
	return cmd
}

// runsActionCommand is pause, resume or cancel: each prints the run as it
// is after.
func (a *app) runsActionCommand(name, method, short string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     name + " run_… [runId=…]",
		Short:   short + " (its requester, or compute:runs:admin)",
		Example: fmt.Sprintf("  better-compute runs %s run_…", name),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.callPrint(cmd, method, idArg(args, "runId"), asJSON, func(m proto.Message) error {
				return a.runTable(m.(*apiv1.FleetRun))
			})
		},
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

// fleetClient connects and returns the FleetRuns client with the tenant
// the settings name, which a request built from flags needs.
func (a *app) fleetClient(cmd *cobra.Command) (apiv1.FleetRunsClient, string, error) {
	conn, err := a.connect(cmd)
	if err != nil {
		return nil, "", err
	}
	if a.settings.Tenant == "" {
		return nil, "", usageErr("no tenant: give --tenant, set BC_TENANT, or set tenant in the config file")
	}
	return apiv1.NewFleetRunsClient(conn), a.settings.Tenant, nil
}
