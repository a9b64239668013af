package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// fleetCommand shows fleet.summary: the fleet at a glance.
func (a *app) fleetCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "The fleet at a glance: nodes connected and healthy, by pool, condition and failed check; what failed and what waits",
		Long: `fleet calls fleet.summary: the tenant's nodes you may read, connected and
healthy (a node is unhealthy while it reports a problem condition or its
latest diag.nvml failed a check), per pool, per condition and per failed
check; the commands that failed in the last hour; open fleet runs; batches
awaiting approval; and whether commands are signed. The lines under it say
how to list each group.`,
		Example: `  better-compute fleet
  better-compute fleet --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.callPrint(cmd, "fleet.summary", nil, asJSON, func(m proto.Message) error {
				return a.fleetTable(m.(*apiv1.FleetSummary))
			})
		},
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

func (a *app) fleetTable(s *apiv1.FleetSummary) error {
	out := a.env.Stdout
	fmt.Fprintf(out, "NODES %d  connected %d  healthy %d  unhealthy %d\n", s.GetNodes(), s.GetConnected(), s.GetHealthy(), s.GetUnhealthy())
	if !s.GetCommandSigning() {
		fmt.Fprintln(out, "WARNING: commands go unsigned (bc-server has no pki.commandSigning): nodes without trust anchors run any command a gateway sends; see docs/trust.md")
	}
	if s.GetApprovalThreshold() == 0 {
		fmt.Fprintln(out, "batches are audit-only (no approver keys): their commands run at once")
	} else {
		fmt.Fprintf(out, "destructive batches need %d approval(s)\n", s.GetApprovalThreshold())
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "\nPOOL\tNODES\tCONNECTED\tUNHEALTHY")
	for _, p := range s.GetPools() {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\n", p.GetPool(), p.GetNodes(), p.GetConnected(), p.GetUnhealthy())
	}
	if err := w.Flush(); err != nil {
		return err
	}
	counts := func(title string, cs []*apiv1.NodeCount) {
		if len(cs) == 0 {
			return
		}
		parts := make([]string, len(cs))
		for i, c := range cs {
			parts[i] = fmt.Sprintf("%s %d", c.GetName(), c.GetNodes())
		}
		fmt.Fprintf(out, "%s: %s\n", title, strings.Join(parts, ", "))
	}
	fmt.Fprintln(out)
	counts("conditions (True)", s.GetByCondition())
	counts("failed checks", s.GetByFailedCheck())
	fmt.Fprintf(out, "failed in the last hour %d   fleet runs in progress %d   batches awaiting approval %d\n",
		s.GetFailedLastHour(), s.GetRunsInProgress(), s.GetBatchesAwaitingApproval())
	fmt.Fprintln(out, "\nlist them: nodes list health=unhealthy | nodes list failedCheck=CHECK | commands list --state failed --settled-since 1h | runs list | batch list")
	return nil
}
