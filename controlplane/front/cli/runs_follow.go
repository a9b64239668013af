package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// runTopics are the events a run publishes (fleetruns' Topic* constants;
// a test keeps the two lists equal). Following them tells the CLI when to
// re-read the run instead of polling it fast.
var runTopics = []string{"fleet.run.created", "fleet.run.progress", "fleet.run.paused", "fleet.run.resumed",
	"fleet.run.cancel-requested", "fleet.run.stopping", "fleet.run.waiting", "fleet.run.finished"}

// followFlags are --wait, --poll and --json of the commands that show a run.
type followFlags struct {
	wait, asJSON bool
	poll         time.Duration
}

func (f *followFlags) add(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.wait, "wait", false, "follow the run until it ends; exit 3 unless it succeeded")
	cmd.Flags().DurationVar(&f.poll, "poll", 2*time.Second, "with --wait, re-read the run at least this often")
	jsonFlag(cmd, &f.asJSON)
}

// runEnded reports whether a run's state is one it ends in.
func runEnded(state string) bool {
	return state == "succeeded" || state == "failed" || state == "cancelled"
}

// showRun follows the run when asked, prints it (with its failures and
// refused targets, or as JSON), and turns an outcome other than succeeded
// into exit 3 when it followed it.
func (a *app) showRun(cmd *cobra.Command, run *apiv1.FleetRun, f followFlags) error {
	if f.wait {
		var err error
		if run, err = a.followRun(cmd, run, f.poll); err != nil {
			return err
		}
	}
	if f.asJSON {
		if err := a.printJSON(run); err != nil {
			return err
		}
	} else if err := a.runReport(cmd, run); err != nil {
		return err
	}
	if f.wait && run.GetState() != "succeeded" {
		why := run.GetStateReason()
		if run.GetStateMessage() != "" {
			why += ": " + run.GetStateMessage()
		}
		return &exitError{code: ExitCommandFailed, err: fmt.Errorf("run %s ended %s (%s)", run.GetId(), run.GetState(), why)}
	}
	return nil
}

// followRun re-reads the run until it ends, showing its progress on
// stderr. The run's fleet.run.* events (events.watch from now) say when to
// re-read it; a read at least every interval covers a lost connection and
// a watch the caller may not hold.
func (a *app) followRun(cmd *cobra.Command, run *apiv1.FleetRun, interval time.Duration) (*apiv1.FleetRun, error) {
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	conn, err := a.connect(cmd)
	if err != nil {
		return nil, err
	}
	client := apiv1.NewFleetRunsClient(conn)
	tenantID, runID := run.GetTenantId(), run.GetId()
	hints := make(chan struct{}, 1)
	hint := func() {
		select {
		case hints <- struct{}{}:
		default:
		}
	}
	go func() {
		req := &apiv1.WatchEventsRequest{TenantId: tenantID, Cursor: "now", Types: runTopics}
		_ = followEvents(ctx, apiv1.NewEventsClient(conn), req, io.Discard, hint, func(e *apiv1.Event) error {
			if e.GetData().GetFields()["runId"].GetStringValue() == runID {
				hint()
			}
			return nil
		})
	}()
	p := &runProgress{w: a.env.Stderr, tty: a.isTerminal(a.env.Stderr), width: a.termWidth(a.env.Stderr)}
	if p.tty {
		// The bar has no room for the run's id, which pause, resume and
		// cancel from another terminal need.
		writeLine(p.w, "following run %s (Ctrl-C stops following; the run goes on)", runID)
	}
	for {
		p.show(run, time.Now())
		if runEnded(run.GetState()) {
			p.end()
			return run, nil
		}
		stopped := func() error {
			p.end()
			return fmt.Errorf("following run %s: %w (the run goes on: better-compute runs get %s --wait)", runID, ctx.Err(), runID)
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, stopped()
		case <-hints:
			t.Stop()
		case <-t.C:
		}
		next, err := client.Get(ctx, &apiv1.GetFleetRunRequest{TenantId: tenantID, RunId: runID})
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil, stopped()
		case status.Code(err) == codes.Unavailable:
			continue
		default:
			p.end()
			return nil, err
		}
		run = next
	}
}

// isTerminal reports whether w is a terminal (Env.IsTerminal decides when
// set).
func (a *app) isTerminal(w io.Writer) bool {
	if a.env.IsTerminal != nil {
		return a.env.IsTerminal(w)
	}
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// termWidth is w's width in columns, 100 when it is not a terminal or
// does not say.
func (a *app) termWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 20 {
			return cols
		}
	}
	return 100
}

// runProgress shows a followed run: a bar redrawn in place on a terminal,
// else a plain line each time what it shows changes.
type runProgress struct {
	w     io.Writer
	tty   bool
	width int
	last  string
	drawn bool
}

func (p *runProgress) show(run *apiv1.FleetRun, now time.Time) {
	text := progressSummary(run)
	if text == p.last {
		return
	}
	p.last = text
	if !p.tty {
		writeLine(p.w, "%s  %s  %s", now.UTC().Format(time.RFC3339), run.GetId(), text)
		return
	}
	line := progressBar(run, 24) + " " + text
	if n := p.width - 1; utf8.RuneCountInString(line) > n {
		line = string([]rune(line)[:n-1]) + "…"
	}
	// Carriage return and erase-line: the bar replaces itself.
	_, _ = fmt.Fprint(p.w, "\r\x1b[K"+line)
	p.drawn = true
}

// end leaves the terminal's cursor on a fresh line after the bar.
func (p *runProgress) end() {
	if p.tty && p.drawn {
		_, _ = fmt.Fprintln(p.w)
		p.drawn = false
	}
}

// progressSummary is what a progress line says: the state, the counts of
// the targets that can run, and what the run waits for.
func progressSummary(run *apiv1.FleetRun) string {
	c := run.GetCounts()
	s := fmt.Sprintf("%s  succeeded %d, failures %d, started %d, waiting %d of %d", run.GetState(), c.GetSucceeded(), c.GetFailures(),
		c.GetStarted(), c.GetWaiting(), c.GetTargets()-c.GetRefused())
	var more []string
	if n := c.GetNotStarted(); n > 0 {
		more = append(more, fmt.Sprintf("%d not started", n))
	}
	if n := c.GetCancelled(); n > 0 {
		more = append(more, fmt.Sprintf("%d cancelled", n))
	}
	if n := c.GetRefused(); n > 0 {
		more = append(more, fmt.Sprintf("%d refused", n))
	}
	if len(more) > 0 {
		s += " (" + strings.Join(more, ", ") + ")"
	}
	if run.GetWaitingReason() != "" {
		s += "; waiting: " + run.GetWaitingReason()
		if run.GetWaitingMessage() != "" {
			s += ": " + run.GetWaitingMessage()
		}
	}
	return s
}

// progressBar draws the share of the runnable targets that are done
// (settled, or not to be started) in width cells.
func progressBar(run *apiv1.FleetRun, width int) string {
	c := run.GetCounts()
	total := int(c.GetTargets() - c.GetRefused())
	done := total - int(c.GetWaiting()+c.GetStarted())
	filled := 0
	if total > 0 {
		filled = min(width, max(0, done*width/total))
	}
	return "[" + strings.Repeat("#", filled) + strings.Repeat("-", width-filled) + "]"
}
