// Package fakesystemd stands in for the system bus and systemd's manager
// as far as daemon.upgrade calls them: a private dbus-daemon, and a
// Manager on it that really runs what it is asked to. StartTransientUnit
// runs the unit's ExecStart as a process of its own (outside the caller's
// process group, as a transient unit is outside bcd's cgroup), and
// RestartUnit stops and starts a service the test registered, killing its
// whole process group as KillMode=control-group does; a service whose main
// process dies unexpectedly is started again, as Restart=on-failure does.
// Tests point the plugin and the helper at it with BCD_SYSTEM_BUS_ADDRESS.
package fakesystemd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// ErrNoDaemon is wrapped when dbus-daemon is not installed; tests skip on it.
var ErrNoDaemon = errors.New("dbus-daemon is not installed")

// busConfig lets its own user own any name and call anything, listening
// only on a socket in the test's directory, and activates no services.
const busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>fakesystemd</type>
  <listen>%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`

// Bus is a private dbus-daemon.
type Bus struct {
	// Addr is its address, for dbus.Connect or BCD_SYSTEM_BUS_ADDRESS.
	Addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartBus starts a dbus-daemon listening on dir/bus.sock and returns
// once it printed its address; ctx bounds the start only. It dies with
// the calling process (Pdeathsig).
func StartBus(ctx context.Context, dir string) (*Bus, error) {
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDaemon, err)
	}
	var listen bytes.Buffer
	if err := xml.EscapeText(&listen, []byte("unix:path="+filepath.Join(dir, "bus.sock"))); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(busConfig, listen.String())), 0o600); err != nil {
		return nil, fmt.Errorf("writing the bus config: %w", err)
	}
	cmd := exec.Command(bin, "--nofork", "--nopidfile", "--print-address", "--config-file="+conf)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting dbus-daemon: %w", err)
	}
	b := &Bus{cmd: cmd, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- strings.TrimSpace(line)
	}()
	go func() {
		_ = cmd.Wait()
		close(b.done)
	}()
	select {
	case b.Addr = <-lines:
	case <-ctx.Done():
		b.Close()
		return nil, fmt.Errorf("waiting for dbus-daemon's address: %w", ctx.Err())
	}
	if b.Addr == "" {
		b.Close()
		return nil, fmt.Errorf("dbus-daemon exited without printing its address: %s", strings.TrimSpace(stderr.String()))
	}
	return b, nil
}

// Close kills the daemon and waits for it.
func (b *Bus) Close() {
	_ = b.cmd.Process.Kill()
	<-b.done
}

// syncBuffer is a bytes.Buffer that writers and a reader may share.
type syncBuffer struct {
	lock sync.Mutex
	buf  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.lock.Lock()
	defer b.lock.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.lock.Lock()
	defer b.lock.Unlock()
	return b.buf.String()
}
