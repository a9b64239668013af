package logs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// errExecTimeout is wrapped when a tool ran past its timeout and its process
// group was killed.
var errExecTimeout = errors.New("timed out and was killed")

// runTo runs path with args, streaming stdout into w, for at most timeout.
// The tool gets a process group of its own, and on timeout, cancel or exit
// the whole group is killed, so no helper it forked outlives the call. A
// non-zero exit is reported with the tail of stderr; the output streamed so
// far stays in w either way.
func runTo(ctx context.Context, timeout time.Duration, w io.Writer, path string, args ...string) error {
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var stderr tail
	cmd := exec.CommandContext(runCtx, path, args...)
	cmd.Stdout = w
	cmd.Stderr = &stderr
	cmd.Stdin = nil
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
	// After the kill, do not wait on a straggler (setsid) that holds the pipe.
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	if cmd.Process != nil {
		// The leader may have exited while its children live on.
		_ = killGroup(cmd)
	}
	switch {
	case err == nil:
		return nil
	case runCtx.Err() != nil && ctx.Err() == nil:
		return fmt.Errorf("%s %w after %s", path, errExecTimeout, timeout)
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", path, ctx.Err())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("%s exited %d: %s", path, ee.ExitCode(), bytes.TrimSpace(stderr.b))
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		return nil
	}
	return fmt.Errorf("running %s: %w", path, err)
}

func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing process group %d: %w", cmd.Process.Pid, err)
	}
	return nil
}

// tail keeps the last 2 KiB written to it: enough of stderr to say why.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 2048 {
		t.b = append([]byte(nil), t.b[len(t.b)-2048:]...)
	}
	return len(p), nil
}

// rotating writes a source to disk in two segments of at most limit/2 bytes
// each: once the current one is full, the older is deleted. What stays is
// the newest half of the limit at least, so a flood keeps its latest lines
// and the disk use stays bounded.
type rotating struct {
	dir, name string
	half      int64
	older     string
	cur       *os.File
	curN      int64
	n         int
	dropped   int64 // bytes deleted with older segments
	err       error
}

func newRotating(dir, name string, limit int64) (*rotating, error) {
	r := &rotating{dir: dir, name: name, half: max(limit/2, 1)}
	if err := r.next(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *rotating) next() error {
	f, err := os.Create(fmt.Sprintf("%s/%s.%d", r.dir, r.name, r.n))
	if err != nil {
		return fmt.Errorf("creating a segment for %s: %w", r.name, err)
	}
	r.n++
	r.cur, r.curN = f, 0
	return nil
}

func (r *rotating) Write(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	written := 0
	for len(p) > 0 {
		if r.curN >= r.half {
			if r.older != "" {
				if fi, err := os.Stat(r.older); err == nil {
					r.dropped += fi.Size()
				}
				_ = os.Remove(r.older)
			}
			r.older = r.cur.Name()
			if err := r.cur.Close(); err != nil {
				r.err = err
				return written, err
			}
			if err := r.next(); err != nil {
				r.err = err
				return written, err
			}
		}
		k := min(int64(len(p)), r.half-r.curN)
		n, err := r.cur.Write(p[:k])
		written += n
		r.curN += int64(n)
		if err != nil {
			r.err = err
			return written, err
		}
		p = p[k:]
	}
	return written, nil
}

// finish joins the segments into path and reports how many bytes were
// dropped while collecting.
func (r *rotating) finish(path string) (int64, error) {
	cur := r.cur.Name()
	if err := r.cur.Close(); err != nil {
		return 0, err
	}
	out, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer out.Close()
	for _, seg := range []string{r.older, cur} {
		if seg == "" {
			continue
		}
		f, err := os.Open(seg)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(out, f)
		f.Close()
		_ = os.Remove(seg)
		if err != nil {
			return 0, err
		}
	}
	return r.dropped, out.Close()
}
