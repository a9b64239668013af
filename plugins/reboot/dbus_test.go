package reboot_test

import (
	"bufio"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/plugins/reboot"
)

// startBus starts a private dbus-daemon and returns its address; Cleanup
// kills it. The fakes below own logind's and systemd's names on it.
func startBus(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Skip("dbus-daemon is not installed")
	}
	cmd := exec.Command(bin, "--session", "--nofork", "--print-address")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- strings.TrimSpace(line)
	}()
	select {
	case addr := <-lines:
		require.NotEmpty(t, addr, "dbus-daemon printed no address")
		return addr
	case <-time.After(10 * time.Second):
		t.Fatal("dbus-daemon printed no address within 10s")
		return ""
	}
}

func connect(t *testing.T, addr string) *dbus.Conn {
	t.Helper()
	conn, err := dbus.Connect(addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// serve owns name on conn and exports v at path under iface.
func serve(t *testing.T, conn *dbus.Conn, name string, v any, path dbus.ObjectPath, iface string) {
	t.Helper()
	require.NoError(t, conn.Export(v, path, iface))
	reply, err := conn.RequestName(name, dbus.NameFlagDoNotQueue)
	require.NoError(t, err)
	require.Equal(t, dbus.RequestNameReplyPrimaryOwner, reply)
}

// fakeLogind is org.freedesktop.login1.Manager as far as node.reboot uses it.
type fakeLogind struct {
	lock  sync.Mutex
	calls []bool // the interactive argument of each Reboot call
	err   *dbus.Error
}

// Reboot records the call and answers with f.err.
func (f *fakeLogind) Reboot(interactive bool) *dbus.Error {
	f.lock.Lock()
	defer f.lock.Unlock()
	f.calls = append(f.calls, interactive)
	return f.err
}

func (f *fakeLogind) Calls() []bool {
	f.lock.Lock()
	defer f.lock.Unlock()
	return append([]bool(nil), f.calls...)
}

func startLogind(t *testing.T, addr string, err *dbus.Error) *fakeLogind {
	f := &fakeLogind{err: err}
	serve(t, connect(t, addr), reboot.LogindService, f, reboot.LogindPath, "org.freedesktop.login1.Manager")
	return f
}

// fakeSystemd is org.freedesktop.systemd1.Manager's StartUnit, emitting
// JobRemoved with result after each call, as systemd does when a job ends.
type fakeSystemd struct {
	conn   *dbus.Conn
	result string

	lock  sync.Mutex
	units []string // "name mode" of each StartUnit
	next  uint32
}

// StartUnit queues a job and announces its end on a goroutine, after the
// reply, so the client sees the two in their real order.
func (f *fakeSystemd) StartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	f.lock.Lock()
	f.next++
	id := f.next
	f.units = append(f.units, name+" "+mode)
	f.lock.Unlock()
	job := dbus.ObjectPath("/org/freedesktop/systemd1/job/" + itoa(id))
	go func() {
		_ = f.conn.Emit(reboot.SystemdPath, "org.freedesktop.systemd1.Manager.JobRemoved", id, job, name, f.result)
	}()
	return job, nil
}

func (f *fakeSystemd) Units() []string {
	f.lock.Lock()
	defer f.lock.Unlock()
	return append([]string(nil), f.units...)
}

func startSystemd(t *testing.T, addr, result string) *fakeSystemd {
	// conn is set before Export, so the handler goroutines see it.
	f := &fakeSystemd{result: result, conn: connect(t, addr)}
	serve(t, f.conn, reboot.SystemdService, f, reboot.SystemdPath, "org.freedesktop.systemd1.Manager")
	return f
}

func itoa(v uint32) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for v > 0 {
		b = append([]byte{byte('0' + v%10)}, b...)
		v /= 10
	}
	return string(b)
}
