package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/better-compute/commands/bcd/accept"
	"github.com/better-compute/commands/bcd/daemon"
	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/internal/checkreport"
)

// cmdExec runs one kind locally through the daemon's whole path and prints
// the outcome: JSON on stdout, progress and a summary on stderr.
func cmdExec(args []string, stdout, stderr io.Writer) error {
	fs, cf := flags("exec", "KIND [--payload JSON|@FILE] [flags]", stderr)
	payload := fs.String("payload", "{}", "the command's JSON payload, or @FILE to read it from a file")
	id := fs.String("id", "", "command id (default: a new cmd_local_… id); a known id is answered from the journal")
	notAfter := fs.Duration("not-after", 10*time.Minute, "how long the command may wait before it expires")
	minGen := fs.Int64("min-generation", 0, "node spec generation the command presupposes")
	quiet := fs.BoolP("quiet", "q", false, "no progress or summary on stderr")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return &exitError{code: 2, err: errors.New("exec needs exactly one KIND")}
	}
	kindName := fs.Arg(0)
	cfg, err := cf.Load()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if cfg.NodeID == "" {
		cfg.NodeID = localNodeID
	}
	if !fs.Changed("log-level") && cfg.LogLevel == "info" {
		// The outcome and the progress are the output; bcd's own info
		// lines would bury them.
		cfg.LogLevel = "warn"
	}
	if err := cfg.Validate(); err != nil {
		return &exitError{code: 2, err: err}
	}
	body, err := readPayload(*payload)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if *id == "" {
		*id = newLocalID()
	}
	logger := newLogger(cfg, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, _, err := openStack(context.Background(), cfg, logger, stackOptions{})
	if err != nil {
		return err
	}
	defer s.close()

	cmd := accept.Command{ID: *id, NodeID: cfg.NodeID, Kind: kindName, Payload: body, NotAfter: time.Now().Add(*notAfter), MinGeneration: *minGen}
	started := time.Now()
	updates, err := s.d.Submit(context.Background(), cmd)
	if err != nil {
		return err
	}
	var out *daemon.Update
	for {
		select {
		case <-ctx.Done():
			// Ctrl-C is a cancel: the kind stops between actions and the
			// real outcome is still printed.
			if !*quiet {
				fmt.Fprintf(stderr, "cancelling %s\n", cmd.ID)
			}
			_ = s.d.Cancel(cmd.ID)
			ctx = context.Background()
			continue
		case u, ok := <-updates:
			if !ok {
				return finishExec(out, started, stdout, stderr, *quiet)
			}
			if u.Terminal() {
				out = &u
			}
			if !*quiet {
				progress(stderr, u)
			}
		}
	}
}

func progress(w io.Writer, u daemon.Update) {
	switch {
	case u.Progress != nil && u.Progress.Percent >= 0:
		fmt.Fprintf(w, "[%3d%%] %s\n", u.Progress.Percent, u.Progress.Message)
	case u.Progress != nil:
		fmt.Fprintf(w, "[ ... ] %s\n", u.Progress.Message)
	case !u.Terminal():
		dup := ""
		if u.Duplicate {
			dup = " (already known)"
		}
		fmt.Fprintf(w, "%s %s: %s%s\n", u.Kind, u.CommandID, u.State, dup)
	}
}

func finishExec(out *daemon.Update, started time.Time, stdout, stderr io.Writer, quiet bool) error {
	if out == nil {
		return &exitError{code: 1, err: errors.New("no outcome: bcd stopped before the command finished (it stays in the journal)")}
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, string(b))
	if !quiet {
		checkreport.Write(stderr, out.Result)
		var sb strings.Builder
		fmt.Fprintf(&sb, "%s %s %s", out.Kind, out.CommandID, strings.ToUpper(string(out.State)))
		if out.RejectCode != "" {
			fmt.Fprintf(&sb, " %s", out.RejectCode)
		}
		if out.Reason != "" {
			fmt.Fprintf(&sb, " (%s)", out.Reason)
		}
		if out.Message != "" && out.Message != out.Reason {
			fmt.Fprintf(&sb, ": %s", out.Message)
		}
		if out.Duplicate {
			sb.WriteString(" [answered from the journal]")
		}
		fmt.Fprintf(&sb, " in %s", time.Since(started).Round(time.Millisecond))
		fmt.Fprintln(stderr, sb.String())
	}
	if out.State != journal.StateSucceeded {
		return &exitError{code: 1}
	}
	return nil
}

func readPayload(p string) (json.RawMessage, error) {
	b := []byte(p)
	if strings.HasPrefix(p, "@") {
		var err error
		if b, err = os.ReadFile(p[1:]); err != nil {
			return nil, fmt.Errorf("--payload: %w", err)
		}
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("--payload is not valid JSON: %s", p)
	}
	return b, nil
}

// newLocalID is a time-ordered command id for a local run.
func newLocalID() string {
	var r [6]byte
	_, _ = rand.Read(r[:])
	return fmt.Sprintf("cmd_local_%x%s", time.Now().UnixMilli(), hex.EncodeToString(r[:]))
}
