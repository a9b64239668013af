package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
)

const (
	module  = "github.com/better-compute/commands/"
	prefix  = module + "plugins/"
	sdkKind = module + "sdk/kind"
)

// listed is what go list says of one package.
type listed struct {
	ImportPath   string
	Standard     bool
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// list runs go list -json over the plugins' packages.
func list(t *testing.T) []listed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "list", "-json=ImportPath,Standard,Imports,TestImports,XTestImports", "./plugins/...")
	cmd.Dir = testutil.RepoRoot(t)
	out, err := cmd.Output()
	require.NoError(t, err, "go list ./plugins/...")
	var pkgs []listed
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		pkgs = append(pkgs, p)
	}
	require.NotEmpty(t, pkgs)
	return pkgs
}

// owner is the plugin a package belongs to ("nvml" for plugins/nvml/...),
// "internal" for the shared code, "" for this package.
func owner(pkg string) string {
	rest, ok := strings.CutPrefix(pkg, prefix)
	if !ok {
		return ""
	}
	first, _, _ := strings.Cut(rest, "/")
	return first
}

func isStd(pkg string) bool {
	first, _, _ := strings.Cut(pkg, "/")
	return !strings.Contains(first, ".")
}

// The registry imports the manifest packages: they must bring nothing of
// their plugin with them.
func TestManifestPackagesImportOnlySDKKind(t *testing.T) {
	found := 0
	for _, p := range list(t) {
		if !strings.HasSuffix(p.ImportPath, "/manifest") {
			continue
		}
		found++
		for _, imp := range append(append(p.Imports, p.TestImports...), p.XTestImports...) {
			require.True(t, isStd(imp) || imp == sdkKind, "%s imports %s; a manifest package imports only sdk/kind", p.ImportPath, imp)
		}
	}
	require.Equal(t, 5, found, "one manifest package per first-party plugin")
}

// No plugin imports another plugin, in its code or its tests: shared code
// goes to plugins/internal, which imports no plugin either.
func TestNoPluginImportsAnother(t *testing.T) {
	for _, p := range list(t) {
		from := owner(p.ImportPath)
		if from == "" {
			continue
		}
		for _, imp := range append(append(p.Imports, p.TestImports...), p.XTestImports...) {
			to := owner(imp)
			if to == "" || to == from || (to == "internal" && from != "internal") {
				continue
			}
			t.Errorf("%s imports %s: a plugin imports only its own packages and plugins/internal", p.ImportPath, imp)
		}
	}
}
