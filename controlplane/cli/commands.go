package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/better-compute/commands/internal/checkreport"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

func (a *app) commandsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "commands",
		Short: "Run, inspect, cancel and watch node commands",
		Long: `commands wraps the commands.* methods. Arguments are key=value pairs as
for "better-compute api"; tenantId defaults to --tenant / BC_TENANT.`,
	}
	cmd.AddCommand(a.runCommand(), a.getCommand(), a.listCommand(), a.cancelCommand(), a.watchCommand(), a.verifyCommand())
	return cmd
}

func (a *app) runCommand() *cobra.Command {
	var (
		wait     bool
		asJSON   bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run nodeId=… kind=… [payload=JSON] [idempotencyKey=…] [notAfterSeconds=N] [batchId=…]",
		Short: "Queue a command; with --wait, follow it until it settles",
		Long: `run queues a command (commands.run) and prints it as a table, as get,
list and cancel do (--json for JSON). With --wait it follows the command,
printing each state it reaches on stderr, until it settles, and exits 3 when it
ended failed, rejected, expired or cancelled.`,
		Example: `  better-compute commands run nodeId=node_… kind=inventory.refresh payload='{"sections":["gpus"],"rescan":true}' --wait`,
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "commands.run", args)
			if err != nil {
				return err
			}
			c := resp.(*apiv1.Command)
			if wait {
				c, err = a.wait(cmd, c, interval)
				if err != nil {
					return err
				}
			}
			if asJSON {
				if err := a.printJSON(c); err != nil {
					return err
				}
			} else {
				a.commandTable([]*apiv1.Command{c}, true)
			}
			if wait && c.GetState() != "succeeded" {
				return &exitError{code: ExitCommandFailed, err: fmt.Errorf("command %s ended %s%s", c.GetId(), c.GetState(), reasonSuffix(c))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the command until it settles; exit 3 unless it succeeded")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	cmd.Flags().DurationVar(&interval, "poll", 2*time.Second, "with --wait, re-read the command at least this often")
	return cmd
}

func reasonSuffix(c *apiv1.Command) string {
	if c.GetReason() == "" {
		return ""
	}
	return " (" + c.GetReason() + ")"
}

func (a *app) getCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get [commandId] nodeId=… [commandId=…]",
		Short: "Show one command",
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "commands.get", idArg(args, "commandId"))
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(resp)
			}
			a.commandTable([]*apiv1.Command{resp.(*apiv1.Command)}, true)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func (a *app) cancelCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "cancel [commandId] nodeId=… [commandId=…]",
		Short: "Cancel a command and show it",
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "commands.cancel", idArg(args, "commandId"))
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(resp)
			}
			a.commandTable([]*apiv1.Command{resp.(*apiv1.Command)}, true)
			fmt.Fprintln(a.env.Stdout, cancelNote(resp.(*apiv1.Command)))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

// idArg turns a bare argument (cmd_…) into key=value.
func idArg(args []string, key string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		if !strings.Contains(a, "=") {
			a = key + "=" + a
		}
		out = append(out, a)
	}
	return out
}

func (a *app) listCommand() *cobra.Command {
	var (
		asJSON bool
		all    bool
	)
	cmd := &cobra.Command{
		Use:   "list nodeId=… [state=…] [limit=N] [cursor=…]",
		Short: "List a node's commands, newest first",
		RunE: func(cmd *cobra.Command, args []string) error {
			var items []*apiv1.Command
			var last *apiv1.ListCommandsResponse
			pairs := args
			for {
				resp, err := a.call(cmd, "commands.list", pairs)
				if err != nil {
					return err
				}
				last = resp.(*apiv1.ListCommandsResponse)
				items = append(items, last.GetItems()...)
				if !all || last.GetNextCursor() == "" {
					break
				}
				pairs = append(withoutKey(args, "cursor"), "cursor="+last.GetNextCursor())
			}
			if asJSON {
				return a.printJSON(&apiv1.ListCommandsResponse{Items: items, NextCursor: last.GetNextCursor()})
			}
			a.commandTable(items, false)
			if last.GetNextCursor() != "" {
				fmt.Fprintf(a.env.Stderr, "more: cursor=%s\n", last.GetNextCursor())
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	cmd.Flags().BoolVar(&all, "all", false, "follow the cursor through every page")
	return cmd
}

func withoutKey(pairs []string, key string) []string {
	var out []string
	for _, p := range pairs {
		if !strings.HasPrefix(p, key+"=") {
			out = append(out, p)
		}
	}
	return out
}

func (a *app) commandTable(cs []*apiv1.Command, detail bool) {
	tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "SEQ\tID\tKIND\tSTATE\tREASON\tCREATED\tNOT AFTER")
	for _, c := range cs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", c.GetSeq(), c.GetId(), c.GetKind(), c.GetState(),
			dash(c.GetReason()), ts(c.GetCreatedAt().AsTime()), ts(c.GetNotAfter().AsTime()))
	}
	if detail && len(cs) == 1 {
		tw.Flush()
		c := cs[0]
		if c.GetBatchId() != "" {
			fmt.Fprintf(a.env.Stdout, "batch: %s (awaiting approval: %v)\n", c.GetBatchId(), c.GetAwaitingApproval())
		}
		if c.GetMessage() != "" {
			fmt.Fprintf(a.env.Stdout, "message: %s\n", c.GetMessage())
		}
		if c.GetBundleKey() != "" {
			fmt.Fprintf(a.env.Stdout, "bundle key: %s\n", c.GetBundleKey())
		}
		if c.GetResult() != nil {
			b, _ := protojson.Marshal(c.GetResult())
			if !checkreport.Write(a.env.Stdout, b) {
				fmt.Fprintf(a.env.Stdout, "result: %s\n", b)
			}
		}
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func ts(t time.Time) string {
	if t.IsZero() || t.Unix() == 0 {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// writeLine ignores the error of a progress line: a closed stderr must not
// fail the command it reports on.
func writeLine(w io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(w, format+"\n", args...)
}
