package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

func (a *app) nodesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "List and show nodes, make join tokens, set node specs and delete nodes",
		Long: `nodes wraps the nodes.* methods. Arguments are key=value pairs as for
"better-compute api"; a bare first argument is the node id; tenantId defaults
to --tenant / BC_TENANT.`,
	}
	cmd.AddCommand(a.nodeListCommand(), a.nodeGetCommand(), a.joinTokenCommand(), a.setSpecCommand(), a.getSpecCommand(), a.nodeDeleteCommand(),
		a.nodeLabelCommand())
	cmd.AddCommand(a.nodeTrustCommands()...)
	return cmd
}

func (a *app) nodeGetCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get [nodeId] [nodeId=…]",
		Short: "Show a node: role, identity, applied generation, inventory and conditions",
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "nodes.get", idArg(args, "nodeId"))
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(resp)
			}
			return a.nodeTable(resp.(*apiv1.Node))
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

// nodeTable prints the node, its conditions and the top level of its
// inventory (each section with its size; --json shows everything).
func (a *app) nodeTable(n *apiv1.Node) error {
	w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
	identity := "full"
	if len(n.GetAllowedKinds()) > 0 {
		identity = "restricted: " + strings.Join(n.GetAllowedKinds(), ",")
	}
	fmt.Fprintf(w, "NODE\t%s\n", n.GetId())
	fmt.Fprintf(w, "TENANT\t%s\n", n.GetTenantId())
	fmt.Fprintf(w, "ROLE\t%s\n", n.GetRole())
	fmt.Fprintf(w, "IDENTITY\t%s\n", identity)
	fmt.Fprintf(w, "GENERATION\t%d\n", n.GetAppliedGeneration())
	fmt.Fprintf(w, "TRUST\t%s\n", trustVersion(n))
	fmt.Fprintf(w, "LABELS\t%s\n", labelsText(n.GetLabels()))
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.env.Stdout)
	if len(n.GetConditions()) == 0 {
		fmt.Fprintln(a.env.Stdout, "CONDITIONS: none")
	} else {
		w = tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "CONDITION\tSTATUS\tREASON\tSINCE\tMESSAGE")
		for _, c := range n.GetConditions() {
			since := ""
			if c.GetSince().IsValid() {
				since = c.GetSince().AsTime().UTC().Format("2006-01-02T15:04:05Z")
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", c.GetType(), c.GetStatus(), c.GetReason(), since, c.GetMessage())
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(a.env.Stdout)
	if err := a.nodeKindsTable(n); err != nil {
		return err
	}
	inv := n.GetInventory().GetFields()
	if len(inv) == 0 {
		fmt.Fprintln(a.env.Stdout, "INVENTORY: none reported")
		return nil
	}
	keys := make([]string, 0, len(inv))
	for k := range inv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	w = tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "INVENTORY\tVALUE")
	for _, k := range keys {
		v := inv[k]
		var shown string
		switch {
		case v.GetListValue() != nil:
			shown = fmt.Sprintf("%d items", len(v.GetListValue().GetValues()))
		case v.GetStructValue() != nil:
			shown = fmt.Sprintf("%d fields", len(v.GetStructValue().GetFields()))
		default:
			b, _ := protojson.Marshal(v)
			shown = string(b)
		}
		fmt.Fprintf(w, "%s\t%s\n", k, shown)
	}
	return w.Flush()
}

func (a *app) joinTokenCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "join-token [nodeId] [role=…] [allowedKinds=[…]] [ttlSeconds=N]",
		Short: "Make a one-time join token for a node (printed once; only its hash is kept)",
		Long: `join-token calls nodes.createJoinToken. The node exchanges the token and a
CSR for its certificate at the gateway (bcd join). allowedKinds makes the
certificate a restricted identity that accepts only those kinds.`,
		Example: `  better-compute nodes join-token node_0412 ttlSeconds=900
  better-compute nodes join-token node_0412 role=discovery allowedKinds='["inventory.refresh","diag.nvml"]'`,
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "nodes.createJoinToken", idArg(args, "nodeId"))
			if err != nil {
				return err
			}
			return a.printJSON(resp)
		},
	}
	return cmd
}

