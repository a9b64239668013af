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

// Handler runs node.reboot against cfg's bus. It reports success once the
// reboot is accepted: a real reboot kills the plugin and bcd right after, and
// bcd's journal with the boot id recorded at acceptance finishes the command.
func Handler(cfg Config) kind.Handler {
	return kind.HandlerFunc(func(ctx context.Context, req kind.Request) (any, error) {
		out, err := Reboot(ctx, cfg, req.Logger)
		if err != nil {
			var be *BusError
			var je *JobError
			switch {
			case errors.As(err, &be):
				return nil, &kind.Failure{Reason: ReasonRefused, Message: err.Error(), Result: map[string]string{"dbusError": be.Name}}
			case errors.As(err, &je):
				return nil, &kind.Failure{Reason: ReasonJobFailed, Message: err.Error(), Result: map[string]string{"jobResult": je.Result}}
			case ctx.Err() != nil:
				return nil, err
			default:
				return nil, &kind.Failure{Reason: ReasonNoBus, Message: err.Error()}
			}
		}
		return Result{Accepted: true, Via: out.Via, JobResult: out.JobResult}, nil
	})
}
