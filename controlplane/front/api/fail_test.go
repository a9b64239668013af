package api_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/front/api"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/pgtx"
)

// A commit whose outcome is unknown (the connection went while COMMIT
// travelled with the group's last statement) is UNAVAILABLE and says what to
// do: the command may be queued, so retry with the same idempotency key.
func TestRun_ACommitOfUnknownOutcomeSaysRetryWithTheSameKey(t *testing.T) {
	t.Parallel()
	s := api.New(api.Config{Logger: hclog.NewNullLogger()})
	err := s.Fail(context.Background(), "commands.run", fmt.Errorf("committing a group of 3: %w: %w", pgtx.ErrCommitUnknown, errors.New("read tcp: connection reset by peer")))
	in := requireCode(t, err, errcode.Unavailable)
	require.Equal(t, "commit-unknown", in.Details["reason"])
	require.Contains(t, in.Message, "retry with the same idempotency key")
}
