package gateway_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clockTicks is Linux's USER_HZ, the unit of /proc/<pid>/stat's CPU times:
// 100 on every architecture Go supports on Linux.
const clockTicks = 100

// cpuSnapshot is the CPU time (user+system) spent so far by this process
// (the gateway), by one child (bc-sim) and by every process named postgres
// on this machine (with-postgres's cluster; one on another machine shows
// as zero). Two of them, taken when bc-sim marks the fan-out's commit and
// its settling, say what each spent in between: where a fan-out's time
// goes when the three share a machine's cores. Taken only at the marks, so
// that the measuring costs the measured nothing (a sampler reading /proc
// every 50 ms took a quarter of the gateway's CPU).
type cpuSnapshot struct {
	self  time.Duration
	child time.Duration
	pg    map[int]time.Duration // pid -> CPU so far
	// selfSys and selfFaults are the system part of self and this
	// process's minor page faults so far: a gateway whose heap grows
	// through fresh pages pays a fault for each, in system time.
	selfSys    time.Duration
	selfFaults int64
}

// fanoutCPU is what each process spent in a window.
type fanoutCPU struct {
	gateway, postgres, sim time.Duration
	gatewaySys             time.Duration // the system part of gateway
	gatewayFaults          int64         // the gateway's minor page faults
}

func (c fanoutCPU) total() time.Duration { return c.gateway + c.postgres + c.sim }

func takeCPUSnapshot(child int) cpuSnapshot {
	c := cpuSnapshot{pg: map[int]time.Duration{}}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		c.selfSys, c.selfFaults = time.Duration(ru.Stime.Nano()), int64(ru.Minflt) // int32 on 32-bit Linux
	}
	if cpu, _, ok := procCPU(child); ok {
		c.child = cpu
	}
	d, err := os.Open("/proc")
	if err != nil {
		return c
	}
	names, _ := d.Readdirnames(-1)
	_ = d.Close()
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if cpu, comm, ok := procCPU(pid); ok && comm == "postgres" {
			c.pg[pid] = cpu
		}
	}
	return c
}

// spentUntil is what each process spent from a to z. A postgres process
// that started in between counts whole; one that ended in between, not at
// all (a short autovacuum worker's share is missed).
func (a cpuSnapshot) spentUntil(z cpuSnapshot) fanoutCPU {
	out := fanoutCPU{gateway: z.self - a.self, sim: z.child - a.child,
		gatewaySys: z.selfSys - a.selfSys, gatewayFaults: z.selfFaults - a.selfFaults}
	for pid, cpu := range z.pg {
		out.postgres += cpu - a.pg[pid]
	}
	return out
}

// procCPU reads a process's CPU time so far and its command name from
// /proc/<pid>/stat; false when it is gone or unreadable.
func procCPU(pid int) (time.Duration, string, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, "", false
	}
	// pid (comm) state ppid ... utime stime: comm may hold spaces, so the
	// fields are counted from its closing parenthesis.
	line := string(b)
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return 0, "", false
	}
	f := strings.Fields(line[end+1:])
	if len(f) < 13 {
		return 0, "", false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, "", false
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, line[open+1 : end], true
}

// The fan-out's CPU split is the difference of two snapshots: each
// process's time at the second less its time at the first; a postgres
// process that began in between counts whole, one that ended counts not.
func TestCPUSnapshotsSayWhatEachProcessSpentBetweenThem(t *testing.T) {
	ms := time.Millisecond
	a := cpuSnapshot{self: 100 * ms, child: 50 * ms, pg: map[int]time.Duration{1: 20 * ms, 2: 7 * ms}, selfSys: 40 * ms, selfFaults: 1000}
	z := cpuSnapshot{self: 180 * ms, child: 80 * ms, pg: map[int]time.Duration{1: 70 * ms, 3: 45 * ms}, selfSys: 65 * ms, selfFaults: 1700}
	got := a.spentUntil(z)
	require.Equal(t, fanoutCPU{gateway: 80 * ms, sim: 30 * ms, postgres: 50*ms + 45*ms, gatewaySys: 25 * ms, gatewayFaults: 700}, got)
	require.Equal(t, 205*ms, got.total())
	require.Equal(t, fanoutCPU{}, z.spentUntil(z), "nothing between a snapshot and itself")
}

// procCPU reads this very process: its name as the kernel keeps it (the
// executable's, cut to 15 bytes) and the CPU time getrusage reports around
// the read, in /proc's coarser unit.
func TestProcCPUReadsThisProcess(t *testing.T) {
	rusage := func() time.Duration {
		var ru syscall.Rusage
		require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before := rusage()
	cpu, comm, ok := procCPU(os.Getpid())
	after := rusage()
	require.True(t, ok)
	name := filepath.Base(os.Args[0])
	require.Equal(t, name[:min(len(name), 15)], comm)
	// The same accounting as getrusage's, with user and system time each
	// cut down to whole ticks: up to two ticks less, never more.
	require.GreaterOrEqual(t, cpu, before-2*time.Second/clockTicks)
	require.LessOrEqual(t, cpu, after)
	_, _, ok = procCPU(-1)
	require.False(t, ok, "no such process")
}
