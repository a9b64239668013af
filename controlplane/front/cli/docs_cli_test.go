package cli_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
)

// mdBlock is one fenced block of a markdown file.
type mdBlock struct {
	line  int // the fence's line, 1-based
	lang  string
	lines []string
}

// mdBlocks returns file's fenced blocks.
func mdBlocks(t *testing.T, file string) []mdBlock {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var (
		out []mdBlock
		cur *mdBlock
	)
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &mdBlock{line: i + 1, lang: strings.TrimPrefix(l, "```")}
		case cur != nil && strings.HasPrefix(l, "```"):
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, l)
		}
	}
	require.Nil(t, cur, "%s: a block that never closes", file)
	return out
}

// The CLI reference's config file example, as written: only the endpoint
// is this test's server (plaintext, so caCert is not read). Its tokenFile
// is ~/…, which no shell expands inside a YAML file.
func TestCLIReferenceConfigFileWorksAsWritten(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	var cfg string
	for _, b := range mdBlocks(t, filepath.Join(testutil.RepoRoot(t), "docs", "cli.md")) {
		if b.lang == "yaml" && len(b.lines) > 0 && b.lines[0] == "# ~/.config/better-compute/config.yaml" {
			cfg = strings.Join(b.lines, "\n") + "\n"
		}
	}
	require.NotEmpty(t, cfg, "docs/cli.md has the config file example")
	cfg = regexp.MustCompile(`(?m)^endpoint: .*$`).ReplaceAllString(cfg, "endpoint: http://"+r.GRPC)
	cfg = regexp.MustCompile(`(?m)^tenant: .*$`).ReplaceAllString(cfg, "tenant: "+servertest.TenantA)
	require.Contains(t, cfg, "tokenFile: ~/.config/better-compute/token")

	home := t.TempDir()
	dir := filepath.Join(home, ".config", "better-compute")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte(servertest.TokOps+"\n"), 0o600))
	res := cliRun(context.Background(), map[string]string{"HOME": home}, "commands", "list", "nodeId="+servertest.NodeA1)
	require.Equal(t, 0, res.code, "the config file as written: %s", res.stderr)
	require.Contains(t, res.stdout, "ID")
}

// docsCLISkipped are the pages' lines this test does not run, each
// with where what it shows is run instead.
var docsCLISkipped = map[string]string{
	// --wait needs a node that runs the command: e2e runs commands run --wait
	// against a real bcd (e2e/e2e_test.go); runs create --wait is run with
	// the test playing the nodes by TestRunsCreateWaitStopsPastMaxErrorsAndPrintsTheFailures
	// and the operator guide's fleet-run test.
	"--wait": "e2e",
	// A watch from now with no --count follows until interrupted.
	"commands watch cursor=now": "TestCommandsWatch",
	// The rollout needs a signed release: TestRolloutCLI and the operator
	// guide's rollout test.
	"rollout ": "TestRolloutCLI",
	// Support bundles need a stored bundle and the server's config:
	// TestBundlesDownload_CopiesFromTheDirStore.
	"bundles download": "TestBundlesDownload_CopiesFromTheDirStore",
	"tar -tzvf":        "TestBundlesDownload_CopiesFromTheDirStore",
	"bc-server ":       "the packaging tests",
	// api.md's download with curl: the same request (bearer token, path,
	// the JSON errors) is made by the API's test.
	"curl -fsS": "TestSupportBundleDownloadStreamsToANodeReader",
	"/bundle\"": "TestSupportBundleDownloadStreamsToANodeReader",
	// trust.md: a result the node signed, and one certificate's serial,
	// need a joined node: TestCommandsVerify_AttestedResultVerifiesAndATamperedOneFails
	// and e2e's revocation test.
	"commands verify": "TestCommandsVerify_AttestedResultVerifiesAndATamperedOneFails",
	"serial=7c1e…":    "e2e (revocation)",
}

