package hclogslog_test

import (
	"bytes"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/hclogslog"
)

// A slog line reaches hclog with its level, message and pairs; a level
// below hclog's is dropped.
func TestForwardsToHclog(t *testing.T) {
	var buf bytes.Buffer
	l := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info, DisableTime: true})
	s := hclogslog.New(l)
	s.Debug("hidden", "k", 1)
	s.With("client", "c1").WithGroup("job").Warn("job failed", "id", 7)
	out := buf.String()
	require.NotContains(t, out, "hidden")
	require.Contains(t, out, "[WARN]  job failed: client=c1 job.id=7")
}
