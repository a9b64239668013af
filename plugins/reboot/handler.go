package reboot

import (
	"context"
	"errors"

	"github.com/better-compute/commands/sdk/kind"
)

// Failure reasons node.reboot reports.
const (
	// ReasonRefused: the bus answered with an error (access denied, an inhibitor).
	ReasonRefused = "reboot-refused"
	// ReasonJobFailed: systemd ran the reboot job and it did not end "done".
	ReasonJobFailed = "reboot-failed"
	// ReasonNoBus: no D-Bus to ask.
	ReasonNoBus = "no-bus"
)

// Result is node.reboot's result document when the reboot was accepted. bcd
// completes the command after the reboot with rebooted: true.
type Result struct {
	Accepted bool   `json:"accepted"`
	Via      string `json:"via"`
	// JobResult is set on the systemd path.
	JobResult string `json:"jobResult,omitempty"`
}

// FailureResult is node.reboot's result document when the reboot was not
// accepted. The detail is in the command's own record, where an operator
// reads it with commands get, not only in bcd's log on the node.
type FailureResult struct {
	// Error is the failure in words: the call, the D-Bus error and its text,
	// or why no bus could be reached.
	Error string `json:"error"`
	// Path is the way the reboot was asked for when it failed: "logind", or
	// "systemd" when logind was not on the bus.
	Path string `json:"path"`
	// DBusError is the D-Bus error name of a refusal.
	DBusError string `json:"dbusError,omitempty"`
	// JobResult is systemd's job result when the reboot job did not end done.
	JobResult string `json:"jobResult,omitempty"`
}

// Handler runs node.reboot against cfg's bus. It reports success once the
// reboot is accepted: a real reboot kills the plugin and bcd right after, and
// bcd's journal with the boot id recorded at acceptance finishes the command.
// A failure carries a FailureResult, and its message names the path.
func Handler(cfg Config) kind.Handler {
	return kind.HandlerFunc(func(ctx context.Context, req kind.Request) (any, error) {
		out, err := Reboot(ctx, cfg, req.Logger)
		if err == nil {
			return Result{Accepted: true, Via: out.Via, JobResult: out.JobResult}, nil
		}
		res := FailureResult{Error: err.Error(), Path: out.Via}
		reason := ReasonNoBus
		var be *BusError
		var je *JobError
		switch {
		case errors.As(err, &be):
			reason, res.DBusError = ReasonRefused, be.Name
		case errors.As(err, &je):
			reason, res.JobResult = ReasonJobFailed, je.Result
		case ctx.Err() != nil:
			// Stopped (a cancel, the deadline): the SDK reports it so.
			return nil, err
		}
		return nil, &kind.Failure{Reason: reason, Message: "asking " + out.Via + " for the reboot: " + err.Error(), Result: res}
	})
}
