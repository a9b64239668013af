// Command archdiagram writes the rooms diagram of docs/architecture.md from
// the code (go list): the block between its markers is replaced, the rest of
// the page kept. `make docs` runs it; internal/depcheck's test fails when the
// committed diagram is stale.
//
//	go run ./internal/tools/archdiagram -w docs/architecture.md
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/better-compute/commands/internal/depcheck"
)

func main() {
	page := flag.String("w", "docs/architecture.md", "the page whose diagram block to rewrite")
	flag.Parse()
	if err := run(*page); err != nil {
		fmt.Fprintln(os.Stderr, "archdiagram:", err)
		os.Exit(1)
	}
}

func run(page string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g, err := depcheck.Load(ctx, ".", "", depcheck.Patterns...)
	if err != nil {
		return err
	}
	old, err := os.ReadFile(page)
	if err != nil {
		return fmt.Errorf("reading the page: %w", err)
	}
	out, err := depcheck.ReplaceDiagram(string(old), depcheck.Mermaid(g.Rooms()))
	if err != nil {
		return fmt.Errorf("%s: %w", page, err)
	}
	return os.WriteFile(page, []byte(out), 0o644)
}
