package queue

import "github.com/better-compute/commands/controlplane/internal/errcode"

// The queue's refusals are errcode's: one set of codes with the API.
type (
	// Code is a public API error code.
	Code = errcode.Code
	// Error is a refusal the API passes to its caller.
	Error = errcode.Error
)

// The public API's error codes.
const (
	InvalidInput     = errcode.InvalidInput
	InvalidState     = errcode.InvalidState
	NotFound         = errcode.NotFound
	Conflict         = errcode.Conflict
	Unsupported      = errcode.Unsupported
	PermissionDenied = errcode.PermissionDenied
	Unauthenticated  = errcode.Unauthenticated
	Unavailable      = errcode.Unavailable
)

// Sentinels for errors.Is: each matches every *Error with its code.
var (
	ErrInvalidInput     = errcode.ErrInvalidInput
	ErrInvalidState     = errcode.ErrInvalidState
	ErrNotFound         = errcode.ErrNotFound
	ErrConflict         = errcode.ErrConflict
	ErrUnsupported      = errcode.ErrUnsupported
	ErrPermissionDenied = errcode.ErrPermissionDenied
	ErrUnauthenticated  = errcode.ErrUnauthenticated
	ErrUnavailable      = errcode.ErrUnavailable
)

// CodeOf returns err's code, or "" when err is not an *Error.
func CodeOf(err error) Code { return errcode.CodeOf(err) }

var newError = errcode.Newf
