package depcheck

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
)

// The SQL walls hold on the tree as it is: the front doors write no SQL,
// and only the command queue's room (and the written exceptions) names the
// commands table. A failure prints each place with the wall it breaks.
func TestRepositoryHoldsItsSQLWalls(t *testing.T) {
	got, err := CheckSQL(load(t, ""), SQLWalls)
	require.NoError(t, err)
	var report []string
	for _, v := range got {
		report = append(report, v.String())
	}
	require.Empty(t, report, "SQL where a wall forbids it:\n%s", strings.Join(report, "\n"))
}

// wrongSQL is one deliberately misplaced statement, added through go
// list's -overlay as a new file of a package, and the wall that must
// catch it.
type wrongSQL struct {
	into string // package directory, relative to the root
	body string // the file's declarations, after its package clause
	wall string
	what string // what the report says of it
}

// Each SQL wall fails on a statement written where it forbids one: the
// file is added through the overlay, so the walls must read it from the
// overlay's replacement, not from the tree.
func TestMisplacedSQLBreaksItsWall(t *testing.T) {
	root := testutil.RepoRoot(t)
	base := load(t, "")
	cases := []wrongSQL{
		{
			into: "controlplane/front/api",
			body: "import (\n\t\"context\"\n\n\t\"github.com/jackc/pgx/v5/pgxpool\"\n)\n\n" +
				"func zzDepcheckWrong(ctx context.Context, db *pgxpool.Pool) error {\n\t_, err := db.Exec(ctx, \"DELETE FROM commands\")\n\treturn err\n}\n",
			wall: sqlWallNamed(t, "the front doors"),
			what: "calls Exec",
		},
		{
			into: "controlplane/front/api",
			body: "var zzDepcheckWrong = \"DELETE FROM commands\"\n",
			wall: sqlWallNamed(t, "the front doors"),
			what: `holds SQL "DELETE FROM commands"`,
		},
		{
			into: "controlplane/fleet/pools",
			body: "const zzDepcheckWrong = `SELECT 1 FROM commands`\n",
			wall: sqlWallNamed(t, "only the command queue's room"),
			what: `holds SQL "SELECT 1 FROM commands"`,
		},
	}
	dir := t.TempDir()
	replace := map[string]string{}
	files := make([]string, len(cases)) // the name each case's file has in its package
	for i, c := range cases {
		p := base.Package(Module + "/" + c.into)
		require.NotNil(t, p, c.into)
		src := filepath.Join(dir, "wrongsql"+string(rune('a'+i))+".go")
		require.NoError(t, os.WriteFile(src, []byte("package "+p.Name+"\n\n"+c.body), 0o644))
		files[i] = "zz_depcheck_wrongsql" + string(rune('a'+i)) + ".go"
		replace[filepath.Join(root, c.into, files[i])] = src
	}
	ov, err := json.Marshal(map[string]any{"Replace": replace})
	require.NoError(t, err)
	overlay := filepath.Join(dir, "overlay.json")
	require.NoError(t, os.WriteFile(overlay, ov, 0o644))

	got, err := CheckSQL(load(t, overlay), SQLWalls)
	require.NoError(t, err)
	for i, c := range cases {
		found := false
		for _, v := range got {
			if v.Wall == c.wall && v.Package == Module+"/"+c.into && strings.HasPrefix(v.Pos, files[i]+":") && strings.Contains(v.What, c.what) {
				found = true
				t.Log(v.String())
				break
			}
		}
		require.True(t, found, "%s in %s broke no wall (%q); got %v", c.what, c.into, c.wall, got)
	}
	// Nothing but the added files is reported: the walls hold elsewhere.
	for _, v := range got {
		require.True(t, strings.HasPrefix(v.Pos, "zz_depcheck_wrongsql"), v.String())
	}
}

// What reads as SQL, and what a help text says that does not.
func TestWhatReadsAsSQL(t *testing.T) {
	for _, s := range []string{
		"SELECT 1 FROM commands",
		"\n\t\tselect count(*) from nodes",
		"SELECT pg_advisory_lock($1)",
		"SELECT  x  FROM nodes WHERE id = $1",
		"INSERT INTO nodes (id) VALUES ($1)",
		"UPDATE nodes SET pool = $2 WHERE id = $1",
		"UPDATE nodes n SET pool = $3",
		"DELETE FROM commands",
		"WITH gone AS (DELETE FROM x RETURNING id) SELECT count(*) FROM gone",
		"WITH RECURSIVE t(n) AS (SELECT 1) SELECT n FROM t",
	} {
		require.True(t, ReadsAsSQL(s), s)
	}
	for _, s := range []string{
		"Delete a node: cancel its open commands (node-deleted), close its sessions",
		"delete NAME [tenantId=…]",
		"update without a state",
		"with --wait, re-read the command at least this often",
		"with state and a short preview of results",
		"Select the nodes from a pool",
		"selected",
		"",
	} {
		require.False(t, ReadsAsSQL(s), s)
	}
	require.True(t, NamesCommandsTable(" FROM commands c WHERE"))
	require.True(t, NamesCommandsTable("JOIN commands c ON c.id = x"))
	require.True(t, NamesCommandsTable("UPDATE commands SET"))
	require.False(t, NamesCommandsTable("FROM command_batches"))
	require.False(t, NamesCommandsTable("bc_commands_pending"))
}

func sqlWallNamed(t *testing.T, prefix string) string {
	t.Helper()
	for _, w := range SQLWalls {
		if strings.HasPrefix(w.Name, prefix) {
			return w.Name
		}
	}
	t.Fatalf("no SQL wall %q", prefix)
	return ""
}
