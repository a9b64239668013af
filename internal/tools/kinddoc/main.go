// Command kinddoc writes the kind reference, docs/reference/kinds.md, from the
// registered manifests: the control plane's first-party kinds and the SDK's
// example kinds. The reference is generated, never edited by hand, so that it
// cannot drift from the manifests that bcd and the control plane really use;
// `make docs` runs it and `make docs-check` (and this package's test) fail
// when the committed file is stale.
//
// Usage:
//
//	go run ./internal/tools/kinddoc -o docs/reference/kinds.md
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
	flag.Parse()
	logger := hclog.New(&hclog.LoggerOptions{Name: "kinddoc", Output: os.Stderr})
	if err := write(*out); err != nil {
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
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating the directory of %s: %w", path, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
