package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/sdk/kind"
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

// acmeJSON is a third-party kind's manifest file, as the SDK guide's
// section 7 writes it into bc-server's kindsDir.
const acmeJSON = `[{
  "kind": "acme.flash", "lane": "provision", "timeout": "20m", "roles": ["node"],
  "flags": {"destructive": true}, "apiRunnable": true,
  "payloadSchema": {"type": "object", "properties": {"image": {"type": "string", "minLength": 1}}, "required": ["image"], "additionalProperties": false},
  "version": "1.2.0", "description": "Flash the ACME controller's firmware."
}]`

// "A reference page for a third-party kind generated from its manifest by
// the same generator that writes docs/reference/kinds.md": -manifest writes
// the page; each kind's section is byte for byte what the registry's page
// would show for that manifest.
func TestManifestMode_WritesAThirdPartyKindsPage(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "acme.json")
	require.NoError(t, os.WriteFile(src, []byte(acmeJSON), 0o644))
	out := filepath.Join(dir, "docs", "acme.md")
	require.NoError(t, writeManifestPage(src, out))
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	page := string(b)
	require.Contains(t, page, "<!-- Generated by internal/tools/kinddoc -manifest acme.json. Do not edit. -->")
	require.Contains(t, page, "# Kind reference: acme.flash\n")
	require.Contains(t, page, "| [`acme.flash`](#acmeflash) | provision | 20m0s | node | destructive | yes | 1.2.0 |")

	ms, err := kinds.ParseManifests([]byte(acmeJSON))
	require.NoError(t, err)
	require.Contains(t, page, "- Manifest digest (SHA-256, reported in Hello): `"+ms[0].Digest()+"`", "the digest bc-server computes")
	reg, err := Render([]Section{{Title: "T", Intro: "I", Manifests: ms}})
	require.NoError(t, err)
	section := func(doc string) string { return doc[strings.Index(doc, "### acme.flash"):] }
	require.Equal(t, section(string(reg)), section(page), "the same generator renders the kind")

	// YAML, one manifest: the shapes bc-server's kindsDir takes.
	y := filepath.Join(dir, "acme.yaml")
	require.NoError(t, os.WriteFile(y, []byte("kind: acme.reset\nlane: control\ntimeout: 1m\nroles: [node]\nversion: 0.1.0\n"), 0o644))
	require.NoError(t, writeManifestPage(y, filepath.Join(dir, "reset.md")))
	b, err = os.ReadFile(filepath.Join(dir, "reset.md"))
	require.NoError(t, err)
	require.Contains(t, string(b), "### acme.reset\n")

	// A bad file says what is wrong and writes nothing.
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"kind":"acme.flash","lane":"sideways","apiRunable":true}`), 0o644))
	err = writeManifestPage(bad, filepath.Join(dir, "bad.md"))
	require.ErrorContains(t, err, "bad.json")
	require.ErrorContains(t, err, "apiRunable")
	_, err = os.Stat(filepath.Join(dir, "bad.md"))
	require.True(t, os.IsNotExist(err))
}

// The command line, as the SDK guide gives it: go run ./internal/tools/kinddoc -manifest acme.json -o acme.md.
func TestManifestMode_CommandLine(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "acme.json"), []byte(acmeJSON), 0o644))
	bin := testutil.BuildBinary(t, "./internal/tools/kinddoc")
	cmd := exec.Command(bin, "-manifest", "acme.json", "-o", "acme.md")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	b, err := os.ReadFile(filepath.Join(dir, "acme.md"))
	require.NoError(t, err)
	require.Contains(t, string(b), "### acme.flash")
}

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}