// docsShell is a server with secrets on (with the key docs/secrets.md's
// own lines make) and a shell environment in which better-compute
// is the built binary, on it as an operator with every permission of the
// test's tenant (nodes.createTenant needs compute:tenants:create).
type docsShell struct {
	r    *servertest.Running
	work string // the examples' working directory
	env  []string
}

func newDocsShell(t *testing.T) *docsShell {
	t.Helper()
	// docs/secrets.md's key, made by its own lines, in /etc/bc-server's
	// place; bc-server refuses a key file of the wrong size or mode.
	etc := t.TempDir()
	var made bool
	for _, b := range mdBlocks(t, filepath.Join(testutil.RepoRoot(t), "docs", "secrets.md")) {
		if b.lang == "sh" && len(b.lines) > 0 && strings.HasPrefix(b.lines[0], "head -c 32 /dev/urandom > ") {
			script := strings.ReplaceAll(strings.Join(b.lines, "\n"), "/etc/bc-server/", etc+"/")
			out, err := exec.Command("sh", "-ec", script).CombinedOutput()
			require.NoError(t, err, "docs/secrets.md:%d: %s\n%s", b.line, script, out)
			made = true
		}
	}
	require.True(t, made, "docs/secrets.md makes the key with head -c 32 /dev/urandom")
	keyFile := filepath.Join(etc, "secrets.key")
	r := servertest.Start(t, func(c *server.Config) { c.Secrets = &server.SecretsConfig{KeyFile: keyFile} })
	bin := testutil.BuildBinary(t, "./controlplane/cmd/better-compute")
	pathDir := t.TempDir()
	require.NoError(t, os.Symlink(bin, filepath.Join(pathDir, "better-compute")))
	return &docsShell{r: r, work: t.TempDir(), env: []string{
		"PATH=" + pathDir + ":/usr/local/bin:/usr/bin:/bin",
		"HOME=" + t.TempDir(),
		"BC_ENDPOINT=http://" + r.GRPC, "BC_TOKEN=" + servertest.TokAdmin, "BC_TENANT=" + servertest.TenantA,
		"TENANT=" + servertest.TenantA,
	}}
}

// run runs line with bash -e -o pipefail in the working directory, with
// more variables.
func (d *docsShell) run(t *testing.T, where, line string, vars ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// pipefail: a line that pipes the CLI into jq fails when the CLI does.
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-ec", line)
	cmd.Dir, cmd.Env = d.work, append(append([]string{}, d.env...), vars...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s: %s\n%s", where, line, out)
	return out
}

// Every better-compute example in docs/cli.md, api.md and trust.md, run as
// written (a line ending in \ continues on the next) through the
// built binary and sh, against a server with the test's tenant and node.
// Placeholders become the test's: $TENANT, node_… and node_0412 (the
// node), cmd_… (the command the first example queued); optional arguments
// written [x] are given.
func TestCLIReferenceExamplesRunAsWritten(t *testing.T) {
	t.Parallel()
	d := newDocsShell(t)
	require.NoError(t, os.WriteFile(filepath.Join(d.work, "token.txt"), []byte("s3cret\n"), 0o600))
	var ids placeholders
	ran := 0
	for _, page := range []string{"cli.md", "api.md", "trust.md"} {
		for _, b := range mdBlocks(t, filepath.Join(testutil.RepoRoot(t), "docs", page)) {
			if b.lang != "sh" {
				continue
			}
		lines:
			for i, l := range b.lines {
				if strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "#") {
					continue
				}
				if i > 0 && strings.HasSuffix(b.lines[i-1], "\\") {
					continue // joined to the line it continues
				}
				for j := i; strings.HasSuffix(b.lines[j], "\\") && j+1 < len(b.lines); j++ {
					l = strings.TrimSuffix(l, "\\") + strings.TrimSpace(b.lines[j+1])
				}
				for s := range docsCLISkipped {
					if strings.Contains(l, s) {
						continue lines
					}
				}
				where := "docs/" + page + ":" + strconv.Itoa(b.line+1+i)
				d.example(t, where, l, &ids)
				ran++
			}
		}
	}
	require.GreaterOrEqual(t, ran, 27, "the examples run")
}

