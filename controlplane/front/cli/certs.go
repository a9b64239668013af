package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// nodeTrustCommands are the node certificate and binding commands.
func (a *app) nodeTrustCommands() []*cobra.Command {
	return []*cobra.Command{a.certsCommand(), a.revokeCertsCommand(), a.bindingsCommand()}
}

func (a *app) certsCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "certs [nodeId] [nodeId=…]",
		Short: "List the certificates the node CA issued to a node (current, superseded, revoked)",
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "nodes.listCertificates", idArg(args, "nodeId"))
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(resp)
			}
			return a.certsTable(resp.(*apiv1.NodeCertificates))
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func (a *app) revokeCertsCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "revoke-certs [nodeId] [nodeId=…] [serial=HEX]",
		Short: "Revoke a node's certificates (all, or one by serial): its sessions close",
		Long: `revoke-certs revokes the node's certificates (nodes.revokeCertificates): its
open sessions close at once and no session starts with them again. The node
comes back only through a new join (nodes createJoinToken, then bcd join).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "nodes.revokeCertificates", idArg(args, "nodeId"))
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(resp)
			}
			certs := resp.(*apiv1.NodeCertificates)
			fmt.Fprintf(a.env.Stdout, "revoked %d certificate(s)\n", len(certs.GetCertificates()))
			return a.certsTable(certs)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func (a *app) certsTable(c *apiv1.NodeCertificates) error {
	w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SERIAL\tSTATE\tROLE\tALLOWED KINDS\tISSUED\tNOT AFTER")
	for _, x := range c.GetCertificates() {
		allowed := strings.Join(x.GetAllowedKinds(), ",")
		if allowed == "" {
			allowed = "(all)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", x.GetSerial(), x.GetState(), x.GetRole(), allowed, stamp(x.GetIssuedAt()), stamp(x.GetNotAfter()))
	}
	return w.Flush()
}

func (a *app) bindingsCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "bindings [nodeId] [nodeId=…]",
		Short: "Show the allocations the node's spec binds: pending, bound (node-signed) or refused",
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "nodes.listBindings", idArg(args, "nodeId"))
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(resp)
			}
			w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ALLOCATION\tGENERATION\tSTATE\tGPUS\tREASON")
			for _, b := range resp.(*apiv1.AllocationBindings).GetBindings() {
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", b.GetAllocation(), b.GetGeneration(), b.GetState(), strings.Join(b.GetGpus(), ","), b.GetReason())
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func stamp(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return t.AsTime().UTC().Format(time.RFC3339)
}
