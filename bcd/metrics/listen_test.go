package metrics

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse_OnlyLoopbackOrUnix(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"127.0.0.1:9464", "[::1]:9464", "localhost:9464", "unix:/run/bcd/metrics.sock", "unix:///run/bcd/m.sock"} {
		_, _, err := Parse(ok)
		require.NoError(t, err, ok)
	}
	for _, bad := range []string{"0.0.0.0:9464", ":9464", "10.0.0.1:9464", "example.com:9464", "unix:", "9464"} {
		_, _, err := Parse(bad)
		require.ErrorIs(t, err, ErrNotLocal, bad)
	}
}

func TestListen_UnixReplacesAStaleSocket(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "m.sock")
	l, err := Listen("unix:" + p)
	require.NoError(t, err)
	// A crash leaves the file behind; the next start binds anyway.
	l.(interface{ SetUnlinkOnClose(bool) }).SetUnlinkOnClose(false)
	require.NoError(t, l.Close())
	l, err = Listen("unix:" + p)
	require.NoError(t, err)
	require.NoError(t, l.Close())
}
