package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/commands/sdk/kind"
	"github.com/stretchr/testify/require"
)

// committed is the reference as committed, relative to this package.
var committed = filepath.Join("..", "..", "..", "docs", "reference", "kinds.md")

// TestCommittedReferenceIsCurrent fails when docs/reference/kinds.md differs
// from what the manifests generate, so `make test` catches a manifest change
// without `make docs`.
func TestCommittedReferenceIsCurrent(t *testing.T) {
	want, err := Render(Sections())
	require.NoError(t, err)
	got, err := os.ReadFile(committed)
	require.NoError(t, err, "docs/reference/kinds.md is missing: run `make docs` and commit it")
	require.True(t, string(got) == string(want),
		"docs/reference/kinds.md is stale: run `make docs` and commit it")
}

// TestReferenceNamesEveryKind pins that every registered manifest, with its
// lane, timeout, roles, flags, API-runnable, version, description and schema,
// is on the page.
func TestReferenceNamesEveryKind(t *testing.T) {
	b, err := Render(Sections())
	require.NoError(t, err)
	doc := string(b)
	for _, s := range Sections() {
		require.NotEmpty(t, s.Manifests, s.Title)
		for _, m := range s.Manifests {
			require.Contains(t, doc, "### "+m.Kind+"\n")
			section := doc[strings.Index(doc, "### "+m.Kind+"\n"):]
			if next := strings.Index(section[4:], "\n### "); next >= 0 {
				section = section[:next+4]
			}
			require.Contains(t, section, "- Lane: `"+string(m.Lane)+"`")
			require.Contains(t, section, "- Timeout: "+m.Timeout.D().String())
			require.Contains(t, section, "- Version: "+m.Version)
			require.Contains(t, section, m.Description)
			require.Contains(t, section, m.Digest())
			for _, r := range m.Roles {
				require.Contains(t, section, "`"+r+"`")
			}
		}
	}
	require.Contains(t, doc, "| [`node.reboot`](#nodereboot) |")
}

// TestRenderSchemaAndFlags checks one hand-made manifest: the schema is
// pretty-printed in the author's key order, flags are named, and a kind with
// no schema is shown as accepting any object.
func TestRenderSchemaAndFlags(t *testing.T) {
	m := kind.Manifest{
		Kind: "test.kind", Lane: kind.LaneBulk, Timeout: kind.Duration(90 * time.Second),
		Roles: []string{"node"}, Flags: kind.Flags{Destructive: true, SelfTerminating: true, Attested: true},
		PayloadSchema: json.RawMessage(`{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}}}`),
		Version:       "2.1.0", Description: "A test kind.",
	}
	empty := kind.Manifest{Kind: "test.empty", Lane: kind.LaneControl, Timeout: kind.Duration(time.Second), Roles: []string{"node"}, Version: "1.0.0"}
	b, err := Render([]Section{{Title: "T", Intro: "I", Manifests: []kind.Manifest{m, empty}}})
	require.NoError(t, err)
	doc := string(b)
	require.Contains(t, doc, "- Flags: destructive, self-terminating, attested\n")
	require.Contains(t, doc, "- Timeout: 1m30s\n")
	require.Contains(t, doc, "- API-runnable: no\n")
	require.Contains(t, doc, "```json\n{\n  \"type\": \"object\",\n  \"properties\": {\n    \"z\": {\n")
	require.Less(t, strings.Index(doc, "### test.empty"), strings.Index(doc, "### test.kind"), "kinds sorted by name")
	require.Contains(t, doc, "- Flags: none\n")
	require.Contains(t, doc, "```json\n{\n  \"type\": \"object\"\n}\n```")

	_, err = Render([]Section{{Manifests: []kind.Manifest{{Kind: "bad.schema", PayloadSchema: json.RawMessage(`{`)}}}})
	require.ErrorContains(t, err, "bad.schema")
}

// TestWrite writes into a fresh directory, the way docs-check does.
func TestWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ref", "kinds.md")
	require.NoError(t, write(path))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	want, err := Render(Sections())
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
}
