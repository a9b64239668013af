package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/better-compute/commands/sdk/kind"
)

// cmdKinds lists the kinds the plugins serve.
func cmdKinds(args []string, stdout, stderr io.Writer) error {
	fs, cf := flags("kinds", "[--json] [flags]", stderr)
	asJSON := fs.Bool("json", false, "print the manifests as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := cf.Load()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	logger := newLogger(cfg, stderr)
	host := startPlugins(context.Background(), logger, cfg, nil, nil)
	defer host.Close()
	if err := listKinds(host.Manifests(), *asJSON, stdout); err != nil {
		return err
	}
	// What loaded is listed either way; a refused plugin makes the exit
	// status say so, so that a script (the SDK guide's jq step) stops.
	refused := host.Refused()
	for _, r := range refused {
		fmt.Fprintf(stderr, "bcd kinds: refused plugin %s: %v\n", orDir(r.Plugin), r.Err)
	}
	if len(refused) > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d plugin(s) refused", len(refused))}
	}
	return nil
}

// listKinds prints the manifests as a table, or as JSON with their digests.
func listKinds(ms []kind.Manifest, asJSON bool, stdout io.Writer) error {
	sort.Slice(ms, func(i, j int) bool { return ms[i].Kind < ms[j].Kind })
	if asJSON {
		type entry struct {
			kind.Manifest
			Digest string `json:"digest"`
		}
		out := make([]entry, 0, len(ms))
		for _, m := range ms {
			out = append(out, entry{Manifest: m, Digest: m.Digest()})
		}
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tLANE\tTIMEOUT\tFLAGS\tVERSION\tDESCRIPTION")
	for _, m := range ms {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.Kind, m.Lane, m.Timeout.D(), flagList(m), m.Version, m.Description)
	}
	return tw.Flush()
}

func flagList(m kind.Manifest) string {
	var fl []string
	if m.Flags.RetrySafe {
		fl = append(fl, "retry-safe")
	}
	if m.Flags.Destructive {
		fl = append(fl, "destructive")
	}
	if m.Flags.SelfTerminating {
		fl = append(fl, "self-terminating")
	}
	if m.Flags.Attested {
		fl = append(fl, "attested")
	}
	if m.APIRunnable {
		fl = append(fl, "api")
	}
	if len(fl) == 0 {
		return "-"
	}
	return strings.Join(fl, ",")
}