func (a *app) setSpecCommand() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "set-spec [nodeId] (spec=JSON | --file spec.json)",
		Short: "Store a node's next spec generation (GPU holds, passthrough instances); prints the generation",
		Example: `  better-compute nodes set-spec node_0412 spec='{"holds":[{"gpu":"GPU-8f…","state":"live"}]}'
  better-compute nodes set-spec node_0412 --file spec.json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			pairs := idArg(args, "nodeId")
			if file != "" {
				b, err := os.ReadFile(file)
				if err != nil {
					return usageErr("--file: %v", err)
				}
				if !json.Valid(b) {
					return usageErr("--file %s does not hold JSON", file)
				}
				pairs = append(withoutKey(pairs, "spec"), "spec="+string(b))
			}
			resp, err := a.call(cmd, "nodes.setSpec", pairs)
			if err != nil {
				return err
			}
			return a.printJSON(resp)
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "read the spec from this JSON file")
	return cmd
}

func (a *app) getSpecCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get-spec [nodeId]",
		Short: "Show a node's latest spec generation",
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "nodes.getSpec", idArg(args, "nodeId"))
			if err != nil {
				return err
			}
			return a.printJSON(resp)
		},
	}
	return cmd
}

func (a *app) nodeDeleteCommand() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "delete [nodeId] --yes",
		Short: "Delete a node: cancel its open commands (node-deleted), close its sessions, stop its certificates",
		Long: `delete calls nodes.delete (compute:nodes:admin). The node's pending and
in-flight commands become cancelled with reason node-deleted, its open
sessions close, its certificates open no new session and its join tokens no
longer join. There is no undo, hence --yes; the node's commands still list.`,
		Example: `  better-compute nodes delete node_0412 --yes`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !yes {
				return usageErr("nodes delete cannot be undone: pass --yes to delete the node")
			}
			resp, err := a.call(cmd, "nodes.delete", idArg(args, "nodeId"))
			if err != nil {
				return err
			}
			return a.printJSON(resp)
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm the deletion")
	return cmd
}

