// Package errcode is the public API's error codes and the refusal type that
// carries one: a leaf that imports nothing of the control plane, so the
// queue (whose refusals the API reports) and the API's status mapping
// (which the CLI links) share one set without the CLI linking the queue.
// It is the one spelling of each code: apierr and queue kept aliases of
// these names for code written before, marked deprecated.
package errcode

import (
	"errors"
	"fmt"
)

// Code is a public API error code; the API maps it onto a gRPC status.
type Code string

// The public API's error codes.
const (
	InvalidInput     Code = "INVALID_INPUT"
	InvalidState     Code = "INVALID_STATE"
	NotFound         Code = "NOT_FOUND"
	Conflict         Code = "CONFLICT"
	Unsupported      Code = "UNSUPPORTED"
	PermissionDenied Code = "PERMISSION_DENIED"
	Unauthenticated  Code = "UNAUTHENTICATED"
	Unavailable      Code = "UNAVAILABLE"
	// Internal is for what no other code covers: the API reports it for a
	// failure of its own, and a refusal never carries it.
	Internal Code = "INTERNAL"
)

// Error is a refusal the API passes to its caller: a code, a machine-readable
// reason and details (the spec's `{ reason: 'batch-required', kind }`), and a
// message for people.
type Error struct {
	// Code is the API error code.
	Code Code
	// Reason is a short machine-readable reason such as "batch-required".
	Reason string
	// Message says what went wrong, in the spec's words where it has them.
	Message string
	// Details are extra key-value facts (kind, field, commandId).
	Details map[string]string
}

// Error reads "NOT_FOUND: node node_… not found".
func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Is makes errors.Is(err, ErrNotFound) match any *Error with the same code.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Code == e.Code && (t.Reason == "" || t.Reason == e.Reason)
}

// Sentinels for errors.Is: each matches every *Error with its code.
var (
	ErrInvalidInput     = &Error{Code: InvalidInput}
	ErrInvalidState     = &Error{Code: InvalidState}
	ErrNotFound         = &Error{Code: NotFound}
	ErrConflict         = &Error{Code: Conflict}
	ErrUnsupported      = &Error{Code: Unsupported}
	ErrPermissionDenied = &Error{Code: PermissionDenied}
	ErrUnauthenticated  = &Error{Code: Unauthenticated}
	ErrUnavailable      = &Error{Code: Unavailable}
)

// CodeOf returns err's code, or "" when err is not an *Error.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Newf returns an *Error with a formatted message.
func Newf(code Code, reason string, details map[string]string, format string, args ...any) *Error {
	return &Error{Code: code, Reason: reason, Message: fmt.Sprintf(format, args...), Details: details}
}
