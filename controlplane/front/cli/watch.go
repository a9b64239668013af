package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/better-compute/commands/internal/backoff"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

func (a *app) watchCommand() *cobra.Command {
	var (
		asJSON bool
		count  int
	)
	cmd := &cobra.Command{
		Use:   "watch [nodeId=…] [types=…] [cursor=…]",
		Short: "Follow events; reconnects and resumes from the last cursor",
		Long: `watch follows the tenant's events (events.watch): node.command.queued,
node.command.cancel-requested and command.settled. When the connection drops it
reconnects and resumes after the last event it printed, so none is lost or
repeated. cursor=now starts at the newest event.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := FindMethod("events.watch")
			if err != nil {
				return err
			}
			conn, err := a.connect(cmd)
			if err != nil {
				return err
			}
			msg, err := BuildRequest(m.Desc.Input(), a.withTenant(m, args))
			if err != nil {
				return usageErr("events.watch: %v", err)
			}
			req := msg.(*apiv1.WatchEventsRequest)
			client := apiv1.NewEventsClient(conn)
			seen := 0
			return followEvents(cmd.Context(), client, req, a.env.Stderr, nil, func(e *apiv1.Event) error {
				if asJSON {
					b, err := renderJSON(e, false)
					if err != nil {
						return err
					}
					writeLine(a.env.Stdout, "%s", b)
				} else {
					writeLine(a.env.Stdout, "%s", eventLine(e))
				}
				seen++
				if count > 0 && seen >= count {
					return errStop
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print each event as one JSON line")
	cmd.Flags().IntVar(&count, "count", 0, "exit after this many events (0: follow forever)")
	return cmd
}

// errStop ends a follow without an error.
var errStop = errors.New("stop")

// followEvents runs the watch, reconnecting with the last cursor after a
// transport error, until fn returns errStop or an error, the context ends, or
// the server refuses the request itself.
//
// started, when set, is called once the server has sent the stream's header,
// that is once it has fixed the cursor: every event after that reaches fn.
func followEvents(ctx context.Context, client apiv1.EventsClient, req *apiv1.WatchEventsRequest, progress io.Writer,
	started func(), fn func(*apiv1.Event) error) error {
	wait := backoff.New(200*time.Millisecond, 5*time.Second)
	for {
		stream, err := client.Watch(ctx, req)
		if err == nil {
			if md, herr := stream.Header(); herr == nil {
				if req.GetCursor() == "now" && len(md.Get("bc-cursor")) > 0 {
					// Resume from the fixed head, not from a new "now", so
					// that a reconnect loses nothing.
					req.Cursor = md.Get("bc-cursor")[0]
				}
				if started != nil {
					started()
					started = nil
				}
			}
			for {
				var e *apiv1.Event
				e, err = stream.Recv()
				if err != nil {
					break
				}
				wait.Reset() // the stream got going: a later loss waits the minimum again
				req.Cursor = e.GetCursor()
				if ferr := fn(e); ferr != nil {
					if errors.Is(ferr, errStop) {
						return nil
					}
					return ferr
				}
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if c := status.Code(err); c != codes.Unavailable && c != codes.Internal && c != codes.Unknown && !errors.Is(err, io.EOF) {
			return err
		}
		next := wait.NextBackOff()
		writeLine(progress, "watch: %v; resuming after %q in %s", err, req.GetCursor(), next.Round(time.Millisecond))
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func eventLine(e *apiv1.Event) string {
	d := e.GetData().GetFields()
	s := fmt.Sprintf("%s  %-30s %s", ts(e.GetOccurredAt().AsTime()), e.GetType(), e.GetNodeId())
	for _, k := range []string{"commandId", "kind", "state", "reason"} {
		if v, ok := d[k]; ok && v.GetStringValue() != "" {
			s += "  " + k + "=" + v.GetStringValue()
		}
	}
	return s
}

// wait follows a command until it settles: events are hints to re-read it,
// and a poll every interval covers an event missed between the watch
// starting and the first read.
func (a *app) wait(cmd *cobra.Command, c *apiv1.Command, interval time.Duration) (*apiv1.Command, error) {
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	conn, err := a.connect(cmd)
	if err != nil {
		return nil, err
	}
	commands := apiv1.NewCommandsClient(conn)
	// The loop below replaces c; the watch goroutine keeps its own copies.
	tenantID, nodeID, commandID := c.GetTenantId(), c.GetNodeId(), c.GetId()
	hints := make(chan struct{}, 1)
	hint := func() {
		select {
		case hints <- struct{}{}:
		default:
		}
	}
	go func() {
		// Once the watch has fixed its cursor, one more read covers a
		// change that landed before it; after that every change arrives as
		// an event, and the poll only backs up a lost connection.
		req := &apiv1.WatchEventsRequest{TenantId: tenantID, NodeId: nodeID, Cursor: "now"}
		_ = followEvents(ctx, apiv1.NewEventsClient(conn), req, io.Discard, hint, func(e *apiv1.Event) error {
			if e.GetData().GetFields()["commandId"].GetStringValue() == commandID {
				hint()
			}
			return nil
		})
	}()
	last, lastProgress, lastWaiting := "", "", ""
	for {
		progress := progressText(c)
		if c.GetState() != last || progress != lastProgress {
			writeLine(a.env.Stderr, "%s  %s %s%s%s", time.Now().UTC().Format(time.RFC3339), c.GetId(), c.GetState(), reasonSuffix(c), progress)
			last, lastProgress = c.GetState(), progress
		}
		// Why it cannot progress, as soon as the gateway says so (the
		// node.command.waiting event wakes this loop), once per change.
		if w := waitingText(c); w != "" && w != lastWaiting && !terminal(c.GetState()) {
			writeLine(a.env.Stderr, "%s", w)
			lastWaiting = w
		}
		if terminal(c.GetState()) {
			return c, nil
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("waiting for %s: %w", c.GetId(), ctx.Err())
		case <-hints:
			t.Stop()
		case <-t.C:
		}
		next, err := commands.Get(ctx, &apiv1.GetCommandRequest{TenantId: tenantID, NodeId: nodeID, CommandId: commandID})
		if err != nil {
			if status.Code(err) == codes.Unavailable {
				continue
			}
			return nil, err
		}
		c = next
	}
}

// progressText renders the node's last progress report: "  40% collecting
// journald" for the usual { percent, message }, else its JSON.
func progressText(c *apiv1.Command) string {
	p := c.GetProgress()
	if p == nil || terminal(c.GetState()) {
		return ""
	}
	f := p.GetStructValue().GetFields()
	if msg, ok := f["message"]; ok {
		if pct, ok := f["percent"]; ok && pct.GetNumberValue() >= 0 {
			return fmt.Sprintf("  %.0f%% %s", pct.GetNumberValue(), msg.GetStringValue())
		}
		return "  " + msg.GetStringValue()
	}
	b, err := renderJSON(p, false)
	if err != nil {
		return ""
	}
	return "  " + string(b)
}

func terminal(state string) bool {
	switch state {
	case "succeeded", "failed", "rejected", "expired", "cancelled":
		return true
	}
	return false
}

// waitingText says why a pending command is held: the waiting reason and
// message, and for what only a person can fix (blockedBy), the fix.
func waitingText(c *apiv1.Command) string {
	if c.GetWaitingReason() == "" {
		return ""
	}
	if b := c.GetBlockedBy(); b != nil {
		return fmt.Sprintf("  blocked (%s): %s\n  fix: %s", b.GetReason(), b.GetMessage(), b.GetFix())
	}
	return fmt.Sprintf("  waiting (%s): %s", c.GetWaitingReason(), c.GetWaitingMessage())
}
