package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/controlplane/commands/history"
	"github.com/better-compute/commands/controlplane/commands/history/archive"
	"github.com/better-compute/commands/controlplane/internal/storetest"
)

// archivedHistory archives, on a real database, two commands settled 100
// days ago (with their events) into a dir store, and returns bc-server's
// config naming that store and the store's directory. The rows are gone
// from the database once it returns.
func archivedHistory(t *testing.T) (cfg, blobs string) {
	t.Helper()
	ctx := context.Background()
	pool := storetest.DB(t)
	dir := t.TempDir()
	blobs = filepath.Join(dir, "blobs")
	secret := filepath.Join(dir, "blob.key")
	require.NoError(t, os.WriteFile(secret, bytes.Repeat([]byte("k"), 32), 0o600))
	cfg = filepath.Join(dir, "server.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("supportBundles:\n  blob:\n    driver: dir\n    dir:\n      path: \""+blobs+
		"\"\n      baseURL: \"http://127.0.0.1:1/v1/blobs\"\n      secretFile: \""+secret+"\"\n"), 0o600))
	store, err := bundles.NewDirStore(bundles.DirOptions{Root: blobs, BaseURL: "http://127.0.0.1:1/v1/blobs", Secret: bytes.Repeat([]byte("k"), 32)})
	require.NoError(t, err)
	at := time.Now().Add(-100 * 24 * time.Hour)
	_, err = pool.Exec(ctx, `
		INSERT INTO tenants (id) VALUES ('acme');
		INSERT INTO nodes (id, tenant_id, next_cmd_seq) VALUES ('node_1', 'acme', 10), ('node_2', 'acme', 10)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO commands (id, tenant_id, node_id, seq, kind, lane, not_after, created_at, settled_at, state, reason, requester, requested_via)
		VALUES ('cmd_old1', 'acme', 'node_1', 1, 'diag.nvml', 'control', $1::timestamptz + interval '1h', $1, $1, 'failed', 'exit-code', 'alice', 'api'),
		       ('cmd_old2', 'acme', 'node_2', 1, 'node.reboot', 'control', $1::timestamptz + interval '1h', $1, $1, 'succeeded', '', 'bob', 'fleet-run')`, at)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO outbox (tenant_id, topic, payload, created_at)
		VALUES ('acme', 'command.settled', '{"commandId": "cmd_old1", "nodeId": "node_1"}', $1)`, at)
	require.NoError(t, err)
	st, err := history.NewArchiver(pool, store, history.Policy{Days: 90}, history.Options{}).Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, st.Commands)
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM commands`).Scan(&left))
	require.Zero(t, left)
	return cfg, blobs
}

func runHistory(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), Env{Args: args, Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
	return code, stdout.String(), stderr.String()
}

// A command whose row is gone is found in the archive by id, node, kind
// and requester, as a table and as JSON with its events; export writes
// every record.
func TestHistorySearchAndExport(t *testing.T) {
	cfg, blobs := archivedHistory(t)
	for _, filter := range [][]string{{"--id", "cmd_old1"}, {"--node", "node_1"}, {"--kind", "diag.nvml"}, {"--requester", "alice"}} {
		code, out, errOut := runHistory(append([]string{"history", "search", "--tenant", "acme", "--server-config", cfg}, filter...)...)
		require.Equal(t, ExitOK, code, errOut)
		require.Contains(t, out, "cmd_old1", filter)
		require.Contains(t, out, "exit-code")
		require.NotContains(t, out, "cmd_old2", filter)
		require.Contains(t, errOut, "1 command(s)")
	}
	code, out, errOut := runHistory("history", "search", "--tenant", "acme", "--archive-dir", blobs, "--id", "cmd_old1", "--json")
	require.Equal(t, ExitOK, code, errOut)
	var found archive.Found
	require.NoError(t, json.Unmarshal([]byte(out), &found))
	require.Len(t, found.Events, 1)
	require.Contains(t, string(found.Command), `"requester":"alice"`)

	code, out, errOut = runHistory("history", "export", "--tenant", "acme", "--server-config", cfg)
	require.Equal(t, ExitOK, code, errOut)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 3, "two commands, one event")
	require.Contains(t, errOut, "3 record(s)")
	// Hours bound the read: nothing archived in the last day.
	code, out, _ = runHistory("history", "export", "--tenant", "acme", "--server-config", cfg, "--since", "1d")
	require.Equal(t, ExitOK, code)
	require.Empty(t, out)
}

// Bad input is a usage error (exit 2) that says what to fix; a damaged
// object is an error (exit 1) naming the integrity check.
func TestHistoryBadInput(t *testing.T) {
	cfg, blobs := archivedHistory(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"history", "search", "--server-config", cfg}, "--tenant"},
		{[]string{"history", "search", "--tenant", "acme"}, "exactly one of --server-config"},
		{[]string{"history", "search", "--tenant", "acme", "--server-config", cfg, "--archive-dir", blobs}, "exactly one of"},
		{[]string{"history", "search", "--tenant", "acme", "--server-config", cfg, "--since", "yesterday"}, "--since"},
		{[]string{"history", "search", "--tenant", "acme", "--server-config", cfg, "--limit", "-1"}, "--limit"},
		{[]string{"history", "export", "--tenant", "../x", "--archive-dir", blobs}, "archive directory"},
		{[]string{"history", "export", "--tenant", "acme", "--archive-dir", filepath.Join(blobs, "nope")}, "not a directory"},
		{[]string{"history", "search", "extra", "--tenant", "acme", "--archive-dir", blobs}, "unknown command"},
	} {
		code, _, errOut := runHistory(c.args...)
		require.Equal(t, ExitUsage, code, "%v: %s", c.args, errOut)
		require.Contains(t, errOut, c.want, c.args)
	}
	m, err := archive.ReadManifest(context.Background(), archive.DirSource(blobs), "acme")
	require.NoError(t, err)
	path := filepath.Join(blobs, filepath.FromSlash(m.Objects[0].Key))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, append(raw, 0), 0o600))
	code, _, errOut := runHistory("history", "search", "--tenant", "acme", "--archive-dir", blobs, "--id", "cmd_old1")
	require.Equal(t, ExitError, code)
	require.Contains(t, errOut, "archive integrity")

	code, out, _ := runHistory("history", "search", "--help")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "--requester")
}
