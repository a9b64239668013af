// Command bc-kind makes a new kind plugin's module (bc-kind new), so that a
// vendor starts from a plugin that builds, passes the conformance harness
// and runs under scripts/kind-dev as it is. It lives in the SDK module so
// that it needs none of the control plane's dependencies.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"

	"github.com/better-compute/commands/sdk/internal/scaffold"
)

const usage = `usage: bc-kind new [-kind vendor.action] [-module path] [-sdk dir] [-no-tidy] DIR

Makes DIR a new Go module serving one kind: a manifest with a closed payload
schema, a handler that drives a tool, a fake of that tool, a unit test, the
conformance test (kindtest) and a README, then runs go mod tidy in it.

  -kind     the kind (default: DIR's name + ".hello")
  -module   the module path (default: example.com/ + DIR's name)
  -sdk      a checkout's sdk/ directory: go.mod replaces the SDK with it
            until a release is served
  -no-tidy  do not run go mod tidy
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "new" {
		fmt.Fprint(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("bc-kind new", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	var o scaffold.Options
	fs.StringVar(&o.Kind, "kind", "", "")
	fs.StringVar(&o.Module, "module", "", "")
	fs.StringVar(&o.SDKDir, "sdk", "", "")
	noTidy := fs.Bool("no-tidy", false, "")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	o.Dir = fs.Arg(0)
	o = scaffold.Default(o)
	files, err := scaffold.Write(o)
	if err != nil {
		fmt.Fprintf(stderr, "bc-kind new: %v\n", err)
		if errors.Is(err, scaffold.ErrExists) {
			return 1
		}
		return 2
	}
	sort.Strings(files)
	fmt.Fprintf(stdout, "bc-kind new: %s (module %s) in %s:\n", o.Kind, o.Module, o.Dir)
	for _, f := range files {
		fmt.Fprintf(stdout, "  %s\n", f)
	}
	if !*noTidy {
		tidy := exec.CommandContext(context.Background(), "go", "mod", "tidy")
		tidy.Dir = o.Dir
		tidy.Stdout, tidy.Stderr = stderr, stderr
		if err := tidy.Run(); err != nil {
			fmt.Fprintf(stderr, "bc-kind new: go mod tidy in %s: %v\n", o.Dir, err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "bc-kind new: done; test it with: cd %s && go test -race ./...\n", o.Dir)
	return 0
}
