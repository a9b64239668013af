package fakebus

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

	"github.com/godbus/dbus/v5"
)

// ErrNoDaemon is wrapped when dbus-daemon is not installed; tests skip on it.
var ErrNoDaemon = errors.New("dbus-daemon is not installed")

// busConfig is a bus that lets its own user own any name and call anything,
// listening only on a socket in the caller's directory. Unlike the stock
// session config it activates no services, so a call to a name nobody owns
// is answered ServiceUnknown, as on the system bus, and it writes nothing
// outside that directory.
const busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>fakebus</type>
  <listen>%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`

// Daemon is a private dbus-daemon.
type Daemon struct {
	// Addr is the bus's address, for dbus.Connect or BCD_SYSTEM_BUS_ADDRESS.
	Addr string

	cmd  *exec.Cmd
	done chan struct{}
}

// StartDaemon starts a dbus-daemon that listens on dir/bus.sock (its
// config is dir/bus.conf) and returns once it has printed its address; ctx
// bounds the start only. The daemon lives until Close, or until the calling
// process dies (Pdeathsig), so that none outlives a killed test or demo.
func StartDaemon(ctx context.Context, dir string) (*Daemon, error) {
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDaemon, err)
	}
	sock := filepath.Join(dir, "bus.sock")
	conf := filepath.Join(dir, "bus.conf")
	var listen strings.Builder
	if err := xmlEscape(&listen, "unix:path="+escapeAddress(sock)); err != nil {
		return nil, err
	}
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(busConfig, listen.String())), 0o600); err != nil {
		return nil, fmt.Errorf("writing the bus config: %w", err)
	}
	cmd := exec.Command(bin, "--nofork", "--nopidfile", "--print-address", "--config-file="+conf)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// dbus-daemon warns on stderr about things that do not matter here
	// (as root it cannot raise its fd limit in a container); it is kept
	// for the error when the daemon does not start.
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("dbus-daemon's stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting dbus-daemon: %w", err)
	}
	d := &Daemon{cmd: cmd, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- strings.TrimSpace(line)
	}()
	go func() {
		_ = cmd.Wait()
		close(d.done)
	}()
	select {
	case d.Addr = <-lines:
	case <-ctx.Done():
		d.Close()
		return nil, fmt.Errorf("waiting for dbus-daemon's address: %w", ctx.Err())
	}
	if d.Addr == "" {
		d.Close()
		return nil, fmt.Errorf("dbus-daemon exited without printing its address: %s", strings.TrimSpace(stderr.String()))
	}
	return d, nil
}

// Done is closed once the daemon has exited.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Close kills the daemon and waits for it.
func (d *Daemon) Close() {
	_ = d.cmd.Process.Kill()
	<-d.done
}

// serve exports the methods on conn at path under iface and owns name.
func serve(conn *dbus.Conn, name string, methods map[string]any, path dbus.ObjectPath, iface string) error {
	if err := conn.ExportMethodTable(methods, path, iface); err != nil {
		return fmt.Errorf("exporting %s: %w", iface, err)
	}
	reply, err := conn.RequestName(name, dbus.NameFlagDoNotQueue)
	if err != nil {
		return fmt.Errorf("owning %s: %w", name, err)
	}
	if reply != dbus.RequestNameReplyPrimaryOwner {
		return fmt.Errorf("owning %s: someone else owns it (reply %d)", name, reply)
	}
	return nil
}

// escapeAddress escapes a D-Bus address value: bytes other than
// [-0-9A-Za-z_/.\*] become %XX.
func escapeAddress(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', strings.IndexByte("-_/.\\*", c) >= 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02x", c)
		}
	}
	return b.String()
}

// lockedBuffer is a bytes.Buffer that exec's copying goroutine and a
// reader may share.
type lockedBuffer struct {
	lock sync.Mutex
	buf  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.lock.Lock()
	defer b.lock.Unlock()
	if b.buf.Len() > 64<<10 {
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.lock.Lock()
	defer b.lock.Unlock()
	return b.buf.String()
}

func xmlEscape(b *strings.Builder, s string) error {
	return xml.EscapeText(b, []byte(s))
}