func (a *app) nodeListCommand() *cobra.Command {
	var (
		asJSON   bool
		all      bool
		selector string
	)
	cmd := &cobra.Command{
		Use:   "list [pool=…] [--selector S] [health=healthy|unhealthy] [condition=TYPE] [failedCheck=CHECK] [connected=true|false] [query=TEXT] [limit=N] [cursor=…]",
		Short: "List the tenant's nodes with their sessions and conditions",
		Long: `list calls nodes.list: the tenant's nodes (those you may read), by id, a
page at a time (limit, 100 by default, at most 200; --all follows every page).
SESSION is connected (with the gateway holding it) or disconnected; LAST SEEN
is when a gateway last held the session or heard from the node; CONDITIONS
lists each condition as TYPE=STATUS (nodes get NODE shows their reasons);
LABELS the node's labels (nodes label). --selector keeps the nodes whose
labels match (gpu=h200,rack in (r1,r2); the grammar of runs create
--selector). The other filters run on the server too: health (HEALTH says
unhealthy while the node reports a problem condition or its latest
diag.nvml failed a check, which it names), condition (a condition type
reported True), failedCheck, connected, and query (text in the id, the pool
or a label value).`,
		Example: `  better-compute nodes list
  better-compute nodes list pool=gpu-east --all
  better-compute nodes list --selector 'gpu=h200,rack in (r1,r2)'
  better-compute nodes list health=unhealthy
  better-compute nodes list failedCheck=row-remap.pending connected=true
  better-compute nodes list --json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if selector != "" {
				args = append(args, "selector="+selector)
			}
			var items []*apiv1.Node
			var last *apiv1.ListNodesResponse
			pairs := args
			for {
				resp, err := a.call(cmd, "nodes.list", pairs)
				if err != nil {
					return err
				}
				last = resp.(*apiv1.ListNodesResponse)
				items = append(items, last.GetItems()...)
				if !all || last.GetNextCursor() == "" {
					break
				}
				pairs = append(withoutKey(args, "cursor"), "cursor="+last.GetNextCursor())
			}
			if asJSON {
				return a.printJSON(&apiv1.ListNodesResponse{Items: items, NextCursor: last.GetNextCursor()})
			}
			if err := a.nodeListTable(items, time.Now()); err != nil {
				return err
			}
			if last.GetNextCursor() != "" {
				fmt.Fprintf(a.env.Stderr, "more: cursor=%s (or --all)\n", last.GetNextCursor())
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	cmd.Flags().BoolVar(&all, "all", false, "follow the cursor through every page")
	cmd.Flags().StringVar(&selector, "selector", "", "keep the nodes whose labels match: gpu=h200,rack in (r1,r2)")
	return cmd
}

// nodeListTable prints one line a node: its session and conditions at a
// glance.
func (a *app) nodeListTable(nodes []*apiv1.Node, now time.Time) error {
	w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tPOOL\tROLE\tSESSION\tVERSION\tTRUST\tLAST SEEN\tCONDITIONS\tLABELS\tHEALTH")
	for _, n := range nodes {
		session := "never connected"
		switch {
		case n.GetConnected():
			session = "connected"
			if n.GetGateway() != "" {
				session += " (" + n.GetGateway() + ")"
			}
		case n.GetConnectedSince().IsValid():
			session = "disconnected"
		}
		lastSeen := "-"
		if n.GetLastSeen().IsValid() {
			lastSeen = ago(now.Sub(n.GetLastSeen().AsTime()))
		}
		var conds []string
		for _, c := range n.GetConditions() {
			conds = append(conds, c.GetType()+"="+c.GetStatus())
		}
		health := "healthy"
		if !n.GetHealthy() {
			health = "unhealthy"
			if len(n.GetFailedChecks()) > 0 {
				health += " (failed " + strings.Join(n.GetFailedChecks(), ",") + ")"
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.GetId(), n.GetPool(), n.GetRole(), session, dash(n.GetAgentVersion()), trustVersion(n), lastSeen,
			dash(strings.Join(conds, ",")), labelsText(n.GetLabels()), health)
	}
	return w.Flush()
}

// trustVersion is the trust bundle version the node reported holding, "-"
// before it has reported one. A key rotation waits for every node to show
// the new version (docs/trust.md).
func trustVersion(n *apiv1.Node) string {
	if n.GetTrustVersion() == 0 {
		return "-"
	}
	return strconv.FormatInt(n.GetTrustVersion(), 10)
}

// ago is a duration as a person reads a time past: 40s ago, 3m ago, 5h ago,
// 2d ago.
func ago(d time.Duration) string {
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
}

// nodeKindsTable prints the kinds the node's last Hello reported, with how
// the registry sees each, and the plugin files its bcd refused.
func (a *app) nodeKindsTable(n *apiv1.Node) error {
	if len(n.GetKinds()) == 0 && len(n.GetRefusedPlugins()) == 0 {
		return nil
	}
	w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KIND\tVERSION\tDIGEST\tREGISTRY")
	for _, k := range n.GetKinds() {
		reg := k.GetStatus()
		if k.GetRegistryVersion() != "" {
			reg += " (" + k.GetRegistryVersion() + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", k.GetKind(), dash(k.GetVersion()), short12(k.GetDigest()), reg)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, r := range n.GetRefusedPlugins() {
		fmt.Fprintf(a.env.Stdout, "REFUSED PLUGIN %s (%s", r.GetPlugin(), r.GetReason())
		if len(r.GetKinds()) > 0 {
			fmt.Fprintf(a.env.Stdout, "; served %s", strings.Join(r.GetKinds(), ", "))
		}
		fmt.Fprintf(a.env.Stdout, "): %s\n", r.GetMessage())
	}
	fmt.Fprintln(a.env.Stdout)
	return nil
}

func short12(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}
