package depcheck

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
)

func load(t *testing.T, overlay string) *Graph {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g, err := Load(ctx, testutil.RepoRoot(t), overlay, Patterns...)
	require.NoError(t, err)
	return g
}

// The walls hold on the tree as it is. A failure prints each broken wall
// with the import chain that breaks it.
func TestRepositoryHoldsItsWalls(t *testing.T) {
	g := load(t, "")
	var report []string
	for _, v := range Check(g, Rules) {
		report = append(report, v.String())
	}
	require.Empty(t, report, "broken walls:\n%s", strings.Join(report, "\n"))
	// The SDK is its own module: every package under sdk/ belongs to it, so
	// a vendor's go get of it brings only its own go.mod's requirements.
	sdkPkgs := 0
	for _, p := range g.roots() {
		if under(p, "sdk") {
			sdkPkgs++
			require.Equal(t, SDKModule, g.Package(p).ModulePath(), "%s is in the SDK's module", p)
		}
	}
	require.NotZero(t, sdkPkgs, "the SDK's packages are loaded")
	for _, bin := range []string{"bcd/cmd/bcd", "controlplane/cmd/bc-server", "controlplane/cmd/better-compute", "controlplane/cmd/bc-mcp", "plugins/nvml/cmd/bc-kind-nvml"} {
		t.Logf("go list -deps ./%s: %d packages", bin, g.Count(Module+"/"+bin))
	}
}

// wrongImport is one deliberately wrong import, added through go list's
// -overlay so the tree is never written, and the wall that must catch it.
type wrongImport struct {
	into    string // package directory, relative to the root
	test    bool   // added by a test file of the package, not the package
	imports string // import path added
	rule    string
}

// Each wall fails on a deliberately added wrong import, and the report
// names the chain from the offending package to what it must not link.
func TestAWrongImportBreaksItsWall(t *testing.T) {
	root := testutil.RepoRoot(t)
	base := load(t, "")
	cases := []wrongImport{
		{into: "bcd/session", imports: Module + "/controlplane/commands/queue", rule: Rules[0].Name},
		{into: "plugins/logs", imports: Module + "/plugins/reboot", rule: Rules[1].Name},
		{into: "plugins/internal/gpu/xid", imports: Module + "/plugins/reboot", rule: Rules[1].Name},
		{into: "plugins/nvml/manifest", imports: Module + "/plugins/internal/gpu/smi", rule: ruleNamed(t, "a first-party manifest")},
		{into: "controlplane/commands/kinds", imports: Module + "/plugins/logs", rule: ruleNamed(t, "bc-server's kind registry")},
		{into: "controlplane/front/cli", imports: "github.com/jackc/pgx/v5/pgxpool", rule: ruleNamed(t, "better-compute links")},
		{into: "controlplane/front/mcp", imports: "github.com/jackc/pgx/v5/pgxpool", rule: ruleNamed(t, "bc-mcp links")},
		{into: "controlplane/server", imports: "github.com/godbus/dbus/v5", rule: ruleNamed(t, "bc-server links")},
		{into: "sdk/kind", imports: Module + "/internal/version", rule: ruleNamed(t, "the SDK links")},
		{into: "sdk/wire", imports: "github.com/jackc/pgx/v5", rule: ruleNamed(t, "the SDK links")},
		{into: "internal/checkreport", imports: Module + "/controlplane/front/mcp", rule: ruleNamed(t, "internal/ (the neutral")},
		{into: "internal/fakebus", imports: Module + "/plugins/reboot", rule: ruleNamed(t, "internal/ (the neutral")},
		{into: "internal/names", imports: Module + "/bcd/accept", rule: ruleNamed(t, "internal/ (the neutral")},
		{into: "controlplane/internal/ids", imports: Module + "/controlplane/trust/pki", rule: ruleNamed(t, "the control plane's PostgreSQL plumbing")},
		{into: "controlplane/front/gateway", imports: Module + "/controlplane/testing/fakedaemon", rule: ruleNamed(t, "production code never links the test doubles")},
		{into: "controlplane/commands/queue", imports: Module + "/controlplane/front/mcp", rule: ruleNamed(t, "the core rooms")},
		{into: "controlplane/trust/pki", imports: Module + "/controlplane/front/mcp", rule: ruleNamed(t, "trust links no front door")},
		{into: "controlplane/trust/trustbundle", imports: Module + "/controlplane/server/serverconfig", rule: ruleNamed(t, "trust links no front door")},
		{into: "controlplane/modules/reconciler", imports: Module + "/controlplane/front/mcp", rule: ruleNamed(t, "a module links no front door")},
		{into: "controlplane/fleet/bindings", imports: Module + "/controlplane/modules/metal", rule: ruleNamed(t, "the core rooms")},
		{into: "controlplane/modules/metal", imports: Module + "/controlplane/commands/queue", rule: ruleNamed(t, "a module reaches the command queue")},
		{into: "controlplane/modules/rollout", test: true, imports: Module + "/controlplane/commands/queue", rule: ruleNamed(t, "a module reaches the command queue")},
	}
	dir := t.TempDir()
	replace := map[string]string{}
	for i, c := range cases {
		p := base.Package(Module + "/" + c.into)
		require.NotNil(t, p, c.into)
		src := filepath.Join(dir, "wrong"+string(rune('a'+i))+".go")
		require.NoError(t, os.WriteFile(src, []byte("package "+p.Name+"\n\nimport _ \""+c.imports+"\"\n"), 0o644))
		name := "zz_depcheck_wrong.go"
		if c.test {
			name = "zz_depcheck_wrong_test.go"
		}
		replace[filepath.Join(root, c.into, name)] = src
	}
	ov, err := json.Marshal(map[string]any{"Replace": replace})
	require.NoError(t, err)
	overlay := filepath.Join(dir, "overlay.json")
	require.NoError(t, os.WriteFile(overlay, ov, 0o644))

	got := Check(load(t, overlay), Rules)
	for _, c := range cases {
		found := false
		for _, v := range got {
			if v.Rule != c.rule || !strings.Contains(strings.Join(v.Chain, " "), c.imports) {
				continue
			}
			if c.test && !strings.HasSuffix(v.Chain[0], " (test)") {
				continue // a test's import is reported as the test's
			}
			found = true
			require.GreaterOrEqual(t, len(v.Chain), 2, v.String())
			t.Log(v.String())
			break
		}
		require.True(t, found, "adding %q to %s broke no wall; got %v", c.imports, c.into, got)
	}
}