// placeholders are the ids the examples print, which later examples name
// as cmd_… and run_….
type placeholders struct{ command, run string }

// example runs one documented better-compute line (see
// TestCLIReferenceExamplesRunAsWritten), remembering the first command id
// and the first fleet run id an example printed.
func (d *docsShell) example(t *testing.T, where, l string, ids *placeholders) {
	t.Helper()
	require.True(t, strings.HasPrefix(l, "better-compute "), "%s: an example that is not a better-compute command: %s", where, l)
	if strings.Contains(l, "cmd_…") {
		require.NotEmpty(t, ids.command, "%s uses cmd_… before any example queued a command", where)
	}
	if strings.Contains(l, "run_…") {
		require.NotEmpty(t, ids.run, "%s uses run_… before any example created a fleet run", where)
	}
	node := servertest.NodeA1
	if strings.Contains(l, "nodes delete") {
		// The examples after it still need the test's node.
		node = "node_spare"
		res := cliRun(context.Background(), map[string]string{"BC_ENDPOINT": "http://" + d.r.GRPC, "BC_TOKEN": servertest.TokAdmin},
			"api", "nodes.create", "tenantId="+servertest.TenantA, "nodeId="+node)
		require.Equal(t, 0, res.code, res.stderr)
	}
	// Files the pages keep in /etc/bc-server are the test's.
	line := strings.NewReplacer("node_…", node, "node_0412", node, "cmd_…", ids.command, "run_…", ids.run, "/etc/bc-server/", d.work+"/").Replace(l)
	// Optional arguments, written [x], are given.
	line = regexp.MustCompile(` \[([^\]'"]+)\]`).ReplaceAllString(line, " $1")
	if strings.Contains(line, "--file spec.json") {
		// The example before it writes the spec it names.
		require.NoError(t, os.WriteFile(filepath.Join(d.work, "spec.json"), []byte(`{"holds":[{"gpu":"GPU-8f…","state":"live"}]}`), 0o600))
	}
	out := d.run(t, where, line)
	if m := regexp.MustCompile(`"id":\s*"(cmd_[^"]+)"`).FindSubmatch(out); m != nil && ids.command == "" {
		ids.command = string(m[1])
	}
	if m := regexp.MustCompile(`(?m)^RUN\s+(run_\S+)$`).FindSubmatch(out); m != nil && ids.run == "" {
		ids.run = string(m[1])
	}
}

// docs/cli.md shows `better-compute api --list` as it prints: every method
// of the API with its request fields, none missing and none stale.
func TestCLIReferenceListsTheAPIsMethodsAsTheCLIPrintsThem(t *testing.T) {
	t.Parallel()
	res := cliRun(context.Background(), map[string]string{}, "api", "--list")
	require.Equal(t, 0, res.code, res.stderr)
	const intro = "lists the methods and their request fields:"
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "docs", "cli.md"))
	require.NoError(t, err)
	i := strings.Index(string(b), intro)
	require.GreaterOrEqual(t, i, 0, "docs/cli.md introduces the list with %q", intro)
	rest := string(b)[i:]
	start := strings.Index(rest, "```text\n")
	require.GreaterOrEqual(t, start, 0)
	rest = rest[start+len("```text\n"):]
	end := strings.Index(rest, "```")
	require.GreaterOrEqual(t, end, 0)
	require.Equal(t, res.stdout, rest[:end], "docs/cli.md's api --list block (paste the CLI's output there)")
}

