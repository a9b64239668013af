// Command sdkapi keeps the SDK module's exported API compatible with its last
// release. The API of that release is committed as apidiff's export data
// (baseline/vX.Y.Z.apidiff, written when sdk/vX.Y.Z is tagged), because CI
// runs on a clone that may carry no tags and the module proxy may not have
// the release: the check needs nothing but this tree.
//
// check compares the SDK in -sdk with the baseline (golang.org/x/exp's
// apidiff, pinned in tools/go.mod) and fails when
//   - a change is incompatible (a removed or changed identifier) and
//     kind.SDKVersion does not declare a new major version;
//   - the API grew but kind.SDKVersion still says the baseline's version
//     (a release that adds must be a new minor);
//   - kind.SDKVersion is older than the baseline.
//
// write replaces the baseline with the API of the SDK in -sdk, as of its
// kind.SDKVersion: the release procedure runs it when it tags sdk/vX.Y.Z.
//
// Usage:
//
//	go run ./internal/tools/sdkapi check   # make sdk-api-check
//	go run ./internal/tools/sdkapi write   # make sdk-api
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	fs := flag.NewFlagSet("sdkapi", flag.ExitOnError)
	sdk := fs.String("sdk", "sdk", "the SDK module's directory")
	baseline := fs.String("baseline", "internal/tools/sdkapi/baseline", "the directory of the released API's export data")
	toolsMod := fs.String("tools", "tools/go.mod", "the tool module that pins apidiff")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: sdkapi [flags] check|write")
		fs.PrintDefaults()
	}
	if len(os.Args) < 2 {
		fs.Usage()
		os.Exit(2)
	}
	cmd := os.Args[1]
	_ = fs.Parse(os.Args[2:])
	c := checker{sdk: *sdk, baseline: *baseline, toolsMod: *toolsMod}
	var err error
	switch cmd {
	case "check":
		err = c.check(os.Stdout)
	case "write":
		err = c.write(os.Stdout)
	default:
		fs.Usage()
		os.Exit(2)
	}
	if err != nil {
		var ie *incompatibleError
		if errors.As(err, &ie) {
			printIncompatible(os.Stderr, ie)
		} else {
			fmt.Fprintln(os.Stderr, "sdkapi:", err)
		}
		os.Exit(1)
	}
}

func printIncompatible(w io.Writer, ie *incompatibleError) {
	fmt.Fprintln(w, "sdkapi:", ie.Error())
	for _, m := range ie.changes {
		fmt.Fprintln(w, "  -", m)
	}
	fmt.Fprintln(w, ie.hint)
}