func ruleNamed(t *testing.T, prefix string) string {
	t.Helper()
	for _, r := range Rules {
		if strings.HasPrefix(r.Name, prefix) {
			return r.Name
		}
	}
	t.Fatalf("no rule %q", prefix)
	return ""
}

// docs/architecture.md's rooms diagram is the code's: regenerated from the
// same go list, it must equal the committed block.
func TestArchitectureDiagramIsFresh(t *testing.T) {
	g := load(t, "")
	page, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "docs", "architecture.md"))
	require.NoError(t, err)
	want := Mermaid(g.Rooms())
	_, err = ReplaceDiagram(string(page), want)
	require.NoError(t, err)
	got := string(page)[strings.Index(string(page), DiagramBegin)+len(DiagramBegin)+1 : strings.Index(string(page), DiagramEnd)]
	require.Equal(t, want, got, "docs/architecture.md's diagram is stale: run make docs and commit it")
}

// The diagram follows the tree: a package in a new folder under a room is
// in that room, and an import between rooms is an arrow.
func TestRoomsAreReadFromThePaths(t *testing.T) {
	for path, room := range map[string]string{
		Module + "/controlplane/internal/apierr":  "controlplane/internal",
		Module + "/controlplane/internal/store":   "controlplane/internal",
		Module + "/controlplane/modules":          "controlplane/modules",
		Module + "/internal/tools/kinddoc":        "internal/tools",
		Module + "/internal/names":                "internal",
		Module + "/bcd/session":                   "bcd",
		Module + "/plugins/nvml/cmd/bc-kind-nvml": "plugins",
	} {
		got, _ := RoomOf(path)
		require.Equal(t, room, got, path)
	}
	g := &Graph{pkgs: map[string]*Package{
		Module + "/controlplane/front/api":      {ImportPath: Module + "/controlplane/front/api", Imports: []string{Module + "/controlplane/commands/queue", "fmt"}},
		Module + "/controlplane/commands/queue": {ImportPath: Module + "/controlplane/commands/queue"},
	}}
	rooms, edges := g.Rooms()
	require.Len(t, rooms, 2)
	require.Equal(t, []string{"controlplane/commands"}, edges["controlplane/front"])
	require.Contains(t, Mermaid(rooms, edges), "controlplane_front --> controlplane_commands")
	_, err := ReplaceDiagram("no markers", "x")
	require.Error(t, err)
}
