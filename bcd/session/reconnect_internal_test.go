package session

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// The gateway's address is checked as gRPC dials it: host:port and the
// dns and passthrough schemes name TCP addresses, a name resolves to
// every address it has, unix: names a socket; what cannot be checked is
// an error (the client then waits out its backoff as before).
func TestProbeTargets_TheFormsGRPCDials(t *testing.T) {
	ctx := context.Background()
	for target, want := range map[string][]string{
		"127.0.0.1:7443":                  {"127.0.0.1:7443"},
		"[::1]:7443":                      {"[::1]:7443"},
		"dns:///127.0.0.1:7443":           {"127.0.0.1:7443"},
		"dns://8.8.8.8:53/127.0.0.1:7443": {"127.0.0.1:7443"},
		"passthrough:///10.0.0.7:7443":    {"10.0.0.7:7443"},
	} {
		network, addrs, err := probeTargets(ctx, target)
		require.NoError(t, err, target)
		require.Equal(t, "tcp", network, target)
		require.Equal(t, want, addrs, target)
	}
	network, addrs, err := probeTargets(ctx, "unix:///run/gw.sock")
	require.NoError(t, err)
	require.Equal(t, "unix", network)
	require.Equal(t, []string{"/run/gw.sock"}, addrs)

	_, addrs, err = probeTargets(ctx, "localhost:7443")
	require.NoError(t, err)
	require.NotEmpty(t, addrs, "a name resolves to its addresses")
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		require.NoError(t, err)
		require.Equal(t, "7443", port)
		require.True(t, net.ParseIP(host).IsLoopback(), a)
	}

	for _, bad := range []string{"gateway.example.com", "xds:///gw", "dns://8.8.8.8", "unix:"} {
		_, _, err := probeTargets(ctx, bad)
		require.Error(t, err, bad)
	}
}

// "Its gateway (or another)": a check tries every address of the gateway
// at once and names the one that accepts.
func TestProbe_NamesTheAddressThatAccepts(t *testing.T) {
	down, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	downAddr := down.Addr().String()
	require.NoError(t, down.Close())
	up, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = up.Close() })
	ctx := context.Background()
	require.Equal(t, up.Addr().String(), probe(ctx, "tcp", []string{downAddr, up.Addr().String()}))
	require.Equal(t, "", probe(ctx, "tcp", []string{downAddr}))
}

// FuzzParseTarget feeds arbitrary controlPlane values to the target
// parser: it never panics, an error names the target, and what it accepts
// is a TCP host and port that join back into an address, or a unix path.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"127.0.0.1:7443", "gw.example.com:7443", "[::1]:7443", "dns:///gw:1", "dns://8.8.8.8:53/gw:1",
		"passthrough:///10.0.0.7:7443", "unix:///run/gw.sock", "unix:", "xds:///gw", "gw", ":7443", "dns://x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		network, host, port, err := parseTarget(target)
		if err != nil {
			require.Contains(t, err.Error(), "target")
			return
		}
		require.NotEmpty(t, host)
		switch network {
		case "unix":
			require.Empty(t, port)
		case "tcp":
			require.NotEmpty(t, port)
			h, p, err := net.SplitHostPort(net.JoinHostPort(host, port))
			require.NoError(t, err)
			require.Equal(t, host, h)
			require.Equal(t, port, p)
		default:
			t.Fatalf("network %q", network)
		}
	})
}
