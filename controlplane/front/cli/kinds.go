package cli

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// kindsCommand shows the kinds the control plane has registered.
func (a *app) kindsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kinds",
		Short: "List the command kinds the control plane has registered, with versions and digests",
		Long: `kinds wraps kinds.list and kinds.get: every registered version of each kind
(a fleet mid-upgrade runs two), its manifest's digest (what a node's Hello
must match), lane, timeout, roles, flags, and whether commands.run takes it
(RUNNABLE: apiRunnable in the manifest and on bc-server's allowlist).

  better-compute kinds list
  better-compute kinds list --runnable
  better-compute kinds get diag.nvml
  better-compute kinds get diag.nvml --schema`,
	}
	var listJSON, runnable, getJSON, schema bool
	list := &cobra.Command{
		Use:   "list [--runnable]",
		Short: "List every registered kind version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var pairs []string
			if runnable {
				pairs = append(pairs, "apiRunnableOnly=true")
			}
			return a.callPrint(cmd, "kinds.list", pairs, listJSON, func(m proto.Message) error {
				return a.kindsTable(m.(*apiv1.ListKindsResponse).GetItems()...)
			})
		},
	}
	jsonFlag(list, &listJSON)
	list.Flags().BoolVar(&runnable, "runnable", false, "only the kinds commands.run takes")
	get := &cobra.Command{
		Use:   "get NAME [version=…] [--schema]",
		Short: "Show one kind (the newest version unless version= names one)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "kinds.get", idArg(args, "name"))
			if err != nil {
				return err
			}
			k := resp.(*apiv1.Kind)
			switch {
			case schema:
				if k.GetPayloadSchema() == "" {
					fmt.Fprintln(a.env.Stdout, "{}")
					return nil
				}
				fmt.Fprintln(a.env.Stdout, k.GetPayloadSchema())
				return nil
			case getJSON:
				return a.printJSON(k)
			}
			if err := a.kindsTable(k); err != nil {
				return err
			}
			if k.GetDescription() != "" {
				fmt.Fprintln(a.env.Stdout, "\n"+k.GetDescription())
			}
			fmt.Fprintf(a.env.Stdout, "digest %s\n", k.GetDigest())
			if k.GetCompatibleVersions() != "" {
				fmt.Fprintf(a.env.Stdout, "compatible versions %s (nodes on these run its commands before their manifest is registered)\n", k.GetCompatibleVersions())
			}
			return nil
		},
	}
	jsonFlag(get, &getJSON)
	get.Flags().BoolVar(&schema, "schema", false, "print only the payload's JSON Schema")
	cmd.AddCommand(list, get)
	return cmd
}

// kindsTable prints a line a kind version.
func (a *app) kindsTable(ks ...*apiv1.Kind) error {
	w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KIND\tVERSION\tDIGEST\tLANE\tTIMEOUT\tROLES\tFLAGS\tRUNNABLE\tSOURCE")
	for _, k := range ks {
		version := k.GetVersion()
		if k.GetNewest() {
			version += " (newest)"
		}
		var flags []string
		f := k.GetFlags()
		for name, on := range map[string]bool{"destructive": f.GetDestructive(), "retry-safe": f.GetRetrySafe(), "self-terminating": f.GetSelfTerminating(), "attested": f.GetAttested()} {
			if on {
				flags = append(flags, name)
			}
		}
		sort.Strings(flags)
		runnable := "yes"
		switch {
		case !k.GetApiRunnable():
			runnable = "no (not apiRunnable)"
		case !k.GetAllowlisted():
			runnable = "no (not allowlisted)"
		}
		digest := k.GetDigest()
		if len(digest) > 12 {
			digest = digest[:12]
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.GetName(), version, digest, k.GetLane(), strconv.FormatInt(k.GetTimeoutSeconds(), 10)+"s",
			dash(strings.Join(k.GetRoles(), ",")), dash(strings.Join(flags, ",")), runnable, k.GetSource())
	}
	return w.Flush()
}
