// Package gctune sets the Go garbage collector's target for a control-plane
// process that holds thousands of node sessions (bc-server's gateway, and
// bc-sim, which holds the other end of them).
//
// Such a process has a large live heap that barely changes (the sessions)
// and bursts of short-lived garbage on top of it (a fan-out's rows and
// messages). Until the heap first reaches its collection target, every
// burst is served from pages the process has never touched, and the kernel
// faults each one in: in BenchmarkSessions at 10,000 nodes, 30,000 to
// 50,000 minor faults and a third or more of the gateway's CPU in system
// time per fan-out, against a few hundred once collections run. At Go's
// default target (GOGC=100) the heap grows to twice the sessions' memory
// first, which took four fan-outs; at 50, to one and a half times, which
// took one or two, and idle sessions hold 6% less memory. Past that point
// the two cost about the same CPU (see the operator guide's "Memory and
// garbage collection").
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
