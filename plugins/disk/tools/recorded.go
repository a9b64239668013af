package tools

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Recorded replays tool output captured from real drives. Each call is
// matched by its command line ("nvme id-ctrl -o json /dev/nvme0n1"); a
// line may have several answers, given in turn (the hdparm -I before and
// after an erase), the last repeating. A call with no recording is an
// error naming it, so a test notices an unexpected tool call.
type Recorded struct {
	mu      sync.Mutex // guards answers and Calls
	answers map[string][]answer
	// Calls lists every command line run, in order.
	Calls []string
}

// NewRecorded returns an empty Recorded runner.
func NewRecorded() *Recorded { return &Recorded{answers: map[string][]answer{}} }

type answer struct {
	out Output
	do  func()
}

// On adds an answer for a command line.
func (r *Recorded) On(cmdline string, out Output) *Recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers[cmdline] = append(r.answers[cmdline], answer{out: out})
	return r
}

// OnDo adds an answer that also has an effect when the call runs: what the
// real tool would do to the device (a sanitize scrambles it).
func (r *Recorded) OnDo(cmdline string, out Output, do func()) *Recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers[cmdline] = append(r.answers[cmdline], answer{out: out, do: do})
	return r
}

// OnFile adds an answer whose stdout is a recording file, exit 0.
func (r *Recorded) OnFile(cmdline, path string) *Recorded {
	b, err := os.ReadFile(filepath.Clean(path))
	if err != nil {
		panic(fmt.Sprintf("recording %s: %v", path, err))
	}
	return r.On(cmdline, Output{Stdout: b})
}

// Run implements Runner.
func (r *Recorded) Run(_ context.Context, _ time.Duration, name string, args ...string) (Output, error) {
	line := strings.Join(append([]string{name}, args...), " ")
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Calls = append(r.Calls, line)
	as := r.answers[line]
	if len(as) == 0 {
		return Output{ExitCode: -1}, fmt.Errorf("no recording for %q", line)
	}
	a := as[0]
	if len(as) > 1 {
		r.answers[line] = as[1:]
	}
	if a.do != nil {
		a.do()
	}
	return a.out, nil
}

// Ran reports whether a command line was run.
func (r *Recorded) Ran(cmdline string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.Calls {
		if c == cmdline {
			return true
		}
	}
	return false
}
