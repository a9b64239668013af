package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/sdk/kind"
	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
	"github.com/better-compute/commands/sdk/wire"
	"github.com/better-compute/commands/sdk/wire/kindpb"
)

// crashWait is how long Execute waits, after its stream broke, for the plugin
// process to be seen exiting, before it kills the plugin itself.
const crashWait = 2 * time.Second

// Execute runs cmd on the plugin that serves its kind and returns a terminal
// Result, always: callers record it as the command's outcome.
//
// The error is nil exactly when the Result is the plugin's own report.
// Otherwise the host made the Result up from what it knows, and the error
// says why:
//   - ErrUnknownKind: failed, reason unknown-kind;
//   - ErrPluginCrashed: failed, reason plugin-crashed; the plugin exited (or
//     its connection broke) mid-command, and it is being restarted;
//   - ErrPluginUnavailable: failed, reason plugin-unavailable; the plugin was
//     down and did not come back by the command's not_after (cmd.NotAfter,
//     or its deadline when it has none), or its restart was refused (its
//     pin, its file's trust, other manifests), which fails it at once; or
//     cancelled, reason cancelled, when ctx was cancelled meanwhile;
//   - ErrClosed: failed, reason interrupted; the host is shutting down;
//   - wire.ErrNoOutcome: ctx ended and the plugin did not report within the
//     cancel grace: cancelled (ctx cancelled) or failed, reason timeout;
//   - anything else: failed, reason plugin-error.
//
// Cancelling ctx is the cancel. The plugin is told to stop between actions
// and what it reports then, side effects included, is the Result. A zero
// cmd.Deadline means the manifest's timeout from now; the plugin fails the
// command with reason timeout when it passes.
func (h *Host) Execute(ctx context.Context, cmd kind.Command, progress func(percent int, message string)) (kind.Result, error) {
	h.kindsLock.RLock()
	r, ok := h.kinds[cmd.Kind]
	if ok {
		// Counted before the lock is let go: a reload that retires this
		// plugin waits for the command before it stops the process.
		r.inst.acquire()
		defer r.inst.release()
	}
	h.kindsLock.RUnlock()
	if !ok {
		return kind.Result{Status: kind.StatusFailed, Reason: kind.ReasonUnknownKind, Message: fmt.Sprintf("no plugin serves kind %q", cmd.Kind)},
			fmt.Errorf("%w: %s", ErrUnknownKind, cmd.Kind)
	}
	deadline := cmd.Deadline
	if deadline.IsZero() {
		deadline = time.Now().Add(r.manifest.Timeout.D())
	}
	// The plugin enforces the deadline itself and reports timeout; the host
	// stops waiting only a grace later, so that report can arrive.
	runCtx, cancel := context.WithDeadline(ctx, deadline.Add(h.cfg.CancelGrace))
	defer cancel()

	// A plugin that is down is waited for only until the command's
	// not_after: past it the command must not start, and a kind's timeout
	// may be hours.
	waitCtx := runCtx
	if !cmd.NotAfter.IsZero() {
		var cancelWait context.CancelFunc
		waitCtx, cancelWait = context.WithDeadline(runCtx, cmd.NotAfter)
		defer cancelWait()
	}
	p, err := r.inst.get(waitCtx)
	if err != nil {
		switch {
		case errors.Is(err, ErrClosed) && !h.isClosed():
			return kind.Result{Status: kind.StatusFailed, Reason: ReasonPluginUnavailable, Message: "the plugin " + r.inst.bin.name + " was replaced by a reload and its old process is gone; nothing ran"},
				fmt.Errorf("%w: %s: %w", ErrPluginUnavailable, r.inst.bin.name, err)
		case errors.Is(err, ErrClosed):
			return kind.Result{Status: kind.StatusFailed, Reason: ReasonInterrupted, Message: "bcd's plugin host is shutting down"}, err
		case errors.Is(err, ErrRefused):
			return kind.Result{Status: kind.StatusFailed, Reason: ReasonPluginUnavailable, Message: "the plugin " + r.inst.bin.name + " is down and its restart was refused (" + err.Error() + "); nothing ran"},
				fmt.Errorf("%w: %s: %w", ErrPluginUnavailable, r.inst.bin.name, err)
		case errors.Is(ctx.Err(), context.Canceled):
			return kind.Result{Status: kind.StatusCancelled, Reason: kind.ReasonCancelled, Message: "cancelled while the plugin " + r.inst.bin.name + " was restarting; nothing ran"},
				fmt.Errorf("%w: %s: %w", ErrPluginUnavailable, r.inst.bin.name, err)
		default:
			msg := "the plugin " + r.inst.bin.name + " did not come back in time; nothing ran"
			if !cmd.NotAfter.IsZero() && !time.Now().Before(cmd.NotAfter) {
				msg = "the plugin " + r.inst.bin.name + " did not come back by the command's not_after; nothing ran"
			}
			if why := r.inst.whyDown(); why != nil {
				msg += " (last restart: " + why.Error() + ")"
			}
			return kind.Result{Status: kind.StatusFailed, Reason: ReasonPluginUnavailable, Message: msg},
				fmt.Errorf("%w: %s: %w", ErrPluginUnavailable, r.inst.bin.name, err)
		}
	}

	req := &pluginv1.ExecuteRequest{
		Command: &pluginv1.Command{
			Id:       cmd.ID,
			Kind:     cmd.Kind,
			NodeId:   cmd.NodeID,
			Payload:  cmd.Payload,
			Deadline: timestamppb.New(deadline),
			// The secretRefs' values, in memory only: the request is
			// never logged or journalled.
			Secrets: cmd.Secrets,
		},
		HostBrokerId: p.brokerID,
	}
	if !cmd.NotAfter.IsZero() {
		req.Command.NotAfter = timestamppb.New(cmd.NotAfter)
	}
	var onProgress func(*pluginv1.Progress)
	if progress != nil {
		onProgress = func(pr *pluginv1.Progress) { progress(int(pr.GetPercent()), pr.GetMessage()) }
	}
	res, err := wire.Execute(runCtx, p.Kind, req, onProgress, h.cfg.CancelGrace)
	if err == nil {
		return kindpb.ResultFromProto(res), nil
	}
	return h.failure(ctx, r.inst, p, err)
}

