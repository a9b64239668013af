package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/mod/semver"
)

// sdkModule is the SDK's module path, the one apidiff loads in -sdk.
const sdkModule = "github.com/better-compute/commands/sdk"

// baselineExt names a baseline file: v<version><baselineExt>.
const baselineExt = ".apidiff"

type checker struct {
	sdk      string // the SDK module's directory
	baseline string // the directory of the released API's export data
	toolsMod string // tools/go.mod, which pins apidiff
}

// incompatibleError is a failed check: what changed, and what would make
// the change acceptable.
type incompatibleError struct {
	msg     string
	changes []string
	hint    string
}

func (e *incompatibleError) Error() string { return e.msg }

// check compares the SDK's API with the baseline's and applies the
// versioning rules in the package comment.
func (c checker) check(w io.Writer) error {
	declared, err := sdkVersion(c.sdk)
	if err != nil {
		return err
	}
	base, file, err := latestBaseline(c.baseline)
	if err != nil {
		return err
	}
	if semver.Compare(declared, base) < 0 {
		return fmt.Errorf("kind.SDKVersion (%s) is older than the released API in %s", declared, file)
	}
	out, err := c.apidiff(file, sdkModule)
	if err != nil {
		return err
	}
	incompatible, compatible := parseReport(out)
	incompatible = slices.DeleteFunc(incompatible, expectedChange)
	if len(incompatible) > 0 && semver.Major(declared) == semver.Major(base) {
		return &incompatibleError{
			msg:     fmt.Sprintf("the SDK's API is incompatible with its release %s (%s):", base, file),
			changes: incompatible,
			hint: "Keep the old identifier as a // Deprecated: forwarder that names its new home, " +
				"or declare a new major version in kind.SDKVersion (see docs/sdk-guide.md, \"Releasing the SDK\").",
		}
	}
	if len(compatible) > 0 && declared == base {
		return &incompatibleError{
			msg:     fmt.Sprintf("the SDK's API grew since its release %s (%s), but kind.SDKVersion still says %s:", base, file, strings.TrimPrefix(declared, "v")),
			changes: compatible,
			hint:    fmt.Sprintf("Declare the next minor version, %s, in kind.SDKVersion.", nextMinor(base)),
		}
	}
	fmt.Fprintf(w, "sdkapi: the SDK's API (kind.SDKVersion %s) is compatible with its release %s: %d incompatible, %d compatible changes\n",
		strings.TrimPrefix(declared, "v"), base, len(incompatible), len(compatible))
	for _, m := range incompatible {
		fmt.Fprintln(w, "  incompatible (new major):", m)
	}
	for _, m := range compatible {
		fmt.Fprintln(w, "  compatible:", m)
	}
	return nil
}

// write replaces the baseline with the SDK's API as of its kind.SDKVersion.
func (c checker) write(w io.Writer) error {
	declared, err := sdkVersion(c.sdk)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.baseline, 0o755); err != nil {
		return err
	}
	file := filepath.Join(c.baseline, declared+baselineExt)
	abs, err := filepath.Abs(file)
	if err != nil {
		return err
	}
	if _, err := c.apidiff("-w", abs, sdkModule); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(c.baseline, "v*"+baselineExt))
	if err != nil {
		return err
	}
	for _, f := range old {
		if f != file {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(w, "sdkapi: wrote the SDK's API as of %s to %s\n", declared, file)
	return nil
}

// apidiff runs apidiff -m ARGS in the SDK's directory. -trimpath keeps this
// machine's paths out of the export data that write commits.
func (c checker) apidiff(args ...string) ([]byte, error) {
	toolsMod, err := filepath.Abs(c.toolsMod)
	if err != nil {
		return nil, err
	}
	for i, a := range args {
		if strings.HasSuffix(a, baselineExt) {
			if args[i], err = filepath.Abs(a); err != nil {
				return nil, err
			}
		}
	}
	cmd := exec.Command("go", append([]string{"tool", "-modfile=" + toolsMod, "apidiff", "-m"}, args...)...)
	cmd.Dir = c.sdk
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -trimpath"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("apidiff %s in %s: %w\n%s", strings.Join(args, " "), c.sdk, err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// versionConstants are the constants whose value is meant to change from
// one release to the next: apidiff reports every changed constant as
// incompatible, since code may have compiled its old value in.
var versionConstants = []string{
	"./kind.SDKVersion",      // the release itself
	"./wire.ProtocolVersion", // the newest protocol; the old ones keep their constants
}

// expectedChange reports whether an apidiff message is a version
// constant's new value.
func expectedChange(msg string) bool {
	for _, c := range versionConstants {
		if strings.HasPrefix(msg, c+": value changed from ") {
			return true
		}
	}
	return false
}

// parseReport splits apidiff's text report into its two sections.
func parseReport(out []byte) (incompatible, compatible []string) {
	var cur *[]string
	for line := range strings.SplitSeq(string(out), "\n") {
		switch {
		case line == "Incompatible changes:":
			cur = &incompatible
		case line == "Compatible changes:":
			cur = &compatible
		case cur != nil && strings.HasPrefix(line, "- "):
			*cur = append(*cur, strings.TrimPrefix(line, "- "))
		}
	}
	return incompatible, compatible
}

// latestBaseline is the newest baseline file in dir, with its version.
func latestBaseline(dir string) (version, file string, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "v*"+baselineExt))
	if err != nil {
		return "", "", err
	}
	for _, f := range files {
		v := strings.TrimSuffix(filepath.Base(f), baselineExt)
		if semver.IsValid(v) && (version == "" || semver.Compare(v, version) > 0) {
			version, file = v, f
		}
	}
	if version == "" {
		return "", "", fmt.Errorf("no released API (v*%s) in %s: write one with make sdk-api", baselineExt, dir)
	}
	return version, file, nil
}

// sdkVersion reads kind.SDKVersion from the SDK's source, as "vX.Y.Z": the
// SDK checked may be a copy that nothing here was built from.
func sdkVersion(sdk string) (string, error) {
	dir := filepath.Join(sdk, "kind")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return "", err
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.SkipObjectResolution)
		if err != nil {
			return "", fmt.Errorf("reading kind.SDKVersion: %w", err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if n.Name != "SDKVersion" || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						return "", fmt.Errorf("kind.SDKVersion in %s is not a string literal", name)
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						return "", err
					}
					if !semver.IsValid("v" + v) {
						return "", fmt.Errorf("kind.SDKVersion %q in %s is not a semantic version", v, name)
					}
					return "v" + v, nil
				}
			}
		}
	}
	return "", fmt.Errorf("no const SDKVersion in %s", dir)
}

// nextMinor is the version after v that adds to its API: vX.(Y+1).0.
func nextMinor(v string) string {
	parts := strings.SplitN(strings.TrimPrefix(semver.Canonical(v), "v"), ".", 3)
	minor, _ := strconv.Atoi(parts[1])
	return fmt.Sprintf("%s.%d.0", parts[0], minor+1)
}
