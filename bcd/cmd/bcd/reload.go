package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/renameio/v2"
	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/bcd/config"
	"github.com/better-compute/commands/bcd/pluginhost"
	"github.com/better-compute/commands/sdk/kind"
)

// Files bcd run keeps in its state directory for bcd reload.
const (
	// pidFileName holds the pid of the bcd run that owns the state directory.
	pidFileName = "bcd.pid"
	// reloadFileName holds the outcome of that bcd run's latest reload.
	reloadFileName = "reload.json"
)

// reloadStatus is what bcd run writes after each reload, for bcd reload.
type reloadStatus struct {
	// Pid is the bcd run that reloaded.
	Pid int `json:"pid"`
	// Seq counts that process's reloads, from 1.
	Seq int `json:"seq"`
	// At is when the reload finished.
	At      time.Time         `json:"at"`
	Started []string          `json:"started"`
	Kept    []string          `json:"kept"`
	Retired []string          `json:"retired"`
	Refused []refusedPlugin   `json:"refused"`
	Kinds   map[string]string `json:"kinds"`
	// Error is set when the reload itself failed (the config file is bad):
	// nothing changed then.
	Error string `json:"error,omitempty"`
}

// refusedPlugin is one refused plugin file and why.
type refusedPlugin struct {
	Plugin string `json:"plugin"`
	Error  string `json:"error"`
}

func refusedOf(rs []pluginhost.Refusal) []refusedPlugin {
	out := make([]refusedPlugin, 0, len(rs))
	for _, r := range rs {
		out = append(out, refusedPlugin{Plugin: r.Plugin, Error: r.Err.Error()})
	}
	return out
}

// writePidFile records this process as the bcd run of stateDir; the
// returned func removes the file if it still names this process.
func writePidFile(stateDir string) (func(), error) {
	path := filepath.Join(stateDir, pidFileName)
	pid := os.Getpid()
	if err := renameio.WriteFile(path, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	return func() {
		if got, err := readPid(stateDir); err == nil && got == pid {
			_ = os.Remove(path)
		}
	}, nil
}

func readPid(stateDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, pidFileName))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("%s holds no pid: %q", pidFileName, b)
	}
	return pid, nil
}

// reloader reloads bcd run's plugin directory on SIGHUP.
type reloader struct {
	logger   hclog.Logger
	flags    *config.Flags
	s        *stack
	stateDir string
	// rehello makes the session send a new Hello (nil without a session).
	rehello func()
	seq     int
}

// notifyHangup takes SIGHUP from now on (its default would end bcd): a
// reload asked for before the plugins are up waits in the channel.
func notifyHangup() (<-chan os.Signal, func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup, func() { signal.Stop(hup) }
}

// watch reloads on every SIGHUP from hup until ctx ends.
func (r *reloader) watch(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.reload(ctx)
		}
	}
}

// reload reads the config file again for the plugin pins (the one setting
// an upgrade changes with the binary), reloads the plugin directory, writes
// the outcome for bcd reload, and, when the kinds changed, ends the session
// so the next Hello reports their new digests. Commands running on a
// replaced plugin finish on its old process.
func (r *reloader) reload(ctx context.Context) {
	r.seq++
	st := reloadStatus{Pid: os.Getpid(), Seq: r.seq}
	before := digests(r.s.host.Manifests())
	refusedBefore := refusalKey(r.s.host.Refused())
	cfg, err := r.flags.Load()
	if err != nil {
		r.logger.Error("reload: the config file does not load; nothing changed", "error", err)
		st.Error = err.Error()
	} else {
		rep, rerr := r.s.host.Reload(ctx, cfg.PluginSHA256)
		st.Started, st.Kept, st.Retired, st.Refused = rep.Started, rep.Kept, rep.Retired, refusedOf(rep.Refused)
		if rerr != nil {
			r.logger.Error("reload: some plugins were refused", "error", rerr)
		}
	}
	st.Kinds = digests(r.s.host.Manifests())
	rememberPluginKinds(r.logger, r.stateDir, r.s.host)
	st.At = time.Now()
	r.logger.Info("plugins reloaded", "seq", st.Seq, "started", st.Started, "kept", st.Kept, "retired", st.Retired, "refused", len(st.Refused), "kinds", len(st.Kinds))
	if b, err := json.MarshalIndent(st, "", "  "); err == nil {
		if err := renameio.WriteFile(filepath.Join(r.stateDir, reloadFileName), b, 0o644); err != nil {
			r.logger.Warn("reload: cannot write the reload status", "error", err)
		}
	}
	// A changed refusal is news too: the control plane names it on the
	// commands it holds.
	if r.rehello != nil && (!mapsEqual(before, st.Kinds) || refusedBefore != refusalKey(r.s.host.Refused())) {
		r.rehello()
	}
}