// failure makes up the Result of a command whose plugin did not report one.
func (h *Host) failure(ctx context.Context, in *instance, p *proc, err error) (kind.Result, error) {
	if errors.Is(err, wire.ErrNoOutcome) {
		if errors.Is(ctx.Err(), context.Canceled) {
			return kind.Result{Status: kind.StatusCancelled, Reason: kind.ReasonCancelled, Message: "cancelled; the plugin reported no outcome in time, so what it did is unknown"}, err
		}
		return kind.Result{Status: kind.StatusFailed, Reason: ReasonTimeout, Message: "the plugin reported no outcome by the deadline"}, err
	}
	if h.isClosed() && in.closingNow() {
		return kind.Result{Status: kind.StatusFailed, Reason: ReasonInterrupted, Message: "bcd's plugin host shut down while the command ran"}, fmt.Errorf("%w: %w", ErrClosed, err)
	}
	if crashed(p, err) {
		in.fail(p)
		in.logger.Error("plugin crashed mid-command", "pid", p.Pid, "error", err)
		return kind.Result{Status: kind.StatusFailed, Reason: ReasonPluginCrashed, Message: "the plugin " + in.bin.name + " exited while the command ran; it is being restarted"},
			fmt.Errorf("%w: %s: %w", ErrPluginCrashed, in.bin.name, err)
	}
	return kind.Result{Status: kind.StatusFailed, Reason: ReasonPluginError, Message: err.Error()}, fmt.Errorf("plugin %s: %w", in.bin.name, err)
}

// crashed tells a dead plugin from a plugin error: the process exited, or its
// connection is gone (Unavailable) or ended with no result, which a live SDK
// plugin never does.
func crashed(p *proc, err error) bool {
	select {
	case <-p.Exited:
		return true
	default:
	}
	if errors.Is(err, wire.ErrNoResult) || status.Code(err) == codes.Unavailable {
		return true
	}
	// A stream error that is not Unavailable may still be the process going
	// down (the error raced its exit): give the exit a moment to show.
	timer := time.NewTimer(crashWait)
	defer timer.Stop()
	select {
	case <-p.Exited:
		return true
	case <-timer.C:
		return false
	}
}

// whyDown is why the plugin's last restart failed, or nil.
func (in *instance) whyDown() error {
	in.procLock.Lock()
	defer in.procLock.Unlock()
	return in.downErr
}

func (in *instance) closingNow() bool {
	in.procLock.Lock()
	defer in.procLock.Unlock()
	return in.closing
}
