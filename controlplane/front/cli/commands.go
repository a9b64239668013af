package cli

import (
	"bytes"
	"encoding/json"
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
				// The node's own words (or why it waited) end the line.
				msg := ""
				if c.GetMessage() != "" {
					msg = ": " + c.GetMessage()
				}
				return &exitError{code: ExitCommandFailed, err: fmt.Errorf("command %s ended %s%s%s", c.GetId(), c.GetState(), reasonSuffix(c), msg)}
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
	var (
		asJSON bool
		node   string
	)
	cmd := &cobra.Command{
		Use:   "get [commandId] [nodeId=… | --node N] [commandId=…]",
		Short: "Show one command (the command id alone finds it in the tenant)",
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "commands.get", withFlagPairs(idArg(args, "commandId"), "nodeId", node))
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
	cmd.Flags().StringVar(&node, "node", "", "the command's node (nodeId=…); optional")
	return cmd
}

func (a *app) cancelCommand() *cobra.Command {
	var (
		asJSON bool
		node   string
	)
	cmd := &cobra.Command{
		Use:   "cancel [commandId] (nodeId=… | --node N) [commandId=…]",
		Short: "Cancel a command and show it",
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "commands.cancel", withFlagPairs(idArg(args, "commandId"), "nodeId", node))
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
	cmd.Flags().StringVar(&node, "node", "", "the command's node (nodeId=…)")
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
		f      listFilters
	)
	cmd := &cobra.Command{
		Use:   "list [--node N | nodeId=…] [--kind K] [--state S] [--reason R] [--run R] [--batch B] [--requester P] [--since T] [--until T] [--settled-since T] [limit=N] [cursor=…]",
		Short: "List commands, newest first: a node's, or without a node the tenant's",
		Long: `list calls commands.list. With a node (--node or nodeId=…), that node's
commands, newest first by seq; without one, every command of the tenant on
a node you may read, newest first by creation. The filters keep commands by
kind, state, reason, fleet run (--run run_…), batch, requester (the
principal that asked), creation time (--since, --until) and settle time
(--settled-since); a time is a duration back from now (90s, 30m, 1h, 7d) or
an RFC 3339 time. REQUESTER says who asked and how: alice (api),
ops (fleet-run run_…), health (module:health).`,
		Example: `  better-compute commands list --node node_0412 --state failed
  better-compute commands list --state failed --settled-since 1h
  better-compute commands list --run run_… --all
  better-compute commands list --kind node.reboot --since 2026-12-04T00:00:00Z --requester alice`,
		RunE: func(cmd *cobra.Command, args []string) error {
			extra, err := f.pairs(time.Now())
			if err != nil {
				return err
			}
			args = append(args, extra...)
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
	f.add(cmd)
	return cmd
}

// listFilters are commands list's filter flags, each the request field
// it names; a field given both ways is refused as set twice.
type listFilters struct {
	node, kind, state, reason, run, batch, requester string
	since, until, settledSince                       string
}

func (f *listFilters) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.node, "node", "", "one node's commands (nodeId=…); without it, the tenant's")
	fl.StringVar(&f.kind, "kind", "", "keep this kind")
	fl.StringVar(&f.state, "state", "", "keep this state (pending, delivered, running, succeeded, failed, rejected, expired, cancelled)")
	fl.StringVar(&f.reason, "reason", "", "keep this reason")
	fl.StringVar(&f.run, "run", "", "keep the commands of this fleet run (run_…)")
	fl.StringVar(&f.batch, "batch", "", "keep the commands of this batch (batch_…)")
	fl.StringVar(&f.requester, "requester", "", "keep the commands this principal asked for")
	fl.StringVar(&f.since, "since", "", "keep the commands created at or after: 1h (back from now) or an RFC 3339 time")
	fl.StringVar(&f.until, "until", "", "keep the commands created before: 30m (back from now) or an RFC 3339 time")
	fl.StringVar(&f.settledSince, "settled-since", "", "keep the commands settled at or after: 1h or an RFC 3339 time")
}

// pairs are the flags given, as request fields.
func (f *listFilters) pairs(now time.Time) ([]string, error) {
	var out []string
	for _, p := range []struct{ key, v string }{{"nodeId", f.node}, {"kind", f.kind}, {"state", f.state}, {"reason", f.reason},
		{"runId", f.run}, {"batchId", f.batch}, {"requester", f.requester}} {
		out = withFlagPairs(out, p.key, p.v)
	}
	for _, p := range []struct{ flag, key, v string }{{"--since", "since", f.since}, {"--until", "until", f.until}, {"--settled-since", "settledSince", f.settledSince}} {
		if p.v == "" {
			continue
		}
		t, err := parseSince(p.v, now)
		if err != nil {
			return nil, usageErr("%s %v", p.flag, err)
		}
		out = append(out, p.key+"="+t.UTC().Format(time.RFC3339Nano))
	}
	return out, nil
}

// withFlagPairs adds key=value when a flag gave value.
func withFlagPairs(pairs []string, key, value string) []string {
	if value == "" {
		return pairs
	}
	return append(pairs, key+"="+value)
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
	fmt.Fprintln(tw, "SEQ\tID\tNODE\tKIND\tSTATE\tREASON\tREQUESTER\tCREATED\tNOT AFTER")
	for _, c := range cs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.GetSeq(), c.GetId(), c.GetNodeId(), c.GetKind(), c.GetState(),
			dash(c.GetReason()), requesterText(c.GetRequester(), c.GetRequestedVia(), c.GetRunId()), ts(c.GetCreatedAt().AsTime()), ts(c.GetNotAfter().AsTime()))
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
		if b := c.GetBlockedBy(); b != nil {
			what := "blocked by"
			if terminal(c.GetState()) {
				what = "was blocked by"
			}
			fmt.Fprintf(a.env.Stdout, "%s: %s: %s\nfix: %s\n", what, b.GetReason(), b.GetMessage(), b.GetFix())
		} else if c.GetWaitingReason() != "" {
			fmt.Fprintf(a.env.Stdout, "waiting: %s: %s\n", c.GetWaitingReason(), c.GetWaitingMessage())
		}
		if c.GetBundleKey() != "" {
			fmt.Fprintf(a.env.Stdout, "bundle key: %s\n", c.GetBundleKey())
		}
		if c.GetResult() != nil {
			b, _ := protojson.Marshal(c.GetResult())
			// protojson varies its spacing on purpose from build to build;
			// what a person (or a script) reads must not.
			var compact bytes.Buffer
			if json.Compact(&compact, b) == nil {
				b = compact.Bytes()
			}
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
