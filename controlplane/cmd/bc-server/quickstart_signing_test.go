package main_test

import (
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/pgtest"
	"github.com/better-compute/commands/internal/testutil"
)

// systemctlShim starts bc-server as the unit's ExecStart does, in the
// background, and returns once it signs ("command signing on" in its log)
// or fails when bc-server exits first; the loop bounds the wait (60 s).
const systemctlShim = `#!/bin/sh
set -e
[ "$*" = "enable --now bc-server" ] || { echo "systemctl shim: unexpected $*" >&2; exit 1; }
$EXEC_START >"$BC_LOG" 2>&1 &
echo $! >"$BC_PID"
i=0
while [ $i -lt 600 ]; do
	grep -q "command signing on" "$BC_LOG" && exit 0
	kill -0 "$(cat "$BC_PID")" 2>/dev/null || { cat "$BC_LOG" >&2; exit 1; }
	sleep 0.1 # the loop polls the log for the event, bounded
	i=$((i + 1))
done
exit 1
`

// Issue 31: "The bc-server package and the operator guide's quick start
// create the signing authority at install (or first start) ... and print
// how to move the root offline." The operator guide's "Command signing at
// first start", run as written: with the packaged server.yaml and the
// unit's ExecStart, under a root directory of the test's in place of /
// (/var/lib/bc-server and /etc/bc-server), its own database, local
// listeners on free ports, and shims for sudo (runs the command),
// systemctl (starts bc-server as the unit does) and journalctl (prints
// bc-server's log). The first start makes the root 0600 in a 0700
// directory owned by the user it runs as, the log says how to copy it
// offline, and the page's copy is the key.
func TestOperatorGuideFirstStartSigningRunsAsWritten(t *testing.T) {
	bin := testutil.BuildBinary(t, "./controlplane/cmd/bc-server")
	db := pgtest.Create(t)
	root := t.TempDir()
	offline := t.TempDir()
	repo := filepath.Join("..", "..", "..")

	// The packaged config and unit, under root.
	prefix := strings.NewReplacer("/var/lib/bc-server", filepath.Join(root, "var/lib/bc-server"),
		"/etc/bc-server", filepath.Join(root, "etc/bc-server"), "/media/offline/", offline+"/")
	cfg, err := os.ReadFile(filepath.Join(repo, "packaging/bc-server/server.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(cfg), "  commandSigning: /var/lib/bc-server/pki/command-root.pem\n  createCommandSigning: true\n")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc/bc-server/kinds.d"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "var/lib/bc-server"), 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/bc-server/server.yaml"), []byte(prefix.Replace(string(cfg))), 0o640))
	unit, err := os.ReadFile(filepath.Join(repo, "packaging/bc-server/bc-server.service"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^ExecStart=/usr/bin/bc-server (.*)$`).FindSubmatch(unit)
	require.NotNil(t, m)
	execStart := bin + " " + prefix.Replace(string(m[1])) +
		" --grpc-listen 127.0.0.1:0 --http-listen off --database-url dbname=" + db

	shims := t.TempDir()
	for name, text := range map[string]string{
		"sudo":       "#!/bin/sh\nexec \"$@\"\n",
		"systemctl":  systemctlShim,
		"journalctl": "#!/bin/sh\ncat \"$BC_LOG\"\n",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(shims, name), []byte(text), 0o755))
	}
	logPath, pidPath := filepath.Join(t.TempDir(), "bc-server.log"), filepath.Join(t.TempDir(), "bc-server.pid")
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidPath); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGTERM)
			}
		}
	})

	steps := shSteps(t, filepath.Join(repo, "docs/operator-guide.md"), "#### Command signing at first start")
	require.Len(t, steps, 4, "start, read the log, check the modes, copy offline")
	run := func(line string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-ec", prefix.Replace(line))
		cmd.Env = append(os.Environ(), "PATH="+shims+":"+os.Getenv("PATH"),
			"EXEC_START="+execStart, "BC_LOG="+logPath, "BC_PID="+pidPath)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s\n%s", line, out)
		return string(out)
	}

	key := filepath.Join(root, "var/lib/bc-server/pki/command-root.pem")
	run(steps[0])
	out := run(steps[1])
	require.Contains(t, out, "created the command-signing root (pki.createCommandSigning)")
	require.Contains(t, out, "keep an offline copy now:\n  copy "+key+" (the private key, 0600) and "+key+".pub to offline storage")

	me, err := user.Current()
	require.NoError(t, err)
	out = run(steps[2])
	require.Equal(t, "700 "+me.Username+" "+filepath.Dir(key)+"\n600 "+me.Username+" "+key+"\n", out)

	run(steps[3])
	for _, f := range []string{key, key + ".pub"} {
		want, err := os.ReadFile(f)
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(offline, filepath.Base(f)))
		require.NoError(t, err)
		require.Equal(t, want, got, "the offline copy of %s", f)
	}
}

// shSteps returns the command lines (not comments) of the ```sh blocks in
// file's section that starts at heading, up to the next heading (## to
// ####; a comment line in a block is not one).
func shSteps(t *testing.T, file, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, heading)
	require.GreaterOrEqual(t, i, 0, "%s has %q", file, heading)
	s = s[i+len(heading):]
	if loc := regexp.MustCompile(`\n#{2,4} `).FindStringIndex(s); loc != nil {
		s = s[:loc[0]]
	}
	var steps []string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(s, -1) {
		for _, l := range strings.Split(strings.TrimSpace(block[1]), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				steps = append(steps, l)
			}
		}
	}
	return steps
}
