// Command kinddoc writes the kind reference, docs/reference/kinds.md, from the
// registered manifests: the control plane's first-party kinds and the SDK's
// example kinds. The reference is generated, never edited by hand, so that it
// cannot drift from the manifests that bcd and the control plane really use;
// `make docs` runs it and `make docs-check` (and this package's test) fail
// when the committed file is stale.
//
// With -manifest it writes the same page for a third-party kind from its
// manifest file instead (the file bc-server reads from its kindsDir: JSON
// or YAML, one manifest or a list), so a vendor documents their kind the way
// the first-party kinds are.
//
// Usage:
//
//	go run ./internal/tools/kinddoc -o docs/reference/kinds.md
//	go run ./internal/tools/kinddoc -manifest acme.json -o acme.md
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
)

func main() {
	out := flag.String("o", "docs/reference/kinds.md", "file to write the kind reference to")
	manifest := flag.String("manifest", "", "a third-party manifest file (JSON or YAML, kind.Manifest's shape): write its reference page instead")
	flag.Parse()
	logger := hclog.New(&hclog.LoggerOptions{Name: "kinddoc", Output: os.Stderr})
	var err error
	if *manifest != "" {
		err = writeManifestPage(*manifest, *out)
	} else {
		err = write(*out)
	}
	if err != nil {
		logger.Error("writing the kind reference", "file", *out, "error", err)
		os.Exit(1)
	}
}

// write renders the reference and writes it to path, creating its directory.
func write(path string) error {
	b, err := Render(Sections())
	if err != nil {
		return err
	}
	return writeFile(path, b)
}

// writeManifestPage renders the page of the manifests in manifestPath and
// writes it to path.
func writeManifestPage(manifestPath, path string) error {
	data, err := os.ReadFile(manifestPath)
	if err != nil {
		return err
	}
	b, err := RenderManifestFile(manifestPath, data)
	if err != nil {
		return err
	}
	return writeFile(path, b)
}

// writeFile writes b to path, creating its directory.
func writeFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating the directory of %s: %w", path, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
