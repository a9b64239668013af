package apierr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
)

// The architecture's codes, each with its gRPC code and the spec's name in
// ErrorInfo.Reason.
func TestCodesMapOntoGRPC(t *testing.T) {
	t.Parallel()
	want := map[errcode.Code]codes.Code{
		errcode.InvalidInput:     codes.InvalidArgument,
		errcode.InvalidState:     codes.FailedPrecondition,
		errcode.NotFound:         codes.NotFound,
		errcode.Conflict:         codes.AlreadyExists,
		errcode.Unsupported:      codes.Unimplemented,
		errcode.PermissionDenied: codes.PermissionDenied,
		errcode.Unauthenticated:  codes.Unauthenticated,
		errcode.Unavailable:      codes.Unavailable,
	}
	for c, gc := range want {
		err := apierr.New(c, "msg", map[string]string{"reason": "batch-required", "kind": "node.reboot"})
		require.Equal(t, gc, status.Code(err), c)
		in, ok := apierr.Parse(err)
		require.True(t, ok)
		require.Equal(t, c, in.Code)
		require.Equal(t, "msg", in.Message)
		require.Equal(t, c, apierr.CodeOf(fmt.Errorf("wrapped: %w", err)), "a wrapped status keeps its code")
		require.Equal(t, map[string]string{"reason": "batch-required", "kind": "node.reboot"}, in.Details)
		require.True(t, apierr.Is(err, c))
	}
}

func TestParseWithoutErrorInfo(t *testing.T) {
	t.Parallel()
	in, ok := apierr.Parse(status.Error(codes.NotFound, "x"))
	require.True(t, ok)
	require.Equal(t, errcode.NotFound, in.Code, "derived from the gRPC code")
	_, ok = apierr.Parse(errors.New("plain"))
	require.False(t, ok)
	require.Equal(t, errcode.Code(""), apierr.CodeOf(errors.New("plain")))
	require.False(t, apierr.Is(errors.New("plain"), errcode.NotFound))
}

func TestInfoString(t *testing.T) {
	t.Parallel()
	in, _ := apierr.Parse(apierr.New(errcode.InvalidState, "needs a batch", map[string]string{"reason": "batch-required", "kind": "node.reboot"}))
	require.Equal(t, "INVALID_STATE: needs a batch (kind=node.reboot, reason=batch-required)", in.String())
}
