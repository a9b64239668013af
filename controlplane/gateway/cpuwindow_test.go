package gateway_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clockTicks is Linux's USER_HZ, the unit of /proc/<pid>/stat's CPU times:
// 100 on every architecture Go supports on Linux.
const clockTicks = 100

// cpuSampler records, every interval, the CPU time (user+system) spent so
// far by this process (the gateway), by one child (bc-sim) and by every
// process named postgres on this machine (with-postgres's cluster), so that
// what each spent inside a window known only afterwards (the fan-out's,
// from bc-sim's report) can be read back: where a fan-out's time goes when
// the three share a machine's cores. A PostgreSQL on another machine shows
// as zero. The sampler's own reads of /proc count toward this process.
type cpuSampler struct {
	child    int
	interval time.Duration
	stop     chan struct{}
	done     chan struct{}

	lock    sync.Mutex
	samples []cpuSample
}

type cpuSample struct {
	at    time.Time
	self  time.Duration
	child time.Duration
	pg    map[int]time.Duration // pid -> CPU so far
}

// fanoutCPU is what each process spent in a window.
type fanoutCPU struct {
	gateway, postgres, sim time.Duration
}

func (c fanoutCPU) total() time.Duration { return c.gateway + c.postgres + c.sim }

func startCPUSampler(child int, interval time.Duration) *cpuSampler {
	s := &cpuSampler{child: child, interval: interval, stop: make(chan struct{}), done: make(chan struct{})}
	s.sample()
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				s.sample()
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

// close takes a last sample and stops.
func (s *cpuSampler) close() {
	close(s.stop)
	<-s.done
}

func (s *cpuSampler) sample() {
	c := cpuSample{at: time.Now(), pg: map[int]time.Duration{}}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if cpu, _, ok := procCPU(s.child); ok {
		c.child = cpu
	}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if cpu, comm, ok := procCPU(pid); ok && comm == "postgres" {
			c.pg[pid] = cpu
		}
	}
	s.lock.Lock()
	s.samples = append(s.samples, c)
	s.lock.Unlock()
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

// window is what each process spent between from and to, read from the
// samples around them (to within one interval). A postgres process that
// started inside the window counts whole; one that ended inside it counts
// up to its last sample.
func (s *cpuSampler) window(from, to time.Time) fanoutCPU {
	s.lock.Lock()
	defer s.lock.Unlock()
	if len(s.samples) == 0 {
		return fanoutCPU{}
	}
	i0, i1 := 0, len(s.samples)-1
	for i, c := range s.samples {
		if !c.at.After(from) {
			i0 = i
		}
	}
	for i := len(s.samples) - 1; i >= i0; i-- {
		if !s.samples[i].at.Before(to) {
			i1 = i
		}
	}
	a, z := s.samples[i0], s.samples[i1]
	out := fanoutCPU{gateway: z.self - a.self, sim: z.child - a.child}
	last := map[int]time.Duration{}
	for _, c := range s.samples[i0 : i1+1] {
		for pid, cpu := range c.pg {
			last[pid] = cpu
		}
	}
	for pid, cpu := range last {
		out.postgres += cpu - a.pg[pid]
	}
	return out
}

// The fan-out's CPU split is read from samples around its window: each
// process's time at the first sample at or after the window's end, less
// its time at the last sample at or before its start; a postgres process
// that began inside counts whole, one that ended inside up to its last.
func TestCPUSamplerWindowCountsEachProcessInsideIt(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	s := &cpuSampler{samples: []cpuSample{
		{at: t0, self: 100 * ms, child: 50 * ms, pg: map[int]time.Duration{1: 10 * ms, 2: 5 * ms}},
		{at: t0.Add(50 * ms), self: 110 * ms, child: 60 * ms, pg: map[int]time.Duration{1: 20 * ms, 2: 7 * ms}},
		{at: t0.Add(100 * ms), self: 150 * ms, child: 80 * ms, pg: map[int]time.Duration{1: 40 * ms, 3: 30 * ms}},
		{at: t0.Add(150 * ms), self: 190 * ms, child: 90 * ms, pg: map[int]time.Duration{1: 70 * ms, 3: 45 * ms}},
		{at: t0.Add(200 * ms), self: 300 * ms, child: 200 * ms, pg: map[int]time.Duration{1: 90 * ms, 3: 50 * ms}},
	}}
	got := s.window(t0.Add(60*ms), t0.Add(140*ms))
	// From the sample at 50ms to the one at 150ms: pid 1 from 20 to 70,
	// pid 2 (gone after 50ms) nothing more, pid 3 (new) 45 whole.
	require.Equal(t, fanoutCPU{gateway: 80 * ms, sim: 30 * ms, postgres: 50*ms + 45*ms}, got)
	require.Equal(t, 205*ms, got.total())
	require.Equal(t, fanoutCPU{}, (&cpuSampler{}).window(t0, t0.Add(time.Second)), "no samples, nothing spent")
}

// procCPU reads this very process: its name as the kernel keeps it (the
// executable's, cut to 15 bytes) and a CPU time no smaller than what
// getrusage had said before.
func TestProcCPUReadsThisProcess(t *testing.T) {
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	before := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	cpu, comm, ok := procCPU(os.Getpid())
	require.True(t, ok)
	name := filepath.Base(os.Args[0])
	require.Equal(t, name[:min(len(name), 15)], comm)
	// /proc counts in ticks of 10ms, getrusage finer: allow one tick.
	require.GreaterOrEqual(t, cpu, before-time.Second/clockTicks)
	_, _, ok = procCPU(-1)
	require.False(t, ok, "no such process")
}
