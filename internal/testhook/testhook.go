// Package testhook holds the faults a test build of bcd, its upgrade
// plugin or its upgrade helper can be made to show. Fault is empty in every
// release build: it is set only by a test's own
// `go build -ldflags "-X …/internal/testhook.Fault=…"`, never by the config
// or a command, so no operator or gateway can switch one on. A build with
// the hold fault also reads EnvHold, so that one test build can be stopped
// at any step.
package testhook

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Fault is the comma-separated faults this build shows; "" (release
// builds) shows none.
var Fault = ""

// The faults.
const (
	// FailSelfCheck makes `bcd self-check` fail, as a build that cannot load
	// its config, journal or plugins would.
	FailSelfCheck = "fail-self-check"
	// NeverRejoin makes bcd run but never write daemon.upgrade's rejoin
	// marker, as a build that cannot talk to the control plane would.
	NeverRejoin = "never-rejoin"
	// HoldFault lets EnvHold stop the build at a named step.
	HoldFault = "hold"
)

// EnvHold is "STEP@DIR": a build with the hold fault that reaches Hold(STEP)
// creates DIR/STEP.reached and waits until DIR/STEP.release exists. It
// holds only the first time (while STEP.reached does not exist yet), so
// the restarted process runs through.
const EnvHold = "BCD_TESTHOOK_HOLD"

// Is reports whether this build shows fault f.
func Is(f string) bool {
	if Fault == "" {
		return false
	}
	for _, x := range strings.Split(Fault, ",") {
		if x == f {
			return true
		}
	}
	return false
}

// Hold stops at step when this build has the hold fault and EnvHold names
// step; see EnvHold. It returns at once in every release build.
func Hold(step string) {
	if !Is(HoldFault) {
		return
	}
	want, dir, ok := strings.Cut(os.Getenv(EnvHold), "@")
	if !ok || want != step {
		return
	}
	reached := filepath.Join(dir, step+".reached")
	if _, err := os.Stat(reached); err == nil {
		return
	}
	if err := os.WriteFile(reached, []byte(step), 0o600); err != nil {
		return
	}
	release := filepath.Join(dir, step+".release")
	for {
		if _, err := os.Stat(release); !errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
