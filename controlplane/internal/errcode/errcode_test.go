package errcode_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/internal/errcode"
)

// The codes are the API's wire strings (ErrorInfo.Reason, the CLI's JSON):
// a rename here is a breaking change for every client.
func TestCodesAreTheWireStrings(t *testing.T) {
	for code, wire := range map[errcode.Code]string{
		errcode.InvalidInput: "INVALID_INPUT", errcode.InvalidState: "INVALID_STATE",
		errcode.NotFound: "NOT_FOUND", errcode.Conflict: "CONFLICT",
		errcode.Unsupported: "UNSUPPORTED", errcode.PermissionDenied: "PERMISSION_DENIED",
		errcode.Unauthenticated: "UNAUTHENTICATED", errcode.Unavailable: "UNAVAILABLE",
		errcode.Internal: "INTERNAL",
	} {
		require.Equal(t, wire, string(code))
	}
}

// A sentinel matches every refusal with its code through any wrapping, and
// a sentinel with a reason only refusals with that reason.
func TestSentinelsMatchByCode(t *testing.T) {
	err := fmt.Errorf("enqueue: %w", errcode.Newf(errcode.NotFound, "node-not-found", nil, "node %s not found", "node_1"))
	require.ErrorIs(t, err, errcode.ErrNotFound)
	require.NotErrorIs(t, err, errcode.ErrConflict)
	require.Equal(t, errcode.NotFound, errcode.CodeOf(err))
	require.Equal(t, "NOT_FOUND: node node_1 not found", errors.Unwrap(err).Error())
	require.ErrorIs(t, err, &errcode.Error{Code: errcode.NotFound, Reason: "node-not-found"})
	require.NotErrorIs(t, err, &errcode.Error{Code: errcode.NotFound, Reason: "tenant-not-found"})
	require.Equal(t, errcode.Code(""), errcode.CodeOf(errors.New("plain")))
}