// refusalKey sums up a set of refusals, to tell whether it changed.
func refusalKey(rs []pluginhost.Refusal) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.Plugin + "\x00" + r.Reason + "\x00" + r.FoundSHA256 + "\n")
	}
	return b.String()
}

func digests(ms []kind.Manifest) map[string]string {
	out := make(map[string]string, len(ms))
	for _, m := range ms {
		out[m.Kind] = m.Digest()
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// cmdReload sends SIGHUP to the bcd run of the state directory (its pid
// file names it), waits for that reload's outcome and prints it. It exits
// non-zero when the reload refused a plugin or could not run.
func cmdReload(args []string, stdout, stderr io.Writer) error {
	fs, cf := flags("reload", "[--timeout D] [flags]", stderr)
	timeout := fs.Duration("timeout", time.Minute, "how long to wait for bcd run to reload")
	asJSON := fs.Bool("json", false, "print the reload's outcome as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := cf.Load()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	pid, err := readPid(cfg.StateDir)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("no running bcd for state directory %s: %w", cfg.StateDir, err)}
	}
	if err := isBcd(pid); err != nil {
		return &exitError{code: 1, err: err}
	}
	prev := 0
	if st, err := readReloadStatus(cfg.StateDir); err == nil && st.Pid == pid {
		prev = st.Seq
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("signalling bcd (pid %d): %w", pid, err)}
	}
	deadline := time.Now().Add(*timeout)
	var st reloadStatus
	for {
		// bcd run writes the outcome when the reload is done; polling the
		// file is the one way to hear back from a signal.
		if got, err := readReloadStatus(cfg.StateDir); err == nil && got.Pid == pid && got.Seq > prev {
			st = got
			break
		}
		if time.Now().After(deadline) {
			return &exitError{code: 1, err: fmt.Errorf("bcd (pid %d) did not report a reload within %s", pid, *timeout)}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if *asJSON {
		b, err := json.MarshalIndent(st, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
	} else {
		fmt.Fprintf(stdout, "bcd (pid %d) reloaded its plugins: started %s; kept %s; retired %s; %d kinds\n",
			pid, list(st.Started), list(st.Kept), list(st.Retired), len(st.Kinds))
	}
	for _, r := range st.Refused {
		fmt.Fprintf(stderr, "bcd reload: refused plugin %s: %s\n", orDir(r.Plugin), r.Error)
	}
	switch {
	case st.Error != "":
		return &exitError{code: 1, err: fmt.Errorf("the reload did not run: %s", st.Error)}
	case len(st.Refused) > 0:
		return &exitError{code: 1, err: fmt.Errorf("%d plugin(s) refused", len(st.Refused))}
	}
	return nil
}

func readReloadStatus(stateDir string) (reloadStatus, error) {
	var st reloadStatus
	b, err := os.ReadFile(filepath.Join(stateDir, reloadFileName))
	if err != nil {
		return st, err
	}
	err = json.Unmarshal(b, &st)
	return st, err
}

// isBcd checks that pid runs the same program as this one: a pid file left
// behind must never make bcd reload signal an unrelated process that got
// the pid since.
func isBcd(pid int) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("reading this program's path: %w", err)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("bcd (pid %d from %s) is not running", pid, pidFileName)
	}
	if err != nil {
		return fmt.Errorf("reading pid %d's program: %w", pid, err)
	}
	// An upgraded bcd binary shows as "path (deleted)" in the running one.
	if filepath.Base(strings.TrimSuffix(exe, " (deleted)")) != filepath.Base(self) {
		return fmt.Errorf("pid %d from %s runs %s, not bcd", pid, pidFileName, exe)
	}
	return nil
}

func list(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	return strings.Join(ss, ", ")
}

func orDir(name string) string {
	if name == "" {
		return "(the plugin directory)"
	}
	return name
}
