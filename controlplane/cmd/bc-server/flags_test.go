package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/trust/auth"
	"github.com/better-compute/commands/internal/version"
)

func runArgs(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// --help is an answer, not a mistake: stdout, exit 0, as bcd and
// better-compute do, listing the --double-dash flags.
func TestHelpPrintsToStdoutAndExitsZero(t *testing.T) {
	for _, arg := range []string{"--help", "-h"} {
		code, out, errs := runArgs(arg)
		require.Equal(t, 0, code, errs)
		require.Empty(t, errs)
		require.Contains(t, out, "Usage: bc-server")
		for _, name := range []string{"--config", "--grpc-listen", "--http-listen", "--database-url", "--auth-config", "--gateway-listen", "--version"} {
			require.Contains(t, out, name)
		}
		require.NotContains(t, out, " -config ", "the Go flag package's single-dash spelling is gone")
	}
}

func TestVersionPrintsToStdout(t *testing.T) {
	code, out, errs := runArgs("--version")
	require.Equal(t, 0, code)
	require.Empty(t, errs)
	require.Equal(t, version.Version+"\n", out)
}

// A mistake goes to stderr with the usage and exits 2.
func TestUsageErrorsExitTwoOnStderr(t *testing.T) {
	code, out, errs := runArgs("--no-such-flag")
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.Contains(t, errs, "unknown flag: --no-such-flag")
	require.Contains(t, errs, "Usage: bc-server")

	code, _, errs = runArgs("-no-such-flag")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "Usage: bc-server")

	code, _, errs = runArgs("serve")
	require.Equal(t, 2, code)
	require.Contains(t, errs, `unexpected argument "serve"`)
}

// A Go-style single-dash flag, as bc-server took before its flags became
// pflag's (-config x.yaml in an old unit file), still works for this
// release, and a warning on stderr names its -- form.
func TestSingleDashFlagsWorkWithAWarning(t *testing.T) {
	c := newCmdline()
	warnings, err := c.parse([]string{"-config", "server.yaml", "-grpc-listen=127.0.0.1:1", "-log-json"})
	require.NoError(t, err)
	require.Equal(t, []string{
		"flag -config is deprecated and is accepted for one more release: use --config",
		"flag -grpc-listen is deprecated and is accepted for one more release: use --grpc-listen",
		"flag -log-json is deprecated and is accepted for one more release: use --log-json",
	}, warnings)
	require.Equal(t, "server.yaml", c.configPath)
	cfg := server.DefaultConfig()
	c.apply(&cfg)
	require.Equal(t, "127.0.0.1:1", cfg.GRPCListen)
	require.True(t, cfg.LogJSON)

	// Through run: the warning reaches stderr and bc-server goes on (here
	// to --version, which exits 0 before serving).
	code, out, errs := runArgs("-log-json", "--version")
	require.Equal(t, 0, code, errs)
	require.Equal(t, version.Version+"\n", out)
	require.Equal(t, "bc-server: warning: flag -log-json is deprecated and is accepted for one more release: use --log-json\n", errs)
}

// Every flag the single-dash parser had works in its -- form and sets the
// config key it always set; flags not given leave the file's values.
func TestEveryFlagInItsDoubleDashForm(t *testing.T) {
	c := newCmdline()
	warnings, err := c.parse([]string{
		"--config", "server.yaml",
		"--grpc-listen", "127.0.0.1:1",
		"--http-listen=off",
		"--database-url", "postgres://db/x",
		"--auth-config", "auth.yaml",
		"--kinds-dir", "kinds.d",
		"--tls-cert", "c.pem", "--tls-key", "k.pem", "--client-ca", "ca.pem",
		"--gateway-listen", ":7444", "--ca-dir", "node-ca",
		"--sweep-interval", "3s", "--max-conns", "12",
		"--log-level", "debug", "--log-json",
		"--shutdown-timeout", "4s",
		"--components", "api,sweeper",
	})
	require.NoError(t, err)
	require.Empty(t, warnings)
	require.Equal(t, "server.yaml", c.configPath)
	cfg := server.DefaultConfig()
	cfg.Auth.Identities = make([]auth.IdentityConfig, 1)
	c.apply(&cfg)
	require.Equal(t, "127.0.0.1:1", cfg.GRPCListen)
	require.Empty(t, cfg.HTTPListen, "off disables the HTTP listener")
	require.Equal(t, "postgres://db/x", cfg.DatabaseURL)
	require.Equal(t, "auth.yaml", cfg.AuthFile)
	require.Nil(t, cfg.Auth.Identities, "--auth-config replaces the file's identities")
	require.Equal(t, "kinds.d", cfg.KindsDir)
	require.Equal(t, "c.pem", cfg.TLS.Cert)
	require.Equal(t, "k.pem", cfg.TLS.Key)
	require.Equal(t, "ca.pem", cfg.TLS.ClientCA)
	require.Equal(t, ":7444", cfg.Gateway.Listen)
	require.Equal(t, "node-ca", cfg.Gateway.CADir)
	require.Equal(t, server.Duration(3*time.Second), cfg.Sweeper.Interval)
	require.Equal(t, int32(12), cfg.MaxConns)
	require.Equal(t, "debug", cfg.LogLevel)
	require.True(t, cfg.LogJSON)
	require.Equal(t, server.Duration(4*time.Second), cfg.ShutdownTimeout)
	// docs/trust.md's keyless deployment: --components api,sweeper here,
	// --components gateway on the gateway host.
	require.Equal(t, []string{"api", "sweeper"}, cfg.Components)
	require.True(t, cfg.Runs(server.ComponentAPI))
	require.False(t, cfg.Runs(server.ComponentGateway))

	// Nothing given: the config as it was.
	c = newCmdline()
	_, err = c.parse(nil)
	require.NoError(t, err)
	cfg, want := server.DefaultConfig(), server.DefaultConfig()
	c.apply(&cfg)
	require.Equal(t, want, cfg)
}

// docs/cli.md's bc-server table has a row for every flag --help lists.
func TestCLIReferenceHasARowForEveryFlag(t *testing.T) {
	code, out, _ := runArgs("--help")
	require.Equal(t, 0, code)
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "cli.md"))
	require.NoError(t, err)
	i := strings.Index(string(doc), "\n## bc-server\n")
	require.GreaterOrEqual(t, i, 0, "docs/cli.md has a bc-server section")
	section := string(doc)[i:]
	if j := strings.Index(section[1:], "\n## "); j >= 0 {
		section = section[:j+1]
	}
	flags := regexp.MustCompile(`--[a-z][a-z0-9-]+`).FindAllString(out, -1)
	require.NotEmpty(t, flags)
	for _, f := range flags {
		require.Regexp(t, "(?m)^\\| .*`"+regexp.QuoteMeta(f)+"`", section, "docs/cli.md's bc-server table has %s", f)
	}
}
