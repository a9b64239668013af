// Package depcheck holds the repository's walls to what the code's own
// imports say (go list -deps), not to what anyone remembers: bcd and the
// plugins never import the control plane, no plugin imports another, the CLI
// links neither the database driver, D-Bus nor a plugin, bc-server links no
// node-side hardware library, and the SDK links only its declared set, so a
// vendor who fetches it fetches nothing else; inside the control plane, the
// rooms of docs/architecture.md: internal/ stays neutral, the PostgreSQL
// plumbing links no other room, the core rooms (commands, fleet) link no
// front door, module or server, only bc-sim links the test doubles, and a
// module reaches the command queue only through the module API. A broken
// wall is reported with the import chain that breaks it. Beside the import
// walls, the SQL walls (sql.go) are read from the source: the front doors
// write no SQL, and only the command queue's room names the commands table.
package depcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Module is the repository's module path; the walls are drawn inside it.
const Module = "github.com/better-compute/commands"

// SDKModule is the SDK's own module (sdk/go.mod), nested in the repository:
// a vendor's `go get` fetches it alone. Its packages keep their import paths
// under Module, so the walls name them as before; `go list ./...` at the
// root does not descend into it, so Patterns names it besides.
const SDKModule = Module + "/sdk"

// Patterns are the package patterns the walls are checked over: the
// repository's module and the SDK's.
var Patterns = []string{"./...", SDKModule + "/..."}

// Package is what the walls need of one package in `go list -json`.
type Package struct {
	ImportPath string
	Name       string
	Standard   bool
	Imports    []string
	// TestImports and XTestImports are the imports of the package's tests.
	TestImports  []string
	XTestImports []string
	Module       *struct{ Path string }
	Error        *struct{ Err string }
	// Dir, GoFiles and CgoFiles are the package's folder and the files
	// its build compiles, tests left out: what the SQL walls read.
	Dir      string
	GoFiles  []string
	CgoFiles []string
}

// ModulePath is the module the package belongs to; "" for the standard
// library.
func (p *Package) ModulePath() string {
	if p.Module == nil {
		return ""
	}
	return p.Module.Path
}

// Graph is the import graph of a set of packages and everything they link.
type Graph struct {
	pkgs map[string]*Package
	// replace is the overlay's Replace map, its paths absolute: a file
	// go list reports that the overlay adds or changes is read from its
	// replacement ("" for a file the overlay deletes).
	replace map[string]string
}

// Load runs `go list -e -deps -json` for patterns in dir. overlay, when not
// empty, is a go build -overlay file, which lets a test add an import to a
// package without writing into the tree.
func Load(ctx context.Context, dir, overlay string, patterns ...string) (*Graph, error) {
	args := []string{"list", "-e", "-deps", "-json=ImportPath,Name,Standard,Imports,TestImports,XTestImports,Module,Error,Dir,GoFiles,CgoFiles"}
	replace := map[string]string{}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
		var err error
		if replace, err = readOverlay(dir, overlay); err != nil {
			return nil, err
		}
	}
	args = append(args, patterns...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %w: %s", strings.Join(patterns, " "), err, strings.TrimSpace(stderr.String()))
	}
	g := &Graph{pkgs: map[string]*Package{}, replace: replace}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p Package
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("reading go list output: %w", err)
		}
		if p.Error != nil {
			return nil, fmt.Errorf("package %s: %s", p.ImportPath, p.Error.Err)
		}
		g.pkgs[p.ImportPath] = &p
	}
	return g, nil
}

// readOverlay reads a go build -overlay file's Replace map, its paths made
// absolute against dir as the go command does.
func readOverlay(dir, overlay string) (map[string]string, error) {
	if !filepath.IsAbs(overlay) {
		overlay = filepath.Join(dir, overlay)
	}
	b, err := os.ReadFile(overlay)
	if err != nil {
		return nil, fmt.Errorf("reading the overlay: %w", err)
	}
	var ov struct{ Replace map[string]string }
	if err := json.Unmarshal(b, &ov); err != nil {
		return nil, fmt.Errorf("reading the overlay %s: %w", overlay, err)
	}
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	out := map[string]string{}
	for from, to := range ov.Replace {
		out[filepath.Clean(abs(from))] = abs(to)
	}
	return out, nil
}

// Package returns the package with the import path, or nil.
func (g *Graph) Package(path string) *Package { return g.pkgs[path] }

// Count is how many packages root links, itself and the standard library
// included (what `go list -deps root | wc -l` prints).
func (g *Graph) Count(root string) int {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(p string) {
		if seen[p] || g.pkgs[p] == nil {
			return
		}
		seen[p] = true
		for _, q := range g.pkgs[p].Imports {
			walk(q)
		}
	}
	walk(root)
	return len(seen)
}

// chain returns the shortest import chain from root to the first package
// that bad accepts, or nil. It walks breadth first in sorted order, so a
// report names the same chain every run. With tests, the root's test
// imports are walked too (go list -deps does not load what only tests
// import, so such a package may be missing from the graph: it is then
// judged by its path alone).
func (g *Graph) chain(root string, tests bool, bad func(*Package) bool) []string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	if p := g.pkgs[root]; tests && p != nil {
		imps := append(append([]string(nil), p.TestImports...), p.XTestImports...)
		sort.Strings(imps)
		for _, q := range imps {
			if _, ok := prev[q]; ok {
				continue
			}
			prev[q] = root + " (test)"
			if g.pkgs[q] == nil && bad(&Package{ImportPath: q}) {
				return []string{root + " (test)", q}
			}
			queue = append(queue, q)
		}
	}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		p := g.pkgs[cur]
		if p == nil {
			continue
		}
		if cur != root && bad(p) {
			var out []string
			for at := cur; at != ""; at = prev[at] {
				out = append(out, at)
				if strings.HasSuffix(at, " (test)") {
					break
				}
			}
			for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
				out[i], out[j] = out[j], out[i]
			}
			return out
		}
		imps := append([]string(nil), p.Imports...)
		sort.Strings(imps)
		for _, q := range imps {
			if _, ok := prev[q]; !ok {
				prev[q] = cur
				queue = append(queue, q)
			}
		}
	}
	return nil
}

// direct returns [root, q] for the first of root's own imports, in sorted
// order, that bad accepts ([root (test), q] for one of its tests'), or
// nil: what the imports link in turn is not judged (Rule.Direct).
func (g *Graph) direct(root string, tests bool, bad func(*Package) bool) []string {
	p := g.pkgs[root]
	if p == nil {
		return nil
	}
	judge := func(from string, imps []string) []string {
		imps = append([]string(nil), imps...)
		sort.Strings(imps)
		for _, q := range imps {
			pkg := g.pkgs[q]
			if pkg == nil {
				// Only a test imports it: judged by its path alone, as
				// chain does.
				pkg = &Package{ImportPath: q}
			}
			if bad(pkg) {
				return []string{from, q}
			}
		}
		return nil
	}
	if c := judge(root, p.Imports); c != nil {
		return c
	}
	if tests {
		return judge(root+" (test)", append(append([]string(nil), p.TestImports...), p.XTestImports...))
	}
	return nil
}

// roots are the repository packages, sorted.
func (g *Graph) roots() []string {
	var out []string
	for p := range g.pkgs {
		if p == Module || strings.HasPrefix(p, Module+"/") {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}