// docs/metal.md stores a BMC credential on standard input, never on the
// command line: its line, run as written, stores exactly the JSON it
// prints.
func TestMetalGuideStoresTheCredentialFromStandardInput(t *testing.T) {
	t.Parallel()
	d := newDocsShell(t)
	var line string
	for _, b := range mdBlocks(t, filepath.Join(testutil.RepoRoot(t), "docs", "metal.md")) {
		for _, l := range b.lines {
			if strings.Contains(l, "secrets put") && strings.Contains(l, "--from-file -") {
				line = l
			}
		}
	}
	require.NotEmpty(t, line, "docs/metal.md stores the credential with secrets put --from-file -")
	const password = "correct horse"
	d.run(t, "docs/metal.md", line, "BMC_PASSWORD="+password)
	res := cliRun(context.Background(), map[string]string{"BC_ENDPOINT": "http://" + d.r.GRPC, "BC_TOKEN": servertest.TokAdmin, "BC_TENANT": servertest.TenantA},
		"secrets", "list")
	require.Equal(t, 0, res.code, res.stderr)
	want := len(`{"username":"admin","password":"` + password + `"}`)
	require.Regexp(t, `(?m)^rack4-admin\s+`+strconv.Itoa(want)+`\s`, res.stdout, "the secret holds the JSON the line printed, from stdin")
}

// helpTree returns every command path under path (itself included) with the
// flags its --help lists, as the CLI prints them.
func helpTree(t *testing.T, path []string) map[string][]string {
	t.Helper()
	res := cliRun(context.Background(), map[string]string{}, append(append([]string{}, path...), "--help")...)
	require.Equal(t, 0, res.code, "%v --help: %s", path, res.stderr)
	out := map[string][]string{}
	section := ""
	for _, l := range strings.Split(res.stdout, "\n") {
		switch {
		case strings.HasSuffix(l, ":") && !strings.HasPrefix(l, " "):
			section = l
		case section == "Available Commands:" && strings.HasPrefix(l, "  "):
			name := strings.Fields(l)[0]
			if name != "help" && name != "completion" {
				for k, v := range helpTree(t, append(append([]string{}, path...), name)) {
					out[k] = v
				}
			}
		case section == "Flags:" && strings.HasPrefix(strings.TrimSpace(l), "-"):
			if m := regexp.MustCompile(`--([a-z][a-z0-9-]*)`).FindStringSubmatch(l); m != nil && m[1] != "help" {
				out[strings.Join(path, " ")] = append(out[strings.Join(path, " ")], "--"+m[1])
			}
		}
	}
	return out
}

// "Every flag below is the real one": each flag of each better-compute
// command, as --help lists it, is named in the docs (cli.md, or the page
// of its area: batches, metal, trust, secrets), in a paragraph that names
// the command.
func TestCLIReferenceNamesEveryBetterComputeFlag(t *testing.T) {
	t.Parallel()
	var docs strings.Builder
	pages, err := filepath.Glob(filepath.Join(testutil.RepoRoot(t), "docs", "*.md"))
	require.NoError(t, err)
	for _, p := range pages {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		docs.Write(b)
	}
	tree := helpTree(t, nil)
	require.Contains(t, tree, "commands run")
	// --json is one convention, said once.
	require.Contains(t, docs.String(), "Every better-compute command that prints a table takes `--json`")
	paragraphs := strings.Split(docs.String(), "\n\n")
	var missing []string
	for cmd, flags := range tree {
		for _, f := range flags {
			if f == "--json" {
				continue
			}
			// In a paragraph (or block) that names the command; the root's
			// flags in any (the global table).
			flag := regexp.MustCompile(regexp.QuoteMeta(f) + `([^a-z0-9-]|$)`)
			found := false
			for _, p := range paragraphs {
				found = found || (strings.Contains(p, cmd) && flag.MatchString(p))
			}
			if !found {
				missing = append(missing, strings.TrimSpace("better-compute "+cmd)+" "+f)
			}
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "flags that no page of docs/ names")
}
