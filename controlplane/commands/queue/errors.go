package queue

import "github.com/better-compute/commands/controlplane/internal/errcode"

// The queue's refusals are errcode's: one set of codes with the API, and one
// spelling of each. These aliases remain for code written against the
// queue's names.
type (
	// Code is errcode.Code.
	//
	// Deprecated: use errcode.Code.
	Code = errcode.Code
	// Error is errcode.Error.
	//
	// Deprecated: use errcode.Error.
	Error = errcode.Error
)

// The public API's error codes.
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
)

// Sentinels for errors.Is: each matches every *Error with its code.
var (
	// ErrInvalidInput is errcode.ErrInvalidInput.
	//
	// Deprecated: use errcode.ErrInvalidInput.
	ErrInvalidInput = errcode.ErrInvalidInput
	// ErrInvalidState is errcode.ErrInvalidState.
	//
	// Deprecated: use errcode.ErrInvalidState.
	ErrInvalidState = errcode.ErrInvalidState
	// ErrNotFound is errcode.ErrNotFound.
	//
	// Deprecated: use errcode.ErrNotFound.
	ErrNotFound = errcode.ErrNotFound
	// ErrConflict is errcode.ErrConflict.
	//
	// Deprecated: use errcode.ErrConflict.
	ErrConflict = errcode.ErrConflict
	// ErrUnsupported is errcode.ErrUnsupported.
	//
	// Deprecated: use errcode.ErrUnsupported.
	ErrUnsupported = errcode.ErrUnsupported
	// ErrPermissionDenied is errcode.ErrPermissionDenied.
	//
	// Deprecated: use errcode.ErrPermissionDenied.
	ErrPermissionDenied = errcode.ErrPermissionDenied
	// ErrUnauthenticated is errcode.ErrUnauthenticated.
	//
	// Deprecated: use errcode.ErrUnauthenticated.
	ErrUnauthenticated = errcode.ErrUnauthenticated
	// ErrUnavailable is errcode.ErrUnavailable.
	//
	// Deprecated: use errcode.ErrUnavailable.
	ErrUnavailable = errcode.ErrUnavailable
)

// CodeOf is errcode.CodeOf.
//
// Deprecated: use errcode.CodeOf.
func CodeOf(err error) errcode.Code { return errcode.CodeOf(err) }
