// Package version holds the build's version, set by the Makefile's ldflags.
package version

// Version is the release, or "dev" for a plain go build.
var Version = "dev"
