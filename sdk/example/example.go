// Package example is the example kind plugin that the SDK guide walks
// through. It serves two kinds:
//
//   - example.echo returns its payload's message, after an optional wait
//     that it spends in ten steps, reporting progress and stopping between
//     steps when cancelled;
//   - example.noop returns {} at once; benchmarks use it to measure bcd's
//     warm path with no work in it.
//
// The manifests are exported Go values, so the control plane registers the
// very values the plugin serves: one manifest, never two copies.
package example

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

// EchoManifest describes example.echo. Its payload needs a string message and
// may ask for a wait of up to a minute (sleepMs).
var EchoManifest = kind.Manifest{
	Kind:    "example.echo",
	Lane:    kind.LaneControl,
	Timeout: kind.Duration(2 * time.Minute),
	Roles:   []string{"node", "discovery"},
	// Running it twice does no harm, so a command interrupted by a daemon
	// crash may simply run again.
	Flags:       kind.Flags{RetrySafe: true},
	APIRunnable: true,
	PayloadSchema: json.RawMessage(`{
		"type": "object",
		"properties": {
			"message": {"type": "string", "minLength": 1, "maxLength": 4096},
			"sleepMs": {"type": "integer", "minimum": 0, "maximum": 60000}
		},
		"required": ["message"],
		"additionalProperties": false
	}`),
	Version:     "1.0.0",
	Description: "Return the payload's message, after an optional cancellable wait.",
	// While a fleet upgrades, the control plane may send example.echo's
	// commands to a node that runs another 1.x before it knows that
	// version's manifest.
	CompatibleVersions: "^1", // any 1.x: the same payloads, lane, timeout, roles and flags
}

// NoopManifest describes example.noop, which does nothing and returns {}.
var NoopManifest = kind.Manifest{
	Kind:          "example.noop",
	Lane:          kind.LaneControl,
	Timeout:       kind.Duration(10 * time.Second),
	Roles:         []string{"node", "discovery"},
	Flags:         kind.Flags{RetrySafe: true},
	APIRunnable:   false,
	PayloadSchema: json.RawMessage(`{"type": "object", "additionalProperties": false}`),
	Version:       "1.0.0",
	Description:   "Do nothing; measures the warm path.",
}

// EchoPayload is example.echo's payload; the SDK has checked it against
// EchoManifest's schema before the handler sees it.
type EchoPayload struct {
	Message string `json:"message"`
	SleepMs int    `json:"sleepMs,omitempty"`
}

// EchoResult is example.echo's result document.
type EchoResult struct {
	Message string `json:"message"`
	// Steps is how many of the ten wait steps ran: fewer than ten when the
	// command was cancelled, so the result says what really happened.
	Steps int `json:"steps"`
}

// echoSteps is how many steps the wait is cut into; cancellation is honoured
// between steps.
const echoSteps = 10

// Echo runs example.echo.
func Echo(ctx context.Context, req kind.Request) (any, error) {
	var p EchoPayload
	if err := req.Command.Decode(&p); err != nil {
		return nil, err
	}
	step := time.Duration(p.SleepMs) * time.Millisecond / echoSteps
	res := EchoResult{Message: p.Message}
	if step > 0 {
		timer := time.NewTimer(step)
		defer timer.Stop()
		for res.Steps < echoSteps {
			select {
			case <-ctx.Done():
				// Stop between steps and report what was done: the SDK turns
				// the context's error into a cancelled (or timeout) result
				// that still carries res.
				req.Logger.Info("echo cancelled", "steps", res.Steps)
				return res, ctx.Err()
			case <-timer.C:
			}
			res.Steps++
			req.Progress.Report(res.Steps*100/echoSteps, fmt.Sprintf("step %d of %d", res.Steps, echoSteps))
			timer.Reset(step)
		}
	}
	return res, nil
}

// Noop runs example.noop.
func Noop(context.Context, kind.Request) (any, error) {
	return struct{}{}, nil
}

// Kinds are the kinds this plugin serves, each manifest with its handler.
func Kinds() []kind.Kind {
	return []kind.Kind{
		{Manifest: EchoManifest, Handler: kind.HandlerFunc(Echo)},
		{Manifest: NoopManifest, Handler: kind.HandlerFunc(Noop)},
	}
}
