package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/better-compute/commands/bcd/journal"
)

// cmdJournal prints the most recent journal records.
func cmdJournal(args []string, stdout, stderr io.Writer) error {
	fs, cf := flags("journal", "[--limit N] [--json] [flags]", stderr)
	limit := fs.Int("limit", 50, "how many records, newest first")
	asJSON := fs.Bool("json", false, "print the records as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := cf.Load()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	j, err := journal.Open(newLogger(cfg, stderr), cfg.StateDir, journal.Options{ReplayHorizon: cfg.ReplayHorizon.D()})
	if err != nil {
		return err
	}
	defer j.Close()
	recs, err := j.Recent(*limit)
	if err != nil {
		return err
	}
	if *asJSON {
		b, err := json.MarshalIndent(map[string]any{"journalId": j.ID(), "records": recs}, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	fmt.Fprintf(stdout, "journal %s\n", j.ID())
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMMAND\tKIND\tSTATE\tREASON\tACCEPTED\tFINISHED")
	for _, r := range recs {
		reason := r.Reason
		if r.RejectCode != "" {
			reason = r.RejectCode
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Kind, r.State, reason, stamp(r.AcceptedAt), stamp(r.FinishedAt))
	}
	return tw.Flush()
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}
