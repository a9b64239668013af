// Package testhook holds the faults a test build of bcd can be made to
// show. Fault is empty in every release build: it is set only by a test's
// own `go build -ldflags "-X …/internal/testhook.Fault=…"`, never by the
// environment or the config, so no operator or gateway can switch one on.
package testhook

// Fault is the fault this build shows; "" (release builds) shows none.
var Fault = ""

// The faults.
const (
	// FailSelfCheck makes `bcd self-check` fail, as a build that cannot load
	// its config, journal or plugins would.
	FailSelfCheck = "fail-self-check"
	// NeverRejoin makes bcd run but never write daemon.upgrade's rejoin
	// marker, as a build that cannot talk to the control plane would.
	NeverRejoin = "never-rejoin"
)

// Is reports whether this build shows fault f.
func Is(f string) bool { return Fault != "" && Fault == f }
