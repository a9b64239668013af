// Package gctune sets the Go garbage collector's target for a control-plane
// process that holds thousands of node sessions (bc-server's gateway, and
// bc-sim, which holds the other end of them).
//
// Such a process has a large live heap that barely changes (the sessions)
// and bursts of short-lived garbage on top of it (a fan-out's rows and
// messages). At Go's default target (GOGC=100) the heap may grow to twice
// the sessions' memory before a collection, so a burst is served from pages
// the process has never touched, and the kernel faults each one in: in
// BenchmarkSessions at 10,000 nodes, about 30,000 minor faults and a third
// or more of the gateway's CPU in system time per fan-out. At 50, a
// collection comes sooner, the next burst reuses the pages the last one
// freed, and a fan-out's faults and the gateway's CPU both fell (see the
// operator guide's "Memory and garbage collection").
package gctune

import (
	"os"
	"runtime/debug"
	"strconv"
)

// Percent is the collector's target for a process that holds many
// sessions: a collection once the heap has grown by half of what the last
// one left live.
const Percent = 50

// Apply sets the collector's target to Percent unless the GOGC environment
// variable sets one, which the Go runtime has then applied and which Apply
// leaves alone: an operator's GOGC always wins. It returns the target in
// effect (-1 for GOGC=off) and whether GOGC chose it.
func Apply() (percent int, fromEnv bool) {
	if v := os.Getenv("GOGC"); v != "" {
		if v == "off" {
			return -1, true
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			// The runtime ignored it too and runs at its default.
			return 100, true
		}
		return n, true
	}
	debug.SetGCPercent(Percent)
	return Percent, false
}
