// Package apierr turns the public API's error codes into gRPC statuses that
// carry a google.rpc.ErrorInfo detail, and reads them back. Every part of the
// API (the services, authentication, the CLI) speaks it, so a client sees the
// spec's code name in ErrorInfo.Reason whatever produced the error.
package apierr

import (
	"errors"
	"fmt"
	"sort"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/better-compute/commands/controlplane/internal/errcode"
)

// Domain is the ErrorInfo domain of every API error.
const Domain = "api.better-compute"

// Code is one of the spec's error codes.
//
// Deprecated: use errcode.Code; the codes live in errcode, which the queue
// uses for its refusals too, so that each has one spelling.
type Code = errcode.Code

// The spec's error codes, as errcode spells them.
const (
	// InvalidInput is errcode.InvalidInput.
	//
	// Deprecated: use errcode.InvalidInput.
	InvalidInput = errcode.InvalidInput
	// InvalidState is errcode.InvalidState.
	//
	// Deprecated: use errcode.InvalidState.
	InvalidState = errcode.InvalidState
	// NotFound is errcode.NotFound.
	//
	// Deprecated: use errcode.NotFound.
	NotFound = errcode.NotFound
	// Conflict is errcode.Conflict.
	//
	// Deprecated: use errcode.Conflict.
	Conflict = errcode.Conflict
	// Unsupported is errcode.Unsupported.
	//
	// Deprecated: use errcode.Unsupported.
	Unsupported = errcode.Unsupported
	// PermissionDenied is errcode.PermissionDenied.
	//
	// Deprecated: use errcode.PermissionDenied.
	PermissionDenied = errcode.PermissionDenied
	// Unauthenticated is errcode.Unauthenticated.
	//
	// Deprecated: use errcode.Unauthenticated.
	Unauthenticated = errcode.Unauthenticated
	// Unavailable is errcode.Unavailable.
	//
	// Deprecated: use errcode.Unavailable.
	Unavailable = errcode.Unavailable
	// Internal is errcode.Internal.
	//
	// Deprecated: use errcode.Internal.
	Internal = errcode.Internal
)

// grpcCodes maps each code to its gRPC code. CONFLICT is AlreadyExists: the
// only conflict the API reports is an idempotency key already used for
// another kind, which is "that key already exists", not an aborted
// transaction that a retry could fix (Aborted would invite a retry).
var grpcCodes = map[errcode.Code]codes.Code{
	errcode.InvalidInput:     codes.InvalidArgument,
	errcode.InvalidState:     codes.FailedPrecondition,
	errcode.NotFound:         codes.NotFound,
	errcode.Conflict:         codes.AlreadyExists,
	errcode.Unsupported:      codes.Unimplemented,
	errcode.PermissionDenied: codes.PermissionDenied,
	errcode.Unauthenticated:  codes.Unauthenticated,
	errcode.Unavailable:      codes.Unavailable,
	errcode.Internal:         codes.Internal,
}

// GRPCCode returns the gRPC code for c (Internal for an unknown code).
func GRPCCode(c errcode.Code) codes.Code {
	if gc, ok := grpcCodes[c]; ok {
		return gc
	}
	return codes.Internal
}

// New returns a gRPC status error with code c, message and an ErrorInfo
// whose reason is c and whose metadata is details.
func New(c errcode.Code, message string, details map[string]string) error {
	return Status(c, message, details).Err()
}

// Errorf is New without details and with a formatted message.
func Errorf(c errcode.Code, format string, args ...any) error {
	return New(c, fmt.Sprintf(format, args...), nil)
}

// Status builds the status that New returns as an error.
func Status(c errcode.Code, message string, details map[string]string) *status.Status {
	st := status.New(GRPCCode(c), message)
	info := &errdetails.ErrorInfo{Reason: string(c), Domain: Domain}
	if len(details) > 0 {
		info.Metadata = make(map[string]string, len(details))
		for k, v := range details {
			info.Metadata[k] = v
		}
	}
	withInfo, err := st.WithDetails(info)
	if err != nil {
		// WithDetails fails only for a status with code OK, which no code maps to.
		return st
	}
	return withInfo
}

// Info is what a client reads back from an API error.
type Info struct {
	// GRPC is the status code.
	GRPC codes.Code
	// Code is ErrorInfo.Reason: the spec's code name.
	Code errcode.Code
	// Message is the status message.
	Message string
	// Details is ErrorInfo.Metadata.
	Details map[string]string
}

// Parse reads an API error. ok is false when err carries no gRPC status; an
// error with a status but no ErrorInfo gets a Code derived from its gRPC code.
func Parse(err error) (Info, bool) {
	if err == nil {
		return Info{}, false
	}
	st, ok := status.FromError(err)
	if !ok {
		return Info{}, false
	}
	in := Info{GRPC: st.Code(), Message: st.Message()}
	for _, d := range st.Details() {
		if ei, isInfo := d.(*errdetails.ErrorInfo); isInfo {
			in.Code = errcode.Code(ei.GetReason())
			in.Details = ei.GetMetadata()
		}
	}
	if in.Code == "" {
		in.Code = fromGRPC(st.Code())
	}
	return in, true
}

// CodeOf returns the API code of err, or "" when err is not an API error.
func CodeOf(err error) errcode.Code {
	in, ok := Parse(err)
	if !ok {
		return ""
	}
	return in.Code
}

func fromGRPC(gc codes.Code) errcode.Code {
	for c, g := range grpcCodes {
		if g == gc {
			return c
		}
	}
	return errcode.Internal
}

// String renders the info for people: "NOT_FOUND: node not found (kind=x)".
func (in Info) String() string {
	s := fmt.Sprintf("%s: %s", in.Code, in.Message)
	if len(in.Details) == 0 {
		return s
	}
	keys := make([]string, 0, len(in.Details))
	for k := range in.Details {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s += " ("
	for i, k := range keys {
		if i > 0 {
			s += ", "
		}
		s += k + "=" + in.Details[k]
	}
	return s + ")"
}

// Is reports whether err is an API error with code c.
func Is(err error, c errcode.Code) bool {
	var target interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &target) {
		return false
	}
	return CodeOf(err) == c
}
