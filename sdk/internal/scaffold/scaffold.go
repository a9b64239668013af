// Package scaffold writes a new kind plugin's module from templates embedded
// in the binary (bc-kind new): a manifest with a closed payload schema, a
// handler that drives a tool, a fake of that tool, a unit test, the
// conformance test and a README. What it writes compiles and passes
// kindtest as it is, so a vendor starts from something that works and
// changes one thing at a time.
package scaffold

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"
	"unicode"

	"github.com/better-compute/commands/sdk/kind"
)

//go:embed templates/*.tmpl
var templates embed.FS

// GoVersion is the go line of a new module: the SDK module's own (a test
// keeps the two equal), so that go mod tidy has nothing to raise.
const GoVersion = "1.26.7"

// ErrExists is returned when the target directory holds files already: the
// scaffold never overwrites a vendor's work.
var ErrExists = errors.New("directory is not empty")

// Options say what to make.
type Options struct {
	// Dir is the new module's directory; it may exist but must be empty.
	Dir string
	// Kind is the kind's name, vendor.action (acme.hello).
	Kind string
	// Module is the Go module path (example.com/acme).
	Module string
	// SDKDir, when set, is a checkout's sdk/ directory: go.mod replaces the
	// SDK module with it (by a path relative to Dir) until a release is
	// served.
	SDKDir string
}

// data is what the templates see.
type data struct {
	Kind, Module, Pkg, Ident, File, Plugin, Tool, ToolEnv string
	SDKVersion, GoVersion, Replace                        string
}

// kindPattern is kind.Manifest's rule for a name, restricted to what makes
// a Go identifier and a file name without escaping.
var kindPattern = regexp.MustCompile(`^[a-z][a-z0-9]*(\.[a-z][a-z0-9]*)+$`)

// Default fills in what o leaves out from the directory's name: the kind
// NAME.hello and the module example.com/NAME.
func Default(o Options) Options {
	base := strings.ToLower(filepath.Base(filepath.Clean(o.Dir)))
	base = strings.Map(func(r rune) rune {
		if r < unicode.MaxASCII && (unicode.IsLower(r) || unicode.IsDigit(r)) {
			return r
		}
		return -1
	}, base)
	if o.Kind == "" && base != "" && unicode.IsLower(rune(base[0])) {
		o.Kind = base + ".hello"
	}
	if o.Module == "" && base != "" {
		o.Module = "example.com/" + base
	}
	return o
}

// Files returns the new module's files, path (slash-separated, relative to
// the module) to content, for o.
func Files(o Options) (map[string][]byte, error) {
	d, err := dataFor(o)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for tmpl, path := range map[string]string{
		"go.mod.tmpl":       "go.mod",
		"kind.go.tmpl":      d.File + ".go",
		"kind_test.go.tmpl": d.File + "_test.go",
		"main.go.tmpl":      "cmd/" + d.Plugin + "/main.go",
		"tool.go.tmpl":      "cmd/" + d.Tool + "/main.go",
		"README.md.tmpl":    "README.md",
	} {
		b, err := render(tmpl, d)
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(path, ".go") {
			if b, err = format.Source(b); err != nil {
				return nil, fmt.Errorf("formatting %s: %w", path, err)
			}
		}
		out[path] = b
	}
	return out, nil
}

// Write writes o's files into o.Dir, which must be empty or absent.
func Write(o Options) ([]string, error) {
	files, err := Files(o)
	if err != nil {
		return nil, err
	}
	if ents, err := os.ReadDir(o.Dir); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("%s: %w", o.Dir, ErrExists)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading %s: %w", o.Dir, err)
	}
	var written []string
	for path, b := range files {
		dst := filepath.Join(o.Dir, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil { //nolint:gosec // a source tree the vendor shares and commits: 0755 like git's checkouts
			return written, fmt.Errorf("creating %s: %w", filepath.Dir(dst), err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil { //nolint:gosec // source files, not secrets: 0644 like git's checkouts
			return written, fmt.Errorf("writing %s: %w", dst, err)
		}
		written = append(written, path)
	}
	return written, nil
}

func dataFor(o Options) (data, error) {
	if !kindPattern.MatchString(o.Kind) {
		return data{}, fmt.Errorf("kind %q: want lower-case dotted words of letters and digits, vendor.action (acme.hello)", o.Kind)
	}
	if o.Module == "" {
		return data{}, errors.New("no module path: give one (example.com/acme)")
	}
	words := strings.Split(o.Kind, ".")
	vendor := words[0]
	ident := ""
	for _, w := range words[1:] {
		ident += strings.ToUpper(w[:1]) + w[1:]
	}
	d := data{
		Kind: o.Kind, Module: o.Module, Pkg: vendor, Ident: ident,
		File:   strings.Join(words[1:], "_"),
		Plugin: "bc-kind-" + vendor, Tool: vendor + "-tool",
		ToolEnv:    "BCD_" + strings.ToUpper(vendor) + "_TOOL",
		SDKVersion: kind.SDKVersion, GoVersion: GoVersion,
	}
	if !strings.HasSuffix(o.Module, "/"+vendor) && o.Module != vendor {
		return data{}, fmt.Errorf("module %s: its last element must be the kind's vendor, %s, the Go package's name", o.Module, vendor)
	}
	if o.SDKDir != "" {
		if _, err := os.Stat(filepath.Join(o.SDKDir, "kind", "kind.go")); err != nil {
			return data{}, fmt.Errorf("-sdk %s: not the SDK module's directory (sdk/ of a checkout): %w", o.SDKDir, err)
		}
		dir, err := filepath.Abs(o.Dir)
		if err != nil {
			return data{}, err
		}
		sdk, err := filepath.Abs(o.SDKDir)
		if err != nil {
			return data{}, err
		}
		rel, err := filepath.Rel(dir, sdk)
		if err != nil {
			return data{}, fmt.Errorf("-sdk %s: %w", o.SDKDir, err)
		}
		// go.mod reads a replacement path as a directory only when it
		// starts with ./ or ../ (or is absolute).
		if !strings.HasPrefix(rel, "..") {
			rel = "./" + rel
		}
		d.Replace = filepath.ToSlash(rel)
	}
	return d, nil
}

func render(name string, d data) ([]byte, error) {
	t, err := template.ParseFS(templates, "templates/"+name)
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, d); err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	return b.Bytes(), nil
}
