// Package kind is what a module team or hardware vendor imports to ship a
// command kind as a bcd plugin: a Manifest value, a Handler, and
//
//	func main() { kind.Serve(kind.Kind{Manifest: m, Handler: h}) }
//
// Serve owns go-plugin's handshake, gRPC, hclog JSON on stderr, message size
// limits and payload validation, and turns a handler panic into a failed
// result. Authors import neither go-plugin nor grpc.
package kind

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Command is what a handler sees of a command.
type Command struct {
	// ID is the command's id (cmd_…).
	ID string
	// Kind is the kind being run; one binary may serve several.
	Kind string
	// NodeID is the node the command is for.
	NodeID string
	// Payload is the JSON payload, already checked against the manifest's schema.
	Payload json.RawMessage
	// Deadline is when bcd gives up on the run (the manifest's timeout).
	Deadline time.Time
	// NotAfter is the command's not_after in the node's clock: the latest
	// time it could start (zero when unknown). bcd's plugin host waits for
	// a plugin that is down only until then, never the kind's whole
	// timeout; a handler may read it, but its run is bounded by Deadline.
	NotAfter time.Time
	// Secrets are the values of the command's secretRefs, by ref name:
	// a command carries only the refs, and bcd exchanges them for the
	// values, sealed to a one-time key of its own, just before the run.
	// They are in memory for this run only. Never log, journal or return
	// them (a result is stored and shown); Secret reads one.
	Secrets map[string][]byte `json:"-"`
}

// Secret returns the value of the secretRef named ref, or an error that
// names the ref when the command carries no such ref.
func (c Command) Secret(ref string) ([]byte, error) {
	v, ok := c.Secrets[ref]
	if !ok {
		return nil, fmt.Errorf("the command carries no secretRef %q: list it in the command's secretRefs", ref)
	}
	return v, nil
}

// Decode unmarshals the payload into v.
func (c Command) Decode(v any) error { return DecodePayload(c.Payload, v) }

// Progress reports a step of a long run. Percent is 0..100, or -1 when unknown.
type Progress interface {
	Report(percent int, message string)
}

// ProgressFunc adapts a function to Progress. A nil ProgressFunc reports
// nothing: a unit test that leaves it unset never panics.
type ProgressFunc func(percent int, message string)

// Report calls f, unless f is nil.
func (f ProgressFunc) Report(percent int, message string) {
	if f != nil {
		f(percent, message)
	}
}

// Condition is a node condition such as RebootRequired.
type Condition struct {
	Type    string    `json:"type"`
	Status  bool      `json:"status"`
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message,omitempty"`
	Since   time.Time `json:"since,omitempty"`
}

// Host is bcd's side of a plugin: what only bcd knows. Each call goes back to
// bcd over go-plugin's broker, so the state lives in one place.
type Host interface {
	// Inventory returns the GPU inventory bcd last recorded (JSON), or nil.
	Inventory(ctx context.Context) (json.RawMessage, time.Time, error)
	// PutInventory replaces bcd's GPU inventory; inventory.refresh calls it.
	PutInventory(ctx context.Context, inventory json.RawMessage) error
	// NodeSpec returns the applied node spec generation and its JSON.
	NodeSpec(ctx context.Context) (int64, json.RawMessage, error)
	// Conditions returns the node's conditions.
	Conditions(ctx context.Context) ([]Condition, error)
	// Journal returns bcd's most recent journal records (JSON), newest first.
	Journal(ctx context.Context, limit int) ([]json.RawMessage, error)
}

// Request is one run of a kind.
type Request struct {
	Command  Command
	Progress Progress
	Host     Host
	// Logger writes hclog JSON to the plugin's stderr, which bcd re-emits
	// under the plugin's name.
	Logger hclog.Logger
}

// Handler runs a command. It returns the result document (any value that
// marshals to JSON) or an error. Return a *Failure to set the failure reason
// and still attach a result. When ctx is cancelled, stop between actions and
// return what really happened: a side effect that already happened is
// reported, never hidden.
type Handler interface {
	Handle(ctx context.Context, req Request) (any, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req Request) (any, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, req Request) (any, error) { return f(ctx, req) }

// Kind pairs a manifest with its handler.
type Kind struct {
	Manifest Manifest
	Handler  Handler
}

// Failure is a handler error that carries a machine-readable reason
// (gpu-busy, reset-failed) and, optionally, a result document.
type Failure struct {
	Reason  string
	Message string
	Result  any
}

// Error reads "<reason>: <message>".
func (f *Failure) Error() string {
	if f.Message == "" {
		return f.Reason
	}
	return f.Reason + ": " + f.Message
}

// Fail returns a *Failure.
func Fail(reason, format string, args ...any) *Failure {
	return &Failure{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Status is a run's terminal outcome.
type Status string

// The outcomes a plugin reports.
const (
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// Result is a run's outcome as the host sees it.
type Result struct {
	Status  Status          `json:"status"`
	Reason  string          `json:"reason,omitempty"`
	Message string          `json:"message,omitempty"`
	Data    json.RawMessage `json:"result,omitempty"`
}

// ResultOf turns a handler's return values into a Result. A handler that
// returns an error after ctx was cancelled (a *Failure included) is reported
// cancelled; one that finished its work anyway is reported succeeded, its
// real outcome.
func ResultOf(ctx context.Context, v any, err error) Result {
	var data json.RawMessage
	marshal := func(x any) error {
		if x == nil {
			return nil
		}
		if raw, ok := x.(json.RawMessage); ok {
			data = raw
			return nil
		}
		b, merr := json.Marshal(x)
		if merr != nil {
			return merr
		}
		data = b
		return nil
	}
	if err == nil {
		if merr := marshal(v); merr != nil {
			return Result{Status: StatusFailed, Reason: ReasonBadResult, Message: "result does not marshal to JSON: " + merr.Error()}
		}
		return Result{Status: StatusSucceeded, Data: data}
	}
	var f *Failure
	if errors.As(err, &f) {
		_ = marshal(f.Result)
		if errors.Is(ctx.Err(), context.Canceled) {
			// A failure after a cancel is the cancel's doing (a tool killed
			// mid-run is no fault of the hardware): report it cancelled,
			// with what the handler did before it stopped.
			return Result{Status: StatusCancelled, Reason: ReasonCancelled, Message: f.Error(), Data: data}
		}
		return Result{Status: StatusFailed, Reason: f.Reason, Message: f.Message, Data: data}
	}
	_ = marshal(v)
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ctx.Err())) {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Result{Status: StatusFailed, Reason: ReasonTimeout, Message: err.Error(), Data: data}
		}
		return Result{Status: StatusCancelled, Reason: ReasonCancelled, Message: err.Error(), Data: data}
	}
	return Result{Status: StatusFailed, Reason: ReasonHandlerError, Message: err.Error(), Data: data}
}
