package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/controlplane/commands/history/archive"
	"github.com/better-compute/commands/controlplane/server/serverconfig"
)

// historyFlags are what history export and search share: where the archive
// is, whose, and which hours.
type historyFlags struct {
	serverConfig, dir string
	fleet             bool
	since, until      string
}

func (f *historyFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.serverConfig, "server-config", "", "bc-server's config file: the archive is in its supportBundles blob store")
	cmd.Flags().StringVar(&f.dir, "archive-dir", "", "a directory holding a copy of the blob store (instead of --server-config)")
	cmd.Flags().BoolVar(&f.fleet, "fleet", false, "read the fleet's archive (events of no tenant, River's jobs) instead of a tenant's")
	cmd.Flags().StringVar(&f.since, "since", "", "only hours from this time: a duration back (7d, 2h) or RFC 3339")
	cmd.Flags().StringVar(&f.until, "until", "", "only hours before this time: a duration back or RFC 3339")
}

// query opens the archive and builds the query's tenant and hours.
func (a *app) historyQuery(f *historyFlags) (archive.Source, archive.Query, error) {
	var q archive.Query
	switch {
	case (f.serverConfig == "") == (f.dir == ""):
		return nil, q, usageErr("name the archive with exactly one of --server-config (bc-server's config) and --archive-dir")
	case f.fleet:
	default:
		q.Tenant = a.flags.Tenant
		if q.Tenant == "" && a.env.Getenv != nil {
			q.Tenant = a.env.Getenv("BC_TENANT")
		}
		if q.Tenant == "" {
			return nil, q, usageErr("--tenant (or BC_TENANT) is required: the archive is kept per tenant (--fleet for the fleet's)")
		}
		if err := archive.CheckTenant(q.Tenant); err != nil {
			return nil, q, usageErr("%v", err)
		}
	}
	now := time.Now()
	for _, t := range []struct {
		s   string
		dst *time.Time
		nm  string
	}{{f.since, &q.Since, "--since"}, {f.until, &q.Until, "--until"}} {
		if t.s == "" {
			continue
		}
		v, err := parseSince(t.s, now)
		if err != nil {
			return nil, q, usageErr("%s: %v", t.nm, err)
		}
		*t.dst = v
	}
	if f.dir != "" {
		st, err := os.Stat(f.dir)
		if err != nil || !st.IsDir() {
			return nil, q, usageErr("--archive-dir %s: not a directory", f.dir)
		}
		return archive.DirSource(f.dir), q, nil
	}
	cfg, err := serverconfig.LoadConfig(f.serverConfig)
	if err != nil {
		return nil, q, err
	}
	if cfg.SupportBundles == nil {
		return nil, q, fmt.Errorf("%s has no supportBundles section: this server archives no history", f.serverConfig)
	}
	store, err := bundles.Open(*cfg.SupportBundles)
	if err != nil {
		return nil, q, err
	}
	return store, q, nil
}

// historyCommand reads the command history's archive (controlplane/commands/history):
// commands settled past the retention, with their events, out of the
// support-bundle blob store, every object checked against its manifest's
// SHA-256.
func (a *app) historyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "history",
		Short: "Read archived command history (commands past the retention, their events)",
		Long: `history reads the archive that bc-server's history retention writes to the
support-bundle blob store: one zstd JSON-lines object per tenant and hour, with a
manifest and each object's SHA-256, which every read checks. Point it at the
store with --server-config (bc-server's YAML) or at a copy with --archive-dir.`,
	}
	cmd.AddCommand(a.historySearchCommand(), a.historyExportCommand())
	return cmd
}

func (a *app) historySearchCommand() *cobra.Command {
	var f historyFlags
	var id, node, kind, requester string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "search [--id ID] [--node NODE] [--kind KIND] [--requester WHO] --tenant T (--server-config FILE | --archive-dir DIR)",
		Short: "Find archived commands by id, node, kind or requester",
		Long: `search reads the tenant's archive objects (within --since and --until) and
prints the commands that match every filter given, with their events under
--json (each command's full row and its events, one JSON object a line).

  better-compute history search --tenant acme --id cmd_01J… --server-config /etc/bc-server/server.yaml
  better-compute history search --tenant acme --node node_0412 --since 400d --archive-dir ./archive --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return usageErr("--limit %d: must not be negative", limit)
			}
			src, q, err := a.historyQuery(&f)
			if err != nil {
				return err
			}
			q.ID, q.Node, q.Kind, q.Requester, q.Limit = id, node, kind, requester, limit
			found, err := archive.Search(cmd.Context(), src, q)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(a.env.Stdout)
				for _, x := range found {
					if err := enc.Encode(x); err != nil {
						return err
					}
				}
				return nil
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNODE\tKIND\tSTATE\tREASON\tREQUESTER\tSETTLED\tEVENTS")
			for _, x := range found {
				var c archive.CommandRow
				if err := json.Unmarshal(x.Command, &c); err != nil {
					return fmt.Errorf("%w: %s: %w", archive.ErrIntegrity, x.Object, err)
				}
				settled := "-"
				if c.SettledAt != nil {
					settled = c.SettledAt.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", c.ID, c.NodeID, c.Kind, c.State, dash(c.Reason), dash(c.Requester), settled, len(x.Events))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stderr, "%d command(s)\n", len(found))
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&id, "id", "", "the command's id")
	cmd.Flags().StringVar(&node, "node", "", "the node's id")
	cmd.Flags().StringVar(&kind, "kind", "", "the command's kind (diag.nvml)")
	cmd.Flags().StringVar(&requester, "requester", "", "who requested it")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many commands (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object a line: the command's row, its events and the object")
	return cmd
}

func (a *app) historyExportCommand() *cobra.Command {
	var f historyFlags
	var output string
	cmd := &cobra.Command{
		Use:   "export --tenant T (--server-config FILE | --archive-dir DIR) [-o FILE]",
		Short: "Write a tenant's archived records as JSON lines, each object checked",
		Long: `export writes every record of the tenant's archive objects (within --since
and --until) as JSON lines, {"type": "command"|"event"|"job", "row": {...}},
to standard output or -o, after checking each object against its manifest.

  better-compute history export --tenant acme --since 400d --until 365d --server-config /etc/bc-server/server.yaml -o acme.jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			src, q, err := a.historyQuery(&f)
			if err != nil {
				return err
			}
			out := a.env.Stdout
			var file *os.File
			if output != "" {
				if file, err = os.Create(output); err != nil {
					return err
				}
				out = file
			}
			w := bufio.NewWriter(out)
			n, err := archive.Export(cmd.Context(), src, q, w)
			if ferr := w.Flush(); err == nil {
				err = ferr
			}
			if file != nil {
				if cerr := file.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					_ = os.Remove(output)
				}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stderr, "%d record(s)\n", n)
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "", "write to this file instead of standard output")
	return cmd
}
