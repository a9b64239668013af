package reboot_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
)

// rebootStrings are string contents that ask a Linux host for a reboot.
var rebootStrings = []string{
	"org.freedesktop.login1.Manager.Reboot", // also matches RebootWithFlags
	"reboot.target",
	"systemctl reboot",
	"kexec",
	"sysrq-trigger",
}

// rebootExec matches a program that reboots (or halts) when run.
var rebootExec = regexp.MustCompile(`^(/usr)?(/s?bin/)?(reboot|shutdown|poweroff|halt|kexec)$`)

// rebootVerbExec matches a program that reboots given a verb in rebootVerb.
var (
	rebootVerbExec = regexp.MustCompile(`^(/usr)?(/s?bin/)?(systemctl|telinit|init|loginctl)$`)
	rebootVerb     = regexp.MustCompile(`^(reboot|soft-reboot|kexec|poweroff|halt|6|0)$`)
)

// rebootCalls are functions that reboot (or import paths whose only purpose here would be to).
var rebootCalls = map[string]bool{"syscall.Reboot": true, "unix.Reboot": true}

const login1Import = "github.com/coreos/go-systemd/v22/login1"

// rebootRefs lists every place in the Go file at path that asks for a reboot.
func rebootRefs(t *testing.T, path string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		// A file that does not parse does not build, so it is no code path;
		// colleagues' files may be mid-edit while this runs.
		t.Logf("skipping %s: %v", path, err)
		return nil
	}
	var refs []string
	add := func(n ast.Node, what string) {
		refs = append(refs, fset.Position(n.Pos()).String()+": "+what)
	}
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == login1Import {
			add(imp, "imports "+login1Import)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if n.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(n.Value)
			if err != nil {
				return true
			}
			for _, r := range rebootStrings {
				if strings.Contains(s, r) {
					add(n, "string "+strconv.Quote(s))
				}
			}
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && rebootCalls[x.Name+"."+n.Sel.Name] {
				add(n, x.Name+"."+n.Sel.Name)
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "exec" || (sel.Sel.Name != "Command" && sel.Sel.Name != "CommandContext") {
				return true
			}
			var args []string
			for _, a := range n.Args {
				if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, _ := strconv.Unquote(lit.Value)
					args = append(args, s)
				}
			}
			for i, s := range args {
				if rebootExec.MatchString(s) {
					add(n, "runs "+s)
				}
				if rebootVerbExec.MatchString(s) {
					for _, v := range args[i+1:] {
						if rebootVerb.MatchString(v) {
							add(n, "runs "+s+" "+v)
						}
					}
				}
			}
		}
		return true
	})
	return refs
}

// goSources lists the non-test Go files under root, skipping skip.
func goSources(t *testing.T, root, skip string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path == skip || name == ".git" || name == "vendor" || name == "testdata" || name == "node_modules" || (strings.HasPrefix(name, ".") && path != root) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			files = append(files, path)
		}
		return nil
	})
	require.NoError(t, err)
	return files
}

// "bcd never reboots on its own": no code path but node.reboot asks for a
// reboot. Every non-test Go source outside plugins/reboot is parsed and must
// not name logind's Reboot, reboot.target, systemctl reboot, the reboot
// system call, go-systemd's login1 or a program that reboots.
func TestNoOtherRebootPath(t *testing.T) {
	root := testutil.RepoRoot(t)
	own := filepath.Join(root, "plugins", "reboot")
	files := goSources(t, root, own)
	require.NotEmpty(t, files)
	var refs []string
	for _, f := range files {
		refs = append(refs, rebootRefs(t, f)...)
	}
	require.Empty(t, refs, "only plugins/reboot may ask for a reboot")
}

// The scan has teeth: it finds node.reboot's own calls.
func TestRebootScanFindsThisPackage(t *testing.T) {
	root := testutil.RepoRoot(t)
	var refs []string
	for _, f := range goSources(t, filepath.Join(root, "plugins", "reboot"), "") {
		refs = append(refs, rebootRefs(t, f)...)
	}
	joined := strings.Join(refs, "\n")
	require.Contains(t, joined, "org.freedesktop.login1.Manager.Reboot")
	require.Contains(t, joined, "reboot.target")
}

func TestRebootScanFindsExecAndSyscall(t *testing.T) {
	dir := t.TempDir()
	src := `package x
import ("os/exec"; "syscall")
func a() { _ = exec.Command("/sbin/shutdown", "-r", "now").Run(); _ = syscall.Reboot(0) }
func b() { _ = exec.CommandContext(nil, "systemctl", "reboot") }
func c() { _ = exec.Command("systemctl", "restart", "bcd.service") }
`
	path := filepath.Join(dir, "x.go")
	require.NoError(t, writeFile(path, src))
	refs := strings.Join(rebootRefs(t, path), "\n")
	require.Contains(t, refs, "runs /sbin/shutdown")
	require.Contains(t, refs, "syscall.Reboot")
	require.Contains(t, refs, "runs systemctl reboot")
	require.NotContains(t, refs, "restart", "restarting a unit is no reboot")
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }
